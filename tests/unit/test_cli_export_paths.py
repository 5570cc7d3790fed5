"""``plan --out`` names the file it writes in the config's production snippets (the run
command and the backup script's docstring), not the default ``plan.json``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.cli import main

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"
ARGS = ["plan", "--data", str(SMALL), "--sensors", "*_TEMP", "--eps", "1", "--delta", "0.05",
        "--window", "24", "--no-backtest"]  # fmt: skip


@pytest.mark.parametrize("name", ["prod_plan.yaml", "prod plan.json"])
def test_the_snippets_name_the_config_written(tmp_path, capsys, name: str) -> None:
    out = tmp_path / name
    assert main([*ARGS, "--out", str(out)]) == 0, capsys.readouterr().err
    production = yaml.safe_load(out.read_text())["production"]
    quoted = "'prod plan.json'" if " " in name else name
    assert f"--config {quoted} " in production["run_command"]
    assert f"recover --config {quoted} " in production["spark_filter"]
    assert f"run --config {quoted} " in production["spark_filter"]
    assert "plan.json" not in production["run_command"].replace(name, "")
