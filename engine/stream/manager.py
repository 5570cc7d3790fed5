"""One process-wide, thread-safe owner of the live pipeline, for the UI and the CLI.

``PipelineManager`` runs the feeder and the streaming query in the background,
simulates a failure, recovers, and reports. Every control call takes one lock,
so two browser sessions cannot start two pipelines or interleave a failure
with a recovery; ``status()`` never waits for that lock (it reads the status
board), so a polling UI stays responsive while recovery runs.

``run_simulation`` is the whole story end to end (``python -m engine simulate``).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import ParameterError, PipelineError
from engine.replan import ReplanningMonitor, calibration_state
from engine.store import BackupStore
from engine.stream.feeder import Feeder, FeedOptions
from engine.stream.pipeline import LivePipeline, discard_lost_state
from engine.stream.recovery import (
    LostRange,
    RecoveryReport,
    find_lost_range,
    recover_lost_range,
    score_recovery,
)
from engine.stream.session import SparkSettings, get_spark
from engine.stream.spec import (
    HistoryLike,
    Monitor,
    PipelineOptions,
    PipelinePaths,
    PipelineStatus,
    Stage,
    StatusBoard,
    StreamSpec,
    align_history,
    check_mode,
)
from engine.stream.versions import PendingPlan, PlanVersion, read_versions


@dataclass(frozen=True)
class _Recovery:
    lost: LostRange
    seconds: float
    rows_read: int
    seed_next_window: int  # lost windows from here on are finished by the live query
    rows_by_version: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunConfig:
    """What the running pipeline was started with. ``spec`` fixes the sensors and
    windows; the plan in force is the newest plan version (pipeline or store)."""

    spec: StreamSpec
    mode: str
    paths: PipelinePaths
    options: PipelineOptions = field(default_factory=PipelineOptions)
    monitor: Monitor | None = None

    def __post_init__(self) -> None:
        check_mode(self.mode)


class PipelineManager:
    """Owns at most one live pipeline at a time. Safe to share between threads."""

    def __init__(
        self,
        settings: SparkSettings | None = None,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings or SparkSettings()
        self._now, self._clock = now, clock
        self._lock = threading.RLock()
        self.board = StatusBoard(now)
        self._pipeline: LivePipeline | None = None
        self._feeder: Feeder | None = None
        self._store: BackupStore | None = None
        self._spark: Any = None
        self._truth: np.ndarray | None = None
        self._stage_factory: Callable[[], Stage] | None = None
        self._failed_run: int | None = None
        self._recovery: _Recovery | None = None
        self._config: RunConfig | None = None
        self._carry: PendingPlan | None = None

    # -- lifecycle ----------------------------------------------------------

    def start(
        self,
        history: HistoryLike,
        spec: StreamSpec,
        mode: str,
        paths: PipelinePaths,
        *,
        speed: float = 0.0,
        rows_per_file: int | None = None,
        delays: np.ndarray | None = None,
        options: PipelineOptions | None = None,
        monitor: Monitor | None = None,
        stage_factory: Callable[[], Stage] | None = None,
        reset: bool = False,
    ) -> PipelineStatus:
        """Start feeder and query in the background (``PipelineError`` if one runs)."""
        with self._lock:
            if self._pipeline is not None or self._failed_run is not None:
                raise PipelineError(
                    f"the pipeline is already {self.board.snapshot().state} "
                    f"(run {self.board.snapshot().run}); stop it before starting another"
                )
            check_mode(mode)
            truth = align_history(history, spec.sensors)
            rows = rows_per_file or default_rows_per_file(spec)
            feed = FeedOptions(speed=speed, rows_per_file=rows, delays=delays)
            paths.ensure()
            _prepare_root(paths, reset)
            self._store = BackupStore(paths.store_file, self._now)
            self._spark = _spark(self.settings)
            self.board = StatusBoard(self._now)
            self._truth, self._stage_factory, self._recovery = truth, stage_factory, None
            self._carry = None
            self._config = RunConfig(spec, mode, paths, options or PipelineOptions(), monitor)
            self._feeder = Feeder(history, spec.sensors, paths.landing_dir, paths.truth_dir, feed)
            first = PlanVersion.initial(spec, self._now(), _calibration(monitor))
            try:
                self._pipeline = self._new_pipeline(first, seed=None).start()
            except BaseException:
                self._feeder, self._pipeline = None, None
                self._store.close()
                self._store = None
                raise
            self._feeder.start()
            return self.status()

    def _new_pipeline(self, version: PlanVersion, seed: Any) -> LivePipeline:
        cfg = self._require_config()
        return LivePipeline(
            self._spark,
            version.spec,
            cfg.mode,
            cfg.paths,
            self._require_store(),
            board=self.board,
            options=cfg.options,
            monitor=cfg.monitor,
            stage=self._stage_factory() if self._stage_factory else None,
            seed=seed,
            version=version,
        )

    def status(self) -> PipelineStatus:
        """A snapshot for polling; never blocks on a running control call."""
        status, feeder, cfg = self.board.snapshot(), self._feeder, self._config
        if feeder is not None:
            status = replace(status, feed=feeder.progress())
        monitor = cfg.monitor if cfg is not None else None
        if isinstance(monitor, ReplanningMonitor):
            plan = monitor.schedule()
            status = replace(
                status,
                replan_every_rows=plan.every_rows,
                scheduled_replanning=plan.enabled,
                rows_under_plan=plan.rows_under_plan,
                plan_expired=plan.expired,
            )
        return status

    def set_spec(
        self,
        spec: StreamSpec,
        reason: str,
        *,
        kind: str = "manual",
        calibration: dict[str, Any] | None = None,
    ) -> None:
        """Queue a new plan for the running pipeline: it becomes a plan version at
        the next micro-batch (stored with the rows it governs; logged to ``plan_log``).

        Does not take the control lock: a re-plan worker must not wait for a
        ``drain`` that holds it while the very batches that install the plan run.
        The pipeline's own lock makes the queueing safe.
        """
        self._require_pipeline().set_spec(spec, reason, kind=kind, calibration=calibration)

    def set_replanning(self, enabled: bool) -> None:
        """Switch scheduled re-planning on or off (off: the plan expires at its horizon)."""
        monitor = self._require_config().monitor
        if not isinstance(monitor, ReplanningMonitor) or monitor.every_rows is None:
            raise PipelineError("this pipeline was started without a re-planning schedule")
        monitor.scheduled = bool(enabled)

    def replan_now(self) -> bool:
        """An operator's re-plan: a fresh plan on recent rows (reason ``manual``)."""
        monitor = self._require_config().monitor
        if not isinstance(monitor, ReplanningMonitor):
            raise PipelineError("this pipeline was started without a re-planning monitor")
        return monitor.request()

    def rows_seen(self) -> int:
        """Stream rows the committed batches carried (the largest ``seq`` + 1)."""
        store = self._store
        return 0 if store is None else store.horizon() + 1

    def versions(self) -> list[PlanVersion]:
        """Every plan version of the stream, from the store (oldest first)."""
        store, cfg = self._store, self._config
        return [] if store is None or cfg is None else read_versions(store, cfg.spec)

    def attach(
        self,
        history: HistoryLike,
        config: RunConfig,
        *,
        stage_factory: Callable[[], Stage] | None = None,
    ) -> PipelineStatus:
        """Take over the failed run that another process (or manager) left in ``config.paths``.

        Opens its store; ``recover`` then rebuilds the lost rows with the plan
        versions stored there and restarts the query on the files not consumed.
        """
        with self._lock:
            if self._pipeline is not None or self._store is not None:
                raise PipelineError("this manager already runs a pipeline; use a new one")
            if not config.paths.store_file.exists():
                raise PipelineError(f"no backup store at {str(config.paths.store_file)!r}")
            self._truth = align_history(history, config.spec.sensors)
            self._store = BackupStore(config.paths.store_file, self._now)
            self._spark = _spark(self.settings)
            self._config, self._stage_factory, self._recovery = config, stage_factory, None
            run = self._store.next_run() - 1
            if config.paths.checkpoint_dir.exists():  # a crash keeps it; its state is gone
                discard_lost_state(config.paths, self._store, run)
            self._failed_run = run
            self.board = StatusBoard(self._now)
            self.board.update(state="failed", mode=config.mode, run=run)
            return self.status()

    def simulate_failure(self, grace_seconds: float = 5.0) -> PipelineStatus:
        """Kill the query and destroy everything that was not backed up.

        The next batch raises inside ``foreachBatch``; if no batch comes within
        ``grace_seconds`` the query is stopped mid-stream instead.
        """
        with self._lock:
            pipeline = self._require_pipeline()
            pipeline.request_failure()
            if not pipeline.await_termination(grace_seconds):
                pipeline.stop()
            pipeline.stop()
            deleted = discard_lost_state(pipeline.paths, self._require_store(), pipeline.run)
            self._failed_run, self._pipeline = pipeline.run, None
            self._carry = pipeline.pending  # a re-plan not in force yet survives the failure
            self.board.update(
                state="failed",
                buffered_rows=0,
                last_error=f"simulated failure of run {pipeline.run}: query killed, checkpoint "
                f"and window state discarded, {len(deleted)} consumed input file(s) deleted",
            )
            return self.status()

    def recover(self) -> RecoveryReport:
        """Rebuild the lost windows from the backup, then restart the live query."""
        with self._lock:
            if self._failed_run is None:
                raise PipelineError("nothing to recover: simulate a failure first")
            store, cfg = self._require_store(), self._require_config()
            self.board.update(state="recovering")
            t0 = self._clock()
            versions = read_versions(store, cfg.spec)  # not memory: a new process has them too
            current = versions[-1] if versions else PlanVersion.initial(cfg.spec, self._now())
            lost = find_lost_range(store, cfg.spec.slide)
            outcome = recover_lost_range(
                self._spark, store, current.spec, cfg.mode, lost, self._failed_run, versions
            )
            seconds = self._clock() - t0
            self._recovery = _Recovery(
                lost, seconds, outcome.rows_read, outcome.seed.next_window, outcome.rows_by_version
            )
            # The restarted run must not fail again on its own.
            options = replace(cfg.options, fail_after_readings=None)
            self._config = replace(cfg, options=options)
            self._pipeline = self._new_pipeline(current, seed=outcome.seed).start()
            if self._carry is not None:
                self._pipeline.queue(self._carry)
            self._failed_run, self._carry = None, None
            return self.report()

    def results(self, kind: str | None = None) -> pd.DataFrame | None:
        """Stored window results of the current run's store (None before any start)."""
        store = self._store
        return None if store is None else store.read_results(kind)

    def plan_log(self) -> pd.DataFrame | None:
        """Every plan change of the live pipeline, with its reason."""
        store = self._store
        return None if store is None else store.read_table("plan_log")

    def report(self) -> RecoveryReport:
        """The last recovery, scored against the truth with the results stored so far."""
        with self._lock:
            rec = self._recovery
            if rec is None or self._truth is None:
                raise PipelineError("no recovery has run yet")
            cfg = self._require_config()
            spec, mode = self._current_spec(), cfg.mode
            report = score_recovery(
                self._require_store(),
                spec,
                mode,
                rec.lost,
                self._truth,
                spark_version=str(self._spark.version),
                seconds=rec.seconds,
                rows_read=rec.rows_read,
                input_rows=self.board.snapshot().input_rows,
            )
            emitted = set(report.window_ids)
            pending = [
                j
                for j in rec.lost.lost_windows(spec.slide)
                if j >= rec.seed_next_window and j not in emitted
            ]
            served = {str(k): v for k, v in sorted(rec.rows_by_version.items())}
            last = self.rows_seen() - 1
            versions = tuple(v.to_dict(last) for v in self.versions())
            return replace(
                report,
                windows_pending=len(pending),
                rows_by_version=served,
                plan_versions=versions,
            )

    def drain(self, timeout: float = 600.0) -> PipelineStatus:
        """Wait for the feeder to finish and the query to process every file."""
        with self._lock:
            pipeline, feeder = self._require_pipeline(), self._feeder
            if feeder is not None:
                feeder.join(timeout)
            pipeline.process_all_available()
            if feeder is None or feeder.progress().done:
                pipeline.finish_stage()  # a disorder stage releases and finalises the rest
            return self.status()

    def wait_for_failure(self, timeout: float) -> bool:
        """Wait until the running query dies (e.g. ``fail_after_readings``)."""
        pipeline, feeder = self._pipeline, self._feeder
        deadline = self._clock() + timeout
        while pipeline is not None and self._clock() < deadline:
            if pipeline.await_termination(0.5):
                return True
            if feeder is not None and feeder.progress().done:
                try:
                    pipeline.process_all_available()
                except PipelineError:
                    return True
                return not pipeline.query.isActive
        return False

    def stop(self) -> PipelineStatus:
        """Stop everything (idempotent)."""
        with self._lock:
            try:
                if self._feeder is not None:
                    self._feeder.stop()
                if self._pipeline is not None:
                    self._pipeline.stop()
            finally:
                self._pipeline, self._failed_run = None, None
                self.board.update(state="stopped")
            return self.status()

    def close(self) -> None:
        """Stop and release the store."""
        self.stop()
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def _require_pipeline(self) -> LivePipeline:
        if self._pipeline is None:
            raise PipelineError(f"no pipeline is running (state: {self.board.snapshot().state})")
        return self._pipeline

    def _require_config(self) -> RunConfig:
        if self._config is None:
            raise PipelineError("the pipeline has not been started")
        return self._config

    def spec_in_force(self) -> StreamSpec:
        """The plan the stream runs with now (the version of the last batch)."""
        return self._current_spec()

    def _current_spec(self) -> StreamSpec:
        """The plan in force: the running pipeline's, else the newest stored version's."""
        if self._pipeline is not None:
            return self._pipeline.spec
        versions = self.versions()
        return versions[-1].spec if versions else self._require_config().spec

    def _require_store(self) -> BackupStore:
        if self._store is None:
            raise PipelineError("the pipeline has not been started")
        return self._store


