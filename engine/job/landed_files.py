"""The landing files a production micro-batch read, and whether each has the landing columns.

Spark reads the landing directory with a fixed schema (``event_time``,
``sensor``, ``value``): a file that lacks one of them is read as nulls, so
its readings would be counted as unusable (no time or sensor) or missing (no
value) and the file consumed for good. The job asks here when a batch shows
such readings: the batch's files come from the file source's log in the
checkpoint (``sources/0/<batch>``, or the ``.compact`` file Spark writes every
tenth batch), their schemas from their Parquet footers (local or mounted
paths; a cluster filesystem's files are not checked).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.backup.dataset import local_path
from engine.errors import DataError
from engine.stream.source import source_log_entries

LANDING_COLUMNS = ("event_time", "sensor", "value")


def batch_files(checkpoint: str, batch_id: int) -> list[Path]:
    """The files micro-batch ``batch_id`` read, from the file source's log of the query's
    ``checkpoint``; [] when the log is not on a local or mounted path."""
    try:
        log = local_path(checkpoint) / "sources" / "0"
    except DataError:
        return []
    for entry in (log / str(batch_id), log / f"{batch_id}.compact"):
        if entry.is_file():
            return [f for b, f in source_log_entries(entry) if b == batch_id]
    return []


def lacking_columns(files: list[Path]) -> list[tuple[Path, list[str]]]:
    """(file, the landing columns it lacks) for each readable file that lacks any."""
    found = []
    for path in files:
        try:
            names = set(pq.read_schema(path).names)
        except (OSError, pa.ArrowException):
            continue  # gone, remote or unreadable: Spark said so, or will
        lacking = [c for c in LANDING_COLUMNS if c not in names]
        if lacking:
            found.append((path, lacking))
    return found
