"""Plans for the UI: instant previews, measured (backtested) plans, what-if curves.

No Streamlit here. A *preview* is the plan without a backtest: ``make_plan`` for
exactly its parameters (a second or less), fitted once per data, sensors and
parameters but method and unit corrections, which ``retarget`` and
``preview_plan`` apply to it. Calibration depends on eps (which sensors it scores,
which keep their readings), so a preview at another eps is fitted again, never
rescaled from whichever eps was asked first. A *measured* plan is ``make_plan``
with its rolling-origin backtest; it is slow, so it is cached by (data, sensors,
parameters, folds).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import astuple, dataclass, replace
from typing import Any

import numpy as np

from engine.data import SensorHistory
from engine.planning import (
    DELTA_GRID,
    BacktestSettings,
    BackupPlan,
    PlanParameters,
    default_history,
    eps_grid,
    make_plan,
    retarget,
    whatif_delta,
    whatif_eps,
)
from engine.planning.folds import DEFAULT_BACKTEST_FOLDS

MAX_FOLDS_ENV = "LACUNA_MAX_FOLDS"
DEFAULT_MAX_FOLDS = DEFAULT_BACKTEST_FOLDS  # as the CLI: one budget for both
Progress = Callable[[float, str], None]


class PlanCache:
    """A small thread-safe LRU of plans and curves (shared by every browser session)."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            plan = self._items.get(key)
            if plan is not None:
                self._items.move_to_end(key)
            return plan

    def put(self, key: Hashable, plan: Any) -> Any:
        with self._lock:
            self._items[key] = plan
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return plan

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class PlanningData:
    """The history to plan on and a cheap key that identifies it."""

    history: SensorHistory
    key: str  # dataset fingerprint + selected sensors


def max_folds() -> int:
    """Backtest folds (evenly spaced) the UI runs: ``LACUNA_MAX_FOLDS``, else the planner's."""
    raw = os.environ.get(MAX_FOLDS_ENV, "")
    return int(raw) if raw.strip().isdigit() and int(raw) > 0 else DEFAULT_MAX_FOLDS


def backtest_settings(history: SensorHistory, params: PlanParameters) -> BacktestSettings:
    rows = params.history or default_history(history.values.shape[0], params.window)
    return BacktestSettings(history=rows, max_folds=max_folds())


def _structure(params: PlanParameters) -> tuple:
    """The parameters a preview must refit for: all of them (eps and the exposure set
    what calibration scores) but the ones ``preview_plan`` applies to a fitted plan
    exactly (the method, unit corrections). A field added to the parameters is in the
    key unless it is named here."""
    return astuple(replace(params, method="greedy", units=()))


def preview_plan(data: PlanningData, params: PlanParameters, cache: PlanCache) -> BackupPlan:
    """The plan for ``params`` without a backtest: instant after the first call
    (except the paper method on many sensors, whose selection alone takes minutes)."""
    key = ("base", data.key, _structure(params))
    base = cache.get(key)
    if base is None:
        fitted = make_plan(data.history, replace(params, method="greedy"), run_backtest_now=False)
        base = cache.put(key, fitted)
    if params.method == "greedy":
        plan = base
    else:  # the same targets, selected by another method
        selected = ("preview", data.key, astuple(params))
        plan = cache.get(selected) or cache.put(selected, retarget(base, method=params.method))
    if plan.parameters.units == params.units:
        return plan
    # unit corrections change only the mixed-unit warning, not the plan
    fixed = replace(plan.parameters, units=params.units)
    warning = fixed.unit_warning(plan.sensors)
    return replace(plan, parameters=fixed, warnings=(warning,) if warning else ())


def cached_preview(data: PlanningData, params: PlanParameters, cache: PlanCache) -> bool:
    """Whether ``preview_plan`` would return at once (its slow part is cached)."""
    if cache.get(("base", data.key, _structure(params))) is None:
        return False
    selected = cache.get(("preview", data.key, astuple(params)))
    return params.method == "greedy" or selected is not None


def _measured_key(data: PlanningData, params: PlanParameters) -> tuple:
    settings = backtest_settings(data.history, params)
    return ("measured", data.key, astuple(params), astuple(settings))


def cached_measured_plan(
    data: PlanningData, params: PlanParameters, cache: PlanCache
) -> BackupPlan | None:
    """The backtested plan for ``params`` if one was computed already."""
    return cache.get(_measured_key(data, params))