def _calibration(monitor: Monitor | None) -> dict[str, Any]:
    """The initial plan's calibration state, when the monitor knows its plan."""
    if isinstance(monitor, ReplanningMonitor):
        return calibration_state(monitor.plan, monitor.scale)
    return {}


def _spark(settings: SparkSettings) -> Any:
    return get_spark(settings)


def _prepare_root(paths: PipelinePaths, reset: bool) -> None:
    """Refuse leftovers of an earlier run, or wipe them when ``reset``."""
    leftovers = [p for p in paths.landing_dir.glob("*.parquet")]
    if paths.checkpoint_dir.exists() and any(paths.checkpoint_dir.iterdir()):
        leftovers.append(paths.checkpoint_dir)
    if paths.store_file.exists():
        leftovers.append(paths.store_file)
    if leftovers and not reset:
        raise PipelineError(
            f"{str(paths.root)!r} holds files of an earlier run (e.g. {str(leftovers[0])!r}); "
            "pass reset=True or use another directory"
        )
    try:
        for p in leftovers:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        paths.store_file.with_name(paths.store_file.name + ".wal").unlink(missing_ok=True)
    except OSError as err:
        raise PipelineError(f"cannot clear {str(paths.root)!r}: {err}") from err


def default_rows_per_file(spec: StreamSpec) -> int:
    """Rows per landing file when not told: ``slide // 2 + 1``.

    Micro-batches then rarely end exactly on a window boundary, so a failure
    lands inside an open window as a crash at a random time would; with files
    of a multiple of the slide every batch would close all its windows and a
    failure between batches would lose nothing.
    """
    return spec.slide // 2 + 1


