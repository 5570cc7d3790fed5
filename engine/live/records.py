"""What the backup store writes and reads, as Python values: no DuckDB here.

``BatchWrite`` is one micro-batch's results, marker, state and plan version,
committed together (its backup rows are already in Parquet: ``BackupWritten``
says how many); ``VersionRecord`` one row of ``plan_versions``; ``StoreSize``
the backup volume. The column tuples name the frames each table takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd

__all__ = [
    "BACKUP_COLUMNS",
    "INDEXED_KINDS",
    "LATE_COLUMNS",
    "LIVE",
    "RECOVERED",
    "RESULT_COLUMNS",
    "VERSION_COLUMNS",
    "BackupWritten",
    "BatchWrite",
    "StoreSize",
    "VersionRecord",
]

BACKUP_COLUMNS = ("seq", "event_time", "sensor", "value")
RESULT_COLUMNS = (
    "window_id",
    "window_start",
    "window_end",
    "sensor",
    "value",
    "kind",
    "version",
    "final",
)
LATE_COLUMNS = ("seq", "event_time", "sensor", "value", "arrival_time")
# Result kinds of the reading-indexed windows (window j holds readings j*slide ..
# j*slide + window - 1), the ids a lost range is counted in. A disorder stage's
# results ("provisional", "correction", "final") are windows of event time: after a
# gap in the data their ids run ahead of these.
LIVE, RECOVERED = "live", "recovered"
INDEXED_KINDS = (LIVE, RECOVERED)


@dataclass(frozen=True)
class VersionRecord:
    """One row of ``plan_versions`` (JSON columns as text; times naive UTC or aware).

    ``closes_at`` is not a column: when this version is written, every open
    version with a smaller id ends at ``first_seq - 1`` and at event time ``closes_at``.
    """

    id: int
    created_at: datetime
    reason: str
    detail: str
    first_seq: int
    backup_sensors: tuple[str, ...]
    reconstruction: str
    calibration: str
    first_time: datetime | None = None
    last_seq: int | None = None
    last_time: datetime | None = None
    closes_at: datetime | None = None
    kept_sensors: tuple[str, ...] = ()  # JSON in the table; NULL (older stores) reads as ()


VERSION_COLUMNS = (
    "id",
    "created_at",
    "reason",
    "detail",
    "first_seq",
    "last_seq",
    "first_time",
    "last_time",
    "backup_sensors",
    "reconstruction",
    "calibration",
    "kept_sensors",
)


@dataclass(frozen=True, eq=False)
class BatchWrite:
    """Everything one micro-batch persists in DuckDB, committed together or not at all.

    Frames: ``results`` has ``RESULT_COLUMNS``, ``late`` has ``LATE_COLUMNS``;
    either may be ``None``. ``backup_rows`` and ``backup_bytes`` are what Spark
    wrote to the batch's Parquet directory before; ``max_seq`` is the largest
    reading index the batch carried (-1 if none); ``state`` is the window-state
    snapshot after the batch.
    """

    run: int
    batch_id: int
    backup_rows: int = 0
    backup_bytes: int = 0
    results: pd.DataFrame | None = None
    late: pd.DataFrame | None = None
    max_seq: int = -1
    state: bytes | None = None
    version: VersionRecord | None = None  # a plan version that starts with this batch


@dataclass(frozen=True)
class StoreSize:
    """Backup volume. ``backup_bytes`` is the Parquet files of the committed
    batches on disk; ``file_bytes`` the DuckDB file (and WAL), which holds
    results, markers and state and grows in blocks."""

    backup_rows: int
    backup_bytes: int
    file_bytes: int


@dataclass(frozen=True)
class BackupWritten:
    """What Spark wrote for one micro-batch's backup: rows and Parquet bytes."""

    rows: int = 0
    bytes: int = 0
