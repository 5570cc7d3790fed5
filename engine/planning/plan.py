"""BackupPlan: parameters, model, selection, calibration and backtest, tied together.

A plan is fitted on the history (by default all of it, up to a cost cap), is
meant to be used for ``horizon`` rows before re-planning, has its targets
calibrated on forward horizons of that history (unless told not to), and is
then *measured* by a rolling-origin backtest on the whole file that keeps each
fold's plan for a horizon and scores every window in it. The backtest figures,
not the model's probability, are what the operator is promised.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from engine.data import SensorHistory
from engine.data.range import check_eps_units
from engine.errors import ParameterError, named
from engine.model import GaussianModel
from engine.model.linear import LinearMap
from engine.model.repair import constant_note, sentence
from engine.planning.backtest import run_backtest
from engine.planning.backtest_result import BacktestResult
from engine.planning.calibration import (
    CalibrationInfo,
    FoldPlan,
    PlanningSpec,
    Progress,
    back_up_everything,
    plan_on,
)
from engine.planning.folds import DEFAULT_BACKTEST_FOLDS, BacktestSettings
from engine.planning.guarantee import window_violation_probability
from engine.planning.horizon import calibration_rows
from engine.planning.parameters import PlanParameters, default_history, resolve_horizon
from engine.planning.savings import BYTES_PER_READING, Savings
from engine.planning.verdict import Verdict
from engine.query import WindowQuery
from engine.selection.greedy import Selection


@dataclass(frozen=True, eq=False)
class BackupPlan:
    """A chosen backup set with everything needed to recover, explain and export it."""

    parameters: PlanParameters
    sensors: tuple[str, ...]
    backup_sensors: tuple[str, ...]
    linear_map: LinearMap
    conditional_variance: np.ndarray  # (n,) model var_{i|O}; 0 for backed-up sensors
    targets: np.ndarray  # (n,) variance targets used (calibrated or the seed's)
    model_violation_probability: np.ndarray  # (n,) model-only, under the seed's assumptions
    calibration: CalibrationInfo
    backtest: BacktestResult | None
    sampling_interval_s: float
    data_fingerprint: str
    history_rows: int
    model: GaussianModel
    fit_start: np.datetime64 | None = None  # first and last time of the rows fitted on
    fit_end: np.datetime64 | None = None
    warnings: tuple[str, ...] = ()  # why the plan is less than measured, one sentence each
    horizon_rows: int = 0  # rows the plan is meant to be used for (resolved by ``make_plan``)
    # Max/min crash plans: the readings a crash loses of these sensors are left out of their
    # windows (each takes the extreme of its kept readings) instead of rebuilt.
    kept_sensors: tuple[str, ...] = ()
    # Every sensor whose kept readings calibration measured within eps, backed up or not
    # (``kept_sensors`` are those not backed up): a set change that releases one of them
    # keeps its readings under a crash, as the plan that measured it would.
    keepable_sensors: tuple[str, ...] = ()

    @property
    def keepable(self) -> tuple[str, ...]:
        """The sensors a crash may leave out of their windows once not backed up."""
        either = {*self.keepable_sensors, *self.kept_sensors}
        return tuple(s for s in self.sensors if s in either)

    @property
    def query(self) -> WindowQuery:
        """The plan's window query with its horizon resolved (what its config states)."""
        return replace(self.parameters.query, horizon=self.horizon_rows or None)

    @property
    def model_note(self) -> str:
        """What the model's covariance repair did to the sensors this plan rebuilds, in one
        sentence ("" if nothing). A plan that rebuilds only constant sensors (by their
        mean) uses no covariance: its note says so without the repair (a factorisation
        of the whole covariance, after the Gram product when the fit was deferred)."""
        backed = set(self.backup_sensors)
        rebuilt = [i for i, s in enumerate(self.sensors) if s not in backed]
        if self.model.constant_[rebuilt].all():
            return sentence([constant_note(self.model.constant_, self.sensors)])
        return self.model.repair_note_

    @property
    def eps_per_sensor(self) -> np.ndarray:
        """Each sensor's eps (n,), in ``sensors`` order (all equal without overrides)."""
        return self.parameters.eps_vector(self.sensors)

    @property
    def measured(self) -> bool:
        """True when a backtest backs this plan's guarantee."""
        return self.backtest is not None and self.backtest.n_folds > 0

    @property
    def backup_fraction(self) -> float:
        return len(self.backup_sensors) / len(self.sensors)

    @property
    def model_worst_probability(self) -> float:
        """Largest model-only miss probability over reconstructed sensors."""
        return float(np.max(self.model_violation_probability, initial=0.0))

    def savings(self, bytes_per_reading: float = BYTES_PER_READING) -> Savings:
        per_day = 86400.0 / self.sampling_interval_s
        full, kept = len(self.sensors) * per_day, len(self.backup_sensors) * per_day
        return Savings(
            readings_per_day_full=full,
            readings_per_day_backup=kept,
            readings_per_day_saved=full - kept,
            bytes_per_reading=bytes_per_reading,
            bytes_per_day_full=full * bytes_per_reading,
            bytes_per_day_backup=kept * bytes_per_reading,
            bytes_per_day_saved=(full - kept) * bytes_per_reading,
            fraction_saved=1.0 - self.backup_fraction,
        )

    def sources(self, sensor: str, top: int = 3) -> list[tuple[str, float]]:
        """The backed-up sensors that weigh most in ``sensor``'s reconstruction, with their
        coefficients: by the spread of their term, |coef| x the sensor's standard deviation
        (a coefficient alone says nothing across units: a sensor in Pa takes a small one).
        Sensors whose coefficient is 0 are not among them."""
        lm = self.linear_map
        if sensor not in lm.targets:
            return []
        row = lm.coef[lm.targets.index(sensor)]
        used = np.flatnonzero(row)
        if used.size == 0:  # a constant sensor, rebuilt by its mean
            return []
        spread = np.abs(row[used]) * self._backup_deviation[used]
        order = used[np.argsort(-spread, kind="stable")[:top]]
        return [(lm.backup[i], float(row[i])) for i in order]

    @cached_property
    def _backup_deviation(self) -> np.ndarray:
        """The model's standard deviation of each backed-up sensor, in the map's order."""
        where = {s: i for i, s in enumerate(self.model.sensors_)}
        variance = np.diag(self.model.cov_)[[where[s] for s in self.linear_map.backup]]
        return np.sqrt(np.maximum(variance, 0.0))


