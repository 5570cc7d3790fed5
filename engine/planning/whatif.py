"""What-if projections: the backup fraction a plan would have at other eps or delta.

Model projections (``retarget``: re-selected on the fitted model, no refit, no
backtest), fast enough to sweep a grid while the operator tunes; the app draws
them, ``bench/bench_replan.py`` times them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.planning.guarantee import variance_target
from engine.planning.plan import BackupPlan
from engine.planning.reselect import retarget

__all__ = ["DELTA_GRID", "eps_grid", "scaled_eps", "whatif_delta", "whatif_eps"]


def eps_grid(eps: float, points: int = 17) -> np.ndarray:
    """Log-spaced eps values from eps/8 to 8 eps: (points,)."""
    return eps * np.logspace(-np.log10(8), np.log10(8), points)


DELTA_GRID: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)


def scaled_eps(base: BackupPlan, eps: float) -> BackupPlan:
    """``base`` retargeted to ``eps``; per-sensor eps all move by the same factor."""
    factor = eps / base.parameters.eps
    per = tuple((s, e * factor) for s, e in base.parameters.eps_by_sensor)
    return retarget(base, eps=eps, eps_by_sensor=per)


def whatif_eps(base: BackupPlan, grid: Sequence[float]) -> list[float]:
    """Model projection: backup fraction at each eps (``retarget``, no backtest).

    With per-sensor eps, every sensor's eps is scaled by ``grid / eps``.
    """
    return [scaled_eps(base, float(e)).backup_fraction for e in grid]


def whatif_delta(base: BackupPlan, grid: Sequence[float]) -> list[float]:
    """Model projection: backup fraction at each delta.

    ``retarget`` only moves eps, so a new delta is expressed as the eps that
    scales the plan's variance targets the way the seed's formula scales with
    delta: ``target(eps', delta0) = target(eps, delta1)``. Calibration would
    also move its quantile level; this curve ignores that (a projection).
    """
    p = base.parameters
    t0 = variance_target(p.eps, p.delta, p.window, p.aggregate)
    out = []
    for d in grid:
        ratio = variance_target(p.eps, float(d), p.window, p.aggregate) / t0
        out.append(scaled_eps(base, p.eps * float(np.sqrt(ratio))).backup_fraction)
    return out
