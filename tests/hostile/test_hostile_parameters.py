"""Parameters and configs an operator can mistype: one line and exit 2, never a traceback,
never a silently wrong number."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.disorder.delays import parse_delays
from engine.errors import ParameterError
from tests.hostile.conftest import one_line_error

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"
PLAN = ("plan", "--data", SMALL, "--sensors", "*_TEMP", "--eps", "1", "--window", "24")


def test_a_horizon_past_the_last_timestamp_is_refused_not_wrapped(run_cli, tmp_path) -> None:
    for horizon in ("2500000", "3000000", "99999999999"):  # wrapped to 1717, OverflowError
        out = tmp_path / "plan.json"
        code, _, err = run_cli(*PLAN, "--delta", "0.05", "--horizon", horizon, "--out", out)
        line = one_line_error(code, err)
        assert "2262-04-11" in line and "at most 2,152,248 rows" in line
        assert not out.exists()
    code, stdout, _ = run_cli(
        *PLAN, "--delta", "0.05", "--horizon", "2152248", "--no-backtest", "--out", out
    )
    assert code == 0
    assert json.loads(stdout)["validity"]["valid_until"] == "2262-04-11T23:00:00Z"


@pytest.mark.parametrize("delta", ["1e-17", "1e-300", "5e-13"])
def test_a_delta_too_small_to_compute_is_one_line(run_cli, delta: str) -> None:
    code, _, err = run_cli(*PLAN, "--delta", delta, "--no-backtest")
    assert "delta must be at least 1e-12" in one_line_error(code, err)


def test_the_smallest_delta_still_plans(run_cli) -> None:
    code, stdout, _ = run_cli(*PLAN, "--delta", "1e-12", "--no-backtest")
    assert code == 0 and json.loads(stdout)["parameters"]["delta"] == 1e-12


@pytest.mark.parametrize(
    "by_unit",
    ["unknown:s=1e308", "degC=1e101", "degC=1,unknown:s=2e100"],
)
def test_eps_by_unit_has_the_cap_of_eps(run_cli, by_unit: str) -> None:
    code, _, err = run_cli(
        "plan", "--data", SMALL, "--eps", "1", "--eps-by-unit", by_unit, "--delta", "0.05",
        "--window", "24", "--no-backtest",
    )  # fmt: skip
    assert "must be at most 1e+100" in one_line_error(code, err)
    code, _, err = run_cli(*PLAN, "--delta", "0.05", "--eps", "1e308")  # the same cap
    assert "must be at most 1e+100" in err


@pytest.mark.parametrize(
    "spec",
    ["exp:1e308", "const:1e8", "pareto:1,1e300", "pareto:0.01,1", "mix:0.5,exp:10,pareto:0.02,1"],
)
def test_delays_are_capped_as_eps_is(run_cli, spec: str) -> None:
    code, _, err = run_cli(
        "disorder", "--data", SMALL, "--sensors", "*_PM2.5", "--delays", spec, "--eps-thr", "10",
        "--delta", "0.05", "--window", "24",
    )  # fmt: skip
    line = one_line_error(code, err)
    assert "at most 1e+07 seconds" in line or "beyond the cap of 1e+09 s" in line


def test_the_largest_delays_allowed_give_finite_latencies(run_cli) -> None:
    code, stdout, _ = run_cli(
        "disorder", "--data", SMALL, "--sensors", "*_PM2.5", "--delays", "exp:1e7",
        "--eps-thr", "10", "--delta", "0.05", "--window", "24", "--rows", "200",
    )  # fmt: skip
    assert code == 0
    report = json.loads(stdout)
    methods = ("ours", "mp_kslack", "fixed_watermark", "no_buffer")
    latencies = [report[m]["avg_latency_s"] for m in methods]
    assert all(x is not None and np.isfinite(x) for x in [*latencies, report["mean_delay_s"]])
    drawn = parse_delays("exp:1e7").sample(1_000_000, np.random.default_rng(0))
    assert drawn.max() < 1e9  # the cap on a drawn delay
    with pytest.raises(ParameterError, match="beyond the cap"):
        parse_delays("pareto:0.05,1").sample(1000, np.random.default_rng(0))


def _config_argv(config: Path, tmp_path: Path) -> list[tuple[str, ...]]:
    backup = tmp_path / "b.csv"
    backup.write_text("time,a\n2020-01-01,1\n2020-01-02,2\n")
    return [
        ("recover", "--config", config, "--backup", backup, "--out", tmp_path / "o.csv"),
        ("run", "--config", config, "--source", tmp_path, "--backup", tmp_path / "bk",
         "--checkpoint", tmp_path / "ck"),
    ]  # fmt: skip


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "link_to_fifo", "link_to_zero"])
def test_a_config_that_never_ends_or_blocks_is_refused(run_cli, tmp_path, kind: str) -> None:
    target = Path("/dev/zero")
    if "fifo" in kind:
        target = tmp_path / "plan.fifo"
        os.mkfifo(target)
    config = target if kind in ("dev_zero", "fifo") else tmp_path / "plan.json"
    if kind.startswith("link"):
        config.symlink_to(target)
    for argv in _config_argv(config, tmp_path):
        # a blocked read would hang: the timer fails the test instead of the suite
        result: list[tuple[int, str, str]] = []
        worker = threading.Thread(
            target=lambda a=argv, r=result: r.append(run_cli(*a)), daemon=True
        )
        worker.start()
        worker.join(20)
        assert result, f"{argv[0]} --config {kind} blocked"
        line = one_line_error(result[0][0], result[0][2])
        assert "not a regular file" in line


def test_a_config_growing_past_the_limit_is_read_no_further(monkeypatch, tmp_path) -> None:
    from engine.errors import ConfigError
    from engine.export import guard

    monkeypatch.setattr(guard, "MAX_CONFIG_BYTES", 1000)
    big = tmp_path / "plan.json"
    big.write_text(" " * 1001)
    with pytest.raises(ConfigError, match="larger than the limit of 1,000"):
        guard.read_config_text(big)


@pytest.mark.parametrize("command", ["plan", "backtest"])
@pytest.mark.parametrize("exposure", ["100000000000000000000", "1000000000", "721"])
def test_an_exposure_longer_than_the_history_is_one_line(run_cli, command, exposure) -> None:
    """A failure stretch is scored at ``w + m - 1`` positions a window: an exposure of 1e20
    rows was a NumPy traceback (exit 1), 1e9 an 8 GB allocation."""
    code, _, err = run_cli(command, *PLAN[1:], "--delta", "0.05", "--exposure", exposure)
    line = one_line_error(code, err)
    assert f"exposure ({exposure} rows) is longer than the history (720 rows)" in line
    assert "range contract" in line


def test_a_disorder_window_longer_than_the_history_is_one_line(run_cli) -> None:
    """It ran every method and answered an empty experiment (every figure null), exit 0."""
    code, _, err = run_cli(
        "disorder", "--data", SMALL, "--delays", "exp:3600", "--eps-thr", "1", "--delta", "0.1",
        "--window", "721",
    )  # fmt: skip
    assert "window (721 readings) is longer than the history (720 rows)" in one_line_error(
        code, err
    )
    code, _, err = run_cli(
        "disorder", "--data", SMALL, "--delays", "exp:3600", "--eps-thr", "1", "--delta", "0.1",
        "--window", "24", "--rows", "3",
    )  # fmt: skip
    assert "is longer than the history (3 rows)" in one_line_error(code, err)


def test_a_horizon_shorter_than_a_window_is_said(run_cli) -> None:
    """It was raised to one window without a word."""
    code, stdout, err = run_cli(*PLAN, "--delta", "0.05", "--horizon", "1", "--no-backtest")
    assert code == 0 and json.loads(stdout)["horizon_rows"] == 24
    assert "warning: --horizon 1 is shorter than a window: planned for one window (24 rows)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ("disorder", "--data", SMALL, "--sensors", "*_TEMP", "--delays", "exp:60",
         "--eps-thr", "1", "--delta", "0.05", "--window", "24", "--rows", "200"),
        ("simulate", *PLAN[1:], "--delta", "0.05", "--disorder", "exp:60"),
    ],
    ids=["disorder", "simulate"],
)  # fmt: skip
@pytest.mark.parametrize("seed", ["-1", "-99999999999999999999"])
def test_a_negative_seed_is_one_line(run_cli, argv, seed: str) -> None:
    """Was NumPy's ``ValueError`` from ``default_rng`` and a traceback (exit 1)."""
    code, _, err = run_cli(*argv, "--seed", seed)
    line = one_line_error(code, err)
    assert "--seed" in line and f"got {seed!r}" in line