def make_plan(
    history: SensorHistory,
    params: PlanParameters,
    *,
    backtest: BacktestSettings | None = None,
    run_backtest_now: bool = True,
    progress: Progress | None = None,
) -> BackupPlan:
    """Backtest the planning procedure, then plan on the most recent ``history`` rows.

    Parameters
    ----------
    history : the sensor history, (T, n).
    params : the operator's request.
    backtest : only its ``max_folds`` (default ``DEFAULT_BACKTEST_FOLDS``) and ``step``
        (default: the horizon) are used; fold histories follow the plan's
        (``plan_backtest_settings``).
    run_backtest_now : False skips the backtest: the plan is then unmeasured and,
        with calibration, lacks the online correction the backtest learns.
    progress : called with (fraction, message) during the backtest.

    The backtest runs first because, with calibration, it also learns each
    sensor's online target correction from the errors it measures; the final
    plan starts from where the backtest ended.
    """
    if params.eps_by_sensor:
        return _make_plan_in_eps_units(
            history, params, backtest=backtest, run_backtest_now=run_backtest_now, progress=progress
        )
    x, sensors = history.values, history.sensors
    _check_sizes(x, sensors, params)
    horizon = resolve_horizon(params, x.shape[0], history.report.sampling_interval_s)
    rows = min(
        params.history or default_history(x.shape[0], params.window, len(sensors), horizon),
        x.shape[0],
    )
    if rows < len(sensors) + 2:
        raise ParameterError(
            f"the plan would learn {len(sensors)} sensors from {rows} history rows; "
            f"need at least {len(sensors) + 2} (raise --history)"
        )
    spec = replace(params.spec(), horizon=horizon)
    result, scale = None, None
    if run_backtest_now:
        settings = plan_backtest_settings(x.shape[0], len(sensors), spec, rows, backtest)
        result, scale = run_backtest(x, sensors, spec, settings, progress, return_scale=True)
    if result is not None and result.n_folds == 0 and spec.calibration == "backtest":
        # a fold's first fit is calibration's rows unless --history caps the fits below it
        # (the default history grows with the file: a longer one needs them all)
        first = settings.history if params.history else _first_fit(len(sensors), spec)
        fold = _unmeasured_plan(x[-rows:], sensors, spec, x.shape[0], first)
    else:
        fold = plan_on(x[-rows:], sensors, spec, scale)
    plan = assemble_plan(
        history, params, fold.model, fold.selection, fold.targets, fold.calibration, result, rows,
        horizon, fold.kept,
    )  # fmt: skip
    return replace(plan, warnings=plan.warnings + plan_warnings(fold, result, spec))


