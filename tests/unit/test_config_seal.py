"""The seal of an exported config (``engine.export.seal``): an edit after export, however
consistent, is refused at load in one line naming the file; a config written before
seals, v1 and v2, still load; ``guarantee.contract`` agrees with ``parameters.exposure``."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.cli import main
from engine.data import load_history
from engine.errors import ConfigError
from engine.export import BackupConfig, load_config, plan_to_config, write_config
from engine.export.plan_book import JobPlan, plan_file
from engine.planning import PlanParameters, make_plan
from engine.query import WindowQuery
from tests.production_reference import sample_rows
from tests.production_reference import write_config as write_reference_config

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"
EDITED = "the plan was edited after it was exported (its seal does not match)"


@pytest.fixture(scope="module")
def history():
    h = load_history(SMALL)
    return h.select([s for s in h.sensors if s.endswith("_TEMP")])


@pytest.fixture(scope="module")
def config(history) -> dict[str, Any]:
    plan = make_plan(history, PlanParameters(WindowQuery(1.0, 0.05, 24)), run_backtest_now=False)
    assert len(plan.backup_sensors) >= 2  # a backup sensor can be removed and one left
    return plan_to_config(plan)


def fresh(config: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(config)


def drop_backup_sensor(c: dict[str, Any]) -> None:
    """A backup sensor removed from every section that names it, so the config stays
    internally consistent."""
    drop = c["backup_sensors"][0]
    c["sensors"].remove(drop)
    c["backup_sensors"].remove(drop)
    for entry in c["reconstruction"].values():
        entry["coefficients"].pop(drop)
    for key in ("eps_by_sensor", "units"):
        c["parameters"][key].pop(drop)


def move_validity_a_year(c: dict[str, Any]) -> None:
    for key in ("fit_end", "valid_until"):
        year = int(c["validity"][key][:4])
        c["validity"][key] = f"{year + 1}{c['validity'][key][4:]}"


def edit_eps(c: dict[str, Any]) -> None:
    c["parameters"]["eps"] = 5.0  # ignored under eps_by_sensor: it rebuilt as before


def edit_coefficient(c: dict[str, Any]) -> None:
    entry = next(iter(c["reconstruction"].values()))
    first = next(iter(entry["coefficients"]))
    entry["coefficients"][first] += 0.5


def to_max(c: dict[str, Any]) -> None:
    c["parameters"]["aggregate"] = "max"


TAMPERS: dict[str, Callable[[dict[str, Any]], None]] = {
    "backup_sensor_removed": drop_backup_sensor,
    "aggregate_avg_to_max": to_max,
    "fit_end_and_valid_until_moved": move_validity_a_year,
    "eps_edited_under_eps_by_sensor": edit_eps,
    "coefficient_edited": edit_coefficient,
}


def test_an_exported_config_is_sealed_and_verifies_as_json_and_yaml(config, tmp_path) -> None:
    assert config["seal"].startswith("sha256:") and len(config["seal"]) == 7 + 64
    loaded = [load_config(write_config(config, tmp_path / f"p{s}")) for s in (".json", ".yaml")]
    assert loaded[0] == loaded[1] == BackupConfig.from_dict(config)
    assert loaded[0].data["seal"] == config["seal"]
    # the same seal whatever the key order
    shuffled = dict(reversed(list(fresh(config).items())))
    (tmp_path / "r.json").write_text(json.dumps(shuffled))
    assert load_config(tmp_path / "r.json") == loaded[0]
    # a tool that writes a whole float as an integer (jq: 24.0 -> 24) edited nothing
    text = json.dumps(config)
    rewritten = text.replace('"delta": 0.05', '"delta": 0.050').replace(".0,", ",")
    assert rewritten != text
    (tmp_path / "jq.json").write_text(rewritten)
    assert load_config(tmp_path / "jq.json").data["seal"] == config["seal"]


@pytest.mark.parametrize("name", list(TAMPERS))
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_consistent_edit_after_export_is_refused_naming_the_file(
    config, tmp_path, name: str, suffix: str
) -> None:
    c = fresh(config)
    TAMPERS[name](c)
    BackupConfig.from_dict({k: v for k, v in c.items() if k != "seal"})  # consistent
    path = tmp_path / f"edited{suffix}"
    path.write_text(json.dumps(c) if suffix == ".json" else yaml.safe_dump(c))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"edited{suffix}: {EDITED}")
    assert "\n" not in str(err.value)


def test_a_specific_rule_speaks_before_the_seal(config) -> None:
    c = fresh(config)
    c["validity"]["valid_until"] = "2099-01-01T00:00:00Z"  # alone: the validity rule's
    with pytest.raises(ConfigError, match="valid_until = fit_end"):
        BackupConfig.from_dict(c)
    c = fresh(config)
    c["parameters"]["exposure"] = 3  # the contract still says range
    with pytest.raises(ConfigError, match="guarantee/contract must be 'crash'"):
        BackupConfig.from_dict(c)


def test_the_contract_must_follow_the_exposure_sealed_or_not(config) -> None:
    c = fresh(config)
    del c["seal"]
    c["parameters"]["exposure"] = 3
    with pytest.raises(ConfigError, match=r"guarantee/contract must be 'crash' .* got 'range'"):
        BackupConfig.from_dict(c)
    c["parameters"]["exposure"] = None
    c["guarantee"]["contract"] = "crash"
    with pytest.raises(ConfigError, match=r"guarantee/contract must be 'range' .* got 'crash'"):
        BackupConfig.from_dict(c)


def test_a_config_written_before_seals_and_v1_still_load(config, tmp_path) -> None:
    c = fresh(config)
    del c["seal"]
    (tmp_path / "old.json").write_text(json.dumps(c))
    assert load_config(tmp_path / "old.json").sensors == tuple(config["sensors"])
    write_reference_config(tmp_path / "v1.json", sample_rows(40))
    assert load_config(tmp_path / "v1.json").schema_version == 1


def test_a_seal_is_refused_under_v1_and_v2(config, tmp_path) -> None:
    c = fresh(config)
    c["schema_version"] = 2
    c["parameters"].pop("exposure")
    with pytest.raises(ConfigError, match="'seal' was unexpected"):
        BackupConfig.from_dict(c)
    write_reference_config(tmp_path / "v1.json", sample_rows(40))
    v1 = json.loads((tmp_path / "v1.json").read_text())
    v1["seal"] = config["seal"]
    with pytest.raises(ConfigError, match="'seal' was unexpected"):
        BackupConfig.from_dict(v1)


def test_an_edited_plan_book_version_is_refused(config, tmp_path) -> None:
    plan = JobPlan(1, 0, "initial", "test", BackupConfig.from_dict(config))
    record = json.loads(plan.to_bytes())
    assert JobPlan.from_bytes(plan.to_bytes(), "v000001.json").config == plan.config
    drop_backup_sensor(record["config"])
    where = str(tmp_path / plan_file(1))
    with pytest.raises(ConfigError, match=f"^{where}: the plan was edited"):
        JobPlan.from_bytes(json.dumps(record).encode(), where)


def test_recover_refuses_an_edited_config_in_one_line(config, tmp_path, capsys) -> None:
    c = fresh(config)
    drop_backup_sensor(c)
    path = tmp_path / "prod_plan.json"
    path.write_text(json.dumps(c))
    backup = tmp_path / "b.csv"
    backup.write_text("time,a\n2020-01-01,1\n2020-01-02,2\n")
    code = main(["recover", "--config", str(path), "--backup", str(backup),
                 "--out", str(tmp_path / "o.csv")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [f"error: prod_plan.json: {EDITED}; re-plan, or use the "
                                        "exported file unchanged"]  # fmt: skip
