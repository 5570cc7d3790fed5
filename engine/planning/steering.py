"""A plan steered by the online controller: its model, the controller's backup set.

The controller (``engine.planning.control``) works in eps units (every sensor's
tolerance 1), as selection does for per-sensor eps (``engine.planning.eps_scale``):
its covariance is ``Sigma / (e e^T)`` and its targets ``t / e^2``. When it changes the
set, the plan the pipeline installs keeps the model, targets and calibration of the
plan it steers and takes the controller's set (``with_backup``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from engine.planning.control import ControlConfig, SensorController
from engine.planning.plan import BackupPlan, Provenance, assemble_plan
from engine.selection import Selection

CONTROL_NOTE = "; backup set steered online by the shadow check"


def controller_inputs(plan: BackupPlan) -> tuple[np.ndarray, np.ndarray]:
    """(n, n) covariance and (n,) base targets of ``plan`` in eps units."""
    e = plan.eps_per_sensor
    return plan.model.cov_ / np.outer(e, e), np.asarray(plan.targets, float) / e**2


def controller_for(plan: BackupPlan, config: ControlConfig) -> SensorController:
    """A controller starting from ``plan``'s model, calibrated targets and set."""
    cov, targets = controller_inputs(plan)
    return SensorController(config, cov, targets, backup_indices(plan))


def backup_indices(plan: BackupPlan) -> tuple[int, ...]:
    return tuple(plan.sensors.index(s) for s in plan.backup_sensors)


def kept_indices(plan: BackupPlan) -> tuple[int, ...]:
    """Indices of ``plan``'s kept-readings sensors, backed up or not (a crash leaves the
    lost rows of those not backed up out of their windows)."""
    return tuple(plan.sensors.index(s) for s in plan.keepable)


def with_backup(plan: BackupPlan, backup: Sequence[int]) -> BackupPlan:
    """``plan`` with the backup set ``backup`` (indices): same model, targets and horizon;
    the reconstruction map and conditional variances of the new set. Unmeasured (no
    backtest): the shadow check measures it live."""
    idx = tuple(sorted(int(j) for j in backup))
    variance = plan.model.conditional_variance(list(idx))
    targets = np.asarray(plan.targets, float)
    selection = Selection(
        backup=idx,
        conditional_variance=variance,
        targets=targets,
        method=plan.parameters.method,
        feasible=bool(np.all(variance <= targets * (1 + 1e-9) + 1e-12)),
    )
    reason = plan.calibration.reason
    calibration = replace(
        plan.calibration, reason=reason if CONTROL_NOTE in reason else reason + CONTROL_NOTE
    )
    source = Provenance(plan.sampling_interval_s, plan.data_fingerprint, plan.fit_start,
                        plan.fit_end)  # fmt: skip
    return assemble_plan(
        source, plan.parameters, plan.model, selection, targets, calibration, None,
        plan.history_rows, plan.horizon_rows, kept_indices(plan),
    )  # fmt: skip
