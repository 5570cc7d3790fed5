"""The CLI as an operator uses it: JSON out, exit 2 on bad input. Its logic runs in this
process (``run_cli``); a real ``python -m engine`` where the process is the point (a whole
plan and recovery, a reader that closes the pipe)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.data import load_history
from engine.export import load_config
from engine.query import WindowQuery
from tests.helpers import run_engine

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_engine(*args)


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plan_writes_a_valid_config_and_recover_rebuilds_every_sensor(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    done = run_process(
        "plan",
        "--data",
        str(SMALL),
        "--sensors",
        "*_TEMP",
        "--eps",
        "1.0",
        "--delta",
        "0.05",
        "--window",
        "24",
        "--agg",
        "avg",
        "--max-folds",
        "8",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["config"] == str(out)
    # one fold per default horizon (96 rows) from row 192 on 720 rows (see test_plan_export)
    assert summary["guarantee"]["backtest"]["n_folds"] == 5
    assert summary["horizon_rows"] == 96 and summary["warnings"] == []
    assert any("selected 6 of" in note for note in summary["data_notes"])  # the loader's
    config = load_config(out)
    history = load_history(SMALL)
    frame = history.to_frame()[["time", *config.backup_sensors]]
    frame.to_csv(tmp_path / "backup.csv", index=False)
    done = run_process(
        "recover",
        "--config",
        str(out),
        "--backup",
        str(tmp_path / "backup.csv"),
        "--out",
        str(tmp_path / "all.parquet"),
    )
    assert done.returncode == 0, done.stderr
    rebuilt = load_history(tmp_path / "all.parquet")
    assert rebuilt.sensors == config.sensors


def test_backtest_prints_the_contract_keys() -> None:
    done = run_cli(
        "backtest",
        "--data",
        str(SMALL),
        "--sensors",
        "*_TEMP",
        "--eps",
        "1.0",
        "--delta",
        "0.05",
        "--window",
        "24",
        "--calibration",
        "none",
        "--history",
        "240",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for key in (
        "backup_fraction_mean",
        "violation_rate_mean",
        "violation_rate_worst_sensor",
        "violation_rate_worst_sensor_ucb95",
        "n_folds",
    ):
        assert key in result
    # origins 192, 288, ..., 576: from the rows calibration needs, one horizon (96) a step
    assert result["n_folds"] == len(range(192, 720 - 96 + 1, 96))
    assert result["horizon_rows"] == 96 and result["step"] == 96
    assert "binomial" in result["verdict_test"]


def test_horizon_flag_sets_the_step_and_too_little_history_warns(tmp_path: Path) -> None:
    args = ("--data", str(SMALL), "--sensors", "*_TEMP", "--eps", "1.0", "--delta", "0.05")
    done = run_cli("backtest", *args, "--window", "24", "--horizon", "48", "--max-folds", "3")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["horizon_rows"] == 48 and result["step"] == 48 and result["n_folds"] == 3
    # 100 rows cannot calibrate a 2-day horizon: one warning line, every sensor backed up
    short = tmp_path / "short.csv"
    short.write_text("".join(SMALL.read_text().splitlines(keepends=True)[:101]))
    done = run_cli("plan", "--data", str(short), *args[2:], "--window", "24", "--horizon", "48")
    assert done.returncode == 0, done.stderr
    warnings = [ln for ln in done.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "too little history" in warnings[0]
    summary = json.loads(done.stdout)
    assert summary["n_backup"] == summary["n_sensors"]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--eps", "0"], "eps"),
        (["--eps", "-1"], "eps"),
        (["--delta", "1.2"], "delta"),
        (["--delta", "0"], "delta"),
        (["--window", "0"], "window"),
        (["--window", "5", "--slide", "6"], "slide"),
        (["--agg", "median"], "aggregate"),
        (["--sensors", "nope"], "unknown sensor"),
        (["--eps", "abc"], "invalid float"),
        (["--data", "missing.csv"], "missing.csv"),
        (["--window", "100000"], "longer than the history"),
        # refused before the history is read, not after a minute of planning
        (["--out", "/no-such-folder/plan.json", "--data", "missing.csv"], "no directory"),
        (["--out", "plan.txt"], "must end in .json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(flags: list[str], needle: str) -> None:
    base = {"--data": str(SMALL), "--eps": "1", "--delta": "0.05", "--window": "24"}
    args = list(flags)
    for key, value in base.items():
        if key not in flags:
            args += [key, value]
    done = run_cli("plan", *args, "--no-backtest")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert needle in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_time_unit_reads_epoch_milliseconds(tmp_path: Path) -> None:
    data = tmp_path / "epoch_ms.csv"
    rows = [f"{1709251200000 + i * 3600000},{i % 5},{i * i % 7},{i % 3}" for i in range(60)]
    data.write_text("\n".join(["time,a,b,c", *rows]) + "\n")
    base = ["plan", "--data", str(data), "--eps", "1", "--delta", "0.05", "--window", "4"]
    refused = run_cli(*base, "--no-backtest")
    assert refused.returncode == 2 and "--time-unit" in refused.stderr
    done = run_cli(*base, "--no-backtest", "--time-unit", "ms")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["validity"]["fit_start"].startswith("2024-03-01T00:00:00")


def test_recover_with_a_broken_config_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text('{"schema_version": 1, "surprise": true}')
    done = run_cli(
        "recover", "--config", str(bad), "--backup", str(SMALL), "--out", str(tmp_path / "o.csv")
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "config invalid" in done.stderr


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        # the plan's --horizon serves simulate too: PlanParameters names the value
        (["--horizon", "0"], "horizon must be an integer >= 1 row, got 0"),
        (["--rows", "100000"], "rows to replay"),
        # the limit said is the one that holds: a plan learns from at least 4 rows
        (["--rows", "717"], "rows to replay must be in [1, 716] (at least 4 rows before"),
        (["--disorder", "gamma:3"], "unknown delay kind 'gamma'"),
    ],
)
def test_simulate_refuses_a_bad_horizon_or_replay_before_spark_starts(
    flags: list[str], needle: str
) -> None:
    args = ["--data", str(SMALL), "--eps", "1", "--delta", "0.05", "--window", "24"]
    done = run_cli("simulate", *args, *flags)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], done.stderr


def test_simulate_passes_its_backup_uri_to_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """``simulate --backup URI`` puts the Parquet backup there (default: WORKDIR/backup)."""
    import engine.live.simulation as simulation
    from engine.cli_parser import build_parser
    from engine.data import load_history
    from engine.live.simulate import simulate_from_cli
    from engine.planning import PlanParameters

    seen: list[object] = []

    class Stop(Exception):
        pass

    def fake_run(*args: object, **kwargs: object) -> None:
        seen.append(args[4])  # the PipelinePaths
        raise Stop

    monkeypatch.setattr(simulation, "run_simulation", fake_run)
    history = load_history(SMALL).select(list(load_history(SMALL).sensors[:4]))
    params = PlanParameters(WindowQuery(1.0, 0.1, 24, aggregate="avg"))
    for extra, want in (
        (["--backup", "file:///mnt/shared/backup"], "file:///mnt/shared/backup"),
        ([], None),
    ):
        flags = ["--data", "x", "--eps", "1", "--delta", "0.1", "--window", "24", *extra]
        args = build_parser().parse_args(["simulate", *flags])
        with pytest.raises(Stop):
            simulate_from_cli(history, params, args)
        paths = seen.pop()
        assert paths.backup_uri == (want or str(paths.root / "backup"))  # type: ignore[attr-defined]


def test_simulate_disorder_draws_the_delays_it_names_with_its_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``simulate --disorder exp:60 --seed 4`` starts the run with those delays (the
    disorder stage then runs, as in the app); without it, readings arrive in order."""
    import engine.live.simulation as simulation
    from engine.cli_parser import build_parser
    from engine.data import load_history
    from engine.live.simulate import simulate_from_cli
    from engine.planning import PlanParameters

    seen: list[object] = []

    class Stop(Exception):
        pass

    def fake_run(*args: object, **kwargs: object) -> None:
        seen.append(kwargs["disorder"])
        raise Stop

    monkeypatch.setattr(simulation, "run_simulation", fake_run)
    history = load_history(SMALL).select(list(load_history(SMALL).sensors[:4]))
    params = PlanParameters(WindowQuery(1.0, 0.1, 24))
    base = ["simulate", "--data", "x", "--eps", "1", "--delta", "0.1", "--window", "24"]
    for extra in (["--disorder", "exp:60", "--seed", "4"], []):
        with pytest.raises(Stop):
            simulate_from_cli(history, params, build_parser().parse_args([*base, *extra]))
    late, in_order = seen
    assert in_order is None
    assert late.delays.describe() == "exp:60"  # type: ignore[attr-defined]
    drawn = late.rng.random()  # type: ignore[attr-defined]
    assert drawn == np.random.default_rng(4).random()


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`plan ... | head -1`: the pipe is closed before the JSON is printed. The command
    ends as a shell expects (141, 128 + SIGPIPE) without Python's BrokenPipeError trace."""
    import os

    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    args = ["plan", "--data", str(SMALL), "--sensors", "*_TEMP", "--eps", "1.0", "--delta", "0.05"]
    args += ["--window", "24", "--max-folds", "2", "--out", str(tmp_path / "plan.json")]
    done = subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=ROOT,
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
    )
    os.close(write)
    assert done.returncode == 141 and "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "plan.json").exists()  # the work itself was done


