"""Calibrated planning and the rolling-origin backtest.

Why: the seed's variance targets assume reconstruction errors are independent
over time and that the model never goes stale. On real sensor data both are
false (DESIGN.md section 3), so a model-only plan misses ``eps`` far more often
than ``delta``. Two remedies live here:

* **calibrated targets** (``calibration="backtest"``, the default). The history
  is cut into contiguous blocks; for each block a model is fitted on the other
  blocks (mergeable moment statistics make that cheap) and the block is
  reconstructed out of sample. For every sensor we take the empirical
  ``1 - delta * margin`` quantile ``q_i`` of its window-aggregate error and
  compare it with the model's standard deviation ``sqrt(var_{i|O})``. The ratio
  ``c_i = q_i / sqrt(var_{i|O})`` absorbs temporal correlation (for a smooth
  sensor the window error does not shrink like ``1/sqrt(w)``), model misfit
  and, for max/min, the slack of the seed's union bound. The target becomes
  ``(eps / c_i)^2``: tighter where the seed was optimistic, looser where it
  was conservative. A sensor in ``O`` is scored as if it were dropped
  (reconstructed from ``O`` without it), so relaxing can remove it.
  The quantile is *locally adaptive* (normalised conformal): reconstruction
  errors come in bursts (a polluted week, a storm), so each held-out window's
  error is divided by the difficulty just before it (``_local_scale``: recent
  residual RMS plus its median), and the quantile of that score is scaled by
  the difficulty at the end of the history, when the plan starts. Plans made
  in a calm spell relax, plans made in a burst tighten; where the difficulty
  says nothing the score is a near-constant multiple of the raw error.
* **the backtest**: fit on ``[t - H, t)``, plan, measure real window errors on
  ``[t, t + S)``; this is the figure an operator is shown, not the model's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import scipy.linalg

from engine.aggregates import window_aggregates
from engine.errors import ParameterError
from engine.model.gaussian import GaussianModel, MomentStats
from engine.planning.guarantee import variance_target
from engine.planning.monitor import rate_upper_bound
from engine.selection.greedy import Method, Selection, select_backups

CALIBRATIONS: tuple[str, ...] = ("backtest", "none")
MAX_LOG_SCALE = 4.0  # the online correction moves a target by at most e^4 ~ 55x either way
Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class PlanningSpec:
    """Everything one planning step needs (a subset of ``PlanParameters``)."""

    eps: float
    delta: float
    window: int
    slide: int
    aggregate: str
    method: Method = "greedy"
    calibration: str = "backtest"
    # Aim each sensor's miss rate at delta * margin: the rest of delta is headroom for
    # the sampling noise of the worst of n sensors and for drift the past did not show.
    margin: float = 0.7
    blocks: int = 4
    # Step of the online (adaptive conformal) update of log-targets per scored window.
    # A miss tightens a target by ~exp(-adapt_rate); a hit relaxes it by
    # exp(adapt_rate * delta * margin), so misses settle at delta * margin.
    adapt_rate: float = 0.2

    def __post_init__(self) -> None:
        if self.calibration not in CALIBRATIONS:
            raise ParameterError(
                f"calibration must be one of {', '.join(CALIBRATIONS)}, got {self.calibration!r}"
            )
        if not 0.0 < self.margin <= 1.0:
            raise ParameterError(f"margin must be in (0, 1], got {self.margin!r}")
        if self.blocks < 2:
            raise ParameterError(f"blocks must be >= 2, got {self.blocks!r}")


@dataclass(frozen=True)
class CalibrationInfo:
    """What calibration did, recorded in the plan and the exported config."""

    method: str  # "backtest" (held-out blocks) or "none" (model only)
    reason: str
    blocks: int = 0
    iterations: int = 0
    windows_per_sensor: int = 0
    level: float = 0.0  # the quantile level used, 1 - delta * margin
    ratio: dict[str, float] = field(default_factory=dict)  # c_i per sensor

    def to_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "reason": self.reason,
            "blocks": self.blocks,
            "iterations": self.iterations,
            "windows_per_sensor": self.windows_per_sensor,
            "quantile_level": self.level,
        }


@dataclass(frozen=True, eq=False)
class FoldPlan:
    """The result of planning on one stretch of history."""

    model: GaussianModel
    selection: Selection
    targets: np.ndarray  # (n,) per-sensor variance targets actually used
    calibration: CalibrationInfo


def seed_targets(spec: PlanningSpec, n: int) -> np.ndarray:
    """The seed's model-only target, the same for every sensor: (n,)."""
    t = variance_target(spec.eps, spec.delta, spec.window, spec.aggregate)
    return np.full(n, t)


