"""Where the production job keeps what it writes, per micro-batch: one durable location.

``<backup>/batch_id=N/date=D[/hour=H]/part-*.parquet``
    the backup sensors' readings of micro-batch ``N``, long format, written by
    the executors. ``_SUCCESS`` in ``batch_id=N`` marks the batch committed; a
    replayed batch overwrites its own directory (exactly once, idempotent);
    ``engine.backup.dataset`` reads only committed batches.
``<backup>/_lacuna/results/batch_id=N/part-00000.pq``
    the windows micro-batch ``N`` closed: true and rebuilt aggregates, error, miss
    (Parquet, named ``.pq`` so that a glob of the backup's ``*.parquet`` reads the
    backup rows alone);
``<backup>/_lacuna/metrics/batch_id=N/part-00000.json``
    one JSON line per micro-batch, with the backup files it wrote and their sizes
    (``backup_files``: how readers tell a lost part file, ``engine.backup.integrity``);
``<backup>/_lacuna/events/NNNNNNNNNNNN-<event>.json``
    alerts, re-plans and expiries (``engine.job.events``);
``<backup>/_lacuna/run.json``
    what the last start stated: the plan's contract, its exposure, the rows a
    micro-batch carries and which failure the checkpoint survives;
``<backup>/_lacuna/plans/vNNNNNN.json``
    the plan versions (``engine.export.plan_book``): which plan wrote which batches;
``<checkpoint>/job``
    Spark's offsets and commits of the one streaming query;
``<checkpoint>/lacuna_state/N.arrow``
    the open windows' partials and the monitor's tally after micro-batch ``N``
    (the last two kept).

Spark and Hive-style readers skip names starting with ``_``, and DuckDB's
``**/*.parquet`` does not match ``.pq``, so the results never show up as backup
rows. Any URI Spark can write works the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.backup.durable import DurableFiles
from engine.errors import PipelineError
from engine.job.events import EVENTS_DIR
from engine.job.partials import WindowState

STATE_SUFFIX = ".arrow"


def join_uri(base: str, *parts: str) -> str:
    """``base/part/...`` for a path or a URI (no normalisation of the user's part)."""
    return "/".join([base.rstrip("/"), *parts])


@dataclass(frozen=True)
class SinkPaths:
    """The job's durable locations, derived from the backup URI and the checkpoint URI."""

    backup: str
    checkpoint: str

    @property
    def results(self) -> str:
        return join_uri(self.backup, "_lacuna", "results")

    @property
    def metrics(self) -> str:
        return join_uri(self.backup, "_lacuna", "metrics")

    @property
    def events(self) -> str:
        return join_uri(self.backup, *EVENTS_DIR)

    @property
    def run(self) -> str:
        """The last start's contract, exposure and durability (``engine.job.exposure``)."""
        return join_uri(self.backup, "_lacuna", "run.json")

    @property
    def state(self) -> str:
        return join_uri(self.checkpoint, "lacuna_state")

    def query_checkpoint(self, name: str) -> str:
        return join_uri(self.checkpoint, name)

    def backup_batch(self, batch_id: int) -> str:
        return join_uri(self.backup, f"batch_id={batch_id}")


class WindowStates:
    """The open windows' state after each micro-batch, under ``<checkpoint>/lacuna_state``.

    Stored under the batch id; the one before the newest is kept too, so a replay of
    the newest batch starts again from the state before it. The newest is also kept
    in memory (the next batch's start, unless Spark replays).
    """

    def __init__(self, files: DurableFiles, folder: str, aggregate: str) -> None:
        self.files, self.folder, self.aggregate = files, folder, aggregate
        self._last: WindowState | None = None

    def before(self, batch_id: int) -> WindowState:
        """The state after batch ``batch_id - 1`` (memory, else checkpoint).

        Spark numbers micro-batches one by one, so a batch continues the state of the
        one before it, exactly: an older state (the newest file deleted) would count
        the windows since then twice and close others never, and no state at all past
        batch 0 (the directory deleted) would restart the windows and the monitor's
        tally. Either is refused, as an unreadable state is.
        """
        if self._last is not None and self._last.batch_id < batch_id:
            return replace(self._last)
        if batch_id == 0:
            return WindowState(self.aggregate)
        stored = [
            int(name.removesuffix(STATE_SUFFIX))
            for name in self.files.names(self.folder)
            if name.endswith(STATE_SUFFIX) and name.removesuffix(STATE_SUFFIX).isdigit()
        ]
        earlier = [b for b in stored if b < batch_id]
        state = (
            WindowState.restore(self.files.read(self._uri(batch_id - 1)))
            if batch_id - 1 in earlier
            else None
        )
        if state is None or state.batch_id != batch_id - 1:
            found = f"the newest is after batch {max(earlier)}" if earlier else "there is none"
            raise PipelineError(
                f"the window state after micro-batch {batch_id - 1} is missing from "
                f"{self.folder} ({found}): resuming would report windows twice or lose "
                "them, and restart the live monitor's tally. Restore the checkpoint from a "
                "copy, or start with a new --checkpoint and --backup"
            )
        return state

    def save(self, state: WindowState) -> None:
        """Store under the batch id; keep the one before it too, for a replay of this batch."""
        self.files.write(self._uri(state.batch_id), state.snapshot())
        names = self.files.names(self.folder)
        ids = sorted(int(n.removesuffix(STATE_SUFFIX)) for n in names if n.endswith(STATE_SUFFIX))
        for old in ids[:-2]:
            self.files.delete(self._uri(old))
        self._last = state

    def _uri(self, batch_id: int) -> str:
        return join_uri(self.folder, f"{batch_id:012d}{STATE_SUFFIX}")
