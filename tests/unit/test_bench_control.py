"""The controller's honesty protocol (``bench/bench_control.py``) on tiny data, so it
cannot rot: its plan is the CLI's, its counterfactual rebuild is the model's regression
on the rest of the set, and a sensor that leaves the model is backed up by the loop."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from bench.bench_control import plan_like_cli, rebuild_all, run_control_fold
from bench.bench_honesty import Case, write_history
from engine.cli import main as cli_main
from engine.data import load_history
from engine.model import GaussianModel
from engine.planning import ControlConfig

H, S, W = 600, 200, 4
CASE = Case("tiny", "none", ("*",), "avg", W, 1.0, None, "choose")


def recording(drift_from: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``a`` a random walk, ``b`` and ``c`` follow it closely; ``c`` leaves it at row
    ``drift_from`` (3 above, for good)."""
    rng = np.random.default_rng(7)
    a = np.cumsum(rng.normal(0, 1, H + S))
    b = a + rng.normal(0, 0.05, H + S)
    c = a + rng.normal(0, 0.05, H + S)
    c[drift_from:] += 3.0
    times = np.datetime64("2026-01-01T00:00", "ns") + np.arange(H + S) * np.timedelta64(1, "h")
    return times, np.column_stack([a, b, c]), ["a", "b", "c"]


def test_the_plan_is_the_one_the_cli_writes(tmp_path: Path) -> None:
    times, values, sensors = recording(H + S)
    csv, out = tmp_path / "cli.csv", tmp_path / "plan.json"
    write_history(csv, times[:H], values[:H], sensors)
    argv = ["plan", "--data", str(csv), "--eps", "1.0", "--delta", "0.05", "--window", str(W),
            "--agg", "avg", "--horizon", str(S), "--out", str(out)]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main(argv) == 0
    cli = json.loads(out.read_text())
    data = load_history(csv)
    plan = plan_like_cli(CASE, data, H, H, S, tmp_path)
    assert list(plan.backup_sensors) == cli["backup_sensors"]
    for i, target in enumerate(plan.linear_map.targets):
        assert plan.linear_map.intercept[i] == pytest.approx(
            cli["reconstruction"][target]["intercept"], rel=1e-12
        )


def test_a_case_of_mixed_units_is_planned_and_scored_with_its_eps_per_unit(
    tmp_path: Path,
) -> None:
    """``--eps-by-unit`` as ``bench_honesty`` passes it: the plan is the CLI's with one eps
    per unit, and the loop scores each sensor against its own eps (a 1,000 eps for a
    temperature would hide every miss)."""
    times, values, _ = recording(H + S)
    sensors = ["a_TEMP", "b_TEMP", "c_PRES"]
    csv, out = tmp_path / "cli.csv", tmp_path / "plan.json"
    write_history(csv, times[:H], values[:H], sensors)
    units = "degC=0.5,hPa=1000"
    argv = ["plan", "--data", str(csv), "--eps", "1000", "--delta", "0.05", "--window",
            str(W), "--agg", "avg", "--horizon", str(S), "--eps-by-unit", units,
            "--out", str(out)]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main(argv) == 0
    cli = json.loads(out.read_text())
    case = Case("mixed", "none", ("*",), "avg", W, 1000.0, None, "choose", eps_by_unit=units)
    plan = plan_like_cli(case, load_history(csv), H, H, S, tmp_path)
    assert list(plan.backup_sensors) == cli["backup_sensors"]
    assert dict(plan.parameters.eps_by_sensor) == {"a_TEMP": 0.5, "b_TEMP": 0.5, "c_PRES": 1000.0}


def test_a_backed_up_sensor_is_rebuilt_by_its_regression_on_the_rest_of_the_set() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 2)) @ rng.normal(size=(2, 5)) + 0.3 * rng.normal(size=(300, 5))
    model = GaussianModel().fit(x)
    backup = (0, 2, 4)
    out = rebuild_all(model, backup, x[:20])
    np.testing.assert_allclose(out[:, [1, 3]], model.linear_map(list(backup)).apply(
        x[:20, list(backup)])[:, [1, 3]])  # fmt: skip
    for j in backup:
        rest = [q for q in backup if q != j]
        alone = model.linear_map(rest).apply(x[:20, rest])[:, j]
        np.testing.assert_allclose(out[:, j], alone, rtol=1e-9, atol=1e-9)


def test_the_loop_backs_up_a_sensor_that_leaves_the_model(tmp_path: Path) -> None:
    times, values, sensors = recording(H + 40)
    csv = tmp_path / "h.csv"
    write_history(csv, times, values, sensors)
    data = load_history(csv)
    plan = plan_like_cli(CASE, data, H, H, S, tmp_path)
    assert plan.backup_sensors == ("a",)
    config = ControlConfig(delta=0.05)
    fold = run_control_fold(plan, CASE, values[H : H + S], config)
    # c misses from window 10 on, until the floor forces it into the backup: within the
    # controller's bound over the fold's windows
    windows = S // W
    assert 1 <= fold["misses"][2] <= config.miss_bound(windows) * windows
    assert fold["pairs"][2] < S // W
    assert fold["changes"] >= 1 and fold["backup"] > 1.0


def test_under_the_crash_contract_the_loop_counts_fractions_of_lost_stretches(
    tmp_path: Path,
) -> None:
    """``--exposure``: each rebuilt window counts the fraction of its ``w + m - 1`` m-row
    losses that miss (bench_honesty's ``crash_misses``, the direct reference), and a sensor
    that leaves the model is still backed up by the loop."""
    from bench.bench_honesty import crash_misses

    times, values, sensors = recording(H + 40)
    csv = tmp_path / "h.csv"
    write_history(csv, times, values, sensors)
    data = load_history(csv)
    plan = plan_like_cli(CASE, data, H, H, S, tmp_path, exposure=W)
    assert plan.parameters.exposure == W and "c" not in plan.backup_sensors
    # c is 3 off once it leaves: of the 7 losses touching a window of 4, the 5 that lose
    # 2 rows or more put its average more than eps = 1 off
    truth = values[H + 40 : H + 40 + W]
    direct = crash_misses(truth, rebuild_all(plan.model, (0,), truth), W, "avg", W, 1.0)[0]
    assert direct[2] == pytest.approx(5 / 7)
    fold = run_control_fold(plan, CASE, values[H : H + S], ControlConfig(delta=0.05), W)
    missed = fold["misses"][2]
    assert missed > 0 and missed / (5 / 7) == pytest.approx(round(missed / (5 / 7)))
    assert fold["crash"]["m"]["pairs"][2] == fold["pairs"][2] < S // W  # then backed up
    assert fold["changes"] >= 1
