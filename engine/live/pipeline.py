"""The live query: Spark Structured Streaming over the landing directory.

``foreachBatch`` turns each micro-batch into pandas (Arrow) and calls the pure
functions of ``engine.live.batch``: (a) the backup writer keeps the readings
the mode asks for, (b) window aggregates are emitted as windows complete, (c)
the shadow check measures what recovery from the backup sensors would have
missed. Spark writes the batch's backup rows to its own Parquet directory
(``engine.backup.runs``, overwritten by a replay) first; then its results,
late readings, marker and window-state snapshot go to the store in one DuckDB
transaction, keyed by ``(run, batch_id)``.

PySpark is imported inside functions only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from engine.backup.durable import DurableFiles
from engine.errors import PipelineError, StoreError
from engine.live.backup_writer import write_batch
from engine.live.batch import (
    LATE_COLUMNS,
    WindowAdvance,
    WindowState,
    advance_windows,
    results_frame,
    select_backup_rows,
    shadow_errors,
)
from engine.live.exposure import stored_sensors
from engine.live.failure import CrashedBatch, FailureTrigger
from engine.live.listener import make_listener
from engine.live.operator_state import batch_results, late_as_released, pack_state, unpack_state
from engine.live.records import BackupWritten, BatchWrite
from engine.live.reporting import BatchReporting
from engine.live.shadow_rows import ShadowRows, rows_under_versions
from engine.live.spec import (
    Fault,
    Monitor,
    PipelineOptions,
    PipelinePaths,
    Stage,
    StreamSpec,
    check_mode,
)
from engine.live.status import StatusBoard
from engine.live.store import COMPACT_BATCHES, BackupStore
from engine.live.switching import PlanSwitching, _last_time
from engine.live.versions import PendingPlan, PlanVersion, read_versions
from engine.stream.checkpoint import clear_interrupted_first_batch
from engine.stream.query_errors import (
    FAILURE_MARK,
    QueryStopped,
    SimulatedFailure,
    query_failure_line,
)
from engine.stream.quiet import stopping
from engine.stream.source import LandingDirSource, StreamSource

__all__ = ["END_OF_FEED", "RUN_FILE", "BackupWriter", "LivePipeline"]

# (micro-batch DataFrame, target URI, sensors, plan version) -> Parquet bytes written
BackupWriter = Callable[[Any, str, Sequence[str], int], int]

RUN_FILE = "lacuna_run.json"


END_OF_FEED = -1  # store batch id of the disorder stage's end-of-feed flush
SEED_STATE = -2  # the batch id a restarted run's seeded state is saved under (no batch)


Shadow = tuple[np.ndarray, ShadowRows]  # closed windows' errors and their rows


class LivePipeline(PlanSwitching, BatchReporting):
    """One streaming query over ``paths.landing`` writing to ``store``.

    A checkpoint directory that already holds a run resumes it (Spark replays
    the batch it had not committed; the window state comes from the store).
    """

    def __init__(
        self,
        spark: Any,
        spec: StreamSpec,
        mode: str,
        paths: PipelinePaths,
        store: BackupStore,
        *,
        board: StatusBoard | None = None,
        options: PipelineOptions | None = None,
        monitor: Monitor | None = None,
        stage: Stage | None = None,
        seed: WindowState | None = None,
        fault: Fault | None = None,
        source: StreamSource | None = None,
        version: PlanVersion | None = None,
        backup_writer: BackupWriter = write_batch,
    ) -> None:
        check_mode(mode)
        self.spark, self.mode, self.paths, self.store = spark, mode, paths, store
        self.board = board or StatusBoard()
        self.options = options or PipelineOptions()
        self.monitor, self.stage, self.fault = monitor, stage, fault
        self._write_backup = backup_writer
        self.source: StreamSource = source or LandingDirSource(
            paths.landing_dir, self.options.max_files_per_trigger
        )
        self._version = version or PlanVersion.initial(spec, store.now())
        if self._version.spec is not spec:
            raise PipelineError("the plan version given is not the spec given")
        self._pending: PendingPlan | None = None
        # the versions before this one (a resumed run's, from the store): the rows they
        # governed in the windows still open are rebuilt and counted under them
        self._history = {v.id: v for v in read_versions(store, spec) if v.id < self._version.id}
        self._history[self._version.id] = self._version
        self._last_time: datetime | None = None
        self._spec_lock = threading.Lock()
        self._failure = FailureTrigger(store, spec.slide)
        self._stopping = threading.Event()  # ``stop`` was called: an interrupted batch is no error
        self._seed = seed
        self._state = seed or WindowState.empty(len(spec.sensors))
        self._readings = 0
        self._inflight: int | None = None
        self._compacted_before = False  # the earlier runs' backups, once per pipeline
        self._stage_start = stage.snapshot() if stage is not None else {}
        self._kinds: dict[str, int] = {}  # the stage's result rows of this batch, by kind
        self._alerts = 0
        self._alerting: dict[int, set[str]] = {}
        self._full_reason: str | None = None
        # (seq, sensor) of readings a batch backed up beyond its version's set that the
        # disorder stage has not released yet. In memory only: the stage's snapshot keeps
        # the backup set's readings alone, so none of these outlives a restart unreleased
        self._stored_unreleased: set[tuple[int, str]] = set()
        self.crashed: CrashedBatch | None = None  # the batch a simulated crash took
        self.run = -1
        self.query: Any = None
        self._listener: Any = None

    # -- control ------------------------------------------------------------

    def start(self) -> LivePipeline:
        """Start the query (resuming the checkpoint's run if there is one)."""
        self.run = self._claim_run()
        # a stop during the first batch's log write leaves a checkpoint Spark refuses
        clear_interrupted_first_batch(DurableFiles(self.spark), str(self.paths.checkpoint_dir))
        trigger = None if self.options.available_now else self.options.trigger_seconds
        self.board.update(
            state="running", mode=self.mode, run=self.run, last_error=None, trigger_seconds=trigger
        )
        reader = self.source.read_stream(self.spark)
        writer = (
            reader.writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", str(self.paths.checkpoint_dir))
            .queryName(f"lacuna_run_{self.run}")
        )
        if self.options.available_now:
            writer = writer.trigger(availableNow=True)
        elif self.options.trigger_seconds > 0:
            writer = writer.trigger(processingTime=f"{self.options.trigger_seconds} seconds")
        self._listener = make_listener(self)
        self.spark.streams.addListener(self._listener)
        stopping(False)
        try:
            self.query = writer.start()
        except Exception as err:  # py4j raises many types; report one readable line
            self._remove_listener()
            raise PipelineError(f"the streaming query could not start: {err}") from err
        return self

    def _claim_run(self) -> int:
        ck = self.paths.checkpoint_dir
        run_file = ck / RUN_FILE
        try:
            if run_file.exists():
                run = int(json.loads(run_file.read_text())["run"])
                blob = self.store.load_state(run)
                if blob is not None:
                    self._state = unpack_state(blob, self.stage)
                self.board.update(plan_version=self._version.id)
                return run
            ck.mkdir(parents=True, exist_ok=True)
            run = self.store.next_run()
            run_file.write_text(json.dumps({"run": run}))
        except OSError as err:
            raise PipelineError(f"checkpoint directory {str(ck)!r} is not usable: {err}") from err
        reason = "start" if self._seed is None else "restart after recovery"
        self.store.log_plan(f"run {run}: {reason} in mode {self.mode}", self.spec.backup_sensors)
        self.store.write_version(self._version.record())  # idempotent: a restart keeps it
        if self._seed is not None:
            # The recovery's seed (rebuilt tail rows, the next window) lives in memory
            # until the first batch commits: a stop before that, then Resume, would
            # start from an empty state and never close a window again.
            self.store.save_state(run, SEED_STATE, pack_state(self._state, self.stage))
        self.board.update(plan_version=self._version.id)
        return run

    @property
    def state(self) -> WindowState:
        return self._state

    def request_failure(self, kind: str = "machine") -> None:
        """``"machine"``: kill the query at the first batch that starts with a window open;
        ``"crash"``: in the next batch with rows, once its backup is written
        (``engine.live.failure``)."""
        self._failure.request(kind)

    def process_all_available(self) -> None:
        """Block until everything that has landed is processed (raises if the query died)."""
        try:
            self.query.processAllAvailable()
        except Exception as err:
            raise PipelineError(f"the streaming query failed: {query_failure_line(err)}") from err

    def await_termination(self, timeout: float) -> bool:
        """Wait for the query to end; ``True`` if it has (with or without an error)."""
        try:
            return bool(self.query.awaitTermination(timeout))
        except Exception:  # the query died with an exception: it has terminated
            return True

    def stop(self) -> None:
        """Detach the listener, then stop the query (if it runs).

        In that order so Spark's listener bus never calls back into a Python side
        that a SIGTERM is tearing down (its failed call was logged with a stack);
        the listener reacts only to a query that failed, not to one stopped. The
        micro-batch the stop interrupts raises ``QueryStopped`` (a short message
        Spark reads as a stop: see ``engine.stream.query_errors``), and py4j's record
        of it is kept quiet (``engine.stream.quiet``): that batch is not committed,
        the next run replays it.
        """
        self._stopping.set()
        stopping(True)
        try:
            self._remove_listener()
        finally:
            if self.query is not None and self.query.isActive:
                self.query.stop()

    def _remove_listener(self) -> None:
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None

    # -- one micro-batch ----------------------------------------------------

    def _on_batch(self, df: Any, batch_id: int) -> None:
        try:
            self._process_batch(df, batch_id)
        except Exception as err:
            if self._stopping.is_set() and not isinstance(err, SimulatedFailure):
                raise QueryStopped(batch_id, self.run) from None  # not the interrupted call's
            raise

    def _process_batch(self, df: Any, batch_id: int) -> None:
        limit = self.options.fail_after_readings
        if (limit is not None and self._readings >= limit) or self._failure.strikes():
            self._failure.request()
            raise SimulatedFailure(f"{FAILURE_MARK} before batch {batch_id} of run {self.run}")
        if self.store.is_committed(self.run, batch_id):
            self._reload_state()  # a replay of a batch whose effects are stored
            self._install_stored_version()
            return
        if self._inflight is not None:
            self._reload_state()  # the last attempt died part-way (the stage may have moved)
        self._inflight = batch_id
        t0 = time.perf_counter()
        pdf = df.toPandas()
        t1 = time.perf_counter()
        version = self._batch_version(pdf)
        spec = version.spec
        choice = stored_sensors(pdf, spec, self.mode, self._state)  # the crash contract's rules
        advance, late, shadow = self._compute(pdf, version, choice.reason is not None)
        t2 = time.perf_counter()
        backup = self._backup(df, pdf, batch_id, choice.sensors, version.id)
        t_backup = time.perf_counter()
        if self._failure.crash_strikes(choice.rows):  # the batch's backup is durable, not its state
            seq = pdf["seq"]
            self.crashed = CrashedBatch(
                self.run,
                batch_id,
                int(seq.min()),
                int(seq.max()),
                backup.rows,
                backup.bytes,
                version,
                len(pdf),
                self._last_time,
            )
            raise SimulatedFailure(f"{FAILURE_MARK}: crash in batch {batch_id} of run {self.run}")
        write = BatchWrite(
            run=self.run,
            batch_id=batch_id,
            backup_rows=backup.rows,
            backup_bytes=backup.bytes,
            results=self._results(advance, spec),
            late=late,
            max_seq=int(pdf["seq"].max()) if len(pdf) else -1,
            state=pack_state(advance.state, self.stage),
            version=None if version is self.version else version.record(self._last_time),
        )
        self.store.commit_batch(write, before_commit=self._fault_hook(batch_id, "before_commit"))
        self._install(version)
        self._last_time = _last_time(pdf) or self._last_time
        t3 = time.perf_counter()
        self._fault_hook(batch_id, "after_commit")()
        self._state, self._inflight = advance.state, None
        self._forget_stored_before(advance.state.start)
        self._readings += len(pdf)
        self._report(pdf, advance, late, shadow, backup, version)
        self._report_backup(choice)
        # store_ms: the Parquet backup write and the store's commit, until the batch is durable
        self._record(batch_id, pdf, advance, late, backup, 1000 * (t3 - t0), 1000 * (t3 - t2))
        t4 = time.perf_counter()
        self._compact()
        self.board.add_profile(
            {
                "to_pandas": t1 - t0,
                "windows_and_shadow": t2 - t1,
                "backup_write": t_backup - t2,
                "store": t3 - t_backup,
                "compaction": time.perf_counter() - t4,
                "batches": 1,
            }
        )

    def _compact(self, least: int = COMPACT_BATCHES) -> None:
        """Fold the run's small backup directories into one (``BackupStore.compact``),
        after the batch committed. A failure leaves them as Spark wrote them, readable,
        and is marked on the board; the pipeline goes on."""
        try:
            if not self._compacted_before:  # the earlier runs are over: fold them whole
                for run in range(self.run):
                    self.store.compact(run, least=2)
                self._compacted_before = True
            self.store.compact(self.run, least=least)
        except (StoreError, OSError, duckdb.Error, pa.ArrowException) as err:
            text = f"backup compaction failed; the batches stay as written: {err}"
            self.board.mark("compaction", text)

    def _backup(
        self, df: Any, pdf: pd.DataFrame, batch_id: int, sensors: Sequence[str], version: int
    ) -> BackupWritten:
        """Spark writes the rows of ``sensors`` to the batch's Parquet directory (before
        the store commits the batch); their count comes from the same rows in pandas."""
        rows = len(select_backup_rows(pdf, sensors)) if sensors else 0
        if rows == 0:
            return BackupWritten()
        target = self.store.batch_uri(self.run, batch_id)
        return BackupWritten(rows, self._write_backup(df, target, sensors, version))

    def _results(self, advance: WindowAdvance, spec: StreamSpec) -> pd.DataFrame:
        """Live window results plus a disorder stage's (``operator_state.batch_results``)."""
        frame, self._kinds = batch_results(results_frame(advance.closed, spec.sensors), self.stage)
        return frame

    def _reload_state(self) -> None:
        """Window (and stage) state as of the run's last committed batch."""
        blob = self.store.load_state(self.run)
        if blob is not None:
            self._state = unpack_state(blob, self.stage)
            return
        self._state = self._seed or WindowState.empty(len(self.spec.sensors))
        if self.stage is not None:
            self.stage.restore(self._stage_start)

    def _compute(
        self, pdf: pd.DataFrame, version: PlanVersion, full: bool
    ) -> tuple[WindowAdvance, pd.DataFrame, Shadow | None]:
        """``full``: the batch backs up every sensor, beyond the version's set."""
        if self.stage is None:
            stored = np.full(len(pdf), full)
            return self._advance(pdf, pdf.iloc[0:0][list(LATE_COLUMNS)], version, stored)
        if full:  # its readings reach the windows when the stage releases them
            self._stored_unreleased.update(
                zip(pdf["seq"].tolist(), pdf["sensor"].tolist(), strict=True)
            )
        released, late = self.stage.process(pdf)
        return self._advance(released, late, version)

    def _advance(
        self,
        released: pd.DataFrame,
        late: pd.DataFrame,
        version: PlanVersion,
        stored: np.ndarray | None = None,
    ) -> tuple[WindowAdvance, pd.DataFrame, Shadow | None]:
        """Window the released readings (plus a stage's late ones) and shadow-check them:
        the closed windows' errors, each row rebuilt under its own plan version.
        ``stored`` (one per released reading; None: a stage's, looked up): readings their
        batch backed up beyond the version's set, returned by recovery as read."""
        spec = version.spec
        params = spec.window_params
        late = late[list(LATE_COLUMNS)]
        # A stage's own results are the low-latency path; the reading-indexed windows
        # below wait for every reading, so late ones still complete them.
        if self.stage is not None and len(late):
            released = pd.concat([released, late_as_released(late, released)], ignore_index=True)
        if stored is None:
            stored = self._stored_on_release(released)
        repair = spec.recovery_map(self.mode) if self.mode != "none" else None
        advance = advance_windows(self._state, released, params, repair, stored=stored)
        late = pd.concat([late, advance.late], ignore_index=True) if len(advance.late) else late
        if not (self.options.shadow and len(advance.closed)):
            return advance, late, None
        crash = spec.query.exposure is not None
        rows = rows_under_versions(advance.closed, {**self._history, version.id: version}, crash)
        # a crash plan is judged by its windows' m-row losses (``_report``), from ``rows``
        whole = None if crash else rows.rebuilt
        errors = shadow_errors(advance.closed, params, spec.linear_map, whole)
        return advance, late, (errors, rows)

    def _stored_on_release(self, released: pd.DataFrame) -> np.ndarray:
        """Which of a stage's released readings a batch backed up beyond its set."""
        if not self._stored_unreleased or not len(released):
            return np.zeros(len(released), dtype=bool)
        pairs = zip(released["seq"].tolist(), released["sensor"].tolist(), strict=True)
        return np.fromiter((p in self._stored_unreleased for p in pairs), bool, len(released))

    def _forget_stored_before(self, start: int) -> None:
        """Once a batch committed: rows the windows no longer hold are done with (an attempt
        that dies before its commit releases the same readings again, looked up again)."""
        if self._stored_unreleased:
            self._stored_unreleased = {k for k in self._stored_unreleased if k[0] >= start}

    def finish_stage(self) -> int:
        """End of feed: flush the disorder stage so every window gets its final result,
        and fold the backup's last small directories (``BackupStore.compact``).

        Releases what the K-slack buffer still holds, applies every pending
        correction and marks results final, committed as one more store batch
        (``END_OF_FEED``; idempotent). Call only while no micro-batch runs (after
        ``process_all_available``). Returns the number of windows it closed.
        """
        closed = self._flush_stage()
        self._compact(least=2)
        return closed

    def _flush_stage(self) -> int:
        flush = getattr(self.stage, "flush", None)
        if flush is None or self.store.is_committed(self.run, END_OF_FEED):
            return 0
        version = self.version
        spec = version.spec
        released, late = flush()
        advance, late, shadow = self._advance(released, late, version)
        write = BatchWrite(
            run=self.run,
            batch_id=END_OF_FEED,
            results=self._results(advance, spec),
            late=late,
            max_seq=int(released["seq"].max()) if len(released) else -1,
            state=pack_state(advance.state, self.stage),
        )
        self.store.commit_batch(write)
        self._state = advance.state
        self._forget_stored_before(advance.state.start)
        none = released.iloc[0:0]
        self._report(none, advance, late, shadow, BackupWritten(), version)
        self._record(END_OF_FEED, none, advance, late, BackupWritten(), None, None)
        return len(advance.closed)

    def _fault_hook(self, batch_id: int, point: str) -> Callable[[], None]:
        fault = self.fault

        def hook() -> None:
            if fault is not None and fault.batch_id == batch_id and fault.point == point:
                self.fault = None  # fire once
                raise SimulatedFailure(f"{FAILURE_MARK}: injected {point} in batch {batch_id}")

        return hook