def plan_on(
    x: np.ndarray, sensors: tuple[str, ...], spec: PlanningSpec, scale: np.ndarray | None = None
) -> FoldPlan:
    """Fit a model on ``x`` (T, n) and choose the backup set, calibrated or not.

    ``scale`` (n,) multiplies the calibrated targets: the online correction learnt
    from realised errors by ``run_backtest`` (or the live monitor).
    """
    model = GaussianModel().fit(x, sensors)
    base = seed_targets(spec, x.shape[1])
    if spec.calibration == "none":
        info = CalibrationInfo("none", "model-only targets (the seed's bound), as requested")
        return FoldPlan(model, select_backups(model.cov_, base, spec.method), base, info)
    blocks = _block_bounds(x.shape[0], spec)
    if blocks is None:
        reason = (
            f"too little history to calibrate ({x.shape[0]} rows; need {spec.blocks} blocks "
            f"of at least {2 * spec.window} rows): model-only targets used"
        )
        info = CalibrationInfo("none", reason)
        return FoldPlan(model, select_backups(model.cov_, base, spec.method), base, info)
    return _calibrate(
        x, sensors, spec, model, blocks, np.ones(x.shape[1]) if scale is None else scale
    )


def _block_bounds(n_rows: int, spec: PlanningSpec) -> list[tuple[int, int]] | None:
    size = n_rows // spec.blocks
    if size < 2 * spec.window:
        return None
    edges = [i * size for i in range(spec.blocks)] + [n_rows]
    return list(pairwise(edges))


def _calibrate(
    x: np.ndarray,
    sensors: tuple[str, ...],
    spec: PlanningSpec,
    model: GaussianModel,
    blocks: list[tuple[int, int]],
    scale: np.ndarray,
) -> FoldPlan:
    stats = [MomentStats.from_array(x[a:b]) for a, b in blocks]
    held_out = [_complement_model(stats, i, sensors) for i in range(len(blocks))]
    level = 1.0 - spec.delta * spec.margin
    targets = seed_targets(spec, x.shape[1])
    selection = select_backups(model.cov_, targets * scale, spec.method)
    ratio = np.ones(x.shape[1])
    n_windows, iterations, seen = 0, 0, {selection.backup}
    for iterations in range(1, 9):
        q, n_windows = _held_out_quantiles(
            x, blocks, held_out, model, selection.backup, spec, level
        )
        sd = np.sqrt(_dropped_variance(model, selection.backup))
        ok = sd > 1e-12 * max(1.0, float(np.sqrt(np.mean(np.diag(model.cov_)))))
        ratio = np.where(ok, np.maximum(q, 1e-300) / np.where(ok, sd, 1.0), ratio)
        new = np.where(ok, (spec.eps / ratio) ** 2, targets)
        # First pass may relax or tighten; later passes only tighten, so the loop ends.
        targets = new if iterations == 1 else np.minimum(targets, new)
        nxt = select_backups(model.cov_, targets * scale, spec.method)
        if nxt.backup == selection.backup or nxt.backup in seen:
            selection = nxt
            break
        seen.add(nxt.backup)
        selection = nxt
    info = CalibrationInfo(
        method="backtest",
        reason=(
            f"targets calibrated on {len(blocks)} held-out blocks so the "
            f"{level:.3f} quantile of each sensor's window error, scaled to the "
            f"latest {spec.window} readings' reconstruction difficulty, is within eps"
        ),
        blocks=len(blocks),
        iterations=iterations,
        windows_per_sensor=n_windows,
        level=level,
        ratio={s: float(r) for s, r in zip(sensors, ratio, strict=True)},
    )
    return FoldPlan(model, selection, targets * scale, info)


def _complement_model(
    stats: list[MomentStats], skip: int, sensors: tuple[str, ...]
) -> GaussianModel:
    rest = [s for i, s in enumerate(stats) if i != skip]
    merged = rest[0]
    for s in rest[1:]:
        merged = merged.merge(s)
    return GaussianModel().fit_stats(merged, sensors)