def measure_plan(
    data: PlanningData, params: PlanParameters, cache: PlanCache, progress: Progress | None = None
) -> BackupPlan:
    """``make_plan`` with its backtest (slow: seconds); cached."""
    key = _measured_key(data, params)
    plan = cache.get(key)
    if plan is None:
        settings = backtest_settings(data.history, params)
        plan = make_plan(data.history, params, backtest=settings, progress=progress)
        cache.put(key, plan)
    return plan


@dataclass(frozen=True)
class WhatIf:
    """Model projections of the backup fraction (no backtest behind them).

    ``now`` is the shown plan's own backup fraction at its eps and delta: the
    marker, equal to the headline; the curves re-select with ``method``
    (greedy: the paper method is too slow to sweep), starting from the shown
    plan's targets, so they pass through ``now`` when the plan is greedy.
    """

    eps: tuple[float, ...]
    fraction_by_eps: tuple[float, ...]
    delta: tuple[float, ...]
    fraction_by_delta: tuple[float, ...]
    method: str
    now: float


def whatif_curves(data: PlanningData, plan: BackupPlan, cache: PlanCache) -> WhatIf:
    """Backup fraction against eps and against delta around the shown ``plan`` (cached)."""
    base = plan if plan.parameters.method == "greedy" else retarget(plan, method="greedy")
    key = ("whatif", data.key, astuple(plan.parameters), plan.measured)
    curves = cache.get(key)
    if curves is None:
        grid = eps_grid(base.parameters.eps)
        curves = WhatIf(
            eps=tuple(float(e) for e in grid),
            fraction_by_eps=tuple(whatif_eps(base, grid)),
            delta=DELTA_GRID,
            fraction_by_delta=tuple(whatif_delta(base, DELTA_GRID)),
            method=base.parameters.method,
            now=plan.backup_fraction,
        )
        cache.put(key, curves)
    return curves


def eps_axis(curves: WhatIf, params: PlanParameters) -> tuple[tuple[float, ...], float, str]:
    """x values, current x and label of the eps what-if curve.

    With one eps per unit group every group's eps moves by the same factor, so the
    axis is that factor (1 = now), not one group's eps.
    """
    if not params.eps_by_sensor:
        return curves.eps, params.eps, "eps"
    return tuple(e / params.eps for e in curves.eps), 1.0, "eps factor (all unit groups)"


def error_bounds(plan: BackupPlan) -> np.ndarray:
    """Per-sensor model error bound (aggregate unit) at the plan's 1 - delta: (n,).

    A target is the variance at which a sensor's window error just reaches eps
    at the planned level (calibrated or the seed's), so the bound at variance v
    is ``eps * sqrt(v / target)``; 0 for backed-up sensors.
    """
    t = np.maximum(plan.targets, 1e-300)
    return plan.eps_per_sensor * np.sqrt(np.maximum(plan.conditional_variance, 0.0) / t)


def backup_table(plan: BackupPlan) -> list[dict[str, Any]]:
    """One row per sensor: status, sources, model bound (None for a sensor that keeps its
    readings under a crash: no eps bound) and measured miss rate.

    The measured rate is over the backtest windows in which the sensor was
    rebuilt (a backed-up window is no evidence for the model), with
    its counts; ``None`` where the backtest never rebuilt it. A crash plan's figures are
    its own contract's: each rebuilt window counts the share of its failure positions that
    missed (``backtest.crash``), as its verdict does.
    """
    bounds = error_bounds(plan)
    per = _measured_misses(plan)
    rows = []
    for i, s in enumerate(plan.sensors):
        backed = s in plan.backup_sensors
        v, rebuilt = per.get(s, (0, 0))
        rows.append(
            {
                "sensor": s,
                "status": "backed up"
                if backed
                else "kept readings under a crash, else reconstructed"
                if s in plan.kept_sensors
                else "reconstructed",
                "reconstructed from (top 3 by weight, coef)": ""
                if backed
                else ", ".join(f"{b} ({c:+.2f})" for b, c in plan.sources(s, 3)),
                # a sensor keeping its readings under a crash has no eps bound: its target
                # is its whole variance, which would give a bound below eps by construction
                "model error bound": 0.0
                if backed
                else None
                if s in plan.kept_sensors
                else float(bounds[i]),
                "model P(miss)": float(plan.model_violation_probability[i]),
                "backtest miss rate (rebuilt windows)": (v / rebuilt) if rebuilt else None,
                "backtest misses / rebuilt windows": _counted(v, rebuilt) if per else "",
                "conditional variance": float(plan.conditional_variance[i]),
                "variance target": float(plan.targets[i]),
            }
        )
    return rows


