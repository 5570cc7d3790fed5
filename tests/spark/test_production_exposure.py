"""The production job keeps a crash-contract plan's exposure on real Spark: a micro-batch
holding more rows than the plan covers backs up every sensor, says so (event, metrics,
progress line, ``status``), and the start states the contract and the checkpoint's
durability; recover over the range says the range contract covers it and gives the
backlog's readings as read. The shadow check's monitor measures the crash contract a
crash plan promises, not whole windows rebuilt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import read_backup
from engine.export import load_config
from engine.export.recover import recover_dataset
from engine.job import read_job_status
from engine.model import LinearMap
from tests.production_reference import (
    BACKUP,
    SENSORS,
    Rows,
    feed,
    long_readings,
    read_results,
    recovered_readings,
    reference_results,
    run_landed,
    sample_rows,
    write_config,
)

pytestmark = pytest.mark.spark

EXPOSURE = 6


def test_batches_over_the_exposure_back_up_every_sensor(spark: Any, tmp_path: Path) -> None:
    rows = sample_rows(48)
    config = tmp_path / "plan.json"
    write_config(config, rows, aggregate="avg", eps=1.0, exposure=EXPOSURE)
    # six files of 4 rows (within the exposure); then, resumed, a backlog of two files
    # of 12 rows (over it)
    feed(rows, tmp_path / "landing", rows_per_file=4, stop=24)
    first, logged = run_landed(spark, tmp_path, config, max_files_per_trigger=1, replan=False)
    assert first.batches == 6 and first.batches_over_exposure == 0
    feed(rows, tmp_path / "landing", rows_per_file=12, start=24)
    second, more = run_landed(spark, tmp_path, config, max_files_per_trigger=1, replan=False)
    assert second.batches == 2 and second.batches_over_exposure == 2
    logged += more

    backup = read_backup(tmp_path / "backup")
    truth = long_readings(rows)
    cut = pd.Timestamp(rows.times[24])
    within, over = backup[backup["event_time"] < cut], backup[backup["event_time"] >= cut]
    assert set(within["sensor"]) == set(BACKUP) and len(within) == 24 * len(BACKUP)
    # every sensor's every reading of the batches over the exposure, as it landed
    want = truth[truth["event_time"] >= cut].sort_values(["event_time", "sensor"])
    assert set(over["sensor"]) == set(SENSORS) and len(over) == len(want) == 24 * len(SENSORS)
    np.testing.assert_array_equal(over["value"].to_numpy(), want["value"].to_numpy())

    said = [r for r in logged if r["event"] == "over_exposure"]
    assert [(r["batch_id"], r["rows"], r["exposure_rows"]) for r in said] == [
        (6, 12, EXPOSURE),
        (7, 12, EXPOSURE),
    ]
    kept = sorted(p.name for p in (tmp_path / "backup" / "_lacuna" / "events").iterdir())
    assert [n for n in kept if "over_exposure" in n] == [
        "000000000006-over_exposure.json",
        "000000000007-over_exposure.json",
    ]
    shadow = {
        r["batch_id"]: (r["rows"], r["over_exposure"]) for r in logged if r["event"] == "shadow"
    }
    assert shadow == {b: (4, False) for b in range(6)} | {6: (12, True), 7: (12, True)}
    progress = {r["batchId"]: r["over_exposure"] for r in logged if r["event"] == "progress"}
    assert progress == {b: b >= 6 for b in range(8)}

    start = next(r for r in logged if r["event"] == "contract")
    assert start["contract"] == "crash" and start["exposure_rows"] == EXPOSURE
    assert start["checkpoint_local"] and "process crash" in start["durability"]
    # a catch-up run takes what landed: warned once a start
    assert sum(r["event"] == "exposure_warning" for r in more) == 1

    status = read_job_status(tmp_path / "backup")
    summary = status.summary()
    assert summary["batches_over_exposure"] == 2
    assert summary["contract"] == "crash" and summary["exposure_rows"] == EXPOSURE
    assert "lost machine" in str(summary["durability"])
    stored = json.loads((tmp_path / "backup" / "_lacuna" / "run.json").read_text())
    assert stored == {k: start[k] for k in stored}

    # recover over the range: the range contract, and the backlog's readings as read
    out = tmp_path / "rebuilt.parquet"
    start, end = pd.Timestamp(rows.times[18]).isoformat(), pd.Timestamp(rows.times[42]).isoformat()
    result = recover_dataset(config, tmp_path / "backup", out, start, end)
    lm = load_config(config).linear_map()
    assert result.contract == "range" and result.guarantee.startswith("range contract")
    assert "crash contract (6 rows lost" in result.guarantee
    assert result.rows == 24 and result.stored_readings == 18 * len(lm.targets)
    got = pd.read_parquet(out)[list(lm.sensors)].to_numpy()
    truth = rows.values[18:42][:, [rows.sensors.index(s) for s in lm.sensors]]
    rebuilt = lm.apply(rows.values[18:42][:, [rows.sensors.index(b) for b in lm.backup]])
    np.testing.assert_allclose(got[:6], rebuilt[:6], rtol=1e-12)
    np.testing.assert_array_equal(got[6:], truth[6:])

    # each window's shadow check scores what that recovery returns: the window across
    # row 24 is rebuilt before it and exact from it, and those after are backed up
    recovered = recovered_readings(rows, lm)
    recovered[24:] = rows.values[24:]
    want = reference_results(rows, lm, 8 * 3600.0, 4 * 3600.0, "avg", 1.0, recovered=recovered)
    results = read_results(tmp_path / "backup")
    both = want.merge(results, on=["start_s", "sensor"], suffixes=("_ref", ""), validate="1:1")
    assert len(both) == len(want) == len(results)
    np.testing.assert_allclose(both["rebuilt"], both["rebuilt_ref"], rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(both["miss"], both["miss_ref"])
    cut_s = int(rows.times[24].astype("datetime64[s]").astype(np.int64))
    assert both.loc[both["start_s"] >= cut_s, "backed_up"].all()
    straddling = both[(both["start_s"] < cut_s) & (both["end_s"] > cut_s)]
    targets = straddling["sensor"].isin(lm.targets)
    assert targets.any() and not straddling.loc[targets, "backed_up"].any()
    assert straddling.loc[~targets, "backed_up"].all()


def test_a_crash_plan_rebuilding_whole_windows_badly_but_lost_stretches_well_does_not_alert(
    spark: Any, tmp_path: Path
) -> None:
    """Rebuilt 1.5 off, every whole window misses eps 1 (the range contract would alert
    after 10 windows), but 4 lost rows of 8 move the average at most 0.75: the crash
    contract the plan promises holds, and the job's monitor stays quiet."""
    logged = _offset_plan(spark, tmp_path, bias=1.5)
    assert not [r for r in logged if r["event"] == "alert"]
    shadow = [r for r in logged if r["event"] == "shadow"]
    assert {r["contract"] for r in shadow} == {"crash"}
    assert sum(r["crash_windows"] for r in shadow) == 12  # every whole window closed
    assert sum(r["crash_misses"] for r in shadow) == 0
    results = read_results(tmp_path / "backup")
    b = results[results["sensor"] == "b"]
    assert len(b) >= 12 and b["miss"].all()  # what the range check saw
    summary = read_job_status(tmp_path / "backup").summary()
    assert summary["shadow_contract"] == "crash" and summary["crash_windows"] == 12
    assert summary["crash_miss_rate"] == 0
    # the status judges the plan by its own contract; the whole-window figure stands beside
    assert summary["sensors_above_delta"] == 0 and summary["range_sensors_above_delta"] == 1


