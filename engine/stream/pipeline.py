"""The live query: Spark Structured Streaming over the landing directory.

``foreachBatch`` turns each micro-batch into pandas (Arrow) and calls the pure
functions of ``engine.stream.batch``: (a) the backup writer keeps the readings
the mode asks for, (b) window aggregates are emitted as windows complete, (c)
the shadow check measures what recovery from the backup sensors would have
missed. A batch's backup rows, results, late readings, marker and window-state
snapshot go to the store in one transaction, keyed by ``(run, batch_id)``.

PySpark is imported inside functions only.
"""

from __future__ import annotations

import io
import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import PipelineError
from engine.store import BackupStore, BatchWrite, backup_bytes
from engine.stream.batch import (
    LATE_COLUMNS,
    WindowAdvance,
    WindowParams,
    WindowState,
    advance_windows,
    results_frame,
    select_backup_rows,
    shadow_errors,
)
from engine.stream.feeder import spark_committed_batches
from engine.stream.source import LandingDirSource, StreamSource
from engine.stream.spec import (
    FAILURE_MARK,
    Fault,
    Monitor,
    PipelineOptions,
    PipelinePaths,
    SimulatedFailure,
    Stage,
    StatusBoard,
    StreamSpec,
    check_mode,
)
from engine.stream.versions import PendingPlan, PlanVersion

__all__ = ["Fault", "LivePipeline", "SimulatedFailure", "consumed_files", "discard_lost_state"]

RUN_FILE = "lacuna_run.json"


END_OF_FEED = -1  # store batch id of the disorder stage's end-of-feed flush


