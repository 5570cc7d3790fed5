"""Calibrated planning: the targets a plan kept for its horizon needs.

Why: the seed's variance targets assume reconstruction errors are independent
over time and that the model never goes stale. On real sensor data both are
false (DESIGN.md section 3), so a model-only plan misses ``eps`` far more often
than ``delta``. Two remedies live here:

* **calibrated targets** (``calibration="backtest"``, the default), aimed at a
  plan *kept for the horizon*. Forward-horizon conformal (``engine.planning.horizon``):
  the most recent stretches of ``horizon`` rows are each scored by a model
  fitted on every row before it, as the plan will be used. For every sensor we
  take the split-conformal ``1 - delta * margin`` quantile ``q_i`` of its
  window-aggregate error and compare it with the model's standard deviation
  ``sqrt(var_{i|O})``. The ratio ``c_i = q_i / sqrt(var_{i|O})`` absorbs
  temporal correlation, drift over the horizon, model misfit and, for max/min,
  the slack of the seed's union bound. ``q_i`` is also at least the quantile
  of the most recent horizon alone (drift) and a Gaussian prediction bound from
  the count of disjoint windows scored (``horizon.prediction_bound``: sliding
  windows overlap, so thin evidence widens it). The target becomes ``(eps / c_i)^2``.
  A sensor in ``O`` is scored as if it were dropped (reconstructed from ``O``
  without it), so relaxing can remove it. Too few scored windows for the
  quantile (or too little history to score one horizon) means a sensor's miss
  rate cannot be measured: its target is 0 and it is backed up.
* **the backtest**: fit on ``[t - H, t)``, plan, measure real window errors on
  ``[t, t + S)``; this is the figure an operator is shown, not the model's
  (``engine.planning.backtest``, scoring folds with ``scores.window_residuals``).

Two contracts (DESIGN.md section 3b). ``exposure=None``: the **range contract**,
whole windows rebuilt, scored as above. ``exposure=m``: the **crash contract**, a
failure loses at most ``m`` consecutive rows and every window it touches is exact
except those rows of the rebuilt sensors. Calibration then scores every window and
every one of the ``w + m - 1`` failure positions touching it
(``Aggregate.exposure_scores``: for avg/sum the window's error; for max/min eps over
the smallest scale of the residual at which the window would miss, which keeps the
ratio ``c_i`` meaningful), for max/min with the residual mirrored too (a rebuild
that ran low through calibration never overshoots the max; the next horizon's may).
The same quantile, drift check and prediction bound (its count still the disjoint
windows: a window's scores share its readings) set the targets. A sensor with no
measured error (every score 0) is held to the variance it was measured at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.aggregates import get_aggregate
from engine.errors import ParameterError, named
from engine.model import GaussianModel
from engine.planning.guarantee import variance_target
from engine.planning.horizon import (
    HORIZON_MIN_WINDOWS,
    MAX_SCORED_HORIZONS,
    calibration_rows,
    conformal_quantile,
    first_fit_rows,
    forward_models,
    horizon_origins,
    prediction_bound,
    scored_horizons,
)
from engine.planning.scores import calibration_scores, dropped_variance, kept_scores
from engine.query import WindowQuery, check_exposure, check_horizon, contract_of, horizon_rows
from engine.selection import Method, Selection, select_backups

CALIBRATIONS: tuple[str, ...] = ("backtest", "none")
# A calibration score at most this many eps is no measured error (float noise of an
# exact rebuild): the sensor's ratio is unmeasured (see ``_calibrate``).
FLAT_SCORE = 1e-9
Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class PlanningSpec:
    """Everything one planning step needs: a query's values and the planning knobs
    (``from_query``; the query checked them)."""

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
    # Rows the plan is used before re-planning; None: HORIZON_MIN_WINDOWS windows.
    horizon: int | None = None
    # Step of the online (adaptive conformal) update of log-targets per scored window.
    # A miss tightens a target by ~exp(-adapt_rate); a hit relaxes it by
    # exp(adapt_rate * delta * margin), so misses settle at delta * margin.
    adapt_rate: float = 0.2
    # The most consecutive rows one failure can lose (the crash contract); None: whole
    # windows are rebuilt (the range contract).
    exposure: int | None = None

    def __post_init__(self) -> None:
        if self.calibration not in CALIBRATIONS:
            raise ParameterError(
                f"calibration must be one of {', '.join(CALIBRATIONS)}, got {self.calibration!r}"
            )
        if not 0.0 < self.margin <= 1.0:
            raise ParameterError(f"margin must be in (0, 1], got {self.margin!r}")
        check_horizon(self.horizon)
        check_exposure(self.exposure)

    @classmethod
    def from_query(
        cls, query: WindowQuery, method: Method = "greedy", calibration: str = "backtest"
    ) -> PlanningSpec:
        """The spec of ``query`` (its slide in readings, tumbling resolved)."""
        q = query
        return cls(
            q.eps, q.delta, q.window, q.effective_slide, q.aggregate, method, calibration,
            horizon=q.horizon, exposure=q.exposure,
        )  # fmt: skip

    @property
    def contract(self) -> str:
        """``"crash"`` (a failure loses ``exposure`` rows) or ``"range"`` (whole windows)."""
        return contract_of(self.exposure)

    @property
    def keeps_readings(self) -> bool:
        """True when a crash's lost readings may be left out of a window instead of rebuilt:
        the crash contract, an aggregate that can (max, min), and an exposure shorter than
        the window (so every window a failure touches keeps a reading)."""
        if self.exposure is None or get_aggregate(self.aggregate).kept_fill is None:
            return False
        return self.exposure < self.window

    @property
    def level(self) -> float:
        """The quantile level calibration aims at: ``1 - delta * margin``."""
        return 1.0 - self.delta * self.margin

    @property
    def horizon_rows(self) -> int:
        """The horizon in rows, at least one window."""
        return horizon_rows(self.horizon, self.window, HORIZON_MIN_WINDOWS * self.window)


@dataclass(frozen=True)
class CalibrationInfo:
    """What calibration did, recorded in the plan and the exported config."""

    method: str  # "backtest" (forward horizons), "none" (model only) or "unmeasured"
    reason: str
    blocks: int = 0  # horizons scored
    iterations: int = 0
    scores_per_sensor: int = 0  # window scores (sliding windows x failure positions)
    level: float = 0.0  # the quantile level used, 1 - delta * margin
    ratio: dict[str, float] = field(default_factory=dict)  # c_i per sensor
    flat: tuple[str, ...] = ()  # sensors with no measured error, held to the variance measured
    kept: tuple[str, ...] = ()  # sensors whose lost readings a crash leaves out (max/min)
    unmeasured: tuple[str, ...] = ()  # backed up: too few windows to measure their miss rate

    def to_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "reason": self.reason,
            "blocks": self.blocks,
            "iterations": self.iterations,
            "scores_per_sensor": self.scores_per_sensor,
            "quantile_level": self.level,
            "flat_sensors": list(self.flat),
            "kept_readings": list(self.kept),
            "unmeasured_sensors": list(self.unmeasured),
        }


@dataclass(frozen=True, eq=False)
class FoldPlan:
    """The result of planning on one stretch of history."""

    model: GaussianModel
    selection: Selection
    targets: np.ndarray  # (n,) per-sensor variance targets actually used
    calibration: CalibrationInfo
    kept: tuple[int, ...] = ()  # rebuilt sensors a crash leaves out of their windows (max/min)


def seed_targets(spec: PlanningSpec, n: int) -> np.ndarray:
    """The seed's model-only target, the same for every sensor: (n,)."""
    t = variance_target(spec.eps, spec.delta, spec.window, spec.aggregate)
    return np.full(n, t)


