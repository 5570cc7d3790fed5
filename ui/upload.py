"""Uploaded bytes -> a validated ``SensorHistory`` (or an ``EngineError``).

No Streamlit here, so the error path is testable on its own: the page shows
``str(err)`` and keeps the last good dataset.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine.data import SUFFIXES, LoadOptions, SensorHistory, load_history
from engine.errors import DataError

CHUNK = 8 << 20  # bytes written per progress step
MAX_NAME_BYTES = 255  # what ext4, XFS, APFS and NTFS allow for one file name
Progress = Callable[[float, str], None]


def safe_name(name: str) -> str:
    """The file's base name, without any directory a browser may send.

    A name the filesystem cannot hold (a NUL or other control character, more
    than ``MAX_NAME_BYTES`` bytes in UTF-8) is a ``DataError`` saying so.
    """
    base = Path(name.replace("\\", "/")).name.strip()
    if any(ord(c) < 32 or ord(c) == 127 for c in base):
        raise DataError(
            f"{base!r}: the file name holds a NUL or another control character; rename the file"
        )
    size = len(base.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise DataError(
            f"{base[:40]}...: the file name is {size} bytes long, more than the "
            f"{MAX_NAME_BYTES} bytes a file name may have; rename the file"
        )
    return base or "upload.csv"


def load_upload(
    name: str,
    data: bytes,
    options: LoadOptions,
    directory: Path,
    progress: Progress | None = None,
) -> SensorHistory:
    """Write ``data`` under its own name in a fresh temp dir, then ``load_history`` it.

    Raises ``DataError`` (or another ``EngineError``) naming the problem; the temp
    dir is removed either way.
    """
    base = safe_name(name)
    if Path(base).suffix.lower() not in SUFFIXES:
        raise DataError(
            f"{base}: unsupported file extension {Path(base).suffix or '(none)'!r}; "
            f"use {', '.join(SUFFIXES)}"
        )
    if not data:
        raise DataError(f"{base}: file is empty")
    folder = Path(tempfile.mkdtemp(prefix="upload-", dir=directory))
    try:
        path = folder / base
        with path.open("wb") as handle:
            for start in range(0, len(data), CHUNK):
                handle.write(data[start : start + CHUNK])
                if progress:
                    done = min(len(data), start + CHUNK) / len(data)
                    progress(0.4 * done, f"saving {base} ({len(data) / 1e6:.1f} MB)")
        if progress:
            progress(0.5, f"reading and checking {base}")
        history = load_history(path, options)
        if progress:
            progress(1.0, f"{base}: {len(history.sensors)} sensors, {history.values.shape[0]} rows")
        return history
    finally:
        shutil.rmtree(folder, ignore_errors=True)
