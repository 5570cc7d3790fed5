"""``disorder --sensors`` may choose one sensor: the replay runs each sensor on its own.
Planning (``plan``, ``backtest``, ``simulate``) still needs two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"


def test_disorder_replays_a_single_sensor(capsys) -> None:
    code = main(["disorder", "--data", str(SMALL), "--sensors", "Aotizhongxin_PM2.5",
                 "--delays", "exp:600", "--eps-thr", "10", "--delta", "0.05", "--window", "24",
                 "--rows", "300"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["parameters"]["n_sensors"] == 1 and report["n_tuples"] == 300


@pytest.mark.parametrize("command", ["plan", "backtest", "simulate"])
def test_planning_commands_still_need_two_sensors(capsys, command: str) -> None:
    code = main([command, "--data", str(SMALL), "--sensors", "Aotizhongxin_PM2.5", "--eps", "1",
                 "--delta", "0.05", "--window", "24"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == ["error: --sensors must select at least 2 sensors, got 1"]