def back_up_everything(model: GaussianModel, spec: PlanningSpec, reason: str) -> FoldPlan:
    """The safe plan when a miss rate cannot be measured: every target 0, all backed up."""
    zero = np.zeros(len(model.sensors_))
    info = CalibrationInfo("unmeasured", reason, level=spec.level)
    # With every target 0 each informative sensor is indispensable (a fitted covariance is
    # positive definite on them), so the selection is all of them: no search, which at
    # 10,000 sensors cost two factorisations of the whole covariance for a known answer.
    informative = tuple(int(i) for i in np.flatnonzero(~model.constant_))
    selection = Selection(informative, zero.copy(), zero.copy(), spec.method, True)
    return FoldPlan(model, selection, zero, info)


def plan_on(
    x: np.ndarray, sensors: tuple[str, ...], spec: PlanningSpec, scale: np.ndarray | None = None
) -> FoldPlan:
    """Fit a model on ``x`` (T, n) and choose the backup set, calibrated or not.

    ``scale`` (n,) multiplies the calibrated targets: the online correction learnt
    from realised errors by ``run_backtest`` (or the live monitor). When
    calibration is asked for but cannot measure the miss rate (too little
    history for one scored horizon, or too few windows for the quantile), every
    sensor is backed up and ``calibration.method`` is ``"unmeasured"``.
    """
    model = GaussianModel().fit(x, sensors)
    base = seed_targets(spec, x.shape[1])
    if spec.calibration == "none":
        info = CalibrationInfo("none", "model-only targets (the seed's bound), as requested")
        return FoldPlan(model, select_backups(model.cov_, base, spec.method), base, info)
    horizon, level = spec.horizon_rows, spec.level
    first = first_fit_rows(x.shape[1], spec.window, horizon)
    # the most recent horizons, as many as the quantile needs when that is over the cap
    # (scoring only the cap's made every quantile infinite: every sensor backed up)
    scored = max(MAX_SCORED_HORIZONS, scored_horizons(spec.window, horizon, level))
    origins = horizon_origins(x.shape[0], first, horizon)[-scored:]
    need = calibration_rows(x.shape[1], spec.window, horizon, level)
    if x.shape[0] < need:
        reason = (
            f"too little history to measure the miss rate: {x.shape[0]} rows, need {need} "
            f"(a first fit and enough horizons of {horizon} rows for the {level:.3f} quantile "
            f"of windows of {spec.window} readings): every sensor is backed up"
        )
        return back_up_everything(model, spec, reason)
    models = forward_models(x, origins, sensors)
    return _calibrate(
        x, sensors, spec, model, (origins, models), np.ones(x.shape[1]) if scale is None else scale
    )


