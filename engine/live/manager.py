"""One process-wide, thread-safe owner of the live pipeline, for the UI and the CLI.

``PipelineManager`` runs the feeder and the streaming query in the background,
simulates a failure, recovers, and reports. Every control call takes one lock,
so two browser sessions cannot start two pipelines or interleave a failure
with a recovery; ``status()`` never waits for that lock (it reads the status
board), so a polling UI stays responsive while recovery runs.
Its read side and re-plan controls are ``engine.live.views.ManagerViews``;
what a run was started with is ``engine.live.run_config.RunConfig``.

``run_simulation`` is the whole story end to end (``python -m engine simulate``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engine.errors import PipelineError
from engine.live.failure import CrashedBatch, await_end, discard_lost_state
from engine.live.feeder import Feeder, FeedOptions
from engine.live.operator_state import resume_stage
from engine.live.ownership import (
    DirectoryLock,
    check_action,
    check_same_run,
    prepare_directory,
    reconcile,
    record_run,
    run_identity,
)
from engine.live.pipeline import LivePipeline
from engine.live.restoring import FailureAndRecovery
from engine.live.run_config import RunConfig, _calibration, _Recovery, default_rows_per_file
from engine.live.spec import (
    HistoryLike,
    Monitor,
    PipelineOptions,
    PipelinePaths,
    Stage,
    StreamSpec,
    align_history,
    check_mode,
)
from engine.live.status import PipelineStatus, StatusBoard
from engine.live.store import BackupStore
from engine.live.versions import PendingPlan, PlanVersion, read_versions
from engine.stream.session import SparkSettings, get_spark


class PipelineManager(FailureAndRecovery):
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
        self._crash: CrashedBatch | None = None  # what a crash took (None: a machine loss)
        self._recovery: _Recovery | None = None
        self._config: RunConfig | None = None
        self._carry: PendingPlan | None = None
        self._owner: DirectoryLock | None = None
        self._root: Any = None  # the directory the board's counters belong to
        self._finished: LivePipeline | None = None  # the pipeline ``finish_feed`` flushed

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
            self._spark = get_spark(self.settings)
            self.board = self._board_for(paths, action, len(spec.sensors))
            self._truth, self._stage_factory, self._recovery = truth, stage_factory, None
            self._carry = None
            self._config = RunConfig(
                spec, mode, paths, options or PipelineOptions(), monitor, history, feed
            )
            truth_dir = None if action == "resume" else paths.truth_dir
            self._feeder = Feeder(history, spec.sensors, paths.landing_dir, truth_dir, feed)
            initial = PlanVersion.initial(spec, self._now(), _calibration(monitor))
            stored = read_versions(self._require_store(), spec) if action == "resume" else []
            try:
                # a resumed run goes on under its plan of record, not the plan it began with
                self._pipeline = self._new_pipeline(stored[-1] if stored else initial, None).start()
            except BaseException:
                self._feeder, self._pipeline = None, None
                self._release()
                raise
            feeder = self._feeder
            self.board.watch_feed(lambda: feeder.progress().readings)
            if action == "resume":
                self.board.restored("resume", first, f"run {self._pipeline.run} resumed")
            self._feeder.start()
            return self.status()

    def _board_for(self, paths: PipelinePaths, action: str, n_sensors: int) -> StatusBoard:
        """The status board of a new run, or of a resumed one with its counters so far.

        A run resumed in this process keeps its board: every counter, the shadow tallies
        and the metrics history go on. Resumed by a new process, the board starts from
        what the store holds (``StatusBoard.from_store``); the shadow tallies of before
        live only in memory.
        """
        previous, store = self.board, self._require_store()
        same = previous.snapshot().run == store.next_run() - 1 and self._root == paths.root
        self._root = paths.root
        if action == "resume" and same:
            return previous
        if action != "resume":
            return StatusBoard(self._now)
        return StatusBoard.from_store(self._now, store.totals(), (store.horizon() + 1) * n_sensors)

    def _claim(self, paths: PipelinePaths, action: str, identity: dict[str, Any]) -> int:
        """Lock ``paths.root``, deal with leftovers, open the store; the first row to feed."""
        self._release()
        self._owner = DirectoryLock(paths.root, self._now)
        self._owner.acquire()
        try:
            first = prepare_directory(paths, action, self._now)
            paths.ensure()
            self._store = BackupStore(paths.store_file, self._now, paths.backup_uri)
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

    def _new_pipeline(
        self, version: PlanVersion, seed: Any, resume_row: int | None = None
    ) -> LivePipeline:
        """The pipeline of ``version``; ``resume_row``: the row a restart after a failure
        resumes at (its disorder stage reports no window begun before it)."""
        cfg = self._require_config()
        stage = self._stage_factory() if self._stage_factory else None
        if stage is not None and resume_row is not None:
            resume_stage(stage, cfg.history, resume_row)
        return LivePipeline(
            self._spark,
            version.spec,
            cfg.mode,
            cfg.paths,
            self._require_store(),
            board=self.board,
            options=cfg.options,
            monitor=cfg.monitor,
            stage=stage,
            seed=seed,
            version=version,
        )

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
            self._spark = get_spark(self.settings)
            self._config, self._stage_factory, self._recovery = config, stage_factory, None
            run = self._store.next_run() - 1
            if config.paths.checkpoint_dir.exists():  # a crash keeps it; its state is gone
                discard_lost_state(config.paths, self._store, run)
            self._failed_run = run
            self.board = StatusBoard(self._now)
            self.board.update(state="failed", mode=config.mode, run=run)
            return self.status()

    def drain(self, timeout: float = 600.0) -> PipelineStatus:
        """Wait for the feeder to finish and the query to process every file."""
        with self._lock:
            pipeline, feeder = self._require_pipeline(), self._feeder
            if feeder is not None:
                feeder.join(timeout)
            pipeline.process_all_available()
            if (feeder is None or feeder.progress().done) and not self._paused():
                # the feed is over: a disorder stage releases and finalises the rest (not
                # at a pause, ``start(stop_row=...)``: the rest of its windows is to come)
                pipeline.finish_stage()
            return self.status()

    def finish_feed(self) -> bool:
        """The end of a replay nobody drains (the Live page): once the feeder is done (not
        stopped, not at a pause) and the query running, process what landed and flush the
        disorder stage, so its held readings close their windows and every result is
        final; once per pipeline. False when not due (or done already)."""
        with self._lock:
            pipeline, feeder = self._pipeline, self._feeder
            if pipeline is None or feeder is None or pipeline is self._finished:
                return False
            progress = feeder.progress()
            if not progress.done or progress.stopped or self._paused():
                return False
            if self.board.snapshot().state != "running":
                return False
            pipeline.process_all_available()
            pipeline.finish_stage()
            self._finished = pipeline
            return True

    def _paused(self) -> bool:
        """The feed stops at a row (``start(stop_row=...)``; ``feed_rest`` goes on): its end
        is not the replay's, so a disorder stage is not flushed there."""
        cfg = self._config
        return cfg is not None and cfg.feed is not None and cfg.feed.stop_row is not None

    def wait_for_failure(self, timeout: float) -> bool:
        """Wait until the running query dies (e.g. ``fail_after_readings``)."""
        pipeline = self._pipeline
        return pipeline is not None and await_end(pipeline, self._feeder, self._clock, timeout)

    def stop(self) -> PipelineStatus:
        """Stop everything (idempotent)."""
        with self._lock:
            try:
                if self._feeder is not None:
                    self._feeder.stop()
                if self._pipeline is not None:
                    self._pipeline.stop()
            finally:
                self._pipeline, self._failed_run, self._crash = None, None, None
                self.board.update(state="stopped")
            return self.status()

    def close(self) -> None:
        """Stop and release the store."""
        self.stop()
        with self._lock:
            self._release()


_DEFAULT: PipelineManager | None = None
_DEFAULT_LOCK = threading.Lock()


def get_manager(settings: SparkSettings | None = None) -> PipelineManager:
    """The process-wide manager (created on first use)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = PipelineManager(settings)
        return _DEFAULT
