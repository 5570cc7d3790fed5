"""Re-planning in the live pipeline: on a schedule (the plan's horizon) and on alerts.

``ReplanningMonitor`` is what the live pipeline's shadow check feeds. It keeps
the per-sensor violation tally (``engine.planning.monitor``, per plan version and
overall) and re-plans in two cases:

* **scheduled**: every ``every_rows`` stream rows (the horizon a plan is valid
  for) it makes a *fresh* calibrated plan on the most recent rows the stream
  has carried. It may shrink the backup set: a plan is re-chosen, not patched;
* **alert**: when a sensor's live violation rate under the plan in force is
  above ``delta`` with confidence, it re-learns on recent rows, tightens the
  alerting sensors' targets (each alert halves them, down to ``min_scale``)
  and *widens* the backup set (the old one is kept). The next scheduled
  re-plan starts fresh again, so alerts cannot ratchet the set up for good.

The plan is computed off the batch thread (``run`` starts a worker) and handed
to ``apply``; the pipeline installs it at a following micro-batch, as a new
plan version. Until that version shows up in ``observe`` no other re-plan
starts. An operator can switch the schedule off (``scheduled = False``); the
plan then expires once the horizon has passed, and ``schedule()`` says so.
A re-planned plan is not backtested (``plan.measured`` is False): the monitor
keeps measuring it live.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engine.data import SensorHistory
from engine.errors import EngineError, ParameterError
from engine.planning.calibration import CalibrationInfo, FoldPlan, plan_on
from engine.planning.eps_scale import fold_in_units
from engine.planning.monitor import MonitorAlert, ViolationMonitor
from engine.planning.parameters import PlanParameters, default_history
from engine.planning.plan import BackupPlan, assemble_plan, eps_units, make_plan
from engine.selection import Selection

Apply = Callable[[BackupPlan, str, str], None]  # (plan, kind, reason)


@dataclass(frozen=True)
class PlanChange:
    """One entry of the re-plan log."""

    at: datetime
    kind: str  # scheduled, alert
    reason: str
    backup_sensors: tuple[str, ...]
    added: tuple[str, ...]
    dropped: tuple[str, ...] = ()
    applied: bool = True

    def to_dict(self) -> dict[str, object]:
        return {
            "at": self.at.isoformat(timespec="seconds"),
            "kind": self.kind,
            "reason": self.reason,
            "backup_sensors": list(self.backup_sensors),
            "added": list(self.added),
            "dropped": list(self.dropped),
            "applied": self.applied,
        }


@dataclass(frozen=True)
class Schedule:
    """Where the plan in force stands against its horizon (rows of the stream)."""

    every_rows: int | None
    enabled: bool
    rows_under_plan: int
    expired: bool


def run_in_thread(job: Callable[[], None]) -> None:
    """The default worker: a daemon thread per re-plan (at most one runs at a time)."""
    threading.Thread(target=job, name="lacuna-replan", daemon=True).start()


def calibration_state(plan: BackupPlan, scale: np.ndarray) -> dict[str, Any]:
    """What calibration did for ``plan``, with the live target scale (JSON types)."""
    info = plan.calibration
    return {
        **info.to_dict(),
        "ratio": {k: float(v) for k, v in info.ratio.items()},
        "scale": {s: float(x) for s, x in zip(plan.sensors, scale, strict=True)},
    }


class ReplanningMonitor:
    """A violation monitor that re-plans on a schedule and on alerts.

    Parameters
    ----------
    plan : the plan in force when the stream starts.
    recent : the most recent history the pipeline has carried (every sensor).
    apply : installs a new plan; gets the plan, its kind (scheduled, alert) and the reason.
    now : clock, injected for tests.
    tighten, min_scale : each alert multiplies an alerting sensor's target by
        ``tighten``, never below ``min_scale`` of the calibrated target.
    every_rows : the horizon: re-plan after this many stream rows (None: only on alerts).
    rows_seen : stream rows processed so far (needed with ``every_rows``).
    run : runs a re-plan job off the batch thread (tests pass ``lambda job: job()``).
    """

    def __init__(
        self,
        plan: BackupPlan,
        recent: Callable[[], SensorHistory],
        apply: Apply,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        tighten: float = 0.5,
        min_scale: float = 0.25,
        confidence: float = 0.95,
        min_windows: int = 10,
        every_rows: int | None = None,
        rows_seen: Callable[[], int] | None = None,
        run: Callable[[Callable[[], None]], None] = run_in_thread,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        if not 0.0 < tighten < 1.0:
            raise ParameterError(f"tighten must be in (0, 1), got {tighten!r}")
        if not 0.0 < min_scale <= 1.0:
            raise ParameterError(f"min_scale must be in (0, 1], got {min_scale!r}")
        if every_rows is not None and (every_rows < 1 or rows_seen is None):
            raise ParameterError(f"every_rows must be >= 1 and needs rows_seen, got {every_rows!r}")
        self.plan, self.recent, self.apply, self.now = plan, recent, apply, now
        self.tighten, self.min_scale, self.every_rows = tighten, min_scale, every_rows
        self.rows_seen = rows_seen or (lambda: 0)
        self.run, self.on_failure = run, on_failure
        self.scheduled = every_rows is not None  # the operator's switch
        # watched under the contract the plan promises, on its windows' disjoint share
        self.monitor = ViolationMonitor.for_query(
            plan.sensors, plan.eps_per_sensor, plan.query, confidence, min_windows
        )
        self.scale = np.ones(len(plan.sensors))
        self.changes: list[PlanChange] = []
        self.plans: list[BackupPlan] = [plan]  # the first plan and every one applied since
        self._lock = threading.Lock()
        self._busy = False
        self._wait_for: int | None = None  # the version id the last applied plan gets
        self._planned_at = 0  # stream row at which the last re-plan started (the schedule)
        self._in_force_since = 0  # stream row at which the plan in force was made
        self._made_since: int | None = None  # the re-plan on its way in: its rows' end

    def observe(
        self, errors: np.ndarray, reconstructed: Sequence[str], version: int = 0
    ) -> MonitorAlert | None:
        """Count closed windows' errors (a range plan); start a re-plan when an alert or the
        schedule says so."""
        return self._after(self.monitor.observe(errors, reconstructed, version), version)

    def observe_misses(
        self, misses: np.ndarray, reconstructed: Sequence[str], version: int = 0
    ) -> MonitorAlert | None:
        """``observe`` for a crash plan: each closed window's crash-contract miss fraction
        (W, n), NaN where not measured (``ViolationMonitor.observe_misses``)."""
        return self._after(self.monitor.observe_misses(misses, reconstructed, version), version)

    def _after(self, alert: MonitorAlert | None, version: int) -> MonitorAlert | None:
        with self._lock:
            if self._busy or (self._wait_for is not None and version < self._wait_for):
                return alert  # a re-plan is computing or not in force yet
            self._wait_for = None
            kind = "alert" if alert is not None else ("scheduled" if self._due() else None)
            if kind is None:
                return alert
            self._busy, self._wait_for = True, version + 1
            started = self._planned_at = self.rows_seen()
        self.run(lambda: self._replan(kind, alert, started))
        return alert

    def request(self) -> bool:
        """Start a fresh re-plan now (an operator's ``manual`` one); False while one runs."""
        with self._lock:
            if self._busy:
                return False
            self._busy, self._wait_for = True, self.monitor.version + 1
            started = self._planned_at = self.rows_seen()
        self.run(lambda: self._replan("manual", None, started))
        return True

    def schedule(self) -> Schedule:
        """The plan in force against its horizon (rows since it was made: a re-plan that
        failed made none); expired when the schedule is off."""
        rows = max(0, self.rows_seen() - self._in_force_since)
        over = self.every_rows is not None and rows >= self.every_rows
        return Schedule(self.every_rows, self.scheduled, rows, over and not self.scheduled)

    def _due(self) -> bool:
        if self.every_rows is None or not self.scheduled:
            return False
        return self.rows_seen() - self._planned_at >= self.every_rows

    def _replan(self, kind: str, alert: MonitorAlert | None, started: int) -> None:
        """The worker's job: compute, apply and log one re-plan, made on the rows up to
        ``started``; never raises."""
        old = self.plan
        try:
            history = self.recent()
            if history.sensors != old.sensors:
                raise ParameterError("recent history has different sensors from the plan")
            new = self._new_plan(old, history, alert)
            reason = self._reason(kind, alert, history, old, new)
            with self._lock:
                self._made_since = started  # its age counts once it is installed
            self._hand_over(new, kind, reason)
        except Exception as err:  # reported below (status and plan log), never silent
            # Never take the stream down over a re-plan: log it, say it in the status
            # (a worker that died quietly would stop all re-planning unseen) and keep
            # the plan in force. Anything but the expected failures names its type.
            expected = isinstance(err, EngineError | np.linalg.LinAlgError | ValueError)
            text = str(err) if expected else f"{type(err).__name__}: {err}"
            why = alert.reason if alert is not None else f"{kind} re-plan"
            change = PlanChange(self.now(), kind, f"{why}; re-plan failed: {text}",
                                old.backup_sensors, (), (), applied=False)  # fmt: skip
            with self._lock:
                self.changes.append(change)
                self._busy, self._wait_for, self._made_since = False, None, None
            if self.on_failure is not None:
                self.on_failure(f"{kind} re-plan failed, the plan in force is kept: {text}")

    def _hand_over(self, new: BackupPlan, kind: str, reason: str) -> None:
        """Install the re-plan ``new`` (``apply``) and log it as the plan in force."""
        self.apply(new, kind, reason)
        self._log_applied(new, kind, reason)
        with self._lock:
            self._busy = False

    def _log_applied(self, new: BackupPlan, kind: str, reason: str) -> None:
        old = self.plan
        added = tuple(s for s in new.backup_sensors if s not in old.backup_sensors)
        dropped = tuple(s for s in old.backup_sensors if s not in new.backup_sensors)
        with self._lock:
            if kind != "control" and self._made_since is not None:  # a re-plan installed
                self._in_force_since, self._made_since = self._made_since, None
            self.changes.append(
                PlanChange(self.now(), kind, reason, new.backup_sensors, added, dropped)
            )
            self.plan = new
            self.plans.append(new)

    def calibration_for(self, plan: BackupPlan) -> dict[str, Any]:
        """What the plan version of ``plan`` stores about its calibration (JSON types)."""
        return calibration_state(plan, self.scale)

    def _new_plan(
        self, old: BackupPlan, history: SensorHistory, alert: MonitorAlert | None
    ) -> BackupPlan:
        """The re-plan: widened with tightened targets on an alert, else a fresh plan."""
        if alert is not None:
            return widen_plan(old, history, self._tightened(alert))
        self.scale = np.ones(len(old.sensors))
        return fresh_plan(old, history)

    def plan_for(self, linear_map: object) -> BackupPlan | None:
        """The plan (first or applied) whose reconstruction map is ``linear_map``: the plan
        behind a stream spec (``StreamSpec.from_plan`` keeps the map object; a spec rebuilt
        from the stored versions, as after a recovery, holds an equal one)."""
        with self._lock:
            plans = list(reversed(self.plans))
        same = next((p for p in plans if p.linear_map is linear_map), None)
        return same or next((p for p in plans if p.linear_map.same_as(linear_map)), None)

    def _reason(
        self,
        kind: str,
        alert: MonitorAlert | None,
        history: SensorHistory,
        old: BackupPlan,
        new: BackupPlan,
    ) -> str:
        why = (
            alert.reason
            if alert is not None
            else (
                f"horizon of {self.every_rows} rows reached"
                if kind == "scheduled"
                else "re-plan requested by the operator"
            )
        )
        added = [s for s in new.backup_sensors if s not in old.backup_sensors]
        dropped = [s for s in old.backup_sensors if s not in new.backup_sensors]
        how = "re-learnt" if alert else "fresh plan"
        text = f"{why}; {how} on {len(history.times)} recent rows"
        text += f", added {', '.join(added)}" if added else ""
        text += f", dropped {', '.join(dropped)}" if dropped else ""
        return text + ("" if added or dropped else ", backup set unchanged")

    def _tightened(self, alert: MonitorAlert) -> np.ndarray:
        for s in alert.sensors:
            i = self.plan.sensors.index(s)
            self.scale[i] = max(self.min_scale, self.scale[i] * self.tighten)
        return self.scale


def fresh_plan(plan: BackupPlan, history: SensorHistory) -> BackupPlan:
    """A new plan on ``history`` made as ``make_plan`` makes one: ``plan``'s parameters and
    resolved horizon, calibrated and backtested (it may shrink the set).

    Why the whole procedure: a re-plan that calibrated on a few recent rows could not
    measure most sensors' miss rates and backed up nearly every sensor (a stationary
    stream's first scheduled version went from 5 of 20 sensors to 14). ``history`` should
    hold as many rows as the first plan learnt from (``learning_rows``).
    """
    _check_rows(plan, history)
    params = plan.parameters.with_query(horizon=plan.horizon_rows)
    new = make_plan(history, params)
    calibration = replace(new.calibration, reason=new.calibration.reason + "; scheduled re-plan")
    return replace(new, parameters=plan.parameters, calibration=calibration)


def learning_rows(plan: BackupPlan, available: int) -> int:
    """Rows a re-plan learns from when ``available`` rows have been seen: as many as
    ``make_plan`` would learn from (the operator's ``history``, or all up to the cost cap)."""
    params: PlanParameters = plan.parameters
    rows = params.history or default_history(
        available, params.window, len(plan.sensors), plan.horizon_rows
    )
    return min(rows, available)


def _plan_like(plan: BackupPlan, history: SensorHistory, scale: np.ndarray | None) -> FoldPlan:
    """``plan_on`` with ``plan``'s parameters, in eps units when it has per-sensor eps (the
    fold converted back to the sensors' units, as ``make_plan`` does).

    Calibration uses the plan's resolved horizon, as ``make_plan`` did for it."""
    params: PlanParameters = plan.parameters
    x, spec = eps_units(history, params)
    spec = replace(spec, horizon=plan.horizon_rows or spec.horizon)
    fold = plan_on(x, history.sensors, spec, scale)
    if params.eps_by_sensor:
        fold = fold_in_units(fold, params.eps_vector(history.sensors))
    return fold


def _assemble_like(
    plan: BackupPlan,
    history: SensorHistory,
    fold: FoldPlan,
    selection: Selection,
    calibration: CalibrationInfo,
) -> BackupPlan:
    """The re-planned ``BackupPlan``, keeping ``plan``'s horizon."""
    return assemble_plan(
        history, plan.parameters, fold.model, selection, fold.targets, calibration, None,
        len(history.times), plan.horizon_rows, fold.kept,
    )  # fmt: skip


def _check_rows(plan: BackupPlan, history: SensorHistory) -> None:
    if history.values.shape[0] < len(plan.sensors) + 2:
        raise ParameterError(
            f"only {history.values.shape[0]} recent rows to re-learn {len(plan.sensors)} sensors"
        )


def widen_plan(plan: BackupPlan, history: SensorHistory, scale: np.ndarray) -> BackupPlan:
    """Re-learn on ``history`` with targets times ``scale``; keep every old backup sensor."""
    params: PlanParameters = plan.parameters
    _check_rows(plan, history)
    fold = _plan_like(plan, history, scale)  # per-sensor eps: plan in eps units
    keep = {plan.sensors.index(s) for s in plan.backup_sensors}
    backup = tuple(sorted(keep | set(fold.selection.backup)))
    variance = fold.model.conditional_variance(list(backup))
    selection = Selection(
        backup=backup,
        conditional_variance=variance,
        targets=fold.targets,
        method=params.method,
        feasible=bool(np.all(variance <= fold.targets * (1 + 1e-9) + 1e-12)),
    )
    calibration = replace(fold.calibration, reason=fold.calibration.reason + "; alert re-plan")
    return _assemble_like(plan, history, fold, selection, calibration)
