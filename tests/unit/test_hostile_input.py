"""Hostile input through the loader and the CLI: a clear one-line error or a correct result.

The corpus (tests/hostile_corpus.py) is written into ``tmp_path``; every file
either loads with the expected sensors and rows, or raises ``DataError`` with a
one-line message; through ``engine.cli.main`` the same file exits 0, or exits 2
with ONE line on stderr starting ``error:`` and never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.cli import main
from engine.data import LoadOptions, load_history
from engine.errors import DataError
from engine.export.seal import seal_config
from engine.model import GaussianModel, MomentStats
from engine.query import WindowQuery
from tests.hostile_corpus import Case, cases, write_corpus

CASES = cases()


@pytest.fixture
def corpus(tmp_path: Path) -> dict[str, Path]:
    return {case.name: path for case, path in write_corpus(tmp_path)}


def _ids(case: Case) -> str:
    return case.name


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_corpus_through_the_loader(case: Case, corpus: dict[str, Path]) -> None:
    path = corpus[case.name]
    if case.error is None:
        history = load_history(path)
        assert history.sensors == case.sensors
        assert history.values.shape == (case.rows, len(case.sensors))
        assert np.all(np.isfinite(history.values))
        return
    with pytest.raises(DataError) as info:
        load_history(path)
    message = str(info.value)
    assert case.error in message
    assert "\n" not in message and message.startswith(path.name)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


PLAN = ("--eps", "1", "--delta", "0.1", "--window", "2", "--no-backtest")


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_corpus_through_the_cli(
    case: Case, corpus: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(capsys, "plan", "--data", str(corpus[case.name]), *PLAN)
    if case.error is None:
        assert code == 0, err
        assert tuple(json.loads(out)["sensors"]) == case.sensors
        return
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert case.error in err and "Traceback" not in err


# --- 4: a path is read exactly as named, never as a glob --------------------------------


@pytest.mark.parametrize("name", ["site[1].csv", "a*b.csv", "q?.csv"])
def test_glob_characters_in_a_path_name_the_file_itself(corpus: dict[str, Path], name: str) -> None:
    history = load_history(corpus[name])
    expected = pd.read_csv(corpus[name]).iloc[:, 1:]
    assert history.sensors == tuple(expected.columns)
    np.testing.assert_array_equal(history.values, expected.to_numpy())


def test_glob_characters_in_a_directory_name(tmp_path: Path) -> None:
    (tmp_path / "d1").mkdir()
    (tmp_path / "d[1]").mkdir()
    for case in cases():
        if case.name == "site[1].csv":
            (tmp_path / "d1" / "x.csv").write_bytes(case.decoy[1])  # type: ignore[index]
            (tmp_path / "d[1]" / "x.csv").write_bytes(case.data)
    history = load_history(tmp_path / "d[1]" / "x.csv")
    expected = pd.read_csv(tmp_path / "d[1]" / "x.csv").iloc[:, 1:].to_numpy()
    np.testing.assert_array_equal(history.values, expected)


def test_recover_reads_the_backup_named_not_a_glob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(0, 1, (40, 3)).round(3), columns=["a", "b", "c"])
    frame["c"] = frame["a"] + frame["b"]
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=40, freq="h"))
    frame.to_csv(tmp_path / "data.csv", index=False)
    config = tmp_path / "plan.json"
    code, _, err = run_main(
        capsys, "plan", "--data", str(tmp_path / "data.csv"), *PLAN, "--out", str(config)
    )
    assert code == 0, err
    backup = json.loads(config.read_text())["backup_sensors"]
    frame[["time", *backup]].to_csv(tmp_path / "b[1].csv", index=False)
    decoy = frame[["time", *backup]].iloc[:5].copy()
    decoy.to_csv(tmp_path / "b1.csv", index=False)
    out = tmp_path / "all.csv"
    code, _, err = run_main(
        capsys, "recover", "--config", str(config), "--backup", str(tmp_path / "b[1].csv"),
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert len(pd.read_csv(out)) == 40


# --- 6: extreme values -------------------------------------------------------------------


def test_the_model_refuses_overflowed_statistics() -> None:
    x = np.random.default_rng(0).normal(0.0, 1.0, (20, 3)) * 1e155
    with pytest.raises(DataError, match="not finite"):
        GaussianModel().fit(x)
    with pytest.raises(DataError, match="not finite"):
        MomentStats.from_array(np.full((5, 2), 1e308))


def test_range_limits_are_relative_to_the_column(tmp_path: Path) -> None:
    """A rain-like column (mostly zero, rare storms 1e4 x the drizzle) still loads."""
    rng = np.random.default_rng(3)
    rain = np.where(rng.random(500) < 0.01, rng.uniform(50, 300, 500), 0.0)
    rain[7] = 0.01
    frame = pd.DataFrame({"rain": rain, "big": rng.normal(1e55, 1e53, 500)})
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=500, freq="h"))
    frame.to_csv(tmp_path / "rain.csv", index=False)
    history = load_history(tmp_path / "rain.csv")
    assert history.values.shape == (500, 2)


def test_blockwise_scan_matches_a_brute_force_reference() -> None:
    from engine.data import range as data_range

    rng = np.random.default_rng(8)
    x = rng.standard_t(2, (1_000, 6)) * [1, 10, 1e-3, 1e5, 1, 1]
    x[rng.random(x.shape) < 0.1] = np.nan
    x[17, 2], x[999, 4], x[:, 5] = 1e6, -3e4, 2.0  # spikes, a constant column
    reference = data_range._reference(x)
    scan = data_range._Scan(6)
    for start in range(0, 1_000, 37):
        scan.add(start, x[start : start + 37], reference)
    dev = np.nan_to_num(np.abs(x - reference), nan=0.0)
    top = dev.argmax(axis=0)
    count = (~np.isnan(x)).sum(axis=0)
    for j in range(6):
        rest = np.delete(dev[:, j], top[j]).sum()
        expected = dev[top[j], j] / (rest / (count[j] - 1)) if rest > 0 else 0.0
        assert scan.top[j] == top[j]
        np.testing.assert_allclose(scan.ratio()[j], expected, rtol=1e-9)
    assert scan.ratio()[5] == 0.0 and scan.ratio()[2] > 1e6


def test_extreme_value_error_names_sensor_and_time(corpus: dict[str, Path]) -> None:
    with pytest.raises(DataError) as info:
        load_history(corpus["reading_1e308.csv"])
    assert "sensor 'b'" in str(info.value) and "2024-03-01 04:00:00" in str(info.value)


# --- smaller: --sensors before the row minimum, honest messages ---------------------------


def test_sensors_are_chosen_before_the_row_minimum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.normal(0, 1, (5, 10_000)).round(2))
    frame.columns = [f"s{i}" for i in range(10_000)]
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=5, freq="h"))
    frame.to_csv(tmp_path / "wide.csv", index=False)
    history = load_history(tmp_path / "wide.csv", LoadOptions(sensors=("s1", "s2", "s3")))
    assert history.sensors == ("s1", "s2", "s3") and history.values.shape == (5, 3)
    code, out, err = run_main(
        capsys, "plan", "--data", str(tmp_path / "wide.csv"), "--sensors", "s1,s2,s3", *PLAN
    )
    assert code == 0, err
    assert json.loads(out)["sensors"] == ["s1", "s2", "s3"]


def test_a_sensor_named_like_a_glob_is_chosen_by_its_name() -> None:
    from engine.data.names import resolve_sensors

    names = ("a", "site[1]", "site1", "q?x", "qax")
    assert resolve_sensors(names, ["site[1]", "q?x"]) == ["site[1]", "q?x"]
    assert resolve_sensors(names, ["site[12]"]) == ["site1"]  # no such name: a glob
    assert resolve_sensors(names, ["q*"]) == ["q?x", "qax"]


def test_a_directory_is_called_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "data.csv").mkdir()
    code, _, err = run_main(capsys, "plan", "--data", str(tmp_path / "data.csv"), *PLAN)
    assert code == 2 and "is a directory" in err


def test_a_name_too_long_for_the_filesystem_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_main(capsys, "plan", "--data", "a" * 300 + ".csv", *PLAN)
    assert code == 2 and err.count("\n") == 1 and "cannot open: File name too long" in err
    assert len(err) < 200


def test_a_device_is_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys, "plan", "--data", "/dev/zero", *PLAN)
    assert code == 2 and "not a regular file" in err


def test_an_unreadable_file_is_one_line(
    corpus: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root reads anything, so the permission error is simulated where the header is read."""
    import errno

    real_open = Path.open

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name == "bom.csv":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    code, _, err = run_main(capsys, "plan", "--data", str(corpus["bom.csv"]), *PLAN)
    assert code == 2 and err == "error: bom.csv: cannot read: Permission denied\n"


