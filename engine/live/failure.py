"""What a crash destroys.

The failure demo kills the live query; before the restart, the input the dead
run had consumed, its checkpoint and its window-state snapshot are discarded
(``discard_lost_state``), so recovery must rebuild them from the backup.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.errors import PipelineError
from engine.live.spec import PipelinePaths
from engine.live.store import BackupStore
from engine.stream.source import LandingDirSource, StreamSource, spark_committed_batches

__all__ = ["consumed_files", "discard_lost_state", "finished_batches"]


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