class LivePipeline:
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
    ) -> None:
        check_mode(mode)
        self.spark, self.mode, self.paths, self.store = spark, mode, paths, store
        self.board = board or StatusBoard()
        self.options = options or PipelineOptions()
        self.monitor, self.stage, self.fault = monitor, stage, fault
        self.source: StreamSource = source or LandingDirSource(
            paths.landing_dir, self.options.max_files_per_trigger
        )
        self._version = version or PlanVersion.initial(spec, store.now())
        if self._version.spec is not spec:
            raise PipelineError("the plan version given is not the spec given")
        self._pending: PendingPlan | None = None
        self._last_time: datetime | None = None
        self._spec_lock = threading.Lock()
        self._fail = threading.Event()
        self._seed = seed
        self._state = seed or WindowState.empty(len(spec.sensors))
        self._readings = 0
        self._inflight: int | None = None
        self._stage_start = stage.snapshot() if stage is not None else {}
        self._kinds: dict[str, int] = {}  # the stage's result rows of this batch, by kind
        self._alerts = 0
        self.run = -1
        self.query: Any = None
        self._listener: Any = None

    # -- control ------------------------------------------------------------

    def start(self) -> LivePipeline:
        """Start the query (resuming the checkpoint's run if there is one)."""
        self.run = self._claim_run()
        self.board.update(state="running", mode=self.mode, run=self.run, last_error=None)
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
        self._listener = _make_listener(self)
        self.spark.streams.addListener(self._listener)
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
                    self._state = self._unpack(blob)
                return run
            ck.mkdir(parents=True, exist_ok=True)
            run = self.store.next_run()
            run_file.write_text(json.dumps({"run": run}))
        except OSError as err:
            raise PipelineError(f"checkpoint directory {str(ck)!r} is not usable: {err}") from err
        reason = "start" if self._seed is None else "restart after recovery"
        self.store.log_plan(f"run {run}: {reason} in mode {self.mode}", self.spec.backup_sensors)
        self.store.write_version(self._version.record())  # idempotent: a restart keeps it
        self.board.update(plan_version=self._version.id)
        return run

    def set_spec(
        self,
        spec: StreamSpec,
        reason: str,
        *,
        kind: str = "manual",
        calibration: dict[str, Any] | None = None,
    ) -> None:
        """Queue a new plan; it becomes a plan version at the next micro-batch.

        ``kind`` is the version's reason (initial, scheduled, alert, manual),
        ``reason`` the sentence logged with it. A newer queued plan replaces an
        older one that has not taken effect yet.
        """
        self.queue(PendingPlan(spec, kind, reason, self.store.now(), calibration or {}))

    def queue(self, pending: PendingPlan) -> None:
        """Queue ``pending`` (e.g. one a failed run had not installed yet)."""
        with self._spec_lock:
            self._version.spec.check_compatible(pending.spec)
            self._pending = pending
        self.store.log_plan(pending.detail, pending.spec.backup_sensors)
        self.board.mark("replan", pending.detail)

    @property
    def pending(self) -> PendingPlan | None:
        """A queued plan that has not taken effect yet."""
        with self._spec_lock:
            return self._pending

    @property
    def spec(self) -> StreamSpec:
        with self._spec_lock:
            return self._version.spec

    @property
    def version(self) -> PlanVersion:
        """The plan version in force (the last batch's)."""
        with self._spec_lock:
            return self._version

    def _batch_version(self, pdf: pd.DataFrame) -> PlanVersion:
        """The version this batch runs under: a queued plan takes effect here."""
        with self._spec_lock:
            pending, current = self._pending, self._version
        if pending is None:
            return current
        new = current.following(pending, self.store.horizon() + 1)
        first_time = _first_time(pdf)
        return replace(new, first_time=first_time) if first_time is not None else new

    def _install(self, version: PlanVersion) -> None:
        """After the batch that started ``version`` committed: it is the plan in force."""
        with self._spec_lock:
            if version.id <= self._version.id:
                return
            if self._pending is not None and self._pending.spec is version.spec:
                self._pending = None
            self._version = version
        self.board.add(plan_changes=1)
        self.board.update(plan_version=version.id)

    @property
    def state(self) -> WindowState:
        return self._state

    def request_failure(self) -> None:
        """Make the next batch raise, killing the query."""
        self._fail.set()

    def process_all_available(self) -> None:
        """Block until everything that has landed is processed (raises if the query died)."""
        try:
            self.query.processAllAvailable()
        except Exception as err:
            raise PipelineError(f"the streaming query failed: {_first_line(err)}") from err

    def await_termination(self, timeout: float) -> bool:
        """Wait for the query to end; ``True`` if it has (with or without an error)."""
        try:
            return bool(self.query.awaitTermination(timeout))
        except Exception:  # the query died with an exception: it has terminated
            return True

    def stop(self) -> None:
        """Stop the query (if it runs) and detach the listener."""
        try:
            if self.query is not None and self.query.isActive:
                self.query.stop()
        finally:
            self._remove_listener()

    def _remove_listener(self) -> None:
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None

    # -- one micro-batch ----------------------------------------------------

    def _on_batch(self, df: Any, batch_id: int) -> None:
        limit = self.options.fail_after_readings
        if self._fail.is_set() or (limit is not None and self._readings >= limit):
            self._fail.set()
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
        advance, late, errors = self._compute(pdf, spec)
        t2 = time.perf_counter()
        backup = select_backup_rows(pdf, spec.stored_sensors(self.mode))
        write = BatchWrite(
            run=self.run,
            batch_id=batch_id,
            backup=backup,
            results=self._results(advance, spec),
            late=late,
            max_seq=int(pdf["seq"].max()) if len(pdf) else -1,
            state=self._pack(advance.state),
            version=None if version is self.version else version.record(self._last_time),
        )
        self.store.commit_batch(write, before_commit=self._fault_hook(batch_id, "before_commit"))
        self._install(version)
        self._last_time = _last_time(pdf) or self._last_time
        t3 = time.perf_counter()
        self._fault_hook(batch_id, "after_commit")()
        self._state, self._inflight = advance.state, None
        self._readings += len(pdf)
        self._report(pdf, advance, late, errors, backup, version)
        self._record(batch_id, pdf, advance, late, backup, 1000 * (t3 - t0), 1000 * (t3 - t2))
        self.board.add_profile(
            {"to_pandas": t1 - t0, "windows_and_shadow": t2 - t1, "store": t3 - t2, "batches": 1}
        )

    def _results(self, advance: WindowAdvance, spec: StreamSpec) -> pd.DataFrame:
        """Live window results plus, with a disorder stage, its versioned results
        (provisional, then corrections once late tuples span Gamma, then final)."""
        live = results_frame(advance.closed, spec.sensors)
        pop = getattr(self.stage, "pop_results", None)  # a stage may keep no results
        if pop is None:
            return live
        staged = pop()
        if not len(staged):
            return live
        self._kinds = staged["kind"].value_counts().to_dict()
        staged = staged[list(live.columns)].copy()
        for name in ("window_start", "window_end"):
            staged[name] = _naive_utc(staged[name])
            live[name] = _naive_utc(live[name])
        return pd.concat([live, staged], ignore_index=True)

    def _reload_state(self) -> None:
        """Window (and stage) state as of the run's last committed batch."""
        blob = self.store.load_state(self.run)
        if blob is not None:
            self._state = self._unpack(blob)
            return
        self._state = self._seed or WindowState.empty(len(self.spec.sensors))
        if self.stage is not None:
            self.stage.restore(self._stage_start)

    def _compute(
        self, pdf: pd.DataFrame, spec: StreamSpec
    ) -> tuple[WindowAdvance, pd.DataFrame, np.ndarray | None]:
        released, late = pdf, pdf.iloc[0:0][list(LATE_COLUMNS)]
        if self.stage is not None:
            released, late = self.stage.process(pdf)
        return self._advance(released, late, spec)

    def _advance(
        self, released: pd.DataFrame, late: pd.DataFrame, spec: StreamSpec
    ) -> tuple[WindowAdvance, pd.DataFrame, np.ndarray | None]:
        """Window the released readings (plus a stage's late ones) and shadow-check them."""
        params = WindowParams(spec.sensors, spec.window, spec.slide, spec.aggregate)
        late = late[list(LATE_COLUMNS)]
        # A stage's own results are the low-latency path; the reading-indexed windows
        # below wait for every reading, so late ones still complete them.
        if self.stage is not None and len(late):
            released = pd.concat([released, _like(late, released)], ignore_index=True)
        repair = spec.recovery_map(self.mode) if self.mode != "none" else None
        advance = advance_windows(self._state, released, params, repair)
        late = pd.concat([late, advance.late], ignore_index=True) if len(advance.late) else late
        errors = None
        if self.options.shadow and len(advance.closed):
            errors = shadow_errors(advance.closed, params, spec.linear_map)
        return advance, late, errors

    def finish_stage(self) -> int:
        """End of feed: flush the disorder stage so every window gets its final result.

        Releases what the K-slack buffer still holds, applies every pending
        correction and marks results final, committed as one more store batch
        (``END_OF_FEED``; idempotent). Call only while no micro-batch runs (after
        ``process_all_available``). Returns the number of windows it closed.
        """
        flush = getattr(self.stage, "flush", None)
        if flush is None or self.store.is_committed(self.run, END_OF_FEED):
            return 0
        version = self.version
        spec = version.spec
        released, late = flush()
        advance, late, errors = self._advance(released, late, spec)
        write = BatchWrite(
            run=self.run,
            batch_id=END_OF_FEED,
            results=self._results(advance, spec),
            late=late,
            max_seq=int(released["seq"].max()) if len(released) else -1,
            state=self._pack(advance.state),
        )
        self.store.commit_batch(write)
        self._state = advance.state
        none = released.iloc[0:0]
        self._report(none, advance, late, errors, none, version)
        self._record(END_OF_FEED, none, advance, late, none, None, None)
        return len(advance.closed)

    def _install_stored_version(self) -> None:
        """A replayed batch already committed a queued plan's version: take it as in force."""
        with self._spec_lock:
            pending, current = self._pending, self._version
        if pending is None:
            return
        stored = [r for r in self.store.read_versions() if r.id == current.id + 1]
        if stored:
            self._install(current.following(pending, stored[0].first_seq))

    def _report(
        self,
        pdf: pd.DataFrame,
        advance: WindowAdvance,
        late: pd.DataFrame,
        errors: np.ndarray | None,
        backup: pd.DataFrame,
        version: PlanVersion,
    ) -> None:
        spec = version.spec
        self.board.add(
            batches=1,
            input_rows=len(pdf),
            backup_rows=len(backup),
            backup_bytes=backup_bytes(backup),
            windows_emitted=len(advance.closed),
            late_rows=len(late),
            duplicate_readings=advance.duplicates,
            stale_readings=advance.stale,
        )
        self.board.update(buffered_rows=advance.state.buffered_rows)
        if errors is None:
            return
        targets = spec.linear_map.targets
        self.board.record_shadow(errors, spec.sensors, targets, spec.eps_vector, version.id)
        if self.monitor is not None:
            alert = self.monitor.observe(errors, reconstructed=targets, version=version.id)
            if alert is not None:
                reason = str(getattr(alert, "reason", alert))
                self.board.update(last_alert=reason)
                self.board.mark("alert", reason)
                self._alerts += 1

    def _record(
        self,
        batch_id: int,
        pdf: pd.DataFrame,
        advance: WindowAdvance,
        late: pd.DataFrame,
        backup: pd.DataFrame,
        duration_ms: float | None,
        store_ms: float | None,
    ) -> None:
        """The batch's point on the metrics history (and the stage's K, watermark, results)."""
        kinds, self._kinds = self._kinds, {}
        metrics = getattr(self.stage, "metrics", None)  # a stage may expose none
        if metrics is not None:
            self.board.update(**metrics())
            self.board.add(
                provisional_results=int(kinds.get("provisional", 0)),
                corrected_results=int(kinds.get("correction", 0)),
                final_results=int(kinds.get("final", 0)),
            )
        alerts, self._alerts = self._alerts, 0
        self.board.record_batch(
            batch_id,
            input_rows=len(pdf),
            duration_ms=duration_ms,
            store_ms=store_ms,
            backup_rows=len(backup),
            backup_bytes=backup_bytes(backup),
            windows=len(advance.closed),
            alerts=alerts,
            late=len(late),
            provisional=int(kinds.get("provisional", 0)),
            corrections=int(kinds.get("correction", 0)),
            final=int(kinds.get("final", 0)),
        )

    def _fault_hook(self, batch_id: int, point: str) -> Callable[[], None]:
        fault = self.fault

        def hook() -> None:
            if fault is not None and fault.batch_id == batch_id and fault.point == point:
                self.fault = None  # fire once
                raise SimulatedFailure(f"{FAILURE_MARK}: injected {point} in batch {batch_id}")

        return hook

    def _pack(self, state: WindowState) -> bytes:
        stage = json.dumps(self.stage.snapshot() if self.stage is not None else None).encode()
        buf = io.BytesIO()
        np.savez(
            buf,
            window=np.frombuffer(state.to_bytes(), np.uint8),
            stage=np.frombuffer(stage, np.uint8),
        )
        return buf.getvalue()

    def _unpack(self, blob: bytes) -> WindowState:
        with np.load(io.BytesIO(blob)) as data:
            stage = json.loads(data["stage"].tobytes().decode())
            state = WindowState.from_bytes(data["window"].tobytes())
        if self.stage is not None and stage is not None:
            self.stage.restore(stage)
        return state