def test_backtest_window_longer_than_the_file_exits_2(
    corpus: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--data", str(corpus["unicode.csv"]), "--eps", "1", "--delta", "0.1")
    code, _, err = run_main(capsys, "backtest", *args, "--window", "50")
    assert code == 2 and "window (50 readings) is longer than the history (8 rows)" in err


# --- smaller: sensor names are never spreadsheet formulas in the CSVs we write -------------

FORMULAS = ("=cmd|' /C calc'!A0", "+SUM(A1)", "@x", "-2+3", "plain")


def _formula_plan(tmp_path: Path) -> tuple[Any, Any, Path]:
    from engine.export import plan_to_config, write_config
    from engine.planning import PlanParameters, make_plan

    rng = np.random.default_rng(5)
    base = rng.normal(0, 1, (80, 2))
    mix = np.column_stack([base, base @ [[1, 0.5, 2], [2, -1, 0.1]]])
    frame = pd.DataFrame(mix.round(4), columns=list(FORMULAS))
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=80, freq="h"))
    frame.to_csv(tmp_path / "data.csv", index=False)
    history = load_history(tmp_path / "data.csv")
    plan = make_plan(history, PlanParameters(WindowQuery(0.5, 0.2, 2)), run_backtest_now=False)
    config = write_config(plan_to_config(plan), tmp_path / "plan.json")
    return history, plan, config


