"""The backup datasets' layouts on storage, the lowest of the stream products (no Spark).

``dataset``: the production job's backup (``batch_id=N/date=D[/hour=H]``, ``_SUCCESS``), read
with DuckDB; ``integrity``: whether each committed batch is still whole (every reader's one
check); ``runs``: the live pipeline's (``run=R/batch_id=N/date=D``), and
``run_compaction`` folding its committed batches (``run=R/batch_id=A-B``); ``durable``:
small files at any URI Spark can write, from the driver.
"""

from engine.backup.dataset import (
    TimeRange,
    committed_files,
    partition_columns,
    read_backup,
    read_backup_arrow,
)
from engine.backup.durable import DurableFiles
from engine.backup.integrity import BatchGap, check_batches, find_gaps, manifest

__all__ = [
    "BatchGap",
    "DurableFiles",
    "TimeRange",
    "check_batches",
    "committed_files",
    "find_gaps",
    "manifest",
    "partition_columns",
    "read_backup",
    "read_backup_arrow",
]
