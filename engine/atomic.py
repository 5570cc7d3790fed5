"""Replacing a local file whole or not at all: every file the product writes over one
that may exist (``plan --out``, ``recover --out``, the app's saved session, the job's
state, markers and compacted files through ``engine.backup.dataset.replace_file``).

Writing in place truncates the file first: a write that then fails (a full disk, a
file-size limit, Ctrl-C) leaves a cut file where a working one was. Here the new
content goes to a hidden temporary file beside the target, is flushed to disk, and is
renamed over the target (``os.replace``, atomic on one file system); on any failure,
Ctrl-C included, the temporary file is removed and the old file stays as it was. The
writer is a callable, so pandas and pyarrow write straight to the temporary file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

TEMP_NAME_CHARS = 100  # of the target's name in the temporary one: it fits where the target does


def temporary_path(path: Path) -> Path:
    """A hidden, unique name beside ``path`` (same folder, so same file system)."""
    return path.with_name(f".{path.name[:TEMP_NAME_CHARS]}.{secrets.token_hex(4)}.tmp")


def write_atomically(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` to write the new content, then replace ``path`` with it.

    A symlink is followed (its file is replaced, the link kept); the new file keeps the
    old one's permission bits. Returns ``path``. Any exception from ``write``, the
    flush or the rename propagates after the temporary file is removed.
    """
    target = Path(path)
    final = Path(os.path.realpath(target)) if target.is_symlink() else target
    tmp = temporary_path(final)
    try:
        write(tmp)
        _flush(tmp)
        if final.exists():
            os.chmod(tmp, stat.S_IMODE(final.stat().st_mode))
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _flush_folder(final.parent)
    return target


def _flush(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _flush_folder(folder: Path) -> None:
    """Make the rename itself durable; a file system that cannot sync a folder is no error
    (the file is whole either way)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
