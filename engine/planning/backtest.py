"""The rolling-origin backtest: the figure an operator is shown, not the model's.

Fit on the rows before origin ``t``, plan with ``plan_on``, keep the plan for
``step`` rows (default: the horizon) and score every window in them as if
those rows were lost (the range contract); a plan for an exposure of ``m`` rows
is also scored under the crash contract: every failure position touching each
window, its ``m`` lost rows rebuilt. With ``calibration="backtest"`` the folds also learn the
online target correction (``track_quantile``) the live plan starts from.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from engine.aggregates import get_aggregate, leave_out
from engine.planning.backtest_result import summarise_backtest
from engine.planning.calibration import (
    FoldPlan,
    PlanningSpec,
    Progress,
    plan_on,
)
from engine.planning.crash_result import summarise_crash
from engine.planning.folds import BacktestSettings, fold_origins
from engine.planning.scores import rebuilt, window_residuals
from engine.planning.verdict import disjoint_share
from engine.windows import window_starts

__all__ = ["MAX_LOG_SCALE", "run_backtest", "track_quantile"]

MAX_LOG_SCALE = 4.0  # the online correction moves a target by at most e^4 ~ 55x either way


def run_backtest(
    x: np.ndarray,
    sensors: tuple[str, ...],
    spec: PlanningSpec,
    settings: BacktestSettings,
    progress: Progress | None = None,
    return_scale: bool = False,
) -> Any:
    """Rolling-origin evaluation of the planning procedure ``spec`` on ``x`` (T, n).

    Each fold's plan is kept for ``step`` rows (default: the horizon) and every
    window in them is scored. Returns the ``BacktestResult``; with
    ``return_scale`` also the online target correction (n,) reached at the end,
    which the live plan starts from.
    """
    origins = fold_origins(x.shape[0], spec.window, settings, spec.horizon_rows)
    step = settings.step or spec.horizon_rows
    n = x.shape[1]
    viol, wins = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    crash_viol, crash_scored = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    fractions: list[float] = []
    log_scale, total = np.zeros(n), 0
    for k, t in enumerate(origins):
        fold = plan_on(x[t - settings.fit_rows(int(t)) : t], sensors, spec, np.exp(log_scale))
        misses, rebuilt = _score_fold(x, int(t), step, fold, spec)
        viol += (misses & rebuilt).sum(axis=0)
        wins += np.where(rebuilt, misses.shape[0], 0)
        total += misses.shape[0]
        fractions.append(fold.selection.cost / n)
        tracked = misses
        if spec.exposure is not None:
            lost = _score_fold_crash(x, int(t), step, fold, spec, spec.exposure)
            crash_viol += np.where(rebuilt, lost.sum(axis=(0, 1)), 0)
            crash_scored += np.where(rebuilt, lost.shape[0] * lost.shape[1], 0)
            tracked = lost.mean(axis=1)  # each window: the fraction of failures that missed
        if spec.calibration == "backtest":
            track_quantile(log_scale, tracked, rebuilt, spec)
        if progress is not None:
            progress((k + 1) / origins.size, f"backtest fold {k + 1}/{origins.size}")
    share = disjoint_share(spec.window, spec.slide)  # the tests count disjoint windows
    result = summarise_backtest(origins.size, settings.history, step, (viol, wins, total),
                                fractions, sensors, spec.delta, share)  # fmt: skip
    if spec.exposure is not None:
        crash = summarise_crash(spec.exposure, spec.window, crash_viol, crash_scored, sensors,
                                share)  # fmt: skip
        result = replace(result, crash=crash)
    return (result, np.exp(log_scale)) if return_scale else result


def track_quantile(
    log_scale: np.ndarray, misses: np.ndarray, rebuilt: np.ndarray, spec: PlanningSpec
) -> None:
    """Online quantile tracking of each sensor's log-target, in place: (n,).

    Each rebuilt window's miss tightens the target by ``exp(-adapt_rate)``, each hit
    relaxes it by ``exp(adapt_rate * aim)``, so a sensor's long-run miss rate
    settles at ``aim = delta * margin``. Windows of a backed-up sensor do not move it.
    ``misses`` (W, n) is boolean, or under the crash contract each window's fraction
    of failure positions that missed.
    """
    aim = spec.delta * spec.margin
    scored = np.where(rebuilt, misses.shape[0], 0)
    hits = (misses * rebuilt[None, :]).sum(axis=0)
    log_scale += spec.adapt_rate * (aim * scored - hits)
    np.clip(log_scale, -MAX_LOG_SCALE, MAX_LOG_SCALE, out=log_scale)


def _score_fold(
    x: np.ndarray, t: int, step: int, fold: FoldPlan, spec: PlanningSpec
) -> tuple[np.ndarray, np.ndarray]:
    """(W, n) misses when rows ``[t, t + step)`` are lost, and the rebuilt mask (n,).

    Only rebuilt sensors' misses count, as violations and in the online update.
    """
    backup = fold.selection.backup
    test = x[t : t + step]
    resid = window_residuals(test, fold.model, backup, spec, spec.slide)
    rebuilt = np.ones(x.shape[1], dtype=bool)
    rebuilt[list(backup)] = False
    return np.abs(resid) > spec.eps, rebuilt


def _score_fold_crash(
    x: np.ndarray, t: int, step: int, fold: FoldPlan, spec: PlanningSpec, exposure: int
) -> np.ndarray:
    """(W, K, n) misses of the slice's windows (slide ``spec.slide``) when a failure at
    each of the ``K = w + m - 1`` positions touching a window loses ``m`` rows.

    Windows and failures are those of rows ``[t, t + step)``: a failure starting
    before ``t`` is scored on the windows of this slice it touches.
    """
    test = x[t : t + step]
    starts = window_starts(test.shape[0], spec.window, spec.slide)
    recovered = leave_out(
        rebuilt(test, fold.model, fold.selection.backup), fold.kept, spec.aggregate
    )
    agg = get_aggregate(spec.aggregate)
    err = agg.exposure_errors(test, recovered, starts, spec.window, exposure)
    return np.asarray(np.abs(err) > spec.eps)
