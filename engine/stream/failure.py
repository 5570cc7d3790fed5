"""What a crash destroys, and how a query's failure reads on one line.

The failure demo kills the live query; before the restart, the input the dead
run had consumed, its checkpoint and its window-state snapshot are discarded
(``discard_lost_state``), so recovery must rebuild them from the backup.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from engine.errors import PipelineError
from engine.store import BackupStore
from engine.stream.feeder import spark_committed_batches
from engine.stream.source import LandingDirSource, StreamSource
from engine.stream.spec import FAILURE_MARK, PipelinePaths

__all__ = ["consumed_files", "discard_lost_state", "finished_batches", "query_failure_line"]


# Spark's reason for an unreadable input file, and Python's for our own errors raised
# inside foreachBatch (the proxy's traceback is in the exception's text).
_READ_FILE = re.compile(
    r"\[FAILED_READ_FILE\.(?P<kind>[A-Z_]+)\] Encountered error while reading file "
    r"(?P<file>\S+?)\.\s+(?P<why>[^\n]*?)(?:\s*SQLSTATE[^\n]*)?$",
    re.MULTILINE,
)
_OWN_ERROR = re.compile(r"^engine\.errors\.\w+: (?P<message>.+)$", re.MULTILINE)
_NANOS = "actual Parquet type INT64"


def query_failure_line(err: object) -> str:
    """A streaming query's failure as one line an operator can act on.

    An input file Spark cannot read names the file, says why (pandas' default
    nanosecond timestamps, a column of the wrong type, not Parquet) and what to
    do; an error of ours raised inside a micro-batch gives its own message;
    otherwise the line with ``FAILURE_MARK`` or the first line.
    """
    text = str(err).strip()
    bad = _READ_FILE.search(text)
    if bad is not None:
        return _unreadable_file(bad)
    own = _OWN_ERROR.findall(text)
    if own:
        return str(own[-1]).strip()
    for line in text.splitlines():
        if FAILURE_MARK in line:
            return line.strip()
    return text.splitlines()[0] if text else type(err).__name__


def _unreadable_file(bad: re.Match[str]) -> str:
    why = bad["why"].strip().rstrip(".") or "not a readable Parquet file"
    if bad["kind"] == "PARQUET_COLUMN_DATA_TYPE_MISMATCH" and _NANOS in why and "timestamp" in why:
        why += (
            " (nanosecond timestamps, pandas' default: Spark reads microseconds; write the "
            "file with coerce_timestamps='us')"
        )
    return (
        f"input file {bad['file']} cannot be read: {why}. Fix it or move it out "
        "of the source directory and start again: the job resumes from its checkpoint, "
        "and the micro-batch that failed was not committed, so nothing is lost"
    )


def finished_batches(checkpoint: Path, store: BackupStore, run: int) -> set[int]:
    """Batches of ``run`` that finished: in Spark's commit log or committed to the store."""
    return spark_committed_batches(checkpoint) | set(store.committed_batches(run))


def consumed_files(checkpoint: Path, store: BackupStore, run: int) -> list[Path]:
    """Landing files whose batch finished (the landing-directory source's view)."""
    source = LandingDirSource(checkpoint)  # the directory is not needed to read the log
    return source.consumed_files(checkpoint, finished_batches(checkpoint, store, run))


def discard_lost_state(
    paths: PipelinePaths, store: BackupStore, run: int, source: StreamSource | None = None
) -> list[Path]:
    """What a crash destroys: the consumed input, the checkpoint, the window state.

    The source destroys the input the failed run had consumed (for the landing
    directory, its files: their readings now exist only in the backup); then the
    checkpoint directory and the run's state snapshot go. Input not consumed yet
    stays: the restarted query reads it. Returns what the source destroyed.
    """
    ck = paths.checkpoint_dir
    source = source or LandingDirSource(paths.landing_dir)
    files = source.destroy_consumed(ck, finished_batches(ck, store, run))
    try:
        shutil.rmtree(ck, ignore_errors=False) if ck.exists() else None
    except OSError as err:
        raise PipelineError(
            f"cannot discard the failed run's files under {str(ck)!r}: {err}"
        ) from err
    store.delete_state(run)
    return files