_DEFAULT: PipelineManager | None = None
_DEFAULT_LOCK = threading.Lock()


def get_manager(settings: SparkSettings | None = None) -> PipelineManager:
    """The process-wide manager (created on first use)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = PipelineManager(settings)
        return _DEFAULT


def run_simulation(
    history: HistoryLike,
    spec: StreamSpec,
    mode: str,
    fail_at: float,
    paths: PipelinePaths,
    settings: SparkSettings | None = None,
    *,
    speed: float = 0.0,
    rows_per_file: int | None = None,
    options: PipelineOptions | None = None,
    timeout: float = 900.0,
    monitor_factory: Callable[[PipelineManager], Monitor] | None = None,
) -> RecoveryReport:
    """Feed, stream, fail at ``fail_at`` of the feed, recover, finish; return the report.

    The report is taken after the restarted query has processed the whole feed,
    so windows finished by the live query from rebuilt rows are included.
    ``monitor_factory`` builds the live monitor (e.g. scheduled re-planning).
    """
    if not 0.0 < fail_at < 1.0:
        raise ParameterError(f"fail_at must be a fraction in (0, 1), got {fail_at!r}")
    check_mode(mode)
    total = int(np.asarray(history.values).shape[0]) * len(spec.sensors)
    base = options or PipelineOptions(trigger_seconds=0.0)
    opts = replace(base, fail_after_readings=int(fail_at * total), available_now=False)
    manager = PipelineManager(settings)
    monitor = monitor_factory(manager) if monitor_factory is not None else None
    try:
        manager.start(
            history,
            spec,
            mode,
            paths,
            speed=speed,
            rows_per_file=rows_per_file,
            options=opts,
            monitor=monitor,
            reset=True,
        )
        manager.wait_for_failure(timeout)
        manager.simulate_failure()
        manager.recover()
        manager.drain(timeout)
        return manager.report()
    finally:
        manager.close()