def _calibrate(
    x: np.ndarray,
    sensors: tuple[str, ...],
    spec: PlanningSpec,
    model: GaussianModel,
    forward: tuple[list[int], list[GaussianModel]],
    scale: np.ndarray,
) -> FoldPlan:
    level = spec.level
    kept = _kept_readings(x, forward, spec, level)
    # A kept sensor needs no rebuild within eps: its target is its whole variance, which
    # every backup set meets (selection needs finite targets).
    free = np.diag(model.cov_).copy()

    def chosen(t: np.ndarray) -> Selection:
        return select_backups(model.cov_, np.where(kept, free, t * scale), spec.method)

    targets = seed_targets(spec, x.shape[1])
    selection = chosen(targets)
    ratio = np.ones(x.shape[1])
    flat = np.zeros(x.shape[1], dtype=bool)
    n_windows, iterations, seen = 0, 0, {selection.backup}
    for iterations in range(1, 9):
        q, n_windows = _forward_quantiles(x, forward, selection.backup, spec, level)
        sd = np.sqrt(dropped_variance(model, selection.backup))
        ok = sd > 1e-12 * max(1.0, float(np.sqrt(np.mean(np.diag(model.cov_)))))
        ratio = np.where(ok, np.maximum(q, 1e-300) / np.where(ok, sd, 1.0), ratio)
        with np.errstate(over="ignore"):  # a ratio of ~0: see the flat rule below
            new = np.where(ok, (spec.eps / ratio) ** 2, targets)
        # A sensor that varies but whose rebuild erred nowhere (flat through the scored
        # horizons, or never overshooting) has no measured ratio: (eps / 0)^2 would let
        # any variance pass. It is trusted only at the variance it was measured at.
        flat = ok & (q <= FLAT_SCORE * spec.eps)
        new = np.where(flat, sd**2, new)
        ratio = np.where(flat, spec.eps / np.where(ok, sd, 1.0), ratio)
        # First pass may relax or tighten; later passes only tighten, so the loop ends.
        targets = new if iterations == 1 else np.minimum(targets, new)
        nxt = chosen(targets)
        if nxt.backup == selection.backup or nxt.backup in seen:
            selection = nxt
            break
        seen.add(nxt.backup)
        selection = nxt
    scored = (
        "window error"
        if spec.exposure is None
        else f"window error when a failure loses {spec.exposure} consecutive rows"
    )
    held = [s for s, f, k in zip(sensors, flat, kept, strict=True) if f and not k]
    # an infinite quantile (too few scored windows for its rank, or for the prediction
    # bound): the sensor's target is 0, so it is backed up, and that is said
    blind = [
        s for s, r, k in zip(sensors, ratio, kept, strict=True) if not np.isfinite(r) and not k
    ]
    keeping = tuple(i for i in np.flatnonzero(kept) if i not in selection.backup)
    names = [sensors[i] for i in keeping]
    info = CalibrationInfo(
        method="backtest",
        reason=(
            f"targets calibrated on the {len(forward[0])} most recent horizons of "
            f"{spec.horizon_rows} rows, each scored by a model fitted on the rows before it, "
            f"so the {level:.3f} quantile of each sensor's {scored} is within eps"
            + (
                f"; {len(held)} sensor(s) with no measured error held to the variance "
                f"measured ({named(held)})"
                if held
                else ""
            )
            + (
                f"; {len(blind)} sensor(s) backed up, their miss rate not measurable on the "
                f"{n_windows} window scores per sensor ({named(blind)})"
                if blind
                else ""
            )
            + (
                f"; {len(names)} sensor(s) keep their readings under a crash (each window "
                f"takes the {spec.aggregate} of the readings the failure did not lose, "
                f"within eps at that quantile without a rebuild: {named(names)})"
                if names
                else ""
            )
        ),
        flat=tuple(held),
        kept=tuple(names),
        unmeasured=tuple(blind),
        blocks=len(forward[0]),
        iterations=iterations,
        scores_per_sensor=n_windows,
        level=level,
        ratio={s: float(r) for s, r in zip(sensors, ratio, strict=True)},
    )
    used = np.where(kept, free, targets * scale)
    return FoldPlan(model, selection, used, info, kept=tuple(int(i) for i in keeping))