def _header_cells(path: Path) -> list[str]:
    import csv

    with path.open(newline="", encoding="utf-8") as handle:
        return next(csv.reader(handle))


def test_csv_headers_written_are_not_formulas_and_still_recover(tmp_path: Path) -> None:
    from engine.export import recover_file
    from ui.exporting import backup_csv

    history, plan, config = _formula_plan(tmp_path)
    assert plan.backup_sensors and len(plan.backup_sensors) < len(FORMULAS)
    (tmp_path / "backup.csv").write_bytes(backup_csv(history, plan))
    for path in (tmp_path / "backup.csv", tmp_path / "all.csv"):
        if path.name == "all.csv":
            recover_file(config, tmp_path / "backup.csv", path)
        cells = _header_cells(path)
        assert not [c for c in cells if c[:1] in ("=", "+", "-", "@")], cells
    assert _header_cells(tmp_path / "all.csv") == [
        "time",
        *("'" + n if n[0] in "=+-@" else n for n in FORMULAS),
    ]
    rebuilt = pd.read_csv(tmp_path / "all.csv").iloc[:, 1:].to_numpy()
    expected = plan.linear_map.apply(history.select(list(plan.backup_sensors)).values)
    np.testing.assert_allclose(rebuilt, expected, rtol=1e-9, atol=1e-9)


