"""A plan's backup set chosen again on its fitted model, without refitting: instant,
and unmeasured until a backtest is run for it.

``retarget``: a new eps (or per-sensor eps) or selection method, what the Tune page
sweeps and the what-if curves draw (``engine.planning.whatif``); ``pin_backups``:
sensors backed up besides the plan's choice (the production job's sensors that kept
missing under two plans in a row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from engine.errors import ParameterError
from engine.planning.eps_scale import select_in_eps_units
from engine.planning.plan import BackupPlan, Provenance, assemble_plan, model_probability
from engine.selection.greedy import Method

__all__ = ["pin_backups", "retarget"]


def retarget(
    plan: BackupPlan,
    eps: float | None = None,
    method: Method | None = None,
    eps_by_sensor: tuple[tuple[str, float], ...] | None = None,
) -> BackupPlan:
    """Re-select for a new ``eps`` (or per-sensor eps) or method without refitting:
    instant, but unmeasured.

    Calibrated targets are ``(eps_i / c_i)^2``, so each scales with its ``eps_i^2``.
    The result carries no backtest (``measured`` is False) until one is run for it.
    """
    given = plan.parameters
    params = replace(
        given.with_query(
            eps=given.eps if eps is None else eps,
            eps_by_sensor=given.eps_by_sensor if eps_by_sensor is None else eps_by_sensor,
        ),
        method=method or given.method,
    )
    factor = params.eps_vector(plan.sensors) / plan.eps_per_sensor
    targets = plan.targets * factor**2
    # A kept sensor's targets is its whole variance (no rebuild needed). Its kept readings
    # were measured within its eps: still so under a larger eps; under a smaller one it is
    # rebuilt, held to the target its calibrated ratio gives (unmeasured: 0, backed up).
    kept = [plan.sensors.index(s) for s in plan.keepable]
    still = [i for i in kept if factor[i] >= 1.0]
    eps_new = params.eps_vector(plan.sensors)
    for i in kept:
        ratio = plan.calibration.ratio.get(plan.sensors[i])
        if i in still:
            targets[i] = plan.targets[i]
        else:
            targets[i] = (eps_new[i] / ratio) ** 2 if ratio and np.isfinite(ratio) else 0.0
    selection = select_in_eps_units(
        plan.model,
        targets,
        params.method,
        params.eps_vector(plan.sensors) if params.eps_by_sensor else None,
    )
    info = replace(
        plan.calibration,
        reason=plan.calibration.reason + f"; retargeted from eps={plan.parameters.eps:g}",
    )
    history_stub = Provenance(
        plan.sampling_interval_s, plan.data_fingerprint, plan.fit_start, plan.fit_end
    )
    out = assemble_plan(
        history_stub, params, plan.model, selection, targets, info, None, plan.history_rows,
        plan.horizon_rows, tuple(still),
    )  # fmt: skip
    # The plan's other warnings still hold; its mixed-unit one is for its own eps, so the
    # new eps says its own (none once each unit group has its eps).
    stale = plan.parameters.unit_warning(plan.sensors)
    still_true = tuple(w for w in plan.warnings if w != stale)
    return replace(out, warnings=out.warnings + still_true)


def pin_backups(plan: BackupPlan, pinned: Sequence[str], why: str) -> BackupPlan:
    """``plan`` with the ``pinned`` sensors backed up too (the same model, refitted map).

    For sensors measured failing in production whatever the plan says: backing one
    up more never makes another sensor's rebuild worse under the model (its
    conditional variance can only fall). The plan's backtest measured the set
    before pinning; a warning says so, with ``why``.
    """
    unknown = sorted(set(pinned) - set(plan.sensors))
    if unknown:
        raise ParameterError(f"cannot pin sensor(s) outside the plan: {', '.join(unknown[:5])}")
    added = sorted(set(pinned) - set(plan.backup_sensors))
    if not added:
        return plan
    backup = sorted(plan.sensors.index(s) for s in {*plan.backup_sensors, *added})
    variance = plan.model.conditional_variance(backup)
    rebuilt = ~np.isin(np.arange(len(plan.sensors)), backup)
    model_p = model_probability(variance, plan.parameters, plan.sensors)
    note = (
        f"{', '.join(added)} backed up besides the plan's choice: {why}; "
        "the backtest measured the plan without them"
    )
    return replace(
        plan,
        backup_sensors=tuple(plan.sensors[i] for i in backup),
        kept_sensors=tuple(s for s in plan.kept_sensors if s not in added),
        linear_map=plan.model.linear_map(backup),
        conditional_variance=variance,
        model_violation_probability=np.where(rebuilt, model_p, 0.0),
        warnings=(*plan.warnings, note),
    )
