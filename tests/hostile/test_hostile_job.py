"""The production job against what an operator's machine really does to it: a lost window
state, files in the wrong place or in pandas' format, a backup read by other tools, storage
that refuses writes, a killed JVM, two runs on one checkpoint. Spark, the session shared
with ``tests/spark``; the process boundary (a killed JVM, two processes) in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import read_backup
from engine.errors import PipelineError
from engine.stream.query_errors import CONCURRENT_RUNS
from tests.production_reference import (
    BACKUP,
    feed,
    land_long,
    landed_sample,
    long_readings,
    run_landed,
    sample_rows,
    write_config,
)

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def _run(spark: Any, tmp: Path, **kw: Any) -> list[dict[str, Any]]:
    return run_landed(spark, tmp, tmp / "plan.json", replan=False, **kw)[1]


def _shadows(logged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in logged if r["event"] == "shadow"]


@pytest.mark.parametrize("lost", ["newest_state_file", "state_directory"])
def test_a_lost_window_state_is_refused_not_resumed(spark: Any, tmp_path: Path, lost: str) -> None:
    """Resuming from an older state reported a window twice for every sensor and never
    the next (exit 0); without any state, the monitor's tally restarted at 0."""
    rows = landed_sample(tmp_path, 64, rows_per_file=8, stop=32)
    first = _shadows(_run(spark, tmp_path, max_files_per_trigger=1))
    state = tmp_path / "checkpoint" / "lacuna_state"
    files = sorted(state.glob("*.arrow"))
    assert len(first) == 4 and len(files) == 2  # the last two states are kept
    if lost == "newest_state_file":
        files[-1].unlink()
    else:
        for f in state.iterdir():
            f.unlink()
        state.rmdir()
    feed(rows, tmp_path / "landing", rows_per_file=8, start=32)
    with pytest.raises(PipelineError) as info:
        _run(spark, tmp_path, max_files_per_trigger=1)
    line = str(info.value)
    assert "\n" not in line and "window state after micro-batch 3 is missing" in line
    assert "new --checkpoint" in line
    results = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{tmp_path}/backup/_lacuna/results/*/part-*')"
    ).fetchone()[0]
    assert results == sum(r["windows"] * len(rows.sensors) for r in first)  # nothing twice


def test_files_in_a_subdirectory_are_said_never_read(spark: Any, tmp_path: Path) -> None:
    rows = landed_sample(tmp_path, 48, rows_per_file=12, stop=24)
    later = long_readings(rows).iloc[24 * len(rows.sensors) :]
    (tmp_path / "landing" / "day2").mkdir()
    land_long(later, tmp_path / "landing" / "day2" / "late.parquet")  # Spark never reads it
    logged = _run(spark, tmp_path)
    said = [r for r in logged if r["event"] == "unread_landing_files"]
    assert len(said) == 1 and said[0]["files"] == 1
    assert said[0]["examples"] == ["day2/late.parquet"] and "never be read" in said[0]["why"]
    events = sorted((tmp_path / "backup" / "_lacuna" / "events").glob("*unread_landing*"))
    assert len(events) == 1  # kept beside the backup: `status` shows it


def test_pandas_nanosecond_files_are_read_truncated_to_microseconds(
    spark: Any, tmp_path: Path
) -> None:
    """Most scripts write pandas' default (INT64 nanoseconds), which Spark cannot read as a
    timestamp. The job reads them, truncated to microseconds, and says so once."""
    rows = landed_sample(tmp_path, 48, rows_per_file=12, stop=24)
    later = long_readings(rows).iloc[24 * len(rows.sensors) :].copy()
    later["event_time"] = pd.to_datetime(later["event_time"]).astype("datetime64[ns]")
    later["event_time"] += pd.Timedelta(nanoseconds=999)  # below a microsecond: truncated
    middle = len(later) // 2
    for i, half in enumerate((later.iloc[:middle], later.iloc[middle:])):
        half.to_parquet(tmp_path / "landing" / f"zz-pandas-{i}.parquet", index=False)
    logged = _run(spark, tmp_path, max_files_per_trigger=1)
    said = [r for r in logged if r["event"] == "nanosecond_timestamps"]
    assert len(said) == 1 and "truncated to microseconds" in said[0]["why"]
    backup = read_backup(tmp_path / "backup")
    truth = long_readings(rows)
    want = truth[truth["sensor"].isin(BACKUP)].sort_values(["event_time", "sensor"])
    assert len(backup) == len(want) and not backup.duplicated(["event_time", "sensor"]).any()
    got = backup.sort_values(["event_time", "sensor"])
    assert (got["event_time"].to_numpy() == want["event_time"].to_numpy()).all()
    np.testing.assert_array_equal(got["value"].to_numpy(), want["value"].to_numpy())


@pytest.mark.parametrize(("scale", "unit"), [(1, "seconds"), (1000, "milliseconds")])
def test_integer_epoch_times_are_refused_with_the_unit_to_use(
    spark: Any, tmp_path: Path, scale: int, unit: str
) -> None:
    rows = landed_sample(tmp_path, 24, rows_per_file=12, stop=12)
    later = long_readings(rows).iloc[12 * len(rows.sensors) :].copy()
    seconds = pd.to_datetime(later["event_time"]).astype("datetime64[s]").astype(np.int64)
    later["event_time"] = seconds * scale
    later.to_parquet(tmp_path / "landing" / "zz-epoch.parquet", index=False)
    with pytest.raises(PipelineError) as info:
        _run(spark, tmp_path)
    line = str(info.value)
    assert "zz-epoch.parquet" in line and "event_time is an integer" in line
    assert f"epoch {unit}" in line and "nanosecond" not in line


def test_the_backup_is_one_dataset_to_duckdb_and_spark_with_their_defaults(
    spark: Any, tmp_path: Path
) -> None:
    rows = landed_sample(tmp_path, 48, rows_per_file=12)
    _run(spark, tmp_path, max_files_per_trigger=2)
    backup = tmp_path / "backup"
    want = len(read_backup(backup))
    assert want == 48 * len(BACKUP)
    got = duckdb.sql(
        f"SELECT count(*), count(DISTINCT batch_id) FROM "
        f"read_parquet('{backup}/**/*.parquet', hive_partitioning = true)"
    ).fetchone()
    assert got == (want, 2)
    assert spark.read.parquet(str(backup)).count() == want
    # the job's record lists each batch's files: a lost one is refused by every reader
    part = next((backup / "batch_id=1").rglob("part-*.parquet"))
    part.unlink()
    with pytest.raises(Exception, match=r"batch_id=1 lacks its file date="):
        read_backup(backup)
    assert rows.values.shape[0] == 48