def test_recover_refuses_to_write_overflowed_values(tmp_path: Path) -> None:
    from engine.errors import DataError as Refused
    from engine.export import recover_file

    history, _, config = _formula_plan(tmp_path)
    data = json.loads(config.read_text())
    target = next(iter(data["reconstruction"]))
    first = next(iter(data["reconstruction"][target]["coefficients"]))
    data["reconstruction"][target]["coefficients"][first] = 1e308
    config.write_text(json.dumps(seal_config(data)))  # sealed: past the loader, to recover
    (tmp_path / "backup.csv").write_bytes(history.to_frame().to_csv(index=False).encode())
    with pytest.raises(Refused, match="overflows"):
        recover_file(config, tmp_path / "backup.csv", tmp_path / "all.csv")
    assert not (tmp_path / "all.csv").exists()


def test_recover_leaves_out_the_time_steps_a_backup_sensor_lacks(tmp_path: Path) -> None:
    """They were filled by interpolation and written out as if backed up (exit 0, a count
    in the JSON only). Now they are left out and said (a file is read in whole rows;
    recovery from the job's backup keeps the step's other readings). A gap in a column
    the plan does not use costs no row."""
    from engine.export import recover_file

    history, plan, config = _formula_plan(tmp_path)
    frame = history.to_frame()
    gap = frame.columns.get_loc(plan.backup_sensors[0])
    frame.iloc[10:20, gap] = np.nan
    frame["unused"] = 1.0
    frame.loc[30:40, "unused"] = np.nan
    frame.to_csv(tmp_path / "backup.csv", index=False)
    result = recover_file(config, tmp_path / "backup.csv", tmp_path / "all.csv")
    assert result.rows == len(frame) - 10 and result.backup_rows_dropped == 10
    assert result.backup_values_filled == 0
    assert any("10 time step(s) where a backup sensor has no reading" in w for w in result.warnings)
    written = pd.to_datetime(pd.read_csv(tmp_path / "all.csv")["time"]).dt.tz_localize(None)
    kept = pd.to_datetime(frame["time"]).drop(index=range(10, 20))
    assert written.tolist() == kept.tolist()
    assert "unused" in result.ignored_columns


def test_recover_says_when_the_backup_comes_at_another_rate_than_the_plan(
    tmp_path: Path,
) -> None:
    from engine.export import recover_file

    history, _, config = _formula_plan(tmp_path)
    frame = history.to_frame()
    frame.to_csv(tmp_path / "same.csv", index=False)
    same = recover_file(config, tmp_path / "same.csv", tmp_path / "a.csv")
    assert not [w for w in same.warnings if "readings come every" in w]
    step = np.diff(pd.to_datetime(frame["time"]).to_numpy())[0]
    frame["time"] = pd.to_datetime(frame["time"]).iloc[0] + (step / 60) * np.arange(len(frame))
    frame.to_csv(tmp_path / "fast.csv", index=False)
    fast = recover_file(config, tmp_path / "fast.csv", tmp_path / "b.csv")
    seconds = step / np.timedelta64(1, "s")
    assert any(
        f"readings come every {seconds / 60:g} s, the plan's every {seconds:g} s" in w
        for w in fast.warnings
    ), fast.warnings


# --- 10: a default fold budget, and progress that suits a log file --------------------------


