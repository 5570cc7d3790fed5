"""Uploaded bytes -> a validated ``SensorHistory`` (or an ``EngineError``).

No Streamlit here, so the error path is testable on its own: the page shows
``str(err)`` and keeps the last good dataset.
"""

from __future__ import annotations

import codecs
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine.data import SUFFIXES, LoadOptions, SensorHistory, load_history
from engine.errors import DataError

CHUNK = 8 << 20  # bytes written per progress step
MAX_NAME_BYTES = 255  # what ext4, XFS, APFS and NTFS allow for one file name
Progress = Callable[[float, str], None]
SNIFF_BYTES = 64 << 10  # how much of a text upload ``looks_like`` reads
# (leading bytes, what the file looks like, what to do); before a CSV parser reads it
SIGNATURES = (
    (b"PAR1", "a Parquet file", "name it .parquet, or export it as CSV"),
    (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook is one)", "export the sheet as CSV"),
    (b"\xd0\xcf\x11\xe0", "an Excel .xls workbook", "export the sheet as CSV"),
    (b"\x1f\x8b", "gzip-compressed data", "decompress it first (gunzip)"),
    (b"%PDF", "a PDF document", "export the readings as CSV"),
    (b"\xff\xfe", "UTF-16 text", "save it as UTF-8 (CSV UTF-8)"),
    (b"\xfe\xff", "UTF-16 text", "save it as UTF-8 (CSV UTF-8)"),
)
TEXT_CONTROLS = frozenset(b"\t\n\r\x0c\x1a")  # control bytes a text file may hold


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


def looks_like(data: bytes) -> tuple[str, str] | None:
    """(what the bytes look like, what to do) when a text upload is plainly not CSV text,
    else None (the loader's own checks follow): a known signature, UTF-16 without its
    byte-order mark (every other byte NUL), or mostly control bytes (binary data)."""
    head = data[:SNIFF_BYTES]
    for magic, kind, advice in SIGNATURES:
        if head.startswith(magic):
            return kind, advice
    if len(head) >= 8:  # ASCII in UTF-16: a NUL beside every character, on one side
        nul = sorted((head[0::2].count(0) / len(head[0::2]), head[1::2].count(0) / len(head[1::2])))
        if nul[0] < 0.1 and nul[1] > 0.4:
            return "UTF-16 text", "save it as UTF-8 (CSV UTF-8)"
    try:  # not UTF-8: the loader says so in one line
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return None
    controls = sum(1 for b in head if (b < 32 and b not in TEXT_CONTROLS) or b == 127)
    if controls > 0.1 * len(head):
        share = 100 * controls / len(head)
        return f"a binary file ({share:.0f} % control bytes such as NUL)", "export it as CSV"
    return None


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
    found = looks_like(data) if SUFFIXES[Path(base).suffix.lower()] == "csv" else None
    if found is not None:
        raise DataError(f"{base}: this looks like {found[0]}, not CSV text; {found[1]}")
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