def test_a_crash_plan_whose_lost_stretches_miss_alerts(spark: Any, tmp_path: Path) -> None:
    """Rebuilt 3 off: a failure losing 3 or 4 of a window's rows (7 of its 11 failure
    positions) moves the average more than eps 1; the job's monitor alerts on b."""
    logged = _offset_plan(spark, tmp_path, bias=3.0)
    shadow = [r for r in logged if r["event"] == "shadow"]
    windows = sum(r["crash_windows"] for r in shadow)
    assert windows == 12
    assert sum(r["crash_misses"] for r in shadow) == pytest.approx(windows * 7 / 11, abs=1e-5)
    alerts = [r for r in logged if r["event"] == "alert"]
    assert alerts and alerts[0]["sensors"] == ["b"]
    assert "crash miss rate of b is 63.6%" in alerts[0]["reason"]
    summary = read_job_status(tmp_path / "backup").summary()
    assert summary["crash_miss_rate"] == pytest.approx(7 / 11, abs=1e-6)
    assert summary["sensors_above_delta"] == 1  # b, as the crash monitor alerted


def test_the_rows_of_batches_over_the_exposure_are_scored_as_backed_up(
    spark: Any, tmp_path: Path
) -> None:
    """Rebuilt 3 off as above, but fed 8 rows a batch, twice the exposure: every batch
    backs up every sensor, so a failure loses nothing the backup cannot give back. No
    window misses and nothing alerts (scored as rebuilt, 7 of 11 positions would miss)."""
    logged = _offset_plan(spark, tmp_path, bias=3.0, rows_per_file=8)
    shadow = [r for r in logged if r["event"] == "shadow"]
    assert sum(r["crash_windows"] for r in shadow) == 12
    assert sum(r["crash_misses"] for r in shadow) == 0
    assert not [r for r in logged if r["event"] == "alert"]
    # and a recovery of any range returns b as stored: its whole windows are exact too
    b = read_results(tmp_path / "backup").query("sensor == 'b'")
    assert len(b) >= 12 and b["backed_up"].all() and (b["error"] == 0).all()


def _offset_plan(
    spark: Any, tmp: Path, bias: float, rows_per_file: int = 4
) -> list[dict[str, Any]]:
    """A crash plan (avg, window 8, slide 4, eps 1, exposure 4) of two sensors where b
    reads as a and the plan rebuilds it as ``a + bias``: every rebuilt reading ``bias``
    off. Fed ``rows_per_file`` rows a file (4: within the exposure), a file a batch; the
    events logged."""
    times = pd.date_range("2026-01-01", periods=56, freq="h").to_numpy()
    a = 10 + np.sin(np.arange(56) / 5.0)
    rows = Rows(times, np.column_stack([a, a]), ("a", "b"))
    lm = LinearMap(("a", "b"), ("a",), ("b",), np.array([bias]), np.ones((1, 1)), np.ones(1))
    config = tmp / "plan.json"
    write_config(config, rows, ("a",), window=8, slide=4, eps=1.0, lm=lm, exposure=4)
    feed(rows, tmp / "landing", rows_per_file=rows_per_file)
    report, logged = run_landed(spark, tmp, config, max_files_per_trigger=1, replan=False)
    over = report.batches if rows_per_file > 4 else 0
    assert report.batches == 56 // rows_per_file and report.batches_over_exposure == over
    return logged