@pytest.fixture(scope="module")
def two_million(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(6)
    n = 2_000_000
    a = rng.normal(0, 1, n)
    table = pa.table(
        {"time": np.arange(n, dtype=np.float64), "a": a, "b": a + rng.normal(0, 0.1, n)}
    )
    path = tmp_path_factory.mktemp("big") / "two_million.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.timeout(240)
def test_backtest_on_two_million_rows_keeps_to_the_default_budget(
    two_million: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli_parser import DEFAULT_MAX_FOLDS

    # A horizon of 10 rows: the folds step by the horizon, so the file offers ~200,000 folds,
    # far more than the budget. (The default horizon, a day of 1 s readings, offers only 23.)
    args = ("--data", str(two_million), "--eps", "0.5", "--delta", "0.1", "--window", "2")
    args = (*args, "--horizon", "10")
    code, out, err = run_main(capsys, "backtest", *args, "--history", "50")
    assert code == 0, err
    assert json.loads(out)["n_folds"] == DEFAULT_MAX_FOLDS
    lines = err.splitlines(keepends=True)
    assert "\r" not in err and all(line.endswith("\n") for line in lines)
    assert f"backtest: {DEFAULT_MAX_FOLDS} of " in lines[0] and "folds, evenly spaced" in lines[0]
    available = int(lines[0].split(" of ")[1].split()[0].replace(",", ""))
    assert available > 1000 * DEFAULT_MAX_FOLDS  # the budget, not the file, set the count
    assert 10 <= len(lines) <= 25, err  # a line every 5 %, not one per fold
    code, out, _ = run_main(capsys, "backtest", *args, "--history", "50", "--max-folds", "7")
    assert code == 0 and json.loads(out)["n_folds"] == 7


def test_progress_on_a_terminal_rewrites_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from engine import cli

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    monkeypatch.setattr(cli.sys, "stderr", stream)
    report = cli.Progress()
    for k in range(1, 101):
        report(k / 100, f"fold {k}/100")
    assert stream.getvalue().count("\r") == 100 and stream.getvalue().endswith("(100%)\n")


@pytest.mark.parametrize(
    "name", ["column_1e154.csv", "year_9999.csv", "list.parquet", "binary.csv", "site[1].csv"]
)
def test_corpus_in_a_real_process_prints_one_line(corpus: dict[str, Path], name: str) -> None:
    """A real interpreter: warnings and tracebacks would reach stderr here."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "engine", "plan", "--data", str(corpus[name]), *PLAN],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    if name == "site[1].csv":
        # 8 rows are too few to calibrate: the plan is made, backs every sensor up and says
        # so in one warning line (never a traceback or a silent unmeasured plan)
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith("warning: ") and done.stderr.count("\n") == 1, done.stderr
        assert "every sensor is backed up" in done.stderr
        summary = json.loads(done.stdout)
        assert summary["n_backup"] == summary["n_sensors"] == 2
        return
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_columns_that_differ_only_in_case_are_refused(tmp_path: Path, suffix: str) -> None:
    """DuckDB does not tell ``x`` from ``X``: a Parquet file's second one became ``X_1``, a
    sensor the stream does not have, and the CSV reader refused in DuckDB's words."""
    frame = pd.DataFrame(np.random.default_rng(1).normal(size=(50, 3)), columns=["x", "X", "y"])
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=50, freq="h"))
    path = tmp_path / f"case{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    with pytest.raises(DataError, match=r"column 3 \('X'\) differs from column 'x' only in case"):
        load_history(path)


def test_a_header_cell_without_a_name_is_said(tmp_path: Path) -> None:
    """``DataFrame.to_csv()`` with its index writes a first column with no name: it was read
    as a sensor ``column1`` (the row numbers, a perfect trend) without a word."""
    frame = pd.DataFrame(np.random.default_rng(1).normal(size=(50, 2)), columns=["a", "b"])
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=50, freq="h"))
    frame.to_csv(tmp_path / "indexed.csv")  # the index, unnamed, first
    history = load_history(tmp_path / "indexed.csv")
    assert "column1" in history.sensors
    (said,) = [n for n in history.report.notes if "no name" in n]
    assert said.startswith("column 1 has no name in the header line: read as 'column1'")
    assert said in history.report.warning_notes()  # a warning (CLI, Data page), not a note
    frame.to_csv(tmp_path / "plain.csv", index=False)
    assert not [n for n in load_history(tmp_path / "plain.csv").report.notes if "no name" in n]
    # the time as an unnamed index (``to_csv()`` of a frame indexed by time) is no row
    # index read as a sensor: a plain note, not the warning
    frame.set_index("time").rename_axis(None).to_csv(tmp_path / "timed.csv")
    timed = load_history(tmp_path / "timed.csv").report
    assert timed.time_column == "column1" and timed.warning_notes() == []
    assert "the time column is unnamed in the header line (read as 'column1')" in timed.notes


