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
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import ParameterError, PipelineError
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


@dataclass(frozen=True)
class _Recovery:
    lost: LostRange
    seconds: float
    rows_read: int
    seed_next_window: int  # lost windows from here on are finished by the live query


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
        self._config: dict[str, Any] = {}

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
            self._config = {
                "spec": spec,
                "mode": mode,
                "paths": paths,
                "options": options or PipelineOptions(),
                "monitor": monitor,
                "earlier": [],  # plans in force before "spec", newest first
            }
            self._feeder = Feeder(history, spec.sensors, paths.landing_dir, paths.truth_dir, feed)
            try:
                self._pipeline = self._new_pipeline(spec, seed=None).start()
            except BaseException:
                self._feeder, self._pipeline = None, None
                self._store.close()
                self._store = None
                raise
            feeder = self._feeder
            self.board.watch_feed(lambda: feeder.progress().readings)
            self._feeder.start()
            return self.status()

    def _new_pipeline(self, spec: StreamSpec, seed: Any) -> LivePipeline:
        cfg = self._config
        return LivePipeline(
            self._spark,
            spec,
            cfg["mode"],
            cfg["paths"],
            self._require_store(),
            board=self.board,
            options=cfg["options"],
            monitor=cfg["monitor"],
            stage=self._stage_factory() if self._stage_factory else None,
            seed=seed,
        )

    def status(self) -> PipelineStatus:
        """A snapshot for polling; never blocks on a running control call."""
        status, feeder = self.board.snapshot(), self._feeder
        return replace(status, feed=feeder.progress()) if feeder is not None else status

    def set_spec(self, spec: StreamSpec, reason: str) -> None:
        """Swap the plan of the running pipeline (next batch; logged to ``plan_log``)."""
        with self._lock:
            pipeline = self._require_pipeline()
            pipeline.set_spec(spec, reason)
            # Rows written under the old plan are rebuilt with its map after a failure;
            # one map per backup set is enough (the newest: it was fitted last).
            old = self._config["spec"]
            earlier = [e for e in self._config["earlier"] if e.backup_sensors != old.backup_sensors]
            self._config["earlier"] = [old, *earlier]
            self._config["spec"] = spec

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
            store, cfg = self._require_store(), self._config
            spec, mode = cfg["spec"], cfg["mode"]
            self.board.update(state="recovering")
            t0 = self._clock()
            lost = find_lost_range(store, spec.slide)
            outcome = recover_lost_range(
                self._spark, store, spec, mode, lost, self._failed_run, cfg["earlier"]
            )
            seconds = self._clock() - t0
            self._recovery = _Recovery(lost, seconds, outcome.rows_read, outcome.seed.next_window)
            self.board.mark(
                "recovery", f"{mode}: {lost.rows} lost row{'' if lost.rows == 1 else 's'} rebuilt",
                seconds=seconds, rows=outcome.rows_read,
            )  # fmt: skip
            # The restarted run must not fail again on its own.
            cfg["options"] = replace(cfg["options"], fail_after_readings=None)
            self._pipeline = self._new_pipeline(spec, seed=outcome.seed).start()
            self._failed_run = None
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
            spec, mode = self._config["spec"], self._config["mode"]
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
            return replace(report, windows_pending=len(pending))

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

    def _require_store(self) -> BackupStore:
        if self._store is None:
            raise PipelineError("the pipeline has not been started")
        return self._store


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
) -> RecoveryReport:
    """Feed, stream, fail at ``fail_at`` of the feed, recover, finish; return the report.

    The report is taken after the restarted query has processed the whole feed,
    so windows finished by the live query from rebuilt rows are included.
    """
    if not 0.0 < fail_at < 1.0:
        raise ParameterError(f"fail_at must be a fraction in (0, 1), got {fail_at!r}")
    check_mode(mode)
    total = int(np.asarray(history.values).shape[0]) * len(spec.sensors)
    base = options or PipelineOptions(trigger_seconds=0.0)
    opts = replace(base, fail_after_readings=int(fail_at * total), available_now=False)
    manager = PipelineManager(settings)
    try:
        manager.start(
            history,
            spec,
            mode,
            paths,
            speed=speed,
            rows_per_file=rows_per_file,
            options=opts,
            reset=True,
        )
        manager.wait_for_failure(timeout)
        manager.simulate_failure()
        manager.recover()
        manager.drain(timeout)
        return manager.report()
    finally:
        manager.close()
