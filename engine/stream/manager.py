"""One process-wide, thread-safe owner of the live pipeline, for the UI and the CLI.

``PipelineManager`` runs the feeder and the streaming query in the background,
simulates a failure, recovers, and reports. Every control call takes one lock,
so two browser sessions cannot start two pipelines or interleave a failure
with a recovery; ``status()`` never waits for that lock (it reads the status
board), so a polling UI stays responsive while recovery runs.

``run_simulation`` is the whole story end to end (``python -m engine simulate``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import PipelineError
from engine.planning.replan import ReplanningMonitor, calibration_state
from engine.store import BackupStore
from engine.stream.failure import discard_lost_state
from engine.stream.feeder import Feeder, FeedOptions
from engine.stream.ownership import (
    DirectoryLock,
    check_action,
    check_same_run,
    prepare_directory,
    reconcile,
    record_run,
    run_identity,
)
from engine.stream.pipeline import LivePipeline
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
    history: HistoryLike | None = None  # what the feeder replays (None: attached run)
    feed: FeedOptions | None = None

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
        self._owner: DirectoryLock | None = None

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
        leftovers: str = "refuse",
        reset: bool = False,
        stop_row: int | None = None,
    ) -> PipelineStatus:
        """Start feeder and query in the background (``PipelineError`` if one runs).

        The directory is locked first (``PipelineError`` naming the owner if another
        process runs a pipeline there). An earlier run's files are handled as
        ``leftovers`` says: ``"refuse"`` (``PipelineError``), ``"resume"`` (continue
        its checkpoint after checking the store holds every committed batch, feed
        from the row after the last landed one), ``"archive"`` (move them to
        ``<root>/archive/<timestamp>/``) or ``"delete"`` (``reset=True`` is the
        same). ``stop_row`` ends the feed there (``feed_rest`` continues it).
        """
        with self._lock:
            if self._pipeline is not None or self._failed_run is not None:
                raise PipelineError(
                    f"the pipeline is already {self.board.snapshot().state} "
                    f"(run {self.board.snapshot().run}); stop it before starting another"
                )
            check_mode(mode)
            check_action(leftovers)
            action = "delete" if reset else leftovers
            if action == "resume" and delays is not None:
                raise PipelineError(
                    "a run with arrival delays cannot be resumed (its landed input is not a "
                    "prefix of the history); archive it and start again"
                )
            truth = align_history(history, spec.sensors)
            rows = rows_per_file or default_rows_per_file(spec)
            first = self._claim(paths, action, run_identity(spec, mode))
            feed = FeedOptions(speed=speed, rows_per_file=rows, delays=delays, start_row=first)
            feed = replace(feed, stop_row=stop_row) if stop_row is not None else feed
            self._spark = _spark(self.settings)
            self.board = StatusBoard(self._now)
            self._truth, self._stage_factory, self._recovery = truth, stage_factory, None
            self._carry = None
            self._config = RunConfig(
                spec, mode, paths, options or PipelineOptions(), monitor, history, feed
            )
            truth_dir = None if action == "resume" else paths.truth_dir
            self._feeder = Feeder(history, spec.sensors, paths.landing_dir, truth_dir, feed)
            initial = PlanVersion.initial(spec, self._now(), _calibration(monitor))
            try:
                self._pipeline = self._new_pipeline(initial, seed=None).start()
            except BaseException:
                self._feeder, self._pipeline = None, None
                self._release()
                raise
            feeder = self._feeder
            self.board.watch_feed(lambda: feeder.progress().readings)
            self._feeder.start()
            return self.status()

    def _claim(self, paths: PipelinePaths, action: str, identity: dict[str, Any]) -> int:
        """Lock ``paths.root``, deal with leftovers, open the store; the first row to feed."""
        self._release()
        self._owner = DirectoryLock(paths.root, self._now)
        self._owner.acquire()
        try:
            first = prepare_directory(paths, action, self._now)
            paths.ensure()
            self._store = BackupStore(paths.store_file, self._now)
            if action == "resume":
                check_same_run(paths, identity)
                reconcile(self._store, paths.checkpoint_dir)
                # Landed files may be gone (consumed before a failure): the store knows too.
                first = max(first, self._store.horizon() + 1)
            record_run(paths, identity)
            return first
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        """Close the store and give up the directory lock (idempotent)."""
        store, self._store = self._store, None
        owner, self._owner = self._owner, None
        try:
            if store is not None:
                store.close()
        finally:
            if owner is not None:
                owner.release()

    def feed_rest(self) -> None:
        """Continue a feed that ``start(stop_row=...)`` ended, to the end of the history."""
        with self._lock:
            feeder, cfg = self._feeder, self._require_config()
            if feeder is None or not feeder.progress().done:
                raise PipelineError("the feed is still running or was never started")
            feeder.join()
            if cfg.feed is None or cfg.feed.stop_row is None or cfg.history is None:
                return
            feed = replace(cfg.feed, start_row=cfg.feed.stop_row, stop_row=None)
            self._config = replace(cfg, feed=feed)
            landing = cfg.paths.landing_dir
            self._feeder = Feeder(cfg.history, cfg.spec.sensors, landing, None, feed)
            self._feeder.start()

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
        if feeder is None:
            return status
        status = replace(status, feed=feeder.progress())
        problem = feeder.failure()
        if problem is None or status.state in ("stopped", "failed"):
            return status
        if status.state != "error" or problem not in (status.last_error or ""):
            # A dead background thread must show at once, not as a quiet "running".
            error = problem if not status.last_error else f"{problem}; {status.last_error}"
            self.board.update(state="error", last_error=error)
            status = replace(status, state="error", last_error=error)
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
            self._release()
            self._owner = DirectoryLock(config.paths.root, self._now)
            self._owner.acquire()  # no other process may run or recover this directory now
            try:
                self._store = BackupStore(config.paths.store_file, self._now)
            except BaseException:
                self._release()
                raise
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
            deleted = discard_lost_state(
                pipeline.paths, self._require_store(), pipeline.run, pipeline.source
            )
            self._failed_run, self._pipeline = pipeline.run, None
            self._carry = pipeline.pending  # a re-plan not in force yet survives the failure
            self.board.mark("failure", f"run {pipeline.run} killed", rows=len(deleted))
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
            rows = f"{lost.rows} lost row{'' if lost.rows == 1 else 's'}"
            self.board.mark(
                "recovery", f"{cfg.mode}: {rows} rebuilt", seconds=seconds, rows=outcome.rows_read
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
            self._release()

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


def run_simulation(*args: Any, **kwargs: Any) -> RecoveryReport:
    """Feed, fail, recover, finish: ``engine.stream.simulation.run_simulation``."""
    from engine.stream.simulation import run_simulation as run

    return run(*args, **kwargs)