def test_a_csv_without_its_header_line_is_refused(tmp_path: Path) -> None:
    """Its first row was read as the header: sensors named '-0.22', a row lost, exit 0."""
    frame = pd.DataFrame(np.random.default_rng(1).normal(size=(50, 3)), columns=["a", "b", "c"])
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=50, freq="h"))
    frame.to_csv(tmp_path / "nohdr.csv", index=False, header=False)
    with pytest.raises(DataError, match="holds readings, not column names: add a header"):
        load_history(tmp_path / "nohdr.csv")
    long = pd.DataFrame({"time": frame["time"], "sensor": "s1", "value": frame["a"]})
    long.to_csv(tmp_path / "long.csv", index=False, header=False)
    with pytest.raises(DataError, match="holds readings, not column names"):
        load_history(tmp_path / "long.csv")
    frame.to_csv(tmp_path / "hdr.csv", index=False)
    frame.rename(columns={"a": "2024", "b": "1e3"}).to_csv(tmp_path / "numeric.csv", index=False)
    for ok in ("hdr.csv", "numeric.csv"):  # a header with some numeric names is a header
        assert load_history(tmp_path / ok).values.shape == (50, 3)


def test_sensors_read_out_of_step_are_said_to_be_mostly_filled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four hourly sensors at 0, 15, 30 and 45 minutes past the hour: 75 % of the grid is
    interpolated and the interval reads 15 min. It was a note in the JSON only."""
    rng = np.random.default_rng(5)
    hours = pd.date_range("2024-01-01", periods=200, freq="h")
    frames = []
    for k in range(4):
        times = hours + pd.Timedelta(minutes=15 * k)
        values = rng.normal(size=200)
        frames.append(pd.DataFrame({"time": times, "sensor": f"s{k}", "value": values}))
    long = pd.concat(frames)
    long.to_csv(tmp_path / "offset.csv", index=False)
    report = load_history(tmp_path / "offset.csv").report
    assert "4 of 4 sensors missed 50 % of the rows or more" in str(report.mostly_filled())
    code, _, err = run_main(capsys, "plan", "--data", str(tmp_path / "offset.csv"), *PLAN)
    assert code == 0 and "warning: 4 of 4 sensors missed 50 % of the rows or more" in err
    sample = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"
    assert load_history(sample).report.mostly_filled() is None  # 3 % missing
    # two loggers a second apart: every sensor misses exactly half of the merged rows
    pairs = [pd.DataFrame({"time": hours + pd.Timedelta(seconds=k // 2), "sensor": f"s{k}",
                           "value": rng.normal(size=200)}) for k in range(4)]  # fmt: skip
    pd.concat(pairs).to_csv(tmp_path / "two_loggers.csv", index=False)
    report = load_history(tmp_path / "two_loggers.csv").report
    assert "4 of 4 sensors missed 50 % of the rows or more" in str(report.mostly_filled())
    assert "--clock STEP" in str(report.mostly_filled())  # and says what to do about it


def test_sensors_on_their_own_clocks_share_rows_on_one_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two loggers a second apart, each reading every minute: with a one-minute clock they
    share every row and nothing is filled in; the CLI says nothing is mostly filled."""
    rng = np.random.default_rng(6)
    minutes = pd.date_range("2024-01-01", periods=200, freq="min")
    values = rng.normal(size=(4, 200))
    pairs = [pd.DataFrame({"time": minutes + pd.Timedelta(seconds=k // 2), "sensor": f"s{k}",
                           "value": values[k]}) for k in range(4)]  # fmt: skip
    pd.concat(pairs).to_csv(tmp_path / "two_loggers.csv", index=False)
    history = load_history(tmp_path / "two_loggers.csv", LoadOptions(clock_s=60.0))
    assert history.report.mostly_filled() is None and history.report.n_values_filled == 0
    assert np.array_equal(history.times, minutes.to_numpy("datetime64[ns]"))
    assert np.array_equal(history.values, values.T)
    assert history.report.sampling_interval_s == 60.0
    assert any("onto one clock of 1 min steps" in n for n in history.report.notes)
    argv = ("plan", "--data", str(tmp_path / "two_loggers.csv"), *PLAN)
    code, _, err = run_main(capsys, *argv, "--clock", "1min")
    assert code == 0 and "mostly" not in err and "missed" not in err, err
    for step in ("5 days", "9000h"):  # no unit of days; over a year
        code, out, err = run_main(capsys, *argv, "--clock", step)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "a clock step is a number and a unit" in err and "Traceback" not in err
    code, _, err = run_main(capsys, "disorder", "--data", str(tmp_path / "two_loggers.csv"),
                            "--delays", "exp:30", "--eps-thr", "1", "--delta", "0.05",
                            "--window", "4", "--clock", "1min")  # fmt: skip
    assert code == 0 and "missed" not in err, err


def test_a_clock_averages_each_sensors_readings_in_a_step_as_pandas_does(tmp_path: Path) -> None:
    """Readings every 10 s, jittered, on a 1-minute clock: each goes to the nearest minute
    (half a step goes to the later one) and a sensor's readings in one minute are averaged,
    an infinite reading left out; the reference is pandas' floor of time + half a step and
    a groupby mean. A wide file whose times repeat is refused with a clock too: a time
    written twice (the hour a naive local clock repeats, a row pasted twice) is not
    another logger's clock, and averaging it away would hide it."""
    rng = np.random.default_rng(7)
    times = pd.date_range("2024-01-01", periods=600, freq="10s") + pd.to_timedelta(
        rng.integers(-4, 5, size=600), unit="s"
    )
    times = times.insert(10, times[10].floor("1min") + pd.Timedelta(seconds=30))  # a tie
    frame = pd.DataFrame({"time": times, "a": rng.normal(size=601), "b": rng.normal(size=601)})
    frame.loc[5, "a"] = np.inf
    frame.loc[7, "b"] = np.nan
    lone = {"time": times[-1] + pd.Timedelta("1h"), "a": 1.0, "b": np.nan}  # b: no reading
    frame = pd.concat([frame, pd.DataFrame([lone])], ignore_index=True)
    frame.to_csv(tmp_path / "jitter.csv", index=False)
    history = load_history(tmp_path / "jitter.csv", LoadOptions(clock_s=60.0, missing="drop"))
    clean = frame.replace(np.inf, np.nan)
    ref = clean.groupby((clean["time"] + pd.Timedelta("30s")).dt.floor("1min"))[["a", "b"]].mean()
    ref = ref.dropna()
    assert np.array_equal(history.times, ref.index.to_numpy("datetime64[ns]"))
    np.testing.assert_allclose(history.values, ref.to_numpy(), rtol=1e-12)
    notes = " ".join(history.report.notes)
    assert "1 infinite values were treated as missing" in notes and "averaged" in notes
    repeated = pd.concat([frame.iloc[:3], frame.iloc[2:3], frame.iloc[3:]]).replace(np.inf, 0.0)
    repeated.to_csv(tmp_path / "repeated.csv", index=False)
    with pytest.raises(DataError, match="duplicate timestamp"):
        load_history(tmp_path / "repeated.csv")
    with pytest.raises(DataError, match="duplicate timestamp"):  # not averaged away
        load_history(tmp_path / "repeated.csv", LoadOptions(clock_s=60.0))


def test_a_spreadsheet_export_ending_every_line_with_the_delimiter_loads(tmp_path: Path) -> None:
    """Excel's CSV ends every line with a comma: the last column has no name and no value.
    It refused the whole file ("sensor 'column5' has no values"), naming a sensor the
    operator never had; it is dropped, and said. A last column that holds values stays."""
    times = pd.date_range("2024-01-01", periods=50, freq="h")
    rows = [f"{t},{i % 7},{(i * 3) % 11},{(i * 5) % 13}," for i, t in enumerate(times)]
    (tmp_path / "excel.csv").write_text("time,a,b,c,\n" + "\n".join(rows) + "\n")
    history = load_history(tmp_path / "excel.csv")
    assert history.sensors == ("a", "b", "c") and history.values.shape == (50, 3)
    (said,) = [n for n in history.report.notes if "column 5" in n]
    assert said.startswith("column 5 has no name and no value") and "dropped" in said
    filled = [f"{t},{i % 7},{(i * 3) % 11},{(i * 5) % 13},{i}" for i, t in enumerate(times)]
    (tmp_path / "named_later.csv").write_text("time,a,b,c,\n" + "\n".join(filled) + "\n")
    assert "column5" in load_history(tmp_path / "named_later.csv").sensors


def test_rows_the_loader_dropped_are_a_warning_and_backtest_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One sensor installed late (no reading in the first 300 of 720 rows): the loader
    drops those rows for every sensor. `plan` and `backtest` exited 0 with only a note in
    plan's JSON (backtest had none): the history silently lost 42 % of its rows."""
    rng = np.random.default_rng(8)
    frame = pd.DataFrame(rng.normal(size=(720, 3)), columns=["a", "b", "c"])
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=720, freq="h"))
    frame.loc[:299, "c"] = np.nan
    frame.to_csv(tmp_path / "late.csv", index=False)
    argv = ("--data", str(tmp_path / "late.csv"), "--eps", "1", "--delta", "0.1", "--window", "4")
    for command in ("plan", "backtest"):
        code, out, err = run_main(capsys, command, *argv)
        assert code == 0, err
        said = [ln for ln in err.splitlines() if "rows dropped" in ln]
        assert len(said) == 1 and said[0].startswith("warning: 300 of 720 rows dropped: "), err
        assert any("dropped 300 rows" in n for n in json.loads(out)["data_notes"])
    frame.loc[10:299, "c"] = rng.normal(size=290)  # a 10-row gap at the start: filled
    frame.to_csv(tmp_path / "early.csv", index=False)
    code, _, err = run_main(capsys, "plan", "--data", str(tmp_path / "early.csv"), *argv[2:])
    assert code == 0 and "rows dropped" not in err