def _unmeasured_plan(
    x: np.ndarray, sensors: tuple[str, ...], spec: PlanningSpec, n_rows: int, first: int
) -> FoldPlan:
    """No backtest fold fits: nothing is trusted to the model.

    Why: the guarantee shown must be backed by a measurement of the plan kept for
    its horizon. Calibration alone, on a history that holds no fold, is its own
    only evidence: on the honesty benchmark's short recordings (Intel motes, 63
    rows) such plans missed eps in up to 80 % of a rebuilt sensor's windows.
    """
    need = first + spec.horizon_rows
    reason = (
        f"too little history to measure the plan over its horizon: {n_rows} rows, one "
        f"backtest fold needs {need} (calibration's {first} and a horizon of "
        f"{spec.horizon_rows}): every sensor is backed up"
    )
    # Nothing is rebuilt from the model: its covariance (the Gram product, the whole
    # cost at 10,000 sensors) is computed only if something reads it (the app's graph).
    return back_up_everything(GaussianModel().fit(x, sensors, defer=True), spec, reason)


def _check_sizes(x: np.ndarray, sensors: tuple[str, ...], params: PlanParameters) -> None:
    if x.shape[0] < len(sensors) + 2:
        raise ParameterError(
            f"need at least {len(sensors) + 2} rows for {len(sensors)} sensors, got {x.shape[0]}"
        )
    params.check_fits(x.shape[0])


def _first_fit(n_sensors: int, spec: PlanningSpec) -> int:
    """The rows a backtest's first fold fits on when the history does not cap them."""
    return max(calibration_rows(n_sensors, spec.window, spec.horizon_rows, spec.level), 4)


def plan_backtest_settings(
    n_rows: int, n_sensors: int, spec: PlanningSpec, rows: int, given: BacktestSettings | None
) -> BacktestSettings:
    """Folds as the plan is made: first fold at the rows calibration needs, fits growing
    to the plan's ``rows``, each plan kept for the horizon (or ``given.step``)."""
    first = max(min(_first_fit(n_sensors, spec), rows), 4)
    return BacktestSettings(
        history=first,
        step=(given.step if given else None) or spec.horizon_rows,
        max_folds=(given.max_folds if given else None) or DEFAULT_BACKTEST_FOLDS,
        max_history=max(rows, first),
    )


def plan_warnings(
    fold: FoldPlan, result: BacktestResult | None, spec: PlanningSpec
) -> tuple[str, ...]:
    """Why a plan is less than measured: said once, never silently."""
    out = []
    if fold.calibration.method == "unmeasured":
        out.append(f"plan unmeasured, {fold.calibration.reason}")
    if blind := fold.calibration.unmeasured:
        out.append(
            f"{len(blind)} sensor(s) backed up because the history cannot measure their miss "
            f"rate (too few windows scored to bound the {fold.calibration.level:.4g} quantile): "
            f"{named(blind)}; a longer history or a longer horizon measures them"
        )
    if result is not None and result.n_folds == 0:
        out.append(f"backtest not run: {result.note}")
    elif result is not None and contract_assessment(result, spec.delta).state == "fails":
        out.append(f"backtest: {contract_verdict(result, spec.delta)}")
    if not fold.selection.backup:
        out.append(NO_BACKUP)
    return tuple(out)


NO_BACKUP = (
    "the plan backs up no sensor: the model alone rebuilds every reading, so a crash whose "
    "window state survives is recovered, but a lost range is not (the backup holds no "
    "reading, so recovery finds no time step to rebuild)"
)


def contract_assessment(result: BacktestResult, delta: float) -> Verdict:
    """The three-state verdict of the contract the plan was made for: crash when it has an
    exposure."""
    if result.crash is None or result.n_folds == 0:
        return result.assess(delta)
    return result.crash.assess(delta)


def contract_verdict(result: BacktestResult, delta: float) -> str:
    """The verdict sentence of the contract the plan was made for."""
    return contract_assessment(result, delta).sentence()


def contract_verdicts(result: BacktestResult | None, delta: float) -> dict[str, str | None]:
    """Both contracts' verdicts: crash (a failure loses the plan's exposure; None for a plan
    without one, or unmeasured) and range (whole windows rebuilt, as a long ``recover``)."""
    if result is None:
        return {"crash": None, "range": None}
    crash = result.crash
    return {
        "crash": None if crash is None or result.n_folds == 0 else crash.verdict(delta),
        "range": result.verdict(delta),
    }


