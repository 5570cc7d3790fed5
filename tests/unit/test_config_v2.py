"""Schema v2: the config states its time (fit period, horizon, valid_until) and each
sensor's eps and unit; v1 configs still load; recover warns outside the validity."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.cli import main, parse_eps_by_unit
from engine.data import load_history
from engine.errors import ConfigError, ParameterError
from engine.export import (
    BackupConfig,
    load_config,
    parse_utc,
    plan_to_config,
    validate_config,
    write_config,
)
from engine.planning import BacktestSettings, PlanParameters, make_plan, retarget
from engine.query import WindowQuery

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"


@pytest.fixture(scope="module")
def mixed():
    return load_history(SMALL)


@pytest.fixture(scope="module")
def plan(mixed):
    eps = tuple((s, 1.0 if s.endswith("_TEMP") else 20.0) for s in mixed.sensors)
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=eps), history=300)
    return make_plan(mixed, params, backtest=BacktestSettings(history=300, max_folds=4))


def _as_v2(config: dict) -> dict:
    old = json.loads(json.dumps(config))
    old["schema_version"] = 2
    old["parameters"].pop("exposure")
    old.pop("seal")  # a v2 config was never sealed (v3 adds it)
    return old


def _as_v1(config: dict) -> dict:
    old = _as_v2(config)
    old["schema_version"] = 1
    old.pop("validity")
    for key in ("eps_by_sensor", "units"):
        old["parameters"].pop(key)
    return old


def test_validity_is_the_fit_period_plus_the_horizon(plan, mixed) -> None:
    v = plan_to_config(plan)["validity"]
    assert parse_utc(v["fit_start"]) == mixed.times[-300]
    assert parse_utc(v["fit_end"]) == mixed.times[-1]
    # the plan's resolved horizon: about one day of whole windows, at least 4 windows
    # (hourly readings, window 24: 4 windows = 96 rows), the rows the backtest stepped by
    assert v["horizon_rows"] == plan.horizon_rows == plan.backtest.step == 96
    assert v["horizon_seconds"] == 96 * 3600.0
    assert parse_utc(v["valid_until"]) - mixed.times[-1] == np.timedelta64(96, "h")
    # the export reads the plan's horizon, not the window or a constant
    shorter = plan_to_config(replace(plan, horizon_rows=30))["validity"]
    assert parse_utc(shorter["valid_until"]) - mixed.times[-1] == np.timedelta64(30, "h")
    assert v["fit_end"].endswith("Z")


def test_v2_round_trips_and_carries_each_sensors_eps_and_unit(plan, tmp_path: Path) -> None:
    config = _as_v2(plan_to_config(plan))
    c = BackupConfig.from_dict(config)
    assert BackupConfig.from_dict(c.to_dict()) == c
    assert load_config(write_config(config, tmp_path / "p.yaml")) == c
    assert c.eps_vector().tolist() == plan.eps_per_sensor.tolist()
    units = config["parameters"]["units"]
    assert {units[s] for s in plan.sensors} == {"degC", "ug/m3"}
    assert c.validity == config["validity"]


def test_v1_still_loads_and_says_it_has_no_validity(plan) -> None:
    old = BackupConfig.from_dict(_as_v1(plan_to_config(plan)))
    assert old.schema_version == 1 and old.validity is None
    assert old.eps_vector().tolist() == [1.0] * len(plan.sensors)
    np.testing.assert_allclose(old.linear_map().coef, plan.linear_map.coef)


@pytest.mark.parametrize(
    ("mutate", "word"),
    [
        (lambda c: c.pop("validity"), "validity"),
        (lambda c: c["parameters"]["eps_by_sensor"].popitem(), "eps_by_sensor"),
        (lambda c: c["parameters"]["eps_by_sensor"].update(x=1.0), "eps_by_sensor"),
        (lambda c: c["validity"].update(valid_until="2000-01-01T00:00:00Z"), "valid_until"),
        (lambda c: c["validity"].update(fit_end="yesterday"), "fit_end"),
        (lambda c: c.update(schema_version=4), "schema_version"),
        (lambda c: c.update(schema_version=1), "Additional"),  # v2 keys under v1
        # a stretched validity went unsaid (and the job would never re-plan)
        (lambda c: c["validity"].update(valid_until="2200-01-01T00:00:00Z"), "fit_end \\+"),
        (lambda c: c["validity"].update(horizon_seconds=1.0), "horizon_seconds"),
        # what a re-plan and recover read: refused at load, not at the first re-plan
        (lambda c: c["guarantee"].pop("history_rows"), "history_rows"),
        (lambda c: c["guarantee"].update(history_rows="abc"), "history_rows"),
        (lambda c: c["guarantee"].update(history_rows=-5), "history_rows"),
        (lambda c: c["guarantee"].update(verdicts=["holds"]), "verdicts"),
        (lambda c: c["guarantee"]["calibration"].update(method="bogus"), "calibration/method"),
        (lambda c: c.update(sensors=["time", *c["sensors"][1:]]), "'time'"),
        # the job's time arithmetic: an empty error line from Spark, or none at all
        (lambda c: c["parameters"].update(sampling_interval_s=1e-300), "microsecond"),
        (lambda c: c["parameters"].update(window=10**30), "at most"),
    ],
)
def test_v2_loader_rejects_bad_configs(plan, mutate, word: str) -> None:
    config = _as_v2(plan_to_config(plan))
    mutate(config)
    with pytest.raises(ConfigError, match=word):
        validate_config(config)


def test_retargeted_plan_keeps_its_fit_period(plan) -> None:
    other = retarget(plan, eps=2.0)
    assert (other.fit_start, other.fit_end) == (plan.fit_start, plan.fit_end)


def _backup_file(mixed, plan, rows: slice, shift: pd.Timedelta, path: Path) -> Path:
    frame = mixed.to_frame().iloc[rows]
    frame = frame.assign(time=frame["time"] + shift)[["time", *plan.backup_sensors]]
    frame.to_csv(path, index=False)
    return path


def _recover(config: Path, backup: Path, out: Path, capsys) -> tuple[int, list[str]]:
    code = main(["recover", "--config", str(config), "--backup", str(backup), "--out", str(out)])
    return code, capsys.readouterr().err.strip().splitlines()


def test_recover_warns_once_outside_the_validity(plan, mixed, tmp_path: Path, capsys) -> None:
    config = write_config(plan_to_config(plan), tmp_path / "plan.json")
    out = tmp_path / "all.csv"
    # the 24 hours after fit_end: inside the validity, no warning
    inside = _backup_file(mixed, plan, slice(-24, None), pd.Timedelta(hours=24), tmp_path / "a.csv")
    assert _recover(config, inside, out, capsys) == (0, [])
    # two days after the horizon (96 h) ends: one warning line naming the spans, exit 0,
    # output written
    assert plan.horizon_rows == 96
    late = _backup_file(
        mixed, plan, slice(-24, None), pd.Timedelta(hours=96 + 48), tmp_path / "b.csv"
    )
    code, lines = _recover(config, late, out, capsys)
    assert code == 0 and len(lines) == 1 and out.exists()
    assert lines[0].startswith("warning: the backup spans ")
    assert "outside the plan's validity" in lines[0]
    # the fit period itself is before fit_end: also outside (the sample's gaps in the
    # backup sensors are said on a line of their own)
    code, lines = _recover(config, SMALL, out, capsys)
    assert code == 0 and [ln for ln in lines if "validity" in ln] == lines[:1]
    assert "outside" in lines[0] and all("has no reading" in ln for ln in lines[1:])


def test_recover_with_a_v1_config_says_it_cannot_check(plan, tmp_path: Path, capsys) -> None:
    config = tmp_path / "v1.json"
    config.write_text(json.dumps(_as_v1(plan_to_config(plan))))
    code, lines = _recover(config, SMALL, tmp_path / "all.csv", capsys)
    assert code == 0 and [ln for ln in lines if "validity" in ln] == lines[:1]
    assert "states no validity" in lines[0]


def test_eps_by_unit_flag(tmp_path: Path, capsys) -> None:
    assert parse_eps_by_unit("degC=1, ug/m3=20") == {"degC": 1.0, "ug/m3": 20.0}
    for bad in ("degC", "degC=0", "degC=x", "=1"):
        with pytest.raises(ParameterError, match="eps-by-unit"):
            parse_eps_by_unit(bad)
    out = tmp_path / "plan.json"
    args = ["plan", "--data", str(SMALL), "--eps", "1", "--delta", "0.05", "--window", "24"]
    code = main([*args, "--no-backtest", "--eps-by-unit", "ug/m3=20", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "warning" not in capsys.readouterr().err
    eps = json.loads(out.read_text())["parameters"]["eps_by_sensor"]
    assert {e for s, e in eps.items() if s.endswith("PM2.5")} == {20.0}
    assert {e for s, e in eps.items() if s.endswith("TEMP")} == {1.0}
    # one eps over degC and ug/m3: one warning line, the plan is still made
    assert main([*args, "--no-backtest"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert [line for line in err if line.startswith("warning:")] == [
        line for line in err if "2 units" in line
    ] and len(err) >= 1
    assert main([*args, "--no-backtest", "--eps-by-unit", "hPa=1"]) == 2
    assert "hPa" in capsys.readouterr().err