@pytest.mark.parametrize(
    ("source", "backup", "checkpoint", "said"),
    [
        ("nope", "b", "c", "--source .* is not a directory"),
        (".", "a_file", "c", "--backup .* is a file"),
        (".", "b", "a_file", "--checkpoint .* is a file"),
    ],
)
def test_run_says_a_wrong_local_path_in_one_line_and_writes_nothing(
    tmp_path: Path, source: str, backup: str, checkpoint: str, said: str
) -> None:
    import re

    from tests.production_reference import sample_rows, write_config

    write_config(tmp_path / "plan.json", sample_rows(48))
    (tmp_path / "a_file").write_text("")
    paths = [str(tmp_path / p) for p in (source, backup, checkpoint)]
    done = run_cli(
        "run", "--config", str(tmp_path / "plan.json"), "--source", paths[0],
        "--backup", paths[1], "--checkpoint", paths[2], "--available-now",
    )  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert re.search(said, done.stderr) and "Traceback" not in done.stderr
    assert not (tmp_path / "b").exists()  # no plan book, nothing else written


def test_simulate_failure_defaults_to_the_plans_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """``simulate --failure``: a crash by default for a plan with an exposure (the crash
    contract's failure), a machine loss without; the flag overrides; a bad kind is one line."""
    import engine.live.simulation as simulation
    from engine.cli_parser import build_parser
    from engine.data import load_history
    from engine.live.simulate import simulate_from_cli
    from engine.planning import PlanParameters

    seen: list[object] = []

    class Stop(Exception):
        pass

    def fake_run(*args: object, **kwargs: object) -> None:
        seen.append(kwargs["failure"])
        raise Stop

    monkeypatch.setattr(simulation, "run_simulation", fake_run)
    history = load_history(SMALL).select(list(load_history(SMALL).sensors[:4]))
    base = ["simulate", "--data", "x", "--eps", "1", "--delta", "0.1", "--window", "24"]
    cases = [(None, [], "machine"), (6, [], "crash"), (6, ["--failure", "machine"], "machine"),
             (None, ["--failure", "crash"], "crash")]  # fmt: skip
    for exposure, extra, want in cases:
        params = PlanParameters(WindowQuery(1.0, 0.1, 24, exposure=exposure))
        with pytest.raises(Stop):
            simulate_from_cli(history, params, build_parser().parse_args([*base, *extra]))
        assert seen.pop() == want
    done = run_cli("simulate", *base[1:], "--failure", "disk")
    assert done.returncode == 2 and "invalid choice: 'disk'" in done.stderr


