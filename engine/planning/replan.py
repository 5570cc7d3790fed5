"""Re-planning when the live monitor says the guarantee no longer holds.

``ReplanningMonitor`` is what the live pipeline's shadow check feeds: it keeps
the per-sensor violation tally (``engine.planning.monitor``) and, when a sensor's live
violation rate is above ``delta`` with confidence, it

1. re-learns the model from the most recent data the pipeline has seen,
2. tightens the alerting sensors' targets (each alert halves them), and
3. *widens* the backup set: the new set contains the old one, so an alert can
   only add protection, never remove it while the stream is misbehaving,

then hands the new plan to ``apply`` (the pipeline swaps its spec at the next
batch) and records a ``PlanChange`` with its reason. The new plan is not
backtested (``plan.measured`` is False): the monitor keeps measuring it live.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np

from engine.data import SensorHistory
from engine.errors import EngineError, ParameterError
from engine.planning.calibration import plan_on
from engine.planning.eps_scale import fold_in_units
from engine.planning.monitor import MonitorAlert, ViolationMonitor
from engine.planning.plan import BackupPlan, PlanParameters, assemble_plan, eps_units
from engine.selection import Selection


@dataclass(frozen=True)
class PlanChange:
    """One entry of the plan-change log."""

    at: datetime
    reason: str
    backup_sensors: tuple[str, ...]
    added: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "at": self.at.isoformat(timespec="seconds"),
            "reason": self.reason,
            "backup_sensors": list(self.backup_sensors),
            "added": list(self.added),
        }


class ReplanningMonitor:
    """A violation monitor that re-plans on an alert.

    Parameters
    ----------
    plan : the plan in force.
    recent : returns the most recent history the pipeline has seen (every sensor).
    apply : installs a new plan (e.g. swaps the pipeline's spec); gets the reason.
    now : clock, injected for tests.
    tighten : factor applied to an alerting sensor's target on each alert.
    """

    def __init__(
        self,
        plan: BackupPlan,
        recent: Callable[[], SensorHistory],
        apply: Callable[[BackupPlan, str], None],
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        tighten: float = 0.5,
        confidence: float = 0.95,
        min_windows: int = 10,
    ) -> None:
        if not 0.0 < tighten < 1.0:
            raise ParameterError(f"tighten must be in (0, 1), got {tighten!r}")
        self.plan, self.recent, self.apply, self.now = plan, recent, apply, now
        self.tighten = tighten
        p = plan.parameters
        self.monitor = ViolationMonitor(
            plan.sensors, plan.eps_per_sensor, p.delta, confidence, min_windows
        )
        self.scale = np.ones(len(plan.sensors))
        self.changes: list[PlanChange] = []

    def observe(self, errors: np.ndarray, reconstructed: Sequence[str]) -> MonitorAlert | None:
        """Count closed windows; on an alert, re-plan and apply the new plan."""
        alert = self.monitor.observe(errors, reconstructed)
        if alert is not None:
            self._replan(alert)
        return alert

    def _replan(self, alert: MonitorAlert) -> None:
        try:
            history = self.recent()
            if history.sensors != self.plan.sensors:
                raise ParameterError("recent history has different sensors from the plan")
            new = widen_plan(self.plan, history, self._tightened(alert))
        except (EngineError, np.linalg.LinAlgError, ValueError) as err:
            # Never take the stream down over a re-plan: log it and keep the plan in force.
            reason = f"{alert.reason}; re-plan failed: {err}"
            self.changes.append(PlanChange(self.now(), reason, self.plan.backup_sensors, ()))
            self.monitor.reset()
            return
        added = tuple(s for s in new.backup_sensors if s not in self.plan.backup_sensors)
        reason = f"{alert.reason}; re-learnt on {history.values.shape[0]} recent rows"
        reason += f", added {', '.join(added)}" if added else ", backup set unchanged"
        self.apply(new, reason)
        self.changes.append(PlanChange(self.now(), reason, new.backup_sensors, added))
        self.plan = new
        self.monitor.reset()

    def _tightened(self, alert: MonitorAlert) -> np.ndarray:
        for s in alert.sensors:
            self.scale[self.plan.sensors.index(s)] *= self.tighten
        return self.scale


def widen_plan(plan: BackupPlan, history: SensorHistory, scale: np.ndarray) -> BackupPlan:
    """Re-learn on ``history`` with targets times ``scale``; keep every old backup sensor."""
    params: PlanParameters = plan.parameters
    if history.values.shape[0] < len(plan.sensors) + 2:
        raise ParameterError(
            f"only {history.values.shape[0]} recent rows to re-learn {len(plan.sensors)} sensors"
        )
    x, spec = eps_units(history, params)  # per-sensor eps: plan in eps units
    fold = plan_on(x, history.sensors, spec, scale)
    if params.eps_by_sensor:
        fold = fold_in_units(fold, params.eps_vector(history.sensors))
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
    calibration = replace(fold.calibration, reason=fold.calibration.reason + "; live re-plan")
    return assemble_plan(
        history, params, fold.model, selection, fold.targets, calibration, None, len(history.times)
    )
