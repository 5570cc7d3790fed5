"""What a ``PipelineManager`` tells about its run, and its plan controls.

The read side (the polled status, stored results, plan log, plan versions,
the recovery report, the plan in force) and the re-plan controls that act on
the running pipeline's plan without taking the manager's control lock.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import PipelineError
from engine.live.feeder import Feeder
from engine.live.pipeline import LivePipeline
from engine.live.records import StoreSize
from engine.live.recovery_report import RecoveryReport, covering_contract, score_recovery
from engine.live.run_config import RunConfig, _Recovery
from engine.live.spec import StreamSpec
from engine.live.status import PipelineStatus, StatusBoard
from engine.live.store import BackupStore
from engine.live.versions import PlanVersion, read_versions
from engine.planning.replan import ReplanningMonitor


class ManagerViews:
    """Mixin of ``PipelineManager``: reports, plan versions and re-plan controls."""

    board: StatusBoard
    _lock: threading.RLock
    _pipeline: LivePipeline | None
    _feeder: Feeder | None
    _store: BackupStore | None
    _spark: Any
    _truth: np.ndarray | None
    _recovery: _Recovery | None
    _config: RunConfig | None

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

    def backup_size(self) -> StoreSize | None:
        """The backup's rows and Parquet bytes at rest (after compaction), None before any
        start."""
        store = self._store
        return None if store is None else store.size()

    def versions(self) -> list[PlanVersion]:
        """Every plan version of the stream, from the store (oldest first)."""
        store, cfg = self._store, self._config
        return [] if store is None or cfg is None else read_versions(store, cfg.spec)

    def results(self, kind: str | None = None) -> pd.DataFrame | None:
        """Stored window results of the current run's store (None before any start)."""
        store = self._store
        return None if store is None else store.read_results(kind)

    def plan_log(self) -> pd.DataFrame | None:
        """Every plan change of the live pipeline, with its reason."""
        store = self._store
        return None if store is None else store.read_table("plan_log")

    # the last report scored and the recovery it scored: ``report`` while the lock is held
    _scored: tuple[_Recovery, RecoveryReport] | None = None

    def report(self) -> RecoveryReport:
        """The last recovery, scored against the truth with the results stored so far.

        Never waits for a control call: a simulated failure holds the lock until the query
        dies (up to its grace), a recovery through its Spark job, and a page polling the
        report would freeze as long. Meanwhile the report last scored of the same recovery
        is returned as it was (``PipelineError`` when there is none: one is under way).
        """
        if not self._lock.acquire(blocking=False):
            scored, rec = self._scored, self._recovery
            if rec is None:
                raise PipelineError("no recovery has run yet")
            if scored is None or scored[0] is not rec:
                raise PipelineError(
                    "the pipeline is busy with a control call (a failure, a recovery, a "
                    "start or a stop): the report comes when it ends"
                )
            return scored[1]
        try:
            return self._score_report()
        finally:
            self._lock.release()

    def _score_report(self) -> RecoveryReport:
        """``report``'s scoring, under the lock; kept as ``_scored``."""
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
            stored=rec.stored,
            cells=rec.cells,
        )
        emitted = set(report.window_ids)
        missing = [j for j in rec.lost.lost_windows(spec.slide) if j not in emitted]
        pending = [j for j in missing if j >= rec.seed_next_window]
        gone = len(missing) - len(pending)  # recovery skipped them: nothing will come
        note = report.note if not gone else (
            f"{report.note}: {gone} of them cannot be rebuilt (a row they need had no "
            "whole backup when recovery ran) and stay without a result"
        )  # fmt: skip
        contract = covering_contract(rec.failure, rec.lost.rows, spec.query.exposure)
        exact = rec.stored is not None and set(spec.sensors) <= set(rec.stored)
        note = f"{_failure_note(rec, contract, spec.query.exposure, exact, mode)}; {note}"
        served = {str(k): v for k, v in sorted(rec.rows_by_version.items())}
        last = self.rows_seen() - 1
        versions = tuple(v.to_dict(last) for v in self.versions())
        report = replace(
            report,
            windows_pending=len(pending),
            windows_unrecoverable=gone,
            note=note,
            rows_by_version=served,
            plan_versions=versions,
            failure=rec.failure,
            contract=contract,
        )
        self._scored = (rec, report)
        return report

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


def _failure_note(
    rec: _Recovery, contract: str, exposure: int | None, exact: bool = False, mode: str = "approx"
) -> str:
    """What failed, what was rebuilt, and which contract's miss rate covers it; with
    ``exact`` (every sensor backed up throughout the lost rows: a batch over the exposure,
    or after a recovery) that nothing was rebuilt, whatever the contract; with no row
    lost (a crash once no batch could come) that nothing was lost; in mode ``none`` (no
    backup) that nothing could be rebuilt."""
    rows = f"{rec.lost.rows} row{'' if rec.lost.rows == 1 else 's'}"
    kind = "crash: window state kept" if rec.failure == "crash" else "machine loss"
    if rec.lost.rows == 0:  # no batch was in flight: no contract to claim
        return f"{kind}, no row lost: nothing was rebuilt, no contract's miss rate is needed"
    if mode == "none":  # no backup: the lost rows' windows are given up, not rebuilt
        return f"{kind}, {rows} lost: mode none keeps no backup, so nothing was rebuilt"
    if rec.failure == "crash":
        what = f"crash: window state kept, the micro-batch in flight ({rows}) rebuilt"
        if rec.kept:
            what += (
                f" ({', '.join(rec.kept)}: the extreme of the readings the crash did not "
                "lose, those rows left out)"
            )
    else:
        what = f"machine loss: window state lost, every open window rebuilt ({rows})"
    if exact:
        return (
            f"{what.replace(' rebuilt', ' restored', 1)}; every sensor was backed up for "
            "those rows, so they came back exactly: no contract's miss rate is needed"
        )
    if contract == "crash":
        return f"{what}; the crash contract (exposure {exposure} rows) covers it"
    why = "" if exposure is None or rec.failure != "crash" else f", more than its {exposure}"
    return f"{what}; the range contract covers it{why}"