@pytest.mark.parametrize(
    "args",
    [("--help",), ("plan", "--help"), ("run", "--help"), ("plan", "--eps", "1")],
    ids=["help", "plan-help", "run-help", "missing-flags"],
)
def test_help_and_a_rejected_argument_answer_before_the_heavy_libraries_load(
    args: tuple[str, ...],
) -> None:
    """The parser imports nothing that a command needs only once it runs: SciPy, pandas,
    PyArrow, DuckDB, PySpark (2.5 s of start-up otherwise, before a flag is read)."""
    heavy = ("scipy", "pandas", "pyarrow", "duckdb", "pyspark")
    probe = (
        "import sys\n"
        "from engine.cli import main\n"
        f"try:\n    code = main({list(args)!r})\nexcept SystemExit as done:\n    code = done.code\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r})\n"
        "print('LOADED', code, ','.join(loaded), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    line = done.stderr.strip().splitlines()[-1]
    code, loaded = line.split(" ")[1], line.split(" ")[2:] or [""]
    assert code in ("0", "2"), done.stderr
    assert loaded == [""], f"loaded {loaded[0]} for {args}"


def test_status_answers_without_scipy_stats(tmp_path: Path) -> None:
    """``status`` needs SciPy's incomplete beta (binomial bounds), not ``scipy.stats``, whose
    import alone costs about a second: the bounds come from ``scipy.special``."""
    probe = (
        "import sys\n"
        "from engine.cli import main\n"
        f"code = main(['status', '--backup', {str(tmp_path)!r}])\n"
        "print('LOADED', code, 'scipy.stats' in sys.modules, 'scipy.special' in sys.modules, "
        "file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    line = done.stderr.strip().splitlines()[-1]
    assert line == "LOADED 2 False True", done.stderr  # refused: no plan book, after the imports


def test_simulate_says_its_warnings_before_the_run_and_each_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run takes minutes: a warning about accepted input is said before it starts,
    not kept to its end; the parameters are read twice (before and after the data), their
    warning is said once. The plan's own warnings (here: two units under one eps) are
    said there too, as ``plan`` says them."""
    import engine.live.simulation as simulation
    from engine.cli import _main
    from engine.errors import DataError

    seen: list[str] = []

    def fake_start(*args: object, **kwargs: object) -> None:  # the run's first step
        seen.append(capsys.readouterr().err)
        raise DataError("the run stopped here")

    monkeypatch.setattr(simulation, "start_live", fake_start)
    code = _main(["simulate", "--data", str(SMALL), "--eps", "1", "--delta", "0.1",
                  "--window", "24", "--horizon", "12", "--rows", "96"])  # fmt: skip
    assert code == 2
    said = seen[0].strip().splitlines()
    assert said[0] == ("warning: --horizon 12 is shorter than a window: planned for one "
                       "window (24 rows)"), said  # fmt: skip
    assert len(said) == 2 and said[1].startswith("warning: the sensors have 2 units"), said
    assert capsys.readouterr().err.strip() == "error: the run stopped here"


def test_simulate_refuses_a_replay_too_short_to_fail_in_alone_without_its_warnings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay of 12 rows under a window of 24 leaves no open window to fail inside: one
    line, the refusal, before the run starts and without the horizon's warning."""
    import engine.live.simulation as simulation
    from engine.cli import _main

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(simulation, "start_live", never)
    code = _main(["simulate", "--data", str(SMALL), "--eps", "1", "--delta", "0.1",
                  "--window", "24", "--horizon", "12", "--rows", "12"])  # fmt: skip
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "leaves no open window" in lines[0], lines


def test_backtest_says_the_mixed_unit_warning_as_plan_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One eps over degC and ug/m3 pools errors of both units in the verdict: ``plan``
    warned of it, ``backtest`` of the same parameters said nothing."""
    from engine.cli import _main

    code = _main(["backtest", "--data", str(SMALL), "--eps", "1", "--delta", "0.05",
                  "--window", "24", "--max-folds", "2"])  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith("warning: the sensors have 2 units") for line in err), err