def test_storage_refusing_a_write_is_said_with_its_cause(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only backup or a full disk: the cause (not 'Return Message: Traceback')."""
    import errno

    from engine.backup.durable import DurableFiles

    landed_sample(tmp_path, 24, rows_per_file=12)
    real = DurableFiles.write
    for code, said in ((errno.EACCES, "permission denied"), (errno.ENOSPC, "no space left")):

        def refuse(self: Any, uri: str, data: bytes, code: int = code) -> None:
            if "_lacuna/results" in uri:  # inside the micro-batch, after the backup
                raise OSError(code, os.strerror(code), uri)
            real(self, uri, data)

        monkeypatch.setattr(DurableFiles, "write", refuse)
        with pytest.raises(PipelineError) as info:
            _run(spark, tmp_path)
        line = str(info.value)
        assert "\n" not in line and said in line and "Traceback" not in line
        assert "_lacuna/results" in line
        monkeypatch.setattr(DurableFiles, "write", real)


def _job(tmp: Path, checkpoint: str = "checkpoint", *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "run", "--config", str(tmp / "plan.json"),
         "--source", str(tmp / "landing"), "--backup", str(tmp / "backup"),
         "--checkpoint", str(tmp / checkpoint), "--trigger", "0.5", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def _java_children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_killed_spark_jvm_is_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    rows = sample_rows(48)
    write_config(tmp_path / "plan.json", rows)
    feed(rows, tmp_path / "landing", rows_per_file=12)
    job = _job(tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not list((tmp_path / "backup" / "_lacuna" / "metrics").glob("batch_id=*")):
            assert job.poll() is None and time.monotonic() < deadline, "the job never ran"
            time.sleep(0.5)
        for pid in _java_children(job.pid):
            os.kill(pid, signal.SIGKILL)  # the driver JVM that pyspark started
        _, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("{")]
    assert job.returncode == 2, err[-3000:]
    assert lines[-1].startswith("error: the Spark driver JVM died")
    assert "Traceback" not in err and "py4j" not in err.lower()


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_two_runs_on_one_checkpoint_say_the_same_one_line(tmp_path: Path) -> None:
    """Started at the same instant on an empty checkpoint, the loser of the race printed
    SparkConcurrentModificationException and 30 Java frames; 50 s apart the second was
    refused in one line. Both now end on the same line, and the winner goes on."""
    rows = sample_rows(96)
    write_config(tmp_path / "plan.json", rows)
    feed(rows, tmp_path / "landing", rows_per_file=4)
    jobs = [_job(tmp_path), _job(tmp_path)]
    try:
        deadline = time.monotonic() + 400
        while all(j.poll() is None for j in jobs):
            assert time.monotonic() < deadline, "neither run stopped"
            time.sleep(0.5)
        loser = next(j for j in jobs if j.poll() is not None)
        winner = next(j for j in jobs if j is not loser)
        _, err = loser.communicate(timeout=60)
        assert winner.poll() is None  # the other run is unharmed
    finally:
        for j in jobs:
            if j.poll() is None:
                j.send_signal(signal.SIGTERM)
        for j in jobs:
            j.communicate(timeout=120)
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("{")]
    assert loser.returncode == 2, err[-3000:]
    assert lines[-1].startswith("error: ") and CONCURRENT_RUNS in lines[-1], err[-3000:]
    assert "Traceback" not in err and not [x for x in lines if x.lstrip().startswith("at ")]
    assert winner.returncode == 0


def test_a_file_landed_with_an_old_modification_time_is_read(spark: Any, tmp_path: Path) -> None:
    """Spark's file source skipped, for good and without a word, a file whose modification
    time was 7 days older than the newest it had read (a late upload, or a file moved in
    as the job advises for a subdirectory: ``mv`` keeps the time)."""
    rows = landed_sample(tmp_path, 48, rows_per_file=12, stop=24)
    landing = tmp_path / "landing"
    read = set(landing.glob("*.parquet"))
    _run(spark, tmp_path)
    feed(rows, landing, rows_per_file=12, start=24)
    late = set(landing.glob("*.parquet")) - read
    ten_days_ago = time.time() - 10 * 86400
    for f in late:
        os.utime(f, (ten_days_ago, ten_days_ago))
    assert len(late) == 2
    _run(spark, tmp_path)
    backup = read_backup(tmp_path / "backup")
    want = long_readings(rows)
    assert len(backup) == int(want["sensor"].isin(BACKUP).sum())  # all 48 rows backed up


def test_a_version_left_by_a_run_killed_before_its_commit_is_withdrawn(
    spark: Any, tmp_path: Path
) -> None:
    """A run that wrote a plan version in micro-batch b and was killed before Spark
    committed b left that version (first batch b + 1) in the plan book; Spark runs b
    again, which decides afresh. The version is withdrawn as b starts, and said."""
    from engine.export import load_config
    from engine.export.plan_book import JobPlan, plan_file, read_plan_book

    rows = landed_sample(tmp_path, 48, rows_per_file=12, stop=24)
    first = _run(spark, tmp_path, max_files_per_trigger=1)
    done = max(r["batch_id"] for r in first if "batch_id" in r)
    phantom = JobPlan(2, done + 2, "alert", "a killed run's", load_config(tmp_path / "plan.json"))
    plans = tmp_path / "backup" / "_lacuna" / "plans"
    (plans / plan_file(2)).write_bytes(phantom.to_bytes())
    feed(rows, tmp_path / "landing", rows_per_file=12, start=24)
    logged = _run(spark, tmp_path, max_files_per_trigger=1)
    said = [r for r in logged if r["event"] == "plan_versions_withdrawn"]
    assert len(said) == 1 and said[0]["versions"] == [2] and said[0]["batch_id"] == done + 1
    assert sorted(read_plan_book(tmp_path / "backup")) == [1]