def _dropped_variance(model: GaussianModel, backup: tuple[int, ...]) -> np.ndarray:
    """var_{i|O} for i outside O, and var_{i|O minus i} for i in O: (n,).

    For i in O the leave-one-out variance is ``1 / P_ii`` with ``P`` the inverse
    of ``Sigma_OO`` (informative sensors only): one inversion for all of O.
    """
    var = model.conditional_variance(list(backup)).copy()
    inf, precision = _backup_precision(model, backup)
    if inf:
        var[inf] = 1.0 / np.diag(precision)
    return var


def _backup_precision(
    model: GaussianModel, backup: tuple[int, ...]
) -> tuple[list[int], np.ndarray]:
    """Informative backed-up sensors and the inverse of their covariance block.

    Constant sensors (zero variance) are left out: they are rebuilt by their mean
    and their leave-one-out variance is 0, as ``conditional_variance`` says.
    """
    inf = [j for j in backup if not model.constant_[j]]
    if not inf:
        return inf, np.zeros((0, 0))
    block = model.cov_[np.ix_(inf, inf)]
    return inf, scipy.linalg.cho_solve(scipy.linalg.cho_factor(block), np.eye(len(inf)))


def _held_out_quantiles(
    x: np.ndarray,
    blocks: list[tuple[int, int]],
    held_out: list[GaussianModel],
    model: GaussianModel,
    backup: tuple[int, ...],
    spec: PlanningSpec,
    level: float,
) -> tuple[np.ndarray, int]:
    """Per-sensor ``level`` quantile of out-of-block window errors, and windows used.

    The quantile is locally adaptive (normalised conformal): each window's error is
    divided by the difficulty ``_local_scale`` measured on the readings just before
    it, and the quantile of that score is multiplied back by the difficulty at the
    end of ``x``, the one in force when the plan starts.
    """
    residuals = [
        _window_residuals(x[a:b], m, backup, spec)
        for (a, b), m in zip(blocks, held_out, strict=True)
    ]
    e = np.abs(np.vstack(residuals))
    scale = _local_scale(x, model, backup, spec.window)
    # Calibration slides by one reading, so block [a, b) has windows starting a .. b - w.
    starts = np.concatenate([np.arange(a, b - spec.window + 1) for a, b in blocks])
    keep = starts >= spec.window  # windows with a full look-back
    score = e[keep] / scale[starts[keep]]
    q = np.quantile(score, level, axis=0, method="higher") * scale[x.shape[0]]
    return q, int(keep.sum())


def _local_scale(
    x: np.ndarray, model: GaussianModel, backup: tuple[int, ...], lookback: int
) -> np.ndarray:
    """(T + 1, n) difficulty of a window starting at row ``s`` (rows ``s >= lookback``).

    The RMS of each sensor's per-reading reconstruction residual over the
    ``lookback`` readings before ``s`` (known when a plan starting at ``s`` is made),
    plus its median over ``x``. The added median keeps the scale away from 0 and
    damps its noise: where local volatility says nothing, scores are a near-constant
    multiple of the raw errors and the quantile is the unnormalised one.
    A sensor whose median is 0 (always rebuilt exactly) gets scale 1.
    """
    r2 = (x - _recovered(x, model, backup)) ** 2
    cum = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(r2, axis=0)])
    s = np.arange(lookback, x.shape[0] + 1)
    rms = np.sqrt(np.maximum(cum[s] - cum[s - lookback], 0.0) / lookback)
    med = np.median(rms, axis=0)
    scale = np.ones((x.shape[0] + 1, x.shape[1]))
    scale[lookback:] = np.where(med > 0, rms + med, 1.0)
    return scale


def _window_residuals(
    x: np.ndarray, model: GaussianModel, backup: tuple[int, ...], spec: PlanningSpec, slide: int = 1
) -> np.ndarray:
    """(W, n) signed window residuals (truth - recovered) on ``x``.

    Calibration slides by one reading: more (overlapping) samples.
    """
    truth = window_aggregates(x, spec.window, slide, spec.aggregate)
    recovered = _recovered(x, model, backup)
    return truth - window_aggregates(recovered, spec.window, slide, spec.aggregate)


def _recovered(x: np.ndarray, model: GaussianModel, backup: tuple[int, ...]) -> np.ndarray:
    """(T, n) readings of ``x`` as rebuilt from the backup set ``O``.

    Every sensor is rebuilt as in ``_dropped_variance``: sensors outside ``O`` from
    ``O``, a sensor in ``O`` from ``O`` without it (what would happen if it were
    dropped).
    """
    recovered = model.linear_map(list(backup)).apply(x[:, list(backup)])
    # A sensor j in O rebuilt from O without j: x_j - (P (x_O - mu_O))_j / P_jj,
    # the leave-one-out regression read off the precision P of Sigma_OO.
    inf, precision = _backup_precision(model, backup)
    if inf:
        centred = x[:, inf] - model.mean_[inf]
        recovered[:, inf] = x[:, inf] - (centred @ precision) / np.diag(precision)
    constant = [j for j in backup if model.constant_[j]]
    recovered[:, constant] = model.mean_[constant]
    return recovered


