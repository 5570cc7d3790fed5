"""Schema v3: the config states the failure the plan is calibrated for
(``parameters.exposure``: the rows one failure can lose; null for whole windows) and
both contracts' verdicts; v1 and v2 configs still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.data import load_history
from engine.errors import ConfigError, ParameterError
from engine.export import BackupConfig, load_config, plan_to_config, write_config
from engine.planning import BacktestSettings, PlanParameters, make_plan
from engine.query import WindowQuery

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"


@pytest.fixture(scope="module")
def history():
    h = load_history(SMALL)
    return h.select([s for s in h.sensors if s.endswith("_TEMP")])


@pytest.fixture(scope="module")
def crash_plan(history):
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, exposure=2), history=300)
    return make_plan(history, params, backtest=BacktestSettings(history=300, max_folds=3))


def test_a_crash_plan_states_its_exposure_and_both_contracts(crash_plan, tmp_path) -> None:
    config = plan_to_config(crash_plan)
    assert config["schema_version"] == 3
    assert config["parameters"]["exposure"] == 2
    g = config["guarantee"]
    assert g["contract"] == "crash" and g["exposure_rows"] == 2
    assert set(g["verdicts"]) == {"crash", "range"}
    assert "crash contract, 2 row(s) lost" in g["verdicts"]["crash"]
    assert g["verdict"] == g["verdicts"]["crash"]
    assert g["backtest"]["crash"]["exposure_rows"] == 2
    c = BackupConfig.from_dict(config)
    assert BackupConfig.from_dict(c.to_dict()) == c
    assert load_config(write_config(config, tmp_path / "p.yaml")) == c


def test_a_range_plan_writes_a_null_exposure(history) -> None:
    params = PlanParameters(WindowQuery(1.0, 0.05, 24), history=300)
    plan = make_plan(history, params, backtest=BacktestSettings(history=300, max_folds=2))
    config = plan_to_config(plan)
    assert config["parameters"]["exposure"] is None
    assert config["guarantee"]["contract"] == "range"
    assert config["guarantee"]["verdicts"]["crash"] is None
    assert config["guarantee"]["backtest"]["crash"] is None
    BackupConfig.from_dict(config)


@pytest.mark.parametrize(
    ("mutate", "word"),
    [
        (lambda c: c["parameters"].pop("exposure"), "exposure"),
        (lambda c: c["parameters"].update(exposure=0), "exposure"),
        (lambda c: c["parameters"].update(exposure="2"), "exposure"),
        (lambda c: c.update(schema_version=2), "Additional"),  # a v3 key under v2
    ],
)
def test_v3_loader_rejects_bad_exposures(crash_plan, mutate, word: str) -> None:
    config = json.loads(json.dumps(plan_to_config(crash_plan)))
    mutate(config)
    with pytest.raises(ConfigError, match=word):
        BackupConfig.from_dict(config)


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_exposure_must_be_a_whole_number_of_rows(bad) -> None:
    with pytest.raises(ParameterError, match="exposure"):
        PlanParameters(WindowQuery(1.0, 0.05, 24, exposure=bad))


def test_cli_plan_takes_exposure(tmp_path, capsys) -> None:
    out = tmp_path / "plan.json"
    argv = ["plan", "--data", str(SMALL), "--sensors", "*_TEMP", "--eps", "1", "--delta", "0.05"]
    argv += ["--window", "24", "--exposure", "2", "--max-folds", "2", "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["parameters"]["exposure"] == 2
    assert load_config(out).parameters["exposure"] == 2
    assert main([*argv[:-4], "--exposure", "0"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_cli_backtest_states_both_contracts(capsys) -> None:
    argv = ["backtest", "--data", str(SMALL), "--sensors", "*_TEMP", "--eps", "1"]
    argv += ["--delta", "0.05", "--window", "24", "--exposure", "3", "--max-folds", "2"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["crash"]["exposure_rows"] == 3
    assert out["crash"]["failure_positions_per_window"] == 24 + 3 - 1
    assert out["verdict"] == out["verdicts"]["crash"]
    assert out["verdicts"]["range"].startswith(("holds", "not enough evidence", "DOES NOT HOLD"))
    assert "crash contract" not in out["verdicts"]["range"]


def test_recover_says_the_range_contract_covers_what_it_rebuilds(crash_plan, tmp_path) -> None:
    """A rebuilt range is whole windows: the plan's range verdict, not its crash one."""
    from tests.helpers import run_engine

    config = plan_to_config(crash_plan)
    path = write_config(config, tmp_path / "plan.json")
    frame = load_history(SMALL).to_frame()[["time", *config["backup_sensors"]]]
    frame.to_csv(tmp_path / "backup.csv", index=False)
    args = ("--backup", str(tmp_path / "backup.csv"), "--out", str(tmp_path / "all.csv"))
    done = run_engine("recover", "--config", str(path), *args)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["contract"] == "range"
    range_verdict = config["guarantee"]["verdicts"]["range"]
    assert range_verdict != config["guarantee"]["verdicts"]["crash"]
    assert result["guarantee"].startswith("range contract (whole windows rebuilt")
    assert result["guarantee"].endswith(": " + range_verdict)
    assert "crash contract (2 rows lost, window state kept) does not cover" in result["guarantee"]
    # a v2 config's verdict is the range contract's, the only one it knew
    old = json.loads(json.dumps(config))
    old["schema_version"] = 2
    old["parameters"].pop("exposure")
    old.pop("seal")  # a v2 config was never sealed (v3 adds it)
    for key in ("contract", "exposure_rows", "verdicts"):
        old["guarantee"].pop(key)
    old["guarantee"]["verdict"] = range_verdict
    old["guarantee"]["backtest"].pop("crash")
    done = run_engine("recover", "--config", str(write_config(old, tmp_path / "v2.json")), *args)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["guarantee"] == (
        "range contract (whole windows rebuilt from the backup): " + range_verdict
    )