def _make_listener(pipeline: LivePipeline) -> Any:
    """A StreamingQueryListener feeding the pipeline's status board."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            if pipeline.query is None or str(p.id) != str(pipeline.query.id):
                return
            durations = dict(p.durationMs or {})
            pipeline.board.update(
                input_rows_per_second=float(p.inputRowsPerSecond or 0.0),
                processed_rows_per_second=float(p.processedRowsPerSecond or 0.0),
                batch_duration_ms=float(durations.get("triggerExecution", 0.0)),
            )
            if "triggerExecution" in durations:  # Spark's figures replace our own estimate
                pipeline.board.patch_batch(
                    pipeline.run,
                    int(p.batchId),
                    duration_ms=float(durations["triggerExecution"]),
                    rows_per_second=float(p.processedRowsPerSecond or 0.0),
                )
            pipeline.board.add_profile({f"spark_{k}": v / 1000.0 for k, v in durations.items()})

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            if pipeline.query is None or str(event.id) != str(pipeline.query.id):
                return
            if event.exception:
                failed = FAILURE_MARK in str(event.exception)
                pipeline.board.update(
                    state="failed" if failed else "error",
                    last_error=_first_line(event.exception),
                )

    return _Listener()


def _first_line(err: object) -> str:
    text = str(err).strip()
    for line in text.splitlines():
        if FAILURE_MARK in line:
            return line.strip()
    return text.splitlines()[0] if text else type(err).__name__


# -- failure: what a crash destroys ------------------------------------------


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


def _first_time(pdf: pd.DataFrame) -> datetime | None:
    return _edge_time(pdf, "min")


def _last_time(pdf: pd.DataFrame) -> datetime | None:
    return _edge_time(pdf, "max")


def _edge_time(pdf: pd.DataFrame, how: str) -> datetime | None:
    if not len(pdf):
        return None
    t = pd.to_datetime(pdf["event_time"], utc=True).agg(how)
    return None if pd.isna(t) else t.to_pydatetime()


def _like(late: pd.DataFrame, released: pd.DataFrame) -> pd.DataFrame:
    """Late readings in the released frame's columns and time zone handling."""
    out = late[["seq", "event_time", "sensor", "value"]].copy()
    times = pd.to_datetime(out["event_time"], utc=True)
    tz = getattr(released["event_time"].dtype, "tz", None)
    out["event_time"] = times.dt.tz_convert(tz) if tz is not None else times.dt.tz_localize(None)
    return out


def _naive_utc(times: pd.Series) -> pd.Series:
    """Timestamps as naive UTC, the store's TIMESTAMP columns."""
    return pd.to_datetime(times, utc=True).dt.tz_localize(None)
