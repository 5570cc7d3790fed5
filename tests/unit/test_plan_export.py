"""Plans, the exported config (schema v3; v1 and v2 still load) and offline recovery from it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine.data import load_history
from engine.errors import ConfigError, ParameterError
from engine.export import (
    BackupConfig,
    dump_config,
    load_config,
    plan_to_config,
    recover_file,
    validate_config,
    write_config,
)
from engine.planning import BacktestSettings, PlanParameters, make_plan, retarget
from engine.query import WindowQuery

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"
TOP_KEYS = {
    "schema_version",
    "created_at",
    "data_fingerprint",
    "parameters",
    "sensors",
    "backup_sensors",
    "reconstruction",
    "guarantee",
    "savings",
    "production",
    "validity",  # added by schema v2
    "seal",  # engine.export.seal: an edit after export is refused
}


@pytest.fixture(scope="module")
def temps():
    history = load_history(SMALL)
    return history.select([s for s in history.sensors if s.endswith("_TEMP")])


@pytest.fixture(scope="module")
def plan(temps):
    params = PlanParameters(WindowQuery(1.0, 0.05, 24))
    return make_plan(temps, params, backtest=BacktestSettings(history=240, max_folds=12))


def test_plan_is_measured_and_consistent(plan, temps) -> None:
    # Folds start where calibration can measure (a first fit of one horizon, 96 rows, plus
    # one scored horizon) and keep each plan for the default horizon (4 windows = 96 rows):
    # origins 192, 288, ..., 576 on 720 rows; the history=240 given is not used for folds.
    assert plan.measured and plan.backtest.n_folds == 5
    assert plan.horizon_rows == 96 and plan.warnings == ()
    assert set(plan.backup_sensors) <= set(temps.sensors)
    assert 0 < len(plan.backup_sensors) < len(temps.sensors)
    rebuilt = [temps.sensors.index(s) for s in plan.linear_map.targets]
    assert np.all(plan.conditional_variance[rebuilt] <= plan.targets[rebuilt] * (1 + 1e-9) + 1e-12)
    assert plan.savings().fraction_saved == pytest.approx(1 - plan.backup_fraction)
    assert plan.calibration.method == "backtest"


def test_retarget_is_unmeasured_and_monotone(plan) -> None:
    loose, tight = retarget(plan, eps=4.0), retarget(plan, eps=0.25)
    assert not loose.measured and not tight.measured
    assert len(loose.backup_sensors) <= len(plan.backup_sensors) <= len(tight.backup_sensors)


def test_config_has_the_fixed_keys_and_round_trips(plan, tmp_path: Path) -> None:
    config = plan_to_config(plan)
    assert set(config) == TOP_KEYS
    assert set(config["reconstruction"]) == set(plan.sensors) - set(plan.backup_sensors)
    assert config["guarantee"]["backtest"]["n_folds"] == 5
    c = BackupConfig.from_dict(config)
    assert BackupConfig.from_dict(c.to_dict()) == c
    for suffix in (".json", ".yaml"):
        path = write_config(config, tmp_path / f"plan{suffix}")
        assert load_config(path) == c
    assert yaml.safe_load(dump_config(config, "yaml")) == json.loads(dump_config(config, "json"))


def test_loader_rejects_unknown_keys_and_inconsistent_maps(plan) -> None:
    config = plan_to_config(plan)
    with pytest.raises(ConfigError, match="extra"):
        validate_config({**config, "extra": 1})
    broken = json.loads(json.dumps(config))
    broken["reconstruction"].pop(next(iter(broken["reconstruction"])))
    with pytest.raises(ConfigError, match="missing"):
        validate_config(broken)
    broken = json.loads(json.dumps(config))
    broken["parameters"]["delta"] = 1.5
    with pytest.raises(ConfigError, match="parameters/delta"):
        validate_config(broken)


def test_recover_from_config_and_backup_columns_only(plan, temps, tmp_path: Path) -> None:
    config_path = write_config(plan_to_config(plan), tmp_path / "plan.json")
    frame = temps.to_frame()
    backup_file = tmp_path / "backup.csv"
    frame[["time", *plan.backup_sensors]].to_csv(backup_file, index=False)
    result = recover_file(config_path, backup_file, tmp_path / "all.csv")
    assert result.rebuilt_sensors == len(plan.sensors) - len(plan.backup_sensors)
    rebuilt = load_history(tmp_path / "all.csv")
    assert rebuilt.sensors == plan.sensors
    # backed-up sensors come back exactly; the rest equal the plan's own linear map
    expected = plan.linear_map.apply(temps.select(list(plan.backup_sensors)).values)
    np.testing.assert_allclose(rebuilt.values, expected, rtol=1e-9, atol=1e-9)


def test_recover_names_a_missing_backup_column(plan, temps, tmp_path: Path) -> None:
    config_path = write_config(plan_to_config(plan), tmp_path / "plan.json")
    frame = temps.to_frame()
    keep = [s for s in temps.sensors if s != plan.backup_sensors[0]]
    frame[["time", *keep]].to_csv(tmp_path / "partial.csv", index=False)
    with pytest.raises(ConfigError, match=plan.backup_sensors[0]):
        recover_file(config_path, tmp_path / "partial.csv", tmp_path / "out.csv")


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"eps": 0.0}, "eps"),
        ({"eps": float("nan")}, "eps"),
        ({"delta": 1.0}, "delta"),
        ({"window": 0}, "window"),
        ({"slide": 30}, "slide"),
        ({"aggregate": "median"}, "aggregate"),
        ({"method": "magic"}, "method"),
        ({"calibration": "vibes"}, "calibration"),
    ],
)
def test_parameters_validate_themselves(kwargs: dict, word: str) -> None:
    base = {"eps": 1.0, "delta": 0.05, "window": 24}
    with pytest.raises(ParameterError, match=word):
        PlanParameters.from_dict({**base, **kwargs})


def test_a_plan_no_backtest_fold_can_measure_backs_up_every_sensor(temps) -> None:
    """The guarantee shown is backed by a measurement of the plan over its
    horizon. 250 rows let calibration score a horizon (192 rows needed) but hold no
    backtest fold (192 + 96): the calibrated plan would rebuild sensors on its own word."""
    short = temps.rows(0, 250)
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, horizon=96))
    plan = make_plan(short, params)
    assert plan.backtest is not None and plan.backtest.n_folds == 0
    assert set(plan.backup_sensors) == set(temps.sensors)
    assert plan.calibration.method == "unmeasured"
    assert any("one backtest fold needs 288" in w for w in plan.warnings)
    # the rows a fold needs do not shrink with the file: calibration's rows are not
    # capped at what the file holds (190 rows said 286, and 250 rows then 288)
    shorter = make_plan(temps.rows(0, 190), params)
    assert any("one backtest fold needs 288" in w for w in shorter.warnings), shorter.warnings
    # what it could not measure is null in its config, which validates as written: the
    # app's Export refused it over a NaN while the CLI wrote it
    config = plan_to_config(plan)
    validate_config(config)
    assert config["guarantee"]["backtest"]["violation_rate_worst_sensor_all_windows"] is None
    assert json.loads(json.dumps(config, allow_nan=False)) == config
    # the same history without the backtest (the UI's instant preview) is calibrated
    preview = make_plan(short, params, run_backtest_now=False)
    assert preview.calibration.method == "backtest"
    assert len(preview.backup_sensors) < len(temps.sensors)


def test_every_non_finite_number_is_written_as_null_at_any_depth():
    from engine.export import json_safe

    nan = float("nan")
    value = {"a": [1.0, nan, (np.float64("inf"), "s", 2)], "b": {"c": -np.inf, "d": True}, "e": nan}
    assert json_safe(value) == {"a": [1.0, None, [None, "s", 2]], "b": {"c": None, "d": True},
                                "e": None}  # fmt: skip
