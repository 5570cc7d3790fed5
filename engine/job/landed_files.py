"""Whether the landing files a production micro-batch read have the landing columns.

Spark reads the landing directory with a fixed schema (``event_time``,
``sensor``, ``value``): a file that lacks one of them is read as nulls, so
its readings would be counted as unusable (no time or sensor) or missing (no
value) and the file consumed for good. The job asks here when a batch shows
such readings: the batch's files are what its source says it consumed
(``engine.stream.source``), their schemas come from their Parquet footers
(local or mounted paths; a cluster filesystem's files are not checked).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

LANDING_COLUMNS = ("event_time", "sensor", "value")


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
