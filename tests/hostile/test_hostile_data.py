"""Sensor histories an operator will really have, or a hostile one: a sound plan or one
line naming what is wrong."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.cli import main
from tests.hostile.conftest import one_line_error

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"
TEMPS = 6


def _temps(tmp_path: Path, scale: float, name: str, tiny: float = 1.0) -> Path:
    """The small sample's first six temperatures, the first multiplied by ``scale`` and
    the third by ``tiny``."""
    frame = pd.read_csv(SMALL)
    cols = ["timestamp", *[c for c in frame.columns if c.endswith("_TEMP")][:TEMPS]]
    frame = frame[cols]
    frame[cols[1]] *= scale
    frame[cols[3]] *= tiny
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def _plan(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an overflow is a failure here
        code = main(["plan", "--data", str(path), "--eps", "1", "--delta", "0.05",
                     "--window", "24", *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_sensor_beyond_the_reading_limit_is_refused_by_name(run_cli, tmp_path) -> None:
    path = _temps(tmp_path, 1e90, "x1e90.csv")  # was: a ridge of 2e172, a backtest of 0 %
    code, _, err = run_cli("plan", "--data", path, "--eps", "1", "--delta", "0.05",
                           "--window", "24")  # fmt: skip
    line = one_line_error(code, err)
    assert "'Aotizhongxin_TEMP'" in line and "outside +-1e+60" in line


@pytest.mark.parametrize("extra", [(), ("--method", "exact"), ("--agg", "sum"), ("--agg", "max")])
def test_a_sensor_at_the_limit_gets_the_plan_it_gets_at_a_moderate_scale(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """Scales far apart (1e59 beside 1 beside 1e-49): the plan and its backtest are those
    of the same data at 1e6, without an overflow."""
    near = _plan(capsys, _temps(tmp_path, 1e6, "near.csv", tiny=1e-50), *extra)
    far = _plan(capsys, _temps(tmp_path, 2.5e58, "far.csv", tiny=1e-50), *extra)
    assert "Aotizhongxin_TEMP" in far["backup_sensors"]  # rebuilt, it would miss by 1e59
    assert far["backup_sensors"] == near["backup_sensors"]
    got, want = far["guarantee"]["backtest"], near["guarantee"]["backtest"]
    for key in ("violation_rate_mean", "violation_rate_worst_sensor", "backup_fraction_mean"):
        assert got[key] == pytest.approx(want[key]) and 0 <= got[key] <= 1


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_nul_in_a_column_name_is_one_line(run_cli, tmp_path, suffix: str) -> None:
    frame = pd.read_csv(SMALL).iloc[:, :5]
    frame.columns = [*frame.columns[:2], "a\x00b", *frame.columns[3:]]
    path = tmp_path / f"nul{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path, index=False)
    code, _, err = run_cli("plan", "--data", path, "--eps", "1", "--delta", "0.05",
                           "--window", "24")  # fmt: skip
    assert "column 3 ('a<NUL>b') has a NUL character" in one_line_error(code, err)


def _numeric_times(tmp_path: Path, times: object) -> Path:
    frame = pd.read_csv(SMALL)
    frame = frame[["timestamp", *[c for c in frame.columns if c.endswith("_TEMP")][:TEMPS]]]
    frame = frame.iloc[: len(times)].assign(timestamp=times)  # type: ignore[arg-type]
    path = tmp_path / "numeric.csv"
    frame.to_csv(path, index=False)
    return path


def test_numeric_times_read_as_1970_are_said_or_refused(run_cli, tmp_path) -> None:
    """Numeric times were read as epoch seconds without a word: Excel serial days planned
    every 0.04 s, YYYYMMDD dates as 1970-08-23 every 1 s, exit 0."""
    plan = ("plan", "--eps", "1", "--delta", "0.05", "--window", "24", "--no-backtest")
    daily = _numeric_times(tmp_path, list(range(45352, 45352 + 300)))  # Excel days
    code, stdout, err = run_cli(*plan, "--data", daily)
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: "), err
    assert "before 1980" in lines[0] and "Excel serial" in lines[0]
    assert "--time-unit" in lines[0]
    assert any("before 1980" in n for n in json.loads(stdout)["data_notes"])
    hourly = _numeric_times(tmp_path, [round(45352 + h / 24, 6) for h in range(300)])
    code, _, err = run_cli(*plan, "--data", hourly)
    line = one_line_error(code, err)
    assert "Excel serial day numbers" in line and "--time-unit" in line
    code, _, err = run_cli(*plan, "--data", hourly, "--time-unit", "s")  # said: as said
    assert code == 0 and "before 1980" in err
    dates = pd.date_range("2023-01-01", periods=300, freq="D").strftime("%Y%m%d").astype(int)
    code, _, err = run_cli(*plan, "--data", _numeric_times(tmp_path, list(dates)))
    assert "YYYYMMDD dates" in one_line_error(code, err)


def test_an_unsteady_interval_and_thousands_separators_are_warnings(run_cli, tmp_path) -> None:
    """Both notes changed what a plan means (a horizon in rows spans another time; a
    reading 1,000 times too small) and were only in the JSON's data notes: the CLI says
    them as warnings, one line each."""
    plan = ("plan", "--eps", "1", "--delta", "0.05", "--window", "4", "--no-backtest")
    times = [*pd.date_range("2024-03-01", periods=300, freq="10min")]
    times += [*pd.date_range(times[-1] + pd.Timedelta("1min"), periods=150, freq="1min")]
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"time": times, "a": rng.normal(size=450), "b": rng.normal(size=450)})
    frame.to_csv(tmp_path / "rates.csv", index=False)
    code, _, err = run_cli(*plan, "--data", tmp_path / "rates.csv")
    said = [line for line in err.splitlines() if "not steady" in line]
    assert code == 0 and len(said) == 1 and said[0].startswith("warning: the sampling interval")
    watts = ["686", "837", "1.401", "912", "1.022", "777"] * 20
    semi = pd.DataFrame({"time": times[:120], "power_W": watts, "temp_C": rng.normal(size=120)})
    semi.to_csv(tmp_path / "semi.csv", index=False, sep=";")
    code, _, err = run_cli(*plan, "--data", tmp_path / "semi.csv")
    said = [line for line in err.splitlines() if "thousands separator" in line]
    assert code == 0 and len(said) == 1 and "'power_W'" in said[0] and "'1.401'" in said[0]
