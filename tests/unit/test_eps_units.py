"""Per-sensor eps as planning in eps units: rescaling, equivalence and per-sensor scoring."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.data import load_history
from engine.live.spec import StreamSpec
from engine.live.status import StatusBoard
from engine.model import GaussianModel
from engine.planning import (
    BacktestSettings,
    PlanParameters,
    ViolationMonitor,
    make_plan,
    retarget,
    run_backtest,
)
from engine.planning.plan import eps_units
from engine.query import WindowQuery
from engine.windows import violation_rates

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"
SETTINGS = BacktestSettings(history=240, max_folds=8)


@pytest.fixture(scope="module")
def mixed():
    return load_history(SMALL)  # 6 TEMP (degC) and 6 PM2.5 (ug/m3) sensors


def _eps(history, temp: float, pm: float) -> tuple[tuple[str, float], ...]:
    return tuple((s, temp if s.endswith("_TEMP") else pm) for s in history.sensors)


def test_model_rescaled_equals_a_fit_on_scaled_readings() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 5)) @ rng.normal(size=(5, 5)) + rng.normal(size=5) * 10
    f = np.array([0.1, 1.0, 7.0, 300.0, 0.02])
    direct = GaussianModel().fit(x * f)
    converted = GaussianModel().fit(x).rescaled(f)
    np.testing.assert_allclose(converted.mean_, direct.mean_, rtol=1e-12)
    np.testing.assert_allclose(converted.cov_, direct.cov_, rtol=1e-10, atol=1e-14)
    obs = [3, 0]
    np.testing.assert_allclose(
        converted.conditional_variance(obs), direct.conditional_variance(obs), rtol=1e-9
    )
    want = direct.linear_map(obs)
    got = GaussianModel().fit(x).linear_map(obs).rescaled(f)
    np.testing.assert_allclose(got.coef, want.coef, rtol=1e-9)
    np.testing.assert_allclose(got.intercept, want.intercept, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.conditional_variance, want.conditional_variance, rtol=1e-9)
    # the rescaled map rebuilds the scaled readings as the direct one does
    np.testing.assert_allclose(got.apply((x * f)[:, obs]), want.apply((x * f)[:, obs]), rtol=1e-9)


def test_plan_with_eps_vector_is_the_plan_on_scaled_data(mixed) -> None:
    eps = _eps(mixed, 1.0, 15.0)
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=eps))
    plan = make_plan(mixed, params, backtest=SETTINGS)
    e = np.array([v for _, v in eps])
    scaled = replace(mixed, values=mixed.values / e)
    unit = make_plan(scaled, PlanParameters(WindowQuery(1.0, 0.05, 24)), backtest=SETTINGS)
    assert plan.backup_sensors == unit.backup_sensors
    assert plan.backtest.per_sensor == unit.backtest.per_sensor
    np.testing.assert_allclose(plan.conditional_variance, unit.conditional_variance * e**2)
    np.testing.assert_allclose(plan.targets, unit.targets * e**2)
    np.testing.assert_allclose(plan.model_violation_probability, unit.model_violation_probability)
    lm = plan.linear_map
    rebuilt = lm.apply(mixed.select(list(lm.backup)).values)
    np.testing.assert_allclose(
        rebuilt / e, unit.linear_map.apply(scaled.select(list(lm.backup)).values), rtol=1e-9
    )
    assert plan.data_fingerprint == mixed.fingerprint() != unit.data_fingerprint
    # the scaled plan shares one eps over two units (and says so); the real plan does not
    assert plan.warnings == () and len(unit.warnings) == 1
    assert plan.eps_per_sensor.tolist() == e.tolist()


def test_equal_per_sensor_eps_reproduce_the_single_eps_plan(mixed) -> None:
    # eps = 0.5, a power of two: dividing by it is exact in floating point, so the plan in
    # eps units sees exactly the scaled readings. (With 0.7 the rounding of the division
    # decides ties between the near-duplicate TEMP sensors in some backtest folds.)
    temps = mixed.select([s for s in mixed.sensors if s.endswith("_TEMP")])
    single = make_plan(temps, PlanParameters(WindowQuery(0.5, 0.05, 24)), backtest=SETTINGS)
    vec = PlanParameters(WindowQuery(5.0, 0.05, 24, eps_by_sensor=_eps(temps, 0.5, 0.5)))
    per = make_plan(temps, vec, backtest=SETTINGS)
    ignored = make_plan(temps, vec.with_query(eps_by_sensor=()), backtest=SETTINGS)
    assert ignored.backup_sensors != single.backup_sensors  # the per-sensor eps matter here
    assert per.backup_sensors == single.backup_sensors
    assert per.backtest.per_sensor == single.backtest.per_sensor
    # equal up to rounding (near-duplicate sensors make a few targets ill-conditioned)
    np.testing.assert_allclose(per.targets, single.targets, rtol=1e-4)
    np.testing.assert_allclose(per.linear_map.coef, single.linear_map.coef, rtol=1e-6)


def test_backtest_counts_each_sensor_against_its_own_eps(mixed) -> None:
    params = PlanParameters(
        WindowQuery(1.0, 0.05, 24, eps_by_sensor=_eps(mixed, 1.0, 15.0)), calibration="none"
    )
    x, spec = eps_units(mixed, params)
    got = run_backtest(x, mixed.sensors, spec, SETTINGS)
    # reference: plan each fold in the original units with the same backup set, and
    # count |error| > eps_i in those units
    e = params.eps_vector(mixed.sensors)
    from engine.planning import fold_origins, plan_on
    from engine.windows import window_errors

    viol = np.zeros(len(e), dtype=int)
    # each fold's plan is kept for the horizon (4 windows here) and all its windows scored
    step = spec.horizon_rows
    assert step == 96 and got.step == step
    for t in fold_origins(x.shape[0], 24, SETTINGS, step):
        fold = plan_on(x[t - 240 : t], mixed.sensors, spec)
        model = GaussianModel().fit(mixed.values[t - 240 : t], mixed.sensors)
        lm = model.linear_map(list(fold.selection.backup))
        test = mixed.values[t : t + step]
        err = window_errors(test, lm.apply(test[:, list(fold.selection.backup)]), 24, 24, "avg")
        rebuilt = ~np.isin(np.arange(len(e)), fold.selection.backup)
        viol += ((err > e) & rebuilt).sum(axis=0)
    assert [v for v, _, _ in got.per_sensor.values()] == viol.tolist()
    # with one eps of 1.0 for all, PM2.5 (tens of ug/m3) is rebuilt in fewer windows
    single = run_backtest(mixed.values, mixed.sensors, replace(spec, eps=1.0), SETTINGS)
    pm = [s for s in mixed.sensors if s.endswith("PM2.5")]
    assert sum(single.per_sensor[s][1] for s in pm) < sum(got.per_sensor[s][1] for s in pm)


def test_a_looser_eps_for_one_group_backs_up_fewer_of_it(mixed) -> None:
    base = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=_eps(mixed, 1.0, 2.0)))
    plan = make_plan(mixed, base, run_backtest_now=False)
    loose = retarget(plan, eps_by_sensor=_eps(mixed, 1.0, 200.0))
    pm = lambda p: [s for s in p.backup_sensors if s.endswith("PM2.5")]  # noqa: E731
    assert len(pm(loose)) < len(pm(plan))
    assert not loose.measured and loose.eps_per_sensor.max() == 200.0
    rebuilt = [plan.sensors.index(s) for s in loose.linear_map.targets]
    assert np.all(
        loose.conditional_variance[rebuilt] <= loose.targets[rebuilt] * (1 + 1e-9) + 1e-12
    )


def test_mixed_units_with_one_eps_warn_in_the_plan(mixed) -> None:
    plan = make_plan(mixed, PlanParameters(WindowQuery(1.0, 0.05, 24)), run_backtest_now=False)
    assert len(plan.warnings) == 1 and "2 units" in plan.warnings[0]
    per = retarget(plan, eps_by_sensor=_eps(mixed, 1.0, 20.0))
    assert per.warnings == ()


def test_scoring_with_an_eps_vector() -> None:
    errors = np.array([[0.5, 5.0, 0.5], [2.0, 50.0, 0.1]])
    eps = np.array([1.0, 10.0, 1.0])
    assert violation_rates(errors, eps).tolist() == [0.5, 0.5, 0.0]
    monitor = ViolationMonitor(("a", "b", "c"), eps, 0.05, min_windows=1)
    monitor.observe(errors, ["a", "b"])
    assert monitor.rates() == {"a": (1, 2), "b": (1, 2), "c": (0, 0)}
    scalar = ViolationMonitor(("a", "b", "c"), 1.0, 0.05, min_windows=1)
    scalar.observe(errors, ["a", "b"])
    assert scalar.rates()["b"] == (2, 2)
    with pytest.raises(Exception, match="eps"):
        ViolationMonitor(("a", "b", "c"), np.array([1.0, 0.0, 1.0]), 0.05)
    with pytest.raises(Exception, match="eps"):
        ViolationMonitor(("a", "b", "c"), np.array([1.0, 1.0]), 0.05)


def test_stream_spec_and_status_board_take_per_sensor_eps(mixed) -> None:
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=_eps(mixed, 1.0, 20.0)))
    plan = make_plan(mixed, params, run_backtest_now=False)
    spec = StreamSpec.from_plan(plan)
    assert spec.eps_vector.tolist() == plan.eps_per_sensor.tolist()
    assert StreamSpec.from_plan(retarget(plan, eps_by_sensor=())).query.eps_by_sensor == ()
    board = StatusBoard()
    n = len(spec.sensors)
    errors = np.full((1, n), 5.0)  # 5 degC misses, 5 ug/m3 does not
    board.record_shadow(errors, spec.sensors, spec.linear_map.targets, spec.eps_vector)
    misses = board.snapshot().shadow_violations
    for s in spec.linear_map.targets:
        assert misses[s] == (1 if s.endswith("_TEMP") else 0)


def test_live_replan_keeps_per_sensor_eps_and_counts_against_it(mixed) -> None:
    from engine.planning import ReplanningMonitor, widen_plan

    params = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=_eps(mixed, 1.0, 20.0)))
    plan = make_plan(mixed.rows(0, 500), params, run_backtest_now=False)
    applied: list = []
    live = ReplanningMonitor(
        plan,
        lambda: mixed.rows(400, 720),
        lambda p, kind, reason: applied.append(p),
        min_windows=5,
        run=lambda job: job(),  # the re-plan in this thread, so ``applied`` is filled below
    )
    assert live.monitor.eps.tolist() == plan.eps_per_sensor.tolist()
    wider = widen_plan(plan, mixed.rows(400, 720), np.full(len(mixed.sensors), 0.25))
    assert set(plan.backup_sensors) <= set(wider.backup_sensors)
    assert wider.eps_per_sensor.tolist() == plan.eps_per_sensor.tolist()
    # in the sensors' own units: each rebuilt sensor within its own (eps-scaled) target
    rebuilt = [wider.sensors.index(s) for s in wider.linear_map.targets]
    assert np.all(wider.conditional_variance[rebuilt] <= wider.targets[rebuilt] * (1 + 1e-9))
    # the same errors are a miss for a degC sensor and a hit for a PM2.5 sensor
    errors = np.full((10, len(mixed.sensors)), 5.0)
    alert = live.observe(errors, wider.linear_map.targets)
    assert alert is not None and alert.sensors
    assert all(s.endswith("_TEMP") for s in alert.sensors)
    assert applied and applied[0].eps_per_sensor.tolist() == plan.eps_per_sensor.tolist()


def test_scheduled_replan_plans_in_eps_units(mixed) -> None:
    from engine.planning.replan import fresh_plan

    params = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=_eps(mixed, 1.0, 20.0)))
    plan = make_plan(mixed.rows(0, 500), params, run_backtest_now=False)
    recent = mixed.rows(400, 720)
    fresh = fresh_plan(plan, recent)
    # the same plan make_plan gives on those rows (in eps units), not one with eps=1 for all
    # (the re-plan is made as the first plan was: its resolved horizon, backtested)
    want = make_plan(recent, params.with_query(horizon=plan.horizon_rows))
    assert fresh.backup_sensors == want.backup_sensors
    np.testing.assert_allclose(fresh.targets, want.targets, rtol=1e-9)
    assert fresh.eps_per_sensor.tolist() == plan.eps_per_sensor.tolist()
    assert fresh.horizon_rows == plan.horizon_rows > 0
    single = params.with_query(horizon=plan.horizon_rows, eps_by_sensor=())
    one_eps = make_plan(recent, single)
    assert fresh.backup_sensors != one_eps.backup_sensors


@pytest.mark.parametrize("way", ["make_plan", "eps_units", "fresh_plan"])
def test_an_eps_that_puts_readings_past_their_limit_is_refused_on_every_way_in(
    mixed, way: str
) -> None:
    """Readings in eps units square into the model's moments: a tiny per-sensor eps (from a
    saved config, the app or a re-plan, not only the CLI's ``--eps-by-unit``) overflowed
    them into a plan made of infinities. Every way in now says which eps is too small."""
    from engine.errors import ParameterError
    from engine.planning.replan import fresh_plan

    tiny = tuple((s, 1e-100 if s.endswith("_TEMP") else 20.0) for s in mixed.sensors)
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=tiny))
    with pytest.raises(ParameterError, match=r"eps of 1e-100 for sensor '.*_TEMP'.*1e\+60"):
        if way == "make_plan":
            make_plan(mixed.rows(0, 500), params, run_backtest_now=False)
        elif way == "eps_units":
            eps_units(mixed, params)
        else:
            ok = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=_eps(mixed, 1.0, 20.0)))
            plan = make_plan(mixed.rows(0, 500), ok, run_backtest_now=False)
            fresh_plan(replace(plan, parameters=params), mixed.rows(400, 720))


def test_the_live_monitor_of_a_sliding_plan_counts_its_disjoint_windows(mixed) -> None:
    """A window of 24 readings sliding by 6: the monitor's test counts a quarter of its
    windows as independent trials, as the backtest verdict does."""
    from engine.planning import ReplanningMonitor

    params = PlanParameters(
        WindowQuery(1.0, 0.05, 24, slide=6, eps_by_sensor=_eps(mixed, 1.0, 20.0))
    )
    plan = make_plan(mixed.rows(0, 500), params, run_backtest_now=False)
    live = ReplanningMonitor(plan, lambda: mixed.rows(400, 720), lambda p, k, r: None)
    assert live.monitor.share == 0.25


def test_a_rebuilt_sensors_sources_are_ranked_by_their_terms_spread(mixed) -> None:
    """|coef| alone ranks across units by accident (a PM2.5 term takes a small coefficient
    for a large spread): the sources are ranked by |coef| x the source's standard
    deviation, here from NumPy on the readings, and sources with coefficient 0 are left out."""
    plan = make_plan(mixed, PlanParameters(WindowQuery(1.0, 0.05, 24)), run_backtest_now=False)
    lm = plan.model.linear_map([0, 1, 6, 7])  # two TEMP and two PM2.5 sensors
    plan = replace(plan, linear_map=lm, backup_sensors=lm.backup)
    sd = dict(zip(mixed.sensors, np.nanstd(mixed.values, axis=0, ddof=1), strict=True))
    differs = 0
    for k, target in enumerate(lm.targets):
        row = lm.coef[k]
        spread = {b: abs(c) * sd[b] for b, c in zip(lm.backup, row, strict=True)}
        expected = sorted(lm.backup, key=lambda b: -spread[b])[:3]
        got = plan.sources(target, 3)
        assert [b for b, _ in got] == expected
        assert [c for _, c in got] == [row[lm.backup.index(b)] for b in expected]
        differs += expected != [lm.backup[i] for i in np.argsort(-np.abs(row))[:3]]
    assert differs >= 1  # the ranking is not the raw coefficients'
    zero = replace(lm, coef=np.where(np.arange(4) == 2, 0.0, lm.coef))
    assert "Aotizhongxin_PM2.5" not in [
        b for b, _ in replace(plan, linear_map=zero).sources(lm.targets[0], 4)
    ]