# ---------------------------------------------------------------- backtest


@dataclass(frozen=True)
class BacktestSettings:
    """Rolling origin: fit on ``history`` rows, test the next ``step`` rows."""

    history: int = 336
    step: int | None = None  # None: one window
    max_folds: int | None = None  # None: every fold; else evenly spaced, ending at the last

    def __post_init__(self) -> None:
        if self.history < 4:
            raise ParameterError(f"history must be >= 4 rows, got {self.history!r}")
        if self.step is not None and self.step < 1:
            raise ParameterError(f"step must be >= 1 row, got {self.step!r}")
        if self.max_folds is not None and self.max_folds < 1:
            raise ParameterError(f"max_folds must be >= 1, got {self.max_folds!r}")


@dataclass(frozen=True)
class BacktestResult:
    """Measured, not modelled: how often recovered window aggregates missed eps.

    A sensor's violation rate is over *all* its windows in the test slices, as
    the guarantee is stated (per window and per sensor; a backed-up sensor is
    recovered exactly). The rate over only the windows where it was rebuilt is
    reported beside it (``..._when_rebuilt``), as is the mean over (window,
    rebuilt sensor) pairs.
    """

    n_folds: int
    history: int
    step: int
    windows: int  # (window, rebuilt sensor) pairs scored
    backup_fraction_mean: float
    violation_rate_mean: float
    violation_rate_worst_sensor: float
    violation_rate_worst_sensor_ucb95: float
    worst_sensor: str | None
    violation_rate_worst_sensor_when_rebuilt: float
    per_sensor: dict[str, tuple[int, int, int]]  # sensor -> (violations, rebuilt, all windows)
    note: str = ""

    def verdict(self, delta: float) -> str:
        """One honest sentence: did the measured worst sensor stay within ``delta``?"""
        if self.n_folds == 0:
            return f"not measured: {self.note}"
        worst, ucb = self.violation_rate_worst_sensor, self.violation_rate_worst_sensor_ucb95
        where = f"{self.n_folds} folds, worst sensor {self.worst_sensor}"
        if ucb <= delta:
            return (
                f"holds: worst sensor missed {worst:.1%} (95% bound {ucb:.1%}) "
                f"<= delta {delta:.1%} over {where}"
            )
        if worst <= delta:
            return (
                f"holds on the measured folds ({worst:.1%} <= delta {delta:.1%}) but the 95% bound "
                f"{ucb:.1%} exceeds delta: more history would confirm it ({where})"
            )
        return f"DOES NOT HOLD: worst sensor missed {worst:.1%} > delta {delta:.1%} over {where}"

    def to_dict(self) -> dict[str, object]:
        return {
            "n_folds": self.n_folds,
            "history": self.history,
            "step": self.step,
            "windows_scored": self.windows,
            "backup_fraction_mean": self.backup_fraction_mean,
            "violation_rate_mean": self.violation_rate_mean,
            "violation_rate_worst_sensor": self.violation_rate_worst_sensor,
            "violation_rate_worst_sensor_ucb95": self.violation_rate_worst_sensor_ucb95,
            "worst_sensor": self.worst_sensor,
            "violation_rate_worst_sensor_when_rebuilt": (
                self.violation_rate_worst_sensor_when_rebuilt
            ),
            "per_sensor": {
                s: {"violations": v, "windows_rebuilt": r, "windows": w}
                for s, (v, r, w) in self.per_sensor.items()
            },
            "note": self.note,
        }


def fold_origins(n_rows: int, window: int, settings: BacktestSettings) -> np.ndarray:
    """Start rows ``t`` of the test slices: (F,) int."""
    step = settings.step or window
    if step < window:
        raise ParameterError(f"step ({step}) must be at least one window ({window})")
    origins = np.arange(settings.history, n_rows - step + 1, step)
    if settings.max_folds is not None and origins.size > settings.max_folds:
        pick = np.linspace(0, origins.size - 1, settings.max_folds).round().astype(int)
        origins = origins[np.unique(pick)]
    return origins


