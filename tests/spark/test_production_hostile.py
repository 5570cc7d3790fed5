"""The production job on hostile landing files: nothing lost, nothing silently wrong.

* a file Spark cannot read (values written as text) stops the job with one
  line naming the file and the column; once the file is rewritten, the job
  resumes and backs up every reading exactly once (pandas' nanosecond
  timestamps are read: ``tests/hostile/test_hostile_job.py``);
* a sensor the plan does not know is backed up in full, readings without a
  sensor are counted and dropped, NaN readings are counted; each is an
  ``input_anomaly`` event kept beside the backup.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import read_backup
from engine.errors import PipelineError
from engine.export.recover import recover_dataset
from engine.job.status import read_job_status
from tests.production_reference import (
    BACKUP,
    feed,
    land_long,
    landed_sample,
    long_readings,
    read_results,
    run_landed,
    sample_rows,
    write_config,
)

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def _run(spark: Any, tmp: Path) -> list[dict[str, Any]]:
    return run_landed(spark, tmp, tmp / "plan.json", replan=False)[1]


def test_a_file_spark_cannot_read_stops_the_job_and_loses_nothing(
    spark: Any, tmp_path: Path
) -> None:
    rows = landed_sample(tmp_path, 48, rows_per_file=12, stop=24)
    later = long_readings(rows).iloc[24 * len(rows.sensors) :].copy()
    later["event_time"] = later["event_time"].astype("datetime64[us]")
    bad = tmp_path / "landing" / "zz-text-values.parquet"
    later.astype({"value": str}).to_parquet(bad, index=False)  # values written as text
    with pytest.raises(PipelineError) as info:
        _run(spark, tmp_path)
    line = str(info.value)
    assert "\n" not in line and "zz-text-values.parquet" in line
    assert "[value]" in line and "BINARY" in line

    later.to_parquet(bad, index=False)  # the operator's fix
    _run(spark, tmp_path)
    backup = read_backup(tmp_path / "backup")
    truth = long_readings(rows)
    want = truth[truth["sensor"].isin(BACKUP)]
    assert len(backup) == len(want)  # every backup reading once, the fixed file's too
    assert not backup.duplicated(["event_time", "sensor"]).any()


@pytest.mark.parametrize("column", ["event_time", "value"])
def test_a_file_without_a_landing_column_stops_the_job_and_loses_nothing(
    spark: Any, tmp_path: Path, column: str
) -> None:
    """Spark reads a missing column as nulls: its readings would be counted as unusable or
    missing and the file consumed for good. The job stops instead, naming the file and
    the column; fixed, the file's readings are backed up like every other's."""
    rows = landed_sample(tmp_path, 48, rows_per_file=12, stop=24)
    later = long_readings(rows).iloc[24 * len(rows.sensors) :].copy()
    later["event_time"] = later["event_time"].astype("datetime64[us]")
    bad = tmp_path / "landing" / "zz-renamed.parquet"
    later.rename(columns={column: "other"}).to_parquet(bad, index=False)
    with pytest.raises(PipelineError) as info:
        run_landed(spark, tmp_path, tmp_path / "plan.json", replan=False, max_files_per_trigger=1)
    line = str(info.value)
    assert "\n" not in line and "zz-renamed.parquet" in line
    assert f"has no column {column}" in line

    later.to_parquet(bad, index=False)  # the operator's fix
    _run(spark, tmp_path)
    backup = read_backup(tmp_path / "backup")
    truth = long_readings(rows)
    want = truth[truth["sensor"].isin(BACKUP)]
    assert len(backup) == len(want) and backup["value"].notna().all()
    assert not backup.duplicated(["event_time", "sensor"]).any()


def test_the_cli_says_an_unreadable_file_in_one_line_without_spark_stack_traces(
    tmp_path: Path,
) -> None:
    """``engine run`` exits 2 and ends on its one line; Spark's task failures are logged
    one line each (they were 300 lines of stack traces before that line)."""
    rows = sample_rows(24)
    write_config(tmp_path / "plan.json", rows)
    frame = long_readings(rows).astype({"value": str})  # values written as text
    frame["event_time"] = frame["event_time"].astype("datetime64[us]")
    (tmp_path / "landing").mkdir()
    frame.to_parquet(tmp_path / "landing" / "from-pandas.parquet", index=False)
    paths = {k: str(tmp_path / k) for k in ("landing", "backup", "checkpoint")}
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", "--config", str(tmp_path / "plan.json"),
         "--source", paths["landing"], "--backup", paths["backup"],
         "--checkpoint", paths["checkpoint"], "--available-now"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "from-pandas.parquet" in lines[-1]
    assert not [x for x in lines if x.lstrip().startswith(("at ", "Caused by", "..."))]
    assert "Traceback" not in done.stderr and len(lines) < 30


def test_unknown_sensors_rows_without_a_sensor_and_nans_are_counted_and_kept(
    spark: Any, tmp_path: Path
) -> None:
    rows = landed_sample(tmp_path, 48, rows_per_file=24)
    times = pd.DatetimeIndex(rows.times[:42]).astype("datetime64[us]")
    rebuilt = next(s for s in rows.sensors if s not in BACKUP)
    odd = pd.DataFrame(
        {
            "event_time": np.concatenate(
                [times[:30], times[:5], times[:4], times[40:42], np.full(3, np.datetime64("NaT"))]
            ),
            "sensor": ["NEW_SENSOR"] * 30 + [None] * 5 + [BACKUP[0]] * 4 + [rebuilt] * 2
            + [BACKUP[0]] * 3,
            # NaN and infinite values: missing readings, each (one inf is not a miss)
            "value": np.r_[np.arange(30.0), np.ones(5), np.nan, -np.inf, np.nan, np.nan,
                           np.inf, np.nan, np.ones(3)],
        }
    )  # fmt: skip
    land_long(odd, tmp_path / "landing" / "zz-odd.parquet")  # NaN stays NaN, not null
    logged = _run(spark, tmp_path)

    events = [r for r in logged if r["event"] == "input_anomaly"]
    assert sum(e["unplanned_readings"] for e in events) == 30
    assert sum(e["unusable_readings"] for e in events) == 5 + 3  # no sensor; no time
    assert sum(e["missing_values"] for e in events) == 4 + 2
    assert {s for e in events for s in e["unplanned_sensors"]} == {"NEW_SENSOR"}
    shadows = [r for r in logged if r["event"] == "shadow"]
    assert sum(r["readings"] for r in shadows) == 48 * len(rows.sensors) + 44
    backup = read_backup(tmp_path / "backup")
    kept = backup[backup["sensor"] == "NEW_SENSOR"].sort_values("event_time")
    np.testing.assert_array_equal(kept["value"].to_numpy(), np.arange(30.0))  # not lost
    # and recovery gives it back as read, after the plan's columns, and says why
    done = recover_dataset(tmp_path / "plan.json", tmp_path / "backup", tmp_path / "r.csv")
    frame = pd.read_csv(tmp_path / "r.csv")
    assert list(frame.columns)[-1] == "NEW_SENSOR" and done.sensors == len(rows.sensors)
    # at every time step: the -inf second reading of a backup sensor at times[1] leaves
    # that step unrebuilt (recover keeps the last reading of a pair), its readings kept
    np.testing.assert_array_equal(frame["NEW_SENSOR"].dropna().to_numpy(), np.arange(30.0))
    torn = frame[frame[rebuilt].isna()]
    assert done.incomplete_rows == 1 and len(torn) == 1 and torn["NEW_SENSOR"].item() == 1.0
    assert any("outside the plan (NEW_SENSOR)" in w for w in done.warnings)
    assert backup["event_time"].notna().all()  # a backup reading without a time: not kept
    status = read_job_status(tmp_path / "backup")
    assert {e["event"] for e in status.events} >= {"input_anomaly"}
    # the NaN readings are left out of their windows: every window that closed is
    # aggregated over the readings it has, and checked, in the job's metrics and in
    # what the console reads back alike
    results = read_results(tmp_path / "backup")
    rebuilt_rows = results[~results["backed_up"] & results["rebuilt"].notna()]
    assert np.isfinite(rebuilt_rows["error"]).all() and (rebuilt_rows["n"] <= 8).all()
    assert np.isfinite(results["value"].dropna()).all()
    assert np.isneginf(backup.loc[backup["sensor"] == BACKUP[0], "value"]).sum() == 1  # as came
    pairs = sum(r["rebuilt_pairs"] for r in shadows)
    assert pairs == len(rebuilt_rows) == status.rates["windows"].sum()


def test_readings_that_land_twice_are_said_as_overfull_windows(spark: Any, tmp_path: Path) -> None:
    """The same 12 readings of one sensor in a second file: every window holding them
    has more readings than time steps; the job says how many, and which sensor."""
    rows = landed_sample(tmp_path, 48, rows_per_file=24)  # window 8, slide 4 readings (hours)
    sensor = next(s for s in rows.sensors if s not in BACKUP)
    truth = long_readings(rows)
    again = truth[truth["sensor"] == sensor].iloc[:12]
    land_long(again, tmp_path / "landing" / "zz-again.parquet")
    logged = _run(spark, tmp_path)

    # reference: epoch-aligned windows of 8 h every 4 h over the sensor's readings
    hour = 3600 * 10**6
    t = np.r_[truth.loc[truth["sensor"] == sensor, "event_time"], again["event_time"]]
    t = t.astype("datetime64[us]").astype(np.int64)
    starts = np.arange(t.min() // (4 * hour) * 4 * hour - 4 * hour, t.max(), 4 * hour)
    n = np.array([((t >= s) & (t < s + 8 * hour)).sum() for s in starts])
    results = read_results(tmp_path / "backup")
    closed = set(results["start_s"] * 10**6)
    keep = np.isin(starts, list(closed))
    want_pairs, want_excess = int((n[keep] > 8).sum()), int(np.clip(n[keep] - 8, 0, None).sum())
    assert want_pairs >= 2  # the test sees the duplicates

    events = [r for r in logged if r["event"] == "overfull_windows"]
    assert {s for e in events for s in e["sensors"]} == {sensor}
    assert sum(e["pairs"] for e in events) == want_pairs
    assert sum(e["excess_readings"] for e in events) == want_excess
    shadows = [r for r in logged if r["event"] == "shadow"]
    assert sum(r["overfull_pairs"] for r in shadows) == want_pairs
    assert "overfull_windows" in {e["event"] for e in read_job_status(tmp_path / "backup").events}


def test_a_file_that_lands_after_its_windows_closed_is_said_late(
    spark: Any, tmp_path: Path
) -> None:
    """Rows 24-47 land first, rows 0-23 after: every one of the later file's windows
    had closed, so its readings are backed up, counted late, and in no window."""
    rows = landed_sample(tmp_path, 48, rows_per_file=24, start=24)  # window 8, slide 4 readings
    _run(spark, tmp_path)
    feed(rows, tmp_path / "landing", rows_per_file=24, stop=24)
    logged = _run(spark, tmp_path)

    n = len(rows.sensors)
    events = [r for r in logged if r["event"] == "late_readings"]
    # a reading counts in its latest window; every window of rows 0-23 ends by row 24,
    # before the watermark (row 47): all 24 x n readings are late
    assert sum(e["late_readings"] for e in events) == 24 * n
    assert sum(r["late_readings"] for r in logged if r["event"] == "shadow") == 24 * n
    backup = read_backup(tmp_path / "backup")
    assert len(backup) == 48 * len(BACKUP)  # nothing lost from the backup
    assert "late_readings" in {e["event"] for e in read_job_status(tmp_path / "backup").events}


def test_readings_stamped_in_the_future_do_not_move_the_watermark(
    spark: Any, tmp_path: Path
) -> None:
    """A sender whose clock says 2099: its readings would move the watermark there and
    every later reading would be late for good. They are backed up, counted and said,
    and left out of the windows; the readings that land after them are windowed."""
    rows = landed_sample(tmp_path, 48, rows_per_file=24, stop=24)
    wrong = long_readings(rows).iloc[: 2 * len(rows.sensors)].copy()
    wrong["event_time"] = wrong["event_time"] + pd.Timedelta(days=30_000)  # about 2098
    land_long(wrong, tmp_path / "landing" / "part-000000-zz-future.parquet")
    first = _run(spark, tmp_path)
    feed(rows, tmp_path / "landing", rows_per_file=24, start=24)
    second = _run(spark, tmp_path)

    n = len(rows.sensors)
    said = [r for r in first + second if r["event"] == "future_readings"]
    assert sum(r["future_readings"] for r in said) == 2 * n
    assert said[0]["latest"].startswith("20")
    assert sum(r["late_readings"] for r in second if r["event"] == "shadow") == 0
    assert sum(r["windows"] for r in second if r["event"] == "shadow") > 0
    backup = read_backup(tmp_path / "backup")
    assert len(backup) == (48 + 2) * len(BACKUP)  # the odd readings kept, as they came
    results = read_results(tmp_path / "backup")
    assert results["end_s"].max() < pd.Timestamp("2030-01-01").timestamp()
