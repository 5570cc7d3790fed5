"""A simulated failure: when it strikes, and what it destroys.

Two kinds (``FAILURE_KINDS``):

* ``"machine"``: the machine is lost with the pipeline's state. The live query is
  killed at a batch that starts with a window open (``FailureTrigger``); before
  the restart, the input the dead run had consumed, its checkpoint and its
  window-state snapshot are discarded (``discard_lost_state``), so recovery must
  rebuild every open window from the backup: the range contract's case.
* ``"crash"``: the process dies in a micro-batch, after the batch's backup was
  written and before the batch committed; the committed window state survives
  (it is on storage the crash does not take). The batch's input is lost, as from
  a source that cannot replay it (``discard_after_crash``), so recovery rebuilds
  that batch's rows only (``engine.live.crash``): the crash contract's case.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.errors import ParameterError, PipelineError
from engine.live.recovery import find_lost_range
from engine.live.spec import PipelinePaths
from engine.live.status import FeedProgress
from engine.live.store import BackupStore
from engine.stream.source import LandingDirSource, StreamSource, spark_committed_batches

__all__ = [
    "FAILURE_KINDS",
    "CrashedBatch",
    "FailureTrigger",
    "await_end",
    "check_failure_kind",
    "consumed_files",
    "discard_after_crash",
    "discard_lost_state",
    "finished_batches",
]

LET_THROUGH = 2  # batches a requested failure lets through while none would lose a window
FAILURE_KINDS: tuple[str, ...] = ("crash", "machine")


def check_failure_kind(kind: object) -> str:
    """``kind`` if it is one of ``FAILURE_KINDS``; ``ParameterError`` naming it if not."""
    if kind not in FAILURE_KINDS:
        raise ParameterError(
            f"failure kind must be one of {', '.join(FAILURE_KINDS)}, got {kind!r}"
        )
    return str(kind)


@dataclass(frozen=True)
class CrashedBatch:
    """The micro-batch a crash took: its id, its rows, what its backup holds."""

    run: int
    batch_id: int
    first_row: int
    last_row: int
    backup_rows: int
    backup_bytes: int = 0
    version: Any = None  # the plan version (``PlanVersion``) the batch ran under
    readings: int = 0  # the readings the batch took in (lost with it, never reported)
    closes_at: Any = None  # the last reading's time before the batch (a new version's start)


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
        self.kind = "machine"

    def request(self, kind: str = "machine") -> None:
        self.kind = check_failure_kind(kind)
        self._asked.set()

    def crash_strikes(self, rows: int) -> bool:
        """Does a crash asked for strike in this batch of ``rows`` rows (after its backup)?"""
        return self._asked.is_set() and self.kind == "crash" and rows > 0

    def strikes(self) -> bool:
        """Does the machine loss asked for strike at the batch starting now?"""
        if not self._asked.is_set() or self.kind != "machine":
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
    """What a machine loss destroys: the consumed input, the checkpoint, the window state.

    The source destroys the input the failed run had consumed (for the landing
    directory, its files: their readings now exist only in the backup); then the
    checkpoint directory and the run's state snapshot go. Input not consumed yet
    stays: the restarted query reads it. Returns what the source destroyed.
    """
    source = source or LandingDirSource(paths.landing_dir)
    files = _discard_input_and_checkpoint(paths, store, run, source)
    store.delete_state(run)
    return files


def discard_after_crash(
    paths: PipelinePaths, store: BackupStore, crashed: CrashedBatch, source: StreamSource
) -> list[Path]:
    """What a crash in a micro-batch destroys: that batch's input and the checkpoint.

    The input of the run's finished batches and of the crashed one goes (the source
    cannot replay it); the checkpoint goes with the process. The store's committed
    window state and the crashed batch's backup stay. Returns the files destroyed.
    """
    return _discard_input_and_checkpoint(paths, store, crashed.run, source, {crashed.batch_id})


def _discard_input_and_checkpoint(
    paths: PipelinePaths,
    store: BackupStore,
    run: int,
    source: StreamSource,
    in_flight: set[int] | frozenset[int] = frozenset(),
) -> list[Path]:
    """Destroy the input ``run``'s finished batches (and ``in_flight``) consumed, then the
    checkpoint directory; the files destroyed."""
    ck = paths.checkpoint_dir
    files = source.destroy_consumed(ck, finished_batches(ck, store, run) | set(in_flight))
    try:
        shutil.rmtree(ck, ignore_errors=False) if ck.exists() else None
    except OSError as err:
        raise PipelineError(
            f"cannot discard the failed run's files under {str(ck)!r}: {err}"
        ) from err
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