def run_backtest(
    x: np.ndarray,
    sensors: tuple[str, ...],
    spec: PlanningSpec,
    settings: BacktestSettings,
    progress: Progress | None = None,
    return_scale: bool = False,
) -> Any:
    """Rolling-origin evaluation of the planning procedure ``spec`` on ``x`` (T, n).

    Returns the ``BacktestResult``; with ``return_scale`` also the online target
    correction (n,) reached at the end, which the live plan starts from.
    """
    origins = fold_origins(x.shape[0], spec.window, settings)
    step = settings.step or spec.window
    n = x.shape[1]
    viol, wins = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    fractions: list[float] = []
    log_scale, total = np.zeros(n), 0
    target_rate = spec.delta * spec.margin
    for k, t in enumerate(origins):
        fold = plan_on(x[t - settings.history : t], sensors, spec, np.exp(log_scale))
        misses, rebuilt = _score_fold(x, int(t), step, fold, spec)
        viol += (misses & rebuilt).sum(axis=0)
        wins += np.where(rebuilt, misses.shape[0], 0)
        total += misses.shape[0]
        fractions.append(fold.selection.cost / n)
        if spec.calibration == "backtest":
            # Adaptive conformal update: each miss tightens, each hit relaxes a little,
            # so every sensor's long-run miss rate tracks delta * margin.
            hits = (misses & rebuilt).sum(axis=0)
            log_scale += spec.adapt_rate * (target_rate * misses.shape[0] - hits)
            np.clip(log_scale, -MAX_LOG_SCALE, MAX_LOG_SCALE, out=log_scale)
        if progress is not None:
            progress((k + 1) / origins.size, f"backtest fold {k + 1}/{origins.size}")
    result = _summarise(origins.size, settings.history, step, viol, wins, total, fractions, sensors)
    return (result, np.exp(log_scale)) if return_scale else result


def _score_fold(
    x: np.ndarray, t: int, step: int, fold: FoldPlan, spec: PlanningSpec
) -> tuple[np.ndarray, np.ndarray]:
    """(W, n) misses when rows ``[t, t + step)`` are lost, and the rebuilt mask (n,).

    Misses are computed for every sensor, a backed-up one as if it had been
    dropped; only rebuilt sensors' misses count, as violations and in the online
    update (a backed-up sensor's target relaxes slowly until it is dropped, and
    its misses then tighten it again).
    """
    backup = fold.selection.backup
    test = x[t : t + step]
    resid = _window_residuals(test, fold.model, backup, spec, spec.slide)
    rebuilt = np.ones(x.shape[1], dtype=bool)
    rebuilt[list(backup)] = False
    return np.abs(resid) > spec.eps, rebuilt


def _summarise(
    n_folds: int,
    history: int,
    step: int,
    viol: np.ndarray,
    rebuilt: np.ndarray,
    total: int,
    fractions: list[float],
    sensors: tuple[str, ...],
) -> BacktestResult:
    per = {s: (int(v), int(r), total) for s, v, r in zip(sensors, viol, rebuilt, strict=True)}
    scored = int(rebuilt.sum())
    if n_folds == 0:
        note = "no fold fits: the history is shorter than history + one step"
    elif scored == 0:
        note = "every sensor was backed up in every fold: nothing was reconstructed"
    else:
        note = ""
    nan = float("nan")
    if total == 0:
        return BacktestResult(n_folds, history, step, 0, nan, nan, nan, nan, None, nan, per, note)
    rates = viol / total
    worst = int(np.argmax(rates))
    cond = np.where(rebuilt > 0, viol / np.maximum(rebuilt, 1), 0.0)
    return BacktestResult(
        n_folds=n_folds,
        history=history,
        step=step,
        windows=scored,
        backup_fraction_mean=float(np.mean(fractions)),
        violation_rate_mean=float(viol.sum() / scored) if scored else 0.0,
        violation_rate_worst_sensor=float(rates[worst]),
        # The worst sensor is picked after looking: a plain 95 % bound on it would
        # be optimistic, so the bound holds for all n sensors at once (Bonferroni).
        violation_rate_worst_sensor_ucb95=rate_upper_bound(
            int(viol[worst]), total, 1.0 - 0.05 / len(sensors)
        ),
        worst_sensor=sensors[worst],
        violation_rate_worst_sensor_when_rebuilt=float(cond.max()),
        per_sensor=per,
        note=note,
    )
