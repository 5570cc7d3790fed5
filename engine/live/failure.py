"""A simulated failure: when it strikes, and what the crash destroys.

The failure demo kills the live query at a batch that starts with a window open
(``FailureTrigger``); before the restart, the input the dead run had consumed,
its checkpoint and its window-state snapshot are discarded (``discard_lost_state``),
so recovery must rebuild them from the backup.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from engine.errors import PipelineError
from engine.live.recovery import find_lost_range
from engine.live.spec import PipelinePaths
from engine.live.status import FeedProgress
from engine.live.store import BackupStore
from engine.stream.source import LandingDirSource, StreamSource, spark_committed_batches

__all__ = [
    "FailureTrigger",
    "await_end",
    "consumed_files",
    "discard_lost_state",
    "finished_batches",
]

LET_THROUGH = 2  # batches a requested failure lets through while none would lose a window


class FailureTrigger:
    """A failure asked for, struck at the first batch that starts with a window open.

    A crash just after a batch that closed every window (tumbling windows whose
    edge the batch ended on) loses nothing, so an operator's simulated failure
    there would show no recovery at all: such a batch is processed, and the
    failure strikes at the next one. At most ``LET_THROUGH`` batches are let
    through: when every batch ends on an edge (files of whole windows) waiting
    longer shows nothing more.
    """

    def __init__(self, store: BackupStore, slide: int) -> None:
        self.store, self.slide = store, slide
        self._asked = threading.Event()
        self._let_through = 0  # batches processed since the failure was asked for

    def request(self) -> None:
        self._asked.set()

    def strikes(self) -> bool:
        """Does the failure asked for strike at the batch starting now?"""
        if not self._asked.is_set():
            return False
        if self._let_through >= LET_THROUGH or self._loses_a_window():
            return True
        self._let_through += 1
        return False

    def _loses_a_window(self) -> bool:
        """Would a crash now lose a window? (the committed rows reach an open one)"""
        return find_lost_range(self.store, self.slide).lost_windows(self.slide).size > 0


def finished_batches(checkpoint: Path, store: BackupStore, run: int) -> set[int]:
    """Batches of ``run`` that finished: in Spark's commit log or committed to the store."""
    return spark_committed_batches(checkpoint) | set(store.committed_batches(run))


def consumed_files(
    source: StreamSource, checkpoint: Path, store: BackupStore, run: int
) -> list[Path]:
    """The input of ``source`` that ``run``'s finished batches consumed."""
    return source.consumed(checkpoint, finished_batches(checkpoint, store, run))


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


class Running(Protocol):
    """What ``await_end`` watches of a live pipeline."""

    query: Any

    def await_termination(self, timeout: float) -> bool: ...
    def process_all_available(self) -> None: ...


class Feeding(Protocol):
    """What ``await_end`` asks a feeder."""

    def progress(self) -> FeedProgress: ...


def await_end(
    pipeline: Running, feeder: Feeding | None, clock: Callable[[], float], timeout: float
) -> bool:
    """Wait until the query dies (``True``), or until no batch can come or ``timeout`` passes.

    No batch can come once the feed is over (or there is no feeder: an attached run) and
    every landed file is processed: waiting longer would only hold the caller.
    """
    deadline = clock() + timeout
    while clock() < deadline:
        if pipeline.await_termination(0.5):
            return True
        if feeder is None or feeder.progress().done:
            try:
                pipeline.process_all_available()
            except PipelineError:
                return True
            return not pipeline.query.isActive
    return False