def test_a_long_files_sensor_ids_are_trimmed_as_header_names_are(tmp_path: Path) -> None:
    """', a' in a long file was sensor ' a': padded unevenly, one sensor split in two
    whose names looked alike in every message, and `--sensors a` did not match it."""
    rows = "".join(
        f"2024-01-01T{h:02d}:00:00,{' a' if h % 2 else 'a'},{h}\n"
        f"2024-01-01T{h:02d}:00:00, b,{2 * h}\n2024-01-01T{h:02d}:00:00,c ,{h % 3}\n"
        for h in range(24)
    )
    (tmp_path / "padded.csv").write_text("time,sensor,value\n" + rows)
    history = load_history(tmp_path / "padded.csv")
    assert history.sensors == ("a", "b", "c") and history.values.shape == (24, 3)
    np.testing.assert_array_equal(history.values[:, 0], np.arange(24.0))


def test_duckdbs_reason_for_a_bad_csv_is_kept(tmp_path: Path) -> None:
    """DuckDB's reason was cut to its first line, 'CSV Error on Line: 2502', for a
    Windows-1252 byte past the first kilobytes or an unterminated quote."""
    rows = [f"2024-01-0{1 + h // 1440} {h // 60 % 24:02d}:{h % 60:02d}:00,{h % 17}.5,{h % 9}.25"
            for h in range(2880)]  # fmt: skip
    latin = [*rows[:2500], rows[2500] + "\xe9", *rows[2501:]]
    (tmp_path / "latin.csv").write_bytes(("time,a,b\n" + "\n".join(latin) + "\n").encode("cp1252"))
    with pytest.raises(DataError, match=r"not UTF-8 text \(save it as UTF-8\)"):
        load_history(tmp_path / "latin.csv")
    quoted = [*rows[:2500], rows[2500].replace(",", ',"', 1), *rows[2501:]]
    (tmp_path / "quote.csv").write_text("time,a,b\n" + "\n".join(quoted) + "\n")
    with pytest.raises(DataError, match="unterminated quote") as err:
        load_history(tmp_path / "quote.csv")
    assert "\n" not in str(err.value)
