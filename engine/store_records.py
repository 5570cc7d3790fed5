"""What the backup store writes and reads, as Python values: no DuckDB here.

``BatchWrite`` is one micro-batch's rows, marker, state and plan version,
committed together; ``VersionRecord`` one row of ``plan_versions``;
``StoreSize`` and ``backup_bytes`` the backup volume in the row format. The
column tuples name the frames each table takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd

__all__ = [
    "BACKUP_COLUMNS",
    "BACKUP_ROW_FIXED_BYTES",
    "LATE_COLUMNS",
    "RESULT_COLUMNS",
    "VERSION_COLUMNS",
    "BatchWrite",
    "StoreSize",
    "VersionRecord",
    "backup_bytes",
]

# Bytes of one backup row in its row format: run INTEGER (4) + batch_id, seq,
# event_time, value (8 each); the sensor name adds its UTF-8 length.
BACKUP_ROW_FIXED_BYTES = 36
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
)


@dataclass(frozen=True, eq=False)
class BatchWrite:
    """Everything one micro-batch persists, committed together or not at all.

    Frames: ``backup`` has ``BACKUP_COLUMNS``, ``results`` has ``RESULT_COLUMNS``,
    ``late`` has ``LATE_COLUMNS``; any may be ``None``. ``max_seq`` is the largest
    reading index the batch carried (-1 if none); ``state`` is the window-state
    snapshot after the batch.
    """

    run: int
    batch_id: int
    backup: pd.DataFrame | None = None
    results: pd.DataFrame | None = None
    late: pd.DataFrame | None = None
    max_seq: int = -1
    state: bytes | None = None
    version: VersionRecord | None = None  # a plan version that starts with this batch


@dataclass(frozen=True)
class StoreSize:
    """Backup volume. ``backup_bytes`` counts rows x the row format's bytes
    (``BACKUP_ROW_FIXED_BYTES`` + sensor name); ``file_bytes`` is the DuckDB file
    (and WAL) on disk, which also holds results and markers and grows in blocks."""

    backup_rows: int
    backup_bytes: int
    file_bytes: int


def backup_bytes(rows: pd.DataFrame | None) -> int:
    """Bytes the backup rows occupy in the row format (see ``StoreSize``)."""
    if rows is None or rows.empty:
        return 0
    counts = rows["sensor"].value_counts()
    names = sum(len(str(s).encode()) * int(c) for s, c in counts.items())
    return BACKUP_ROW_FIXED_BYTES * len(rows) + names