def _make_plan_in_eps_units(
    history: SensorHistory,
    params: PlanParameters,
    **kwargs: Any,
) -> BackupPlan:
    """``make_plan`` with per-sensor eps: plan on readings divided by each sensor's eps
    with eps = 1, then convert the plan back to the sensors' own units.

    Exact because every step commutes with a positive per-sensor scaling: window
    avg/sum/max/min, the Gaussian conditional mean (equivariant) and variance, and
    each sensor's check ``|error_i| > eps_i`` (``|error_i / eps_i| > 1``). Selection
    then compares variances in eps units, so sensors of different units are weighed
    by their own tolerance, not by the size of their numbers.
    """
    e = params.eps_vector(history.sensors)
    scaled = replace(history, values=np.ascontiguousarray(_in_eps_units(history, e)))
    unit = params.with_query(eps=1.0, eps_by_sensor=())
    plan = make_plan(scaled, unit, **kwargs)
    dropped = unit.unit_warning(history.sensors)
    kept = tuple(w for w in plan.warnings if w != dropped)
    own = params.unit_warning(history.sensors)
    return replace(
        plan,
        parameters=params,
        linear_map=plan.linear_map.rescaled(e),
        conditional_variance=plan.conditional_variance * e**2,
        targets=plan.targets * e**2,
        model=plan.model.rescaled(e),
        data_fingerprint=history.fingerprint(),
        warnings=kept + ((own,) if own else ()),
    )


def eps_units(history: SensorHistory, params: PlanParameters) -> tuple[np.ndarray, PlanningSpec]:
    """Readings and planning spec in which every sensor's tolerance is ``spec.eps``.

    Without per-sensor eps: the readings and ``params.spec()`` unchanged. With it:
    readings divided by each sensor's eps and eps = 1 (see ``_make_plan_in_eps_units``).
    """
    if not params.eps_by_sensor:
        return history.values, params.spec()
    e = params.eps_vector(history.sensors)
    return _in_eps_units(history, e), params.with_query(eps=1.0, eps_by_sensor=()).spec()


def _in_eps_units(history: SensorHistory, e: np.ndarray) -> np.ndarray:
    """``history``'s readings divided by each sensor's eps ``e`` (n,), refused
    (``ParameterError``, ``check_eps_units``) where that passes the readings' limit: their
    squares, the model's moments, would overflow. Every way in (the CLI, the app, a
    saved config, a re-plan) plans through here."""
    per = dict(zip(history.sensors, e.tolist(), strict=True))
    check_eps_units(history.values, history.sensors, per)
    return history.values / e


@dataclass(frozen=True)
class Provenance:
    """What ``assemble_plan`` needs of a history when re-targeting without one."""

    sampling_interval_s: float
    data_fingerprint: str
    fit_start: np.datetime64 | None = None
    fit_end: np.datetime64 | None = None


def assemble_plan(
    source: SensorHistory | Provenance,
    params: PlanParameters,
    model: GaussianModel,
    selection: Selection,
    targets: np.ndarray,
    calibration: CalibrationInfo,
    backtest: BacktestResult | None,
    rows: int,
    horizon_rows: int,
    kept: tuple[int, ...] = (),
) -> BackupPlan:
    """The plan of ``selection``, fitted on the last ``rows`` of ``source``, to be used
    for ``horizon_rows`` rows; ``kept`` (indices) the sensors whose kept readings were
    measured within eps: a crash leaves those ``selection`` does not back up out of their
    windows (``kept_sensors``), and the plan remembers them all (``keepable_sensors``)."""
    backup = sorted(selection.backup)
    sensors = model.sensors_
    rebuilt = ~np.isin(np.arange(len(sensors)), backup)
    model_p = model_probability(selection.conditional_variance, params, sensors)
    if isinstance(source, Provenance):
        interval, fingerprint = source.sampling_interval_s, source.data_fingerprint
        fit = (source.fit_start, source.fit_end)
    else:
        interval, fingerprint = source.report.sampling_interval_s, source.fingerprint()
        fit = (source.times[-rows], source.times[-1]) if len(source.times) else (None, None)
    warning = params.unit_warning(sensors)
    return BackupPlan(
        parameters=params,
        sensors=sensors,
        backup_sensors=tuple(sensors[i] for i in backup),
        linear_map=model.linear_map(backup),
        conditional_variance=selection.conditional_variance,
        targets=targets,
        model_violation_probability=np.where(rebuilt, model_p, 0.0),
        calibration=calibration,
        backtest=backtest,
        sampling_interval_s=interval,
        data_fingerprint=fingerprint,
        history_rows=rows,
        model=model,
        fit_start=fit[0],
        fit_end=fit[1],
        warnings=(warning,) if warning else (),
        horizon_rows=horizon_rows,
        kept_sensors=tuple(sensors[i] for i in sorted(set(kept) - set(backup))),
        keepable_sensors=tuple(sensors[i] for i in sorted(set(kept))),
    )


def model_probability(
    variance: np.ndarray, params: PlanParameters, sensors: tuple[str, ...]
) -> np.ndarray:
    """Model-only miss probability per sensor, each against its own eps."""
    if not params.eps_by_sensor:
        return window_violation_probability(variance, params.eps, params.window, params.aggregate)
    e = params.eps_vector(sensors)  # scale-free: variance in eps units against eps = 1
    return window_violation_probability(variance / e**2, 1.0, params.window, params.aggregate)