def unmeasured_label(plan: BackupPlan) -> str | None:
    """What the table's backtest rate says for every sensor when the backtest measured
    nothing for ``plan``: "not run" (a preview), "n/a" (a backtest that could not score
    it); None when it measured the plan (a sensor without a rate was never rebuilt)."""
    if plan.backtest is None:
        return "not run"
    return None if _measured_misses(plan) else "n/a"


def _measured_misses(plan: BackupPlan) -> dict[str, tuple[float, int]]:
    """sensor -> (misses, rebuilt windows) the backtest measured under the plan's contract:
    whole windows (range), or windows each counting its missed share of failure positions
    (crash)."""
    if not plan.measured or plan.backtest is None:
        return {}
    crash = plan.backtest.crash
    if crash is None:
        return {s: (v, r) for s, (v, r, _w) in plan.backtest.per_sensor.items()}
    k = crash.positions
    return {s: (v / k, r // k) for s, (v, r) in crash.per_sensor.items()}


def _counted(misses: float, windows: int) -> str:
    """``misses / windows``: a whole count, or a crash plan's shares to 0.01 of a window."""
    shown = f"{misses}" if isinstance(misses, int) else f"{misses:.2f}"
    return f"{shown} / {windows}"


MEASURED_EPS_FACTORS: tuple[float, ...] = (0.5, 0.7, 1.0, 1.4, 2.0)


@dataclass(frozen=True)
class MeasuredPoint:
    """A backtest at one eps: the measured trade-off (greedy selection)."""

    eps: float  # the single eps (with per-sensor eps: the plan's eps times ``factor``)
    factor: float  # the eps (every sensor's) as a multiple of the plan's own
    backup_fraction: float  # mean over the backtest's folds
    miss_worst: float  # worst sensor's violation rate
    miss_worst_ucb95: float
    miss_mean: float


def scaled_parameters(params: PlanParameters, factor: float) -> PlanParameters:
    """``params`` with eps, and every sensor's eps when set per sensor, times ``factor``."""
    per = tuple((s, e * factor) for s, e in params.eps_by_sensor)
    return params.with_query(eps=float(params.eps * factor), eps_by_sensor=per)


def _measured_whatif_key(data: PlanningData, params: PlanParameters) -> tuple:
    return ("measured-whatif", data.key, astuple(params), max_folds())


def cached_measured_whatif(
    data: PlanningData, params: PlanParameters, cache: PlanCache
) -> tuple[MeasuredPoint, ...] | None:
    return cache.get(_measured_whatif_key(data, params))


def measure_whatif(
    data: PlanningData, params: PlanParameters, cache: PlanCache, progress: Progress
) -> tuple[MeasuredPoint, ...]:
    """Backtest the plan at eps x ``MEASURED_EPS_FACTORS`` (slow: run in the background).

    The paper method never drives these: they use greedy (exact stays exact). With
    per-sensor eps (one per unit group) every sensor's eps moves by the factor.
    """
    method = "greedy" if params.method == "paper" else params.method
    points = []
    k = len(MEASURED_EPS_FACTORS)
    for i, factor in enumerate(MEASURED_EPS_FACTORS):
        p = scaled_parameters(replace(params, method=method), factor)

        def step(fraction: float, message: str, i: int = i, f: float = factor) -> None:
            progress((i + fraction) / k, f"eps x {f:g} ({i + 1} of {k}): {message}")

        bt = measure_plan(data, p, cache, step).backtest
        if bt is None or not bt.n_folds:
            continue
        rates = bt if bt.crash is None else bt.crash  # the plan's own contract's figures
        point = MeasuredPoint(
            p.eps, factor, bt.backup_fraction_mean, rates.violation_rate_worst_sensor,
            rates.violation_rate_worst_sensor_ucb95, rates.violation_rate_mean,
        )  # fmt: skip
        points.append(point)
    return cache.put(_measured_whatif_key(data, params), tuple(points))


def range_plan(data: PlanningData, plan: BackupPlan, cache: PlanCache) -> BackupPlan:
    """The plan's query planned for whole windows (the range contract): the plan itself
    for a range plan; for a crash plan the measured range plan when one was computed
    (on Tune, with no exposure), else its preview (unmeasured: ``measured`` False)."""
    if plan.parameters.exposure is None:
        return plan
    whole = plan.parameters.with_query(exposure=None)
    return cached_measured_plan(data, whole, cache) or preview_plan(data, whole, cache)