def test_a_unit_given_twice_in_eps_by_unit_is_refused(run_cli) -> None:
    """Was: the last one silently won (``degC=1,degC=50`` planned at 50)."""
    code, _, err = run_cli(*PLAN, "--delta", "0.05", "--eps-by-unit", "degC=1,degC=50")
    line = one_line_error(code, err)
    assert "'degC' twice" in line


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("--eps", "1", "--eps-by-unit", "degC=1e-320"), "must be at least 1e-100, got 1e-320"),
        (("--eps", "1", "--eps-by-unit", "degC=1e-200"), "must be at least 1e-100, got 1e-200"),
        (("--eps", "1e-101"), "eps must be at least 1e-100, got 1e-101"),
        # at the floor, but the readings in eps units pass the readings' limit of 1e60
        (("--eps", "1", "--eps-by-unit", "degC=1e-100"), "1e+60"),
    ],
)
def test_an_eps_below_the_floor_is_one_line(run_cli, flags, needle: str) -> None:
    """1e-320 printed two ``RuntimeWarning`` lines before its error; 1e-200 blamed the data's
    covariance. The floor mirrors the cap: eps squared stays a normal double."""
    argv = [a for a in PLAN if a not in ("--eps", "1")]
    code, _, err = run_cli(*argv, "--delta", "0.05", *flags)
    line = one_line_error(code, err)
    assert needle in line
    assert "RuntimeWarning" not in err and len(err.strip().splitlines()) == 1


def test_the_smallest_eps_by_unit_the_readings_allow_still_plans(run_cli) -> None:
    code, stdout, err = run_cli(*PLAN, "--delta", "0.05", "--eps-by-unit", "degC=1e-50")
    assert code == 0 and "RuntimeWarning" not in err
    assert json.loads(stdout)["n_backup"] == 6  # so tight that every sensor is backed up


def test_disorder_rows_zero_is_refused_not_read_as_all(run_cli) -> None:
    """``--rows 0`` replayed every row, as if it had not been given."""
    code, _, err = run_cli(
        "disorder", "--data", SMALL, "--sensors", "*_TEMP", "--delays", "exp:60",
        "--eps-thr", "1", "--delta", "0.05", "--window", "24", "--rows", "0",
    )  # fmt: skip
    assert "--rows must be >= 1, got 0" in one_line_error(code, err)


def test_an_error_comes_alone_without_the_warnings_before_it(run_cli, tmp_path) -> None:
    """A warning said before the refusal made two stderr lines (the horizon's, then the
    missing file's)."""
    argv = [a if a != SMALL else tmp_path / "missing.csv" for a in PLAN]
    code, _, err = run_cli(*argv, "--delta", "0.05", "--horizon", "1")
    assert "file not found" in one_line_error(code, err)
    assert len(err.strip().splitlines()) == 1
