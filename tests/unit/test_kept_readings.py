"""Kept readings: under the crash contract a max/min window can leave a crash's lost
readings of a sensor out and take the extreme of the readings it kept. Scored against a
brute force, chosen by calibration only where measured within eps, carried by the plan
and its config, and scored so by the backtest."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import engine.planning.calibration as C
import engine.planning.scores as S
from engine.aggregates import leave_out
from engine.data.history import DataReport, SensorHistory
from engine.errors import ConfigError, ParameterError
from engine.export import BackupConfig, plan_to_config
from engine.export.seal import seal_config
from engine.model import GaussianModel
from engine.planning import PlanParameters, make_plan, retarget
from engine.planning.reselect import pin_backups
from engine.query import WindowQuery


def brute_kept_errors(x: np.ndarray, window: int, exposure: int, sign: float) -> np.ndarray:
    """(W * K, n) |extreme of the window - extreme of the rows a failure did not lose|."""
    out = []
    for a in range(x.shape[0] - window + 1):
        w = sign * x[a : a + window]
        for d in range(1 - exposure, window):
            keep = [r for r in range(window) if not d <= r < d + exposure]
            out.append(np.abs(w.max(axis=0) - w[keep].max(axis=0)))
    return np.array(out)


@pytest.mark.parametrize(("aggregate", "sign"), [("max", 1.0), ("min", -1.0)])
@pytest.mark.parametrize("exposure", [1, 3, 7])
def test_kept_scores_are_the_extreme_of_the_kept_readings(
    aggregate: str, sign: float, exposure: int
) -> None:
    x = np.random.default_rng(exposure).normal(size=(40, 3))
    spec = C.PlanningSpec(1.0, 0.05, 8, 8, aggregate, exposure=exposure)
    got = S.kept_scores(x, spec)
    np.testing.assert_allclose(got, brute_kept_errors(x, 8, exposure, sign), atol=1e-12)


def test_only_a_crash_plan_for_max_or_min_with_exposure_under_the_window_keeps_readings() -> None:
    base = C.PlanningSpec(1.0, 0.05, 8, 8, "max", exposure=2)
    assert base.keeps_readings
    assert not replace(base, aggregate="avg").keeps_readings
    assert not replace(base, aggregate="sum").keeps_readings
    assert not replace(base, exposure=None).keeps_readings
    assert not replace(base, exposure=8).keeps_readings  # a window can lose every reading
    with pytest.raises(ParameterError, match="every reading"):
        leave_out(np.zeros((4, 2)), [0], "avg")
    filled = leave_out(np.zeros((4, 2)), [1], "min")
    assert np.all(filled[:, 1] == np.inf) and np.all(filled[:, 0] == 0)


def _history(x: np.ndarray) -> SensorHistory:
    sensors = tuple(f"s{i}" for i in range(x.shape[1]))
    times = np.datetime64("2024-01-01T00:00", "ns") + np.arange(x.shape[0]) * np.timedelta64(
        3600, "s"
    )
    report = DataReport("synthetic", "wide", "time", x.shape[0], x.shape[0], sensors, 3600.0,
                        0, 0, dict.fromkeys(sensors, 0.0), (), (), "drop", 0, 0, ())  # fmt: skip
    return SensorHistory(times, x, sensors, report)


def _smooth_and_spiky(rows: int, seed: int) -> np.ndarray:
    """s0, s1: slow daily curves (a window's max is never far above its neighbours), weakly
    related to each other; s2: one of them plus noise; s3: white noise with spikes (a lost
    reading often holds the window's max, far above the rest)."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    a = 5 * np.sin(2 * np.pi * t / 24) + np.cumsum(rng.normal(0, 0.05, rows))
    b = 5 * np.sin(2 * np.pi * (t + 7) / 24) + np.cumsum(rng.normal(0, 0.05, rows))
    spikes = rng.normal(0, 0.5, rows) + 6 * (rng.random(rows) < 0.05)
    return np.column_stack([a, b, a + rng.normal(0, 0.8, rows), spikes])


def test_a_crash_plan_for_max_keeps_the_smooth_sensors_and_backs_up_the_spiky_one() -> None:
    x = _smooth_and_spiky(1400, 5)
    query = WindowQuery(1.0, 0.05, 24, aggregate="max", horizon=168, exposure=2)
    plan = make_plan(_history(x), PlanParameters(query))
    assert {"s0", "s1"} <= set(plan.kept_sensors)
    assert "s3" not in plan.kept_sensors
    assert not set(plan.kept_sensors) & set(plan.backup_sensors)
    assert "keep their readings under a crash" in plan.calibration.reason
    # The backtest scores the crash contract with the rule the plan states: its kept
    # sensors' miss rates are those of their kept readings, within delta here.
    crash = plan.backtest.crash
    for s in plan.kept_sensors:
        misses, triples = crash.per_sensor[s]
        assert triples > 0 and misses / triples <= 0.05
    # The same history planned for whole windows, or for avg, keeps nothing.
    whole = make_plan(_history(x), PlanParameters(replace(query, exposure=None)))
    assert whole.kept_sensors == ()
    avg = make_plan(_history(x), PlanParameters(replace(query, aggregate="avg")))
    assert avg.kept_sensors == ()


def test_the_backtest_scores_a_folds_kept_sensors_by_their_kept_readings() -> None:
    """A fold's kept sensors are scored by their kept readings (brute force), the others
    as rebuilt from the backup."""
    import engine.planning.backtest as B

    x = _smooth_and_spiky(700, 6)
    names = ("s0", "s1", "s2", "s3")
    spec = C.PlanningSpec(1.0, 0.05, 24, 24, "max", horizon=168, exposure=2)
    fold = C.plan_on(x[:500], names, spec)
    # Nothing backed up and a model whose means of s0 and s1 are 10 too high: a rebuild
    # overshoots every window's max; left out, the lost readings cannot.
    stale = GaussianModel().fit(x[:500] + np.array([10.0, 10.0, 0.0, 0.0]), names)
    fold = replace(fold, model=stale, kept=(0, 1), selection=replace(fold.selection, backup=()))
    got = B._score_fold_crash(x, 500, 168, fold, spec, 2)  # (W, K, n) misses
    windows = 168 // 24
    brute = brute_kept_errors(x[500:668], 24, 2, 1.0).reshape(168 - 24 + 1, 25, 4)
    expected = brute[::24][:windows] > 1.0
    np.testing.assert_array_equal(got[..., :2], expected[..., :2])
    plain = B._score_fold_crash(x, 500, 168, replace(fold, kept=()), spec, 2)
    np.testing.assert_array_equal(got[..., 2:], plain[..., 2:])
    assert plain[..., :2].mean() > 0.2 > got[..., :2].mean()  # the rule is what saves them


def test_the_config_carries_kept_readings_and_refuses_wrong_ones() -> None:
    x = _smooth_and_spiky(1400, 5)
    query = WindowQuery(1.0, 0.05, 24, aggregate="max", horizon=168, exposure=2)
    plan = make_plan(_history(x), PlanParameters(query))
    data = plan_to_config(plan)
    assert data["kept_readings"] == list(plan.kept_sensors)
    assert BackupConfig.from_dict(data).kept_readings == plan.kept_sensors
    backed = dict(data, kept_readings=[*data["kept_readings"], data["backup_sensors"][0]])
    with pytest.raises(ConfigError, match="not backed up"):
        BackupConfig.from_dict(backed)
    as_avg = dict(data, parameters=dict(data["parameters"], aggregate="avg"))
    with pytest.raises(ConfigError, match="max and min plans only"):
        BackupConfig.from_dict(as_avg)
    none = make_plan(_history(x), PlanParameters(replace(query, exposure=None)))
    assert "kept_readings" not in plan_to_config(none)  # absent: none, as before
    # what the Export page says of it: the kept sensors are not "rebuilt from" the backup
    from ui.exporting import summary_text

    n, k = len(data["sensors"]), len(data["kept_readings"])
    line = summary_text(data, "lacuna_backup.json")
    assert f"{k} keep their readings under a crash" in line and f"{n} sensors" in line
    # every sensor backed up: nothing is rebuilt, and the line does not say it is
    assert summary_text(plan_to_config(none), "x.json").endswith("4 sensors, 4 backed up.")
    # recover states the range verdict; a crash config without one says so, never its
    # crash verdict in its place
    from engine.export.recover import range_guarantee

    guarantee = dict(data["guarantee"])
    guarantee.pop("verdicts", None)
    bare = BackupConfig.from_dict(seal_config(dict(data, guarantee=guarantee)))
    assert range_guarantee(bare).endswith("not measured: the config states no range verdict")


def test_a_smaller_eps_does_not_keep_what_was_measured_at_a_larger_one() -> None:
    x = _smooth_and_spiky(1400, 5)
    query = WindowQuery(1.0, 0.05, 24, aggregate="max", horizon=168, exposure=2)
    plan = make_plan(_history(x), PlanParameters(query))
    assert plan.kept_sensors
    assert retarget(plan, eps=2.0).kept_sensors == plan.kept_sensors
    tighter = retarget(plan, eps=0.5)
    assert tighter.kept_sensors == ()


def test_the_shadow_check_scores_kept_sensors_by_their_kept_readings() -> None:
    """The controller's feedback under a crash plan: a kept sensor's miss is that of its
    kept readings (a rebuild 10 too high would overshoot every window), a rebuilt one's
    that of its rebuild; a range contract ignores the rule."""
    from engine.planning.feedback import shadow_feedback

    rng = np.random.default_rng(8)
    truth = np.cumsum(rng.normal(0, 0.05, size=(40, 2)), axis=0)
    recovered = truth + 10.0
    backed = np.zeros((40, 2), bool)
    args = {"window": 10, "slide": 10, "aggregate": "max", "eps": np.ones(2)}
    kept = np.array([True, False])
    crash = shadow_feedback(np.arange(4), truth, recovered, backed, exposure=2, kept=kept, **args)
    assert all(f.miss[0] == 0.0 and f.miss[1] > 0.5 for f in crash)
    plain = shadow_feedback(np.arange(4), truth, recovered, backed, exposure=2, **args)
    assert all(f.miss[0] > 0.5 for f in plain)
    whole = shadow_feedback(
        np.arange(4), truth, recovered, backed, exposure=None, kept=kept, **args
    )
    assert all(f.miss[0] == 1.0 for f in whole)


def test_the_plan_table_says_which_sensors_keep_their_readings() -> None:
    from ui.plans import backup_table

    x = _smooth_and_spiky(1400, 5)
    query = WindowQuery(1.0, 0.05, 24, aggregate="max", horizon=168, exposure=2)
    plan = make_plan(_history(x), PlanParameters(query))
    status = {row["sensor"]: row["status"] for row in backup_table(plan)}
    for s in plan.sensors:
        want = (
            "backed up"
            if s in plan.backup_sensors
            else "kept readings under a crash, else reconstructed"
            if s in plan.kept_sensors
            else "reconstructed"
        )
        assert status[s] == want
    assert "kept readings under a crash, else reconstructed" in status.values()


def test_a_crash_plans_table_shows_its_own_contracts_backtest_rates() -> None:
    """Beside a kept sensor the table shows what the crash backtest measured for it (each
    window counting its missed share of failure positions), not whole-window misses."""
    from ui.plans import backup_table

    x = _smooth_and_spiky(1400, 5)
    query = WindowQuery(1.0, 0.05, 24, aggregate="max", horizon=168, exposure=2)
    plan = make_plan(_history(x), PlanParameters(query))
    crash = plan.backtest.crash
    rows = {row["sensor"]: row for row in backup_table(plan)}
    for s, (missed, triples) in crash.per_sensor.items():
        windows = triples // crash.positions
        rate = rows[s]["backtest miss rate (rebuilt windows)"]
        assert rate == (missed / crash.positions / windows if windows else None)
        shares = f"{missed / crash.positions:.2f} / {windows}"
        assert rows[s]["backtest misses / rebuilt windows"] == shares
    kept = plan.kept_sensors[0]
    whole_misses, rebuilt, _ = plan.backtest.per_sensor[kept]
    assert whole_misses / rebuilt > rows[kept]["backtest miss rate (rebuilt windows)"]


def test_a_kept_sensor_backed_up_for_a_while_keeps_its_readings_once_released() -> None:
    """Online control backs a kept sensor up, then releases it: its kept readings were
    measured within eps, so a crash leaves them out again (it was rebuilt for good)."""
    from engine.planning.steering import backup_indices, with_backup

    x = _smooth_and_spiky(1400, 5)
    query = WindowQuery(1.0, 0.05, 24, aggregate="max", horizon=168, exposure=2)
    plan = make_plan(_history(x), PlanParameters(query))
    kept = plan.kept_sensors[0]
    base = backup_indices(plan)
    held = with_backup(plan, (*base, plan.sensors.index(kept)))
    assert kept in held.backup_sensors and kept not in held.kept_sensors
    assert kept in held.keepable and kept not in plan_to_config(held)["kept_readings"]
    released = with_backup(held, base)
    assert released.kept_sensors == plan.kept_sensors
    assert plan_to_config(released)["kept_readings"] == list(plan.kept_sensors)
    # and a pinned sensor stays eligible the same way
    pinned = pin_backups(plan, [kept], "measured failing")
    assert kept not in pinned.kept_sensors and kept in pinned.keepable


def test_a_reason_says_how_many_names_it_left_out() -> None:
    from engine.errors import named

    assert named(list("abcdef")) == "a, b, c, d, e and 1 more"
    assert named(list("abc")) == "a, b, c"