def _kept_readings(
    x: np.ndarray, forward: tuple[list[int], list[GaussianModel]], spec: PlanningSpec, level: float
) -> np.ndarray:
    """(n,) True for the sensors the kept-readings rule serves: under the crash contract
    for max or min, the ``level`` quantile of the window's error when a failure's lost
    readings are left out (``kept_scores``) is within eps on the scored horizons, with
    the same drift check and prediction bound as a rebuild's (``_forward_quantiles``)."""
    if not spec.keeps_readings:
        return np.zeros(x.shape[1], dtype=bool)
    q, _ = _forward_quantiles(x, forward, (), spec, level, score=lambda b, _m: kept_scores(b, spec))
    return np.asarray(q <= spec.eps)


def _forward_quantiles(
    x: np.ndarray,
    forward: tuple[list[int], list[GaussianModel]],
    backup: tuple[int, ...],
    spec: PlanningSpec,
    level: float,
    score: Callable[[np.ndarray, GaussianModel], np.ndarray] | None = None,
) -> tuple[np.ndarray, int]:
    """(n,) conformal ``level`` quantile of forward-horizon scores, and scores used.

    ``score(rows, model)`` scores a horizon's rows; by default ``calibration_scores``
    with the backup set ``backup``.

    The larger of the pooled quantile and the most recent horizon's own (where finite).

    Each horizon ``[o, o + horizon)`` is reconstructed by the model fitted on ``x[:o]``
    with the backup set ``backup``; windows slide by one reading inside it and are
    scored under the spec's contract (``calibration_scores``).
    """
    horizon = spec.horizon_rows
    if score is None:

        def score(rows: np.ndarray, model: GaussianModel) -> np.ndarray:
            return calibration_scores(rows, model, backup, spec)

    scores = [score(x[o : o + horizon], m) for o, m in zip(*forward, strict=True)]
    e = np.vstack(scores)
    q = conformal_quantile(e, level)
    # Drift: a sensor must also meet the level in the most recent scored horizon (when
    # it has enough windows for the quantile), not only on average. Every horizon (max of
    # 16 noisy quantiles) over-tightened long histories; the latest one is what drifts.
    last = conformal_quantile(scores[-1], level)
    q = np.where(np.isfinite(last), np.maximum(q, last), q)
    # Thin evidence: sliding windows overlap, so N scores hold only about
    # N / window independent ones, and a rank read off them can be the largest of a
    # few. A Gaussian prediction bound from the disjoint windows' count widens
    # there (benchmark: fixed Beijing NO2 sum on the fresh half, no verdict lost,
    # savings -1.6 points on the choose half). Under the crash contract every window
    # has w + m - 1 scores (one per failure position), all sharing its readings, so
    # the count is still that of disjoint windows.
    disjoint = len(scores) * disjoint_windows(min(horizon, x.shape[0]), spec.window)
    q = np.maximum(q, prediction_bound(e, disjoint, level))
    return q, e.shape[0]


def disjoint_windows(rows: int, window: int) -> int:
    """How many disjoint windows of ``window`` rows fit in ``rows``: ``rows // window``
    (the windows starting at every row hold no more independent ones)."""
    return max(rows, 0) // window


# ---------------------------------------------------------------- backtest
