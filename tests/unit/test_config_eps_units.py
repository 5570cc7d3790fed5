"""What the exported config says about eps and units is what the plan used: ``eps`` is
the one every sensor was planned at when they share one (``--eps-by-unit`` covering
them all), and the operator's unit corrections reach a re-plan (the production job's,
``BackupConfig.plan_parameters``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.data import load_history
from engine.export import BackupConfig, from_config, load_config, plan_to_config, to_config
from engine.planning import PlanParameters, make_plan
from engine.query import WindowQuery

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"
DRIFT = ROOT / "sample_data" / "synthetic_drift.csv"


@pytest.fixture(scope="module")
def drift():
    return load_history(DRIFT).rows(0, 800)


def test_the_config_writes_the_eps_every_sensor_shares(drift) -> None:
    sensors = drift.sensors
    uniform = WindowQuery(2.0, 0.05, 30, eps_by_sensor=tuple((s, 1.0) for s in sensors))
    plan = make_plan(drift, PlanParameters(uniform), run_backtest_now=False)
    p = plan_to_config(plan)["parameters"]
    assert p["eps"] == 1.0 and set(p["eps_by_sensor"].values()) == {1.0}
    back = BackupConfig.from_dict(plan_to_config(plan)).query
    assert back.eps == 1.0 and back.eps_by_sensor == ()  # a uniform map: one eps, as planned
    assert list(back.eps_vector(sensors)) == list(plan.eps_per_sensor)
    # per-sensor eps that differ: the default stays (the codec's round trip)
    mixed = tuple((s, 1.0 + (i % 2)) for i, s in enumerate(sensors))
    mixed_query = WindowQuery(2.0, 0.05, 30, eps_by_sensor=mixed)
    assert to_config(mixed_query, sensors)["parameters"]["eps"] == 2.0
    assert from_config(to_config(uniform, sensors)) == uniform


def test_plan_with_eps_by_unit_covering_every_sensor_writes_that_eps(tmp_path, capsys) -> None:
    out = tmp_path / "unit.json"
    code = main(["plan", "--data", str(SMALL), "--sensors", "*_TEMP,*_PM2.5", "--eps", "2",
                 "--eps-by-unit", "degC=1,ug/m3=1", "--delta", "0.05", "--window", "24",
                 "--no-backtest", "--out", str(out)])  # fmt: skip
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    written = json.loads(out.read_text())["parameters"]
    assert set(written["eps_by_sensor"].values()) == {1.0}
    assert written["eps"] == 1.0 and printed["parameters"]["eps"] == 1.0
    config = load_config(out)
    assert config.query.eps == 1.0 and set(config.eps_vector()) == {1.0}


def test_a_re_plan_keeps_the_operators_unit_corrections(drift) -> None:
    """Two sensors corrected to degC are exported as degC; a re-plan that read them as
    guessed (``unknown:s``) would lose the mixed-unit warning."""
    corrections = (("s00", "degC"), ("s01", "degC"))
    params = PlanParameters(WindowQuery(0.5, 0.05, 30), units=corrections)
    plan = make_plan(drift, params, run_backtest_now=False)
    config = BackupConfig.from_dict(plan_to_config(plan))
    assert config.parameters["units"]["s00"] == "degC"
    again = config.plan_parameters()
    assert again.units == corrections  # only the corrections, as the CLI and app hold them
    replanned = make_plan(drift, again, run_backtest_now=False)
    assert plan_to_config(replanned)["parameters"]["units"] == config.parameters["units"]
    assert replanned.warnings == plan.warnings and any("units" in w for w in plan.warnings)
