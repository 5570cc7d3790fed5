"""``engine status``'s "above delta" per sensor is the job monitor's own test: valid
however often it is checked, Bonferroni over the version's rebuilt sensors, on the
windows' disjoint share.

The job's layout is written by PyArrow (``bench.bench_compaction``), its shadow results
then set to chosen misses.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from bench.bench_compaction import write_backup
from engine.errors import DataError
from engine.job.status import read_job_status
from engine.planning.monitor import ViolationMonitor

WINDOWS = 20


def _status(
    root: Path, windows: int, misses: dict[int, set[int]], slide: int | None = None
) -> tuple[pd.DataFrame, list[str], np.ndarray]:
    """The job status of a backup of ``windows`` batches (one window checked in each) whose
    ``misses`` (rebuilt sensor index -> the batches it missed in) are set; with the names
    of the rebuilt sensors and the (batch, sensor) miss frame, batches in order."""
    write_backup(root, windows, slide)
    results = sorted((root / "_lacuna" / "results").glob("batch_id=*/part-00000.pq"))
    assert len(results) == windows
    sensors = pq.read_table(results[0]).column("sensor").to_pylist()
    frame = np.zeros((windows, len(sensors)), dtype=bool)
    for batch, path in enumerate(sorted(results, key=lambda p: int(p.parent.name.split("=")[1]))):
        t = pq.read_table(path)
        miss = [batch in misses.get(i, set()) for i in range(len(sensors))]
        frame[batch] = miss
        pq.write_table(t.set_column(t.schema.get_field_index("miss"), "miss", [miss]), path)
    return read_job_status(root).rates.set_index("sensor"), sensors, frame


def test_above_delta_is_the_monitors_alert_not_a_per_check_bound(tmp_path: Path) -> None:
    """Sensor A missed 6 of 20 windows: its 95 % lower bound (13.5 %) is above delta 5 %,
    which the status once called "above delta"; over 112 rebuilt sensors, checked after
    every batch, that is too little evidence, and the monitor does not alert. Sensor B
    missed 15 of 20: above delta by either rule."""
    rates, sensors, frame = _status(
        tmp_path / "backup", WINDOWS, {0: set(range(6)), 1: set(range(15))}
    )
    a, b = sensors[0], sensors[1]
    assert rates.loc[a, "misses"] == 6 and rates.loc[a, "windows"] == WINDOWS
    assert rates.loc[a, "lower95"] > 0.05  # the per-check bound says "above"
    assert not rates.loc[a, "above_delta"]
    assert rates.loc[b, "above_delta"]

    monitor = ViolationMonitor(tuple(sensors), eps=0.5, delta=0.05)  # tumbling windows
    alert = None
    for row in frame:
        alert = monitor.observe(np.where(row, 1.0, 0.0)[None, :], sensors) or alert
    flagged = set() if alert is None else set(alert.sensors)
    assert flagged == set(rates.index[rates["above_delta"]]) == {b}


def test_sliding_windows_count_as_their_disjoint_share(tmp_path: Path) -> None:
    """14 misses in 40 windows is above delta for tumbling windows of 8 rows; the same
    counts for windows of 8 sliding by 2 hold a quarter as many disjoint trials, too few
    to say so (the job's monitor counts them alike)."""
    misses = {0: set(range(0, 40, 3))}  # 14 of the 40
    tumbling, sensors, _ = _status(tmp_path / "tumbling", 40, misses)
    sliding, _, _ = _status(tmp_path / "sliding", 40, misses, slide=2)
    a = sensors[0]
    for rates in (tumbling, sliding):
        assert (rates.loc[a, "misses"], rates.loc[a, "windows"]) == (14, 40)
    assert tumbling.loc[a, "above_delta"]
    assert not sliding.loc[a, "above_delta"]


def test_the_headline_counts_pairs_under_the_version_in_force_and_all_versions(
    tmp_path: Path,
) -> None:
    """After an alert re-plan the headline read 0 windows and no misses beside the alert:
    its figures are the version in force's (window, rebuilt sensor) pairs, said so, with
    every version's beside them."""
    from engine.export.plan_book import JobPlan, plan_file, read_plan_book

    root = tmp_path / "backup"
    _, sensors, _ = _status(root, WINDOWS, {0: set(range(15))})
    first = read_plan_book(root)[1]
    alerted = JobPlan(2, WINDOWS, "alert", "", first)
    (root / "_lacuna" / "plans" / plan_file(2)).write_bytes(alerted.to_bytes())
    summary = read_job_status(root).summary()
    rebuilt = len(sensors)  # the results' rebuilt sensors
    assert summary["rates_version"] == 2 and summary["rebuilt_pairs"] == 0
    assert summary["misses"] == 0 and summary["miss_rate"] is None
    assert summary["all_versions"] == {
        "rebuilt_pairs": WINDOWS * rebuilt,
        "misses": 15,
        "miss_rate": 15 / (WINDOWS * rebuilt),
    }


def _alert(root: Path, batch: int, version: int, sensors: list[str]) -> None:
    events = root / "_lacuna" / "events"
    events.mkdir(parents=True, exist_ok=True)
    event = {"event": "alert", "batch_id": batch, "plan_version": version,
             "sensors": sensors, "new_sensors": sensors}  # fmt: skip
    (events / f"{batch:012d}-alert.json").write_text(json.dumps(event))


def test_a_range_plans_alert_stays_in_the_headline_after_its_rate_falls(tmp_path: Path) -> None:
    """A sensor that missed 8 of its first 12 windows and none of the next 48 alerted at
    batch 9: the monitor's test is valid however often it is checked because crossing it
    once is an alert. The headline re-ran the test on the final totals only and said no
    sensor is above delta beside the alert event; it now counts the alerted sensors."""
    root = tmp_path / "backup"
    rates, sensors, _ = _status(root, 60, {0: set(range(8))})
    a = sensors[0]
    assert not rates.loc[a, "above_delta"]  # the final totals alone: below the test
    assert read_job_status(root).summary()["sensors_above_delta"] == 0
    _alert(root, 9, 1, [a])
    summary = read_job_status(root).summary()
    assert summary["sensors_above_delta"] == 1 and summary["alerts"] == 1
    _alert(root, 10, 2, [a])  # another version's alert is not this version's
    assert read_job_status(root).summary()["sensors_above_delta"] == 1


def test_alerts_count_each_sensor_once_a_version_however_often_logged(tmp_path: Path) -> None:
    """A restarted job logs a sensor's alert again (its memory of what it said is gone):
    two files naming the same (version, sensor) read 2 alerts; they are one."""
    root = tmp_path / "backup"
    _, sensors, _ = _status(root, WINDOWS, {})
    _alert(root, 5, 1, [sensors[0]])
    _alert(root, 12, 1, [sensors[0]])
    assert read_job_status(root).summary()["alerts"] == 1
    _alert(root, 14, 1, [sensors[0], sensors[1]])
    assert read_job_status(root).summary()["alerts"] == 2


def test_missing_results_or_metrics_are_said_not_read_as_nothing_yet(tmp_path: Path) -> None:
    """With the results folder gone the page said no rebuilt window had closed while the
    metrics counted 20 batches' pairs; with the metrics gone, 0 micro-batches beside a
    miss rate. The status compares their counts and names what is missing."""
    root = tmp_path / "backup"
    _status(root, WINDOWS, {0: {1}})
    assert read_job_status(root).gaps == ()
    assert read_job_status(root).summary()["record_gaps"] == []
    shutil.rmtree(root / "_lacuna" / "results" / "batch_id=3")
    (gap,) = read_job_status(root).gaps
    assert "results under _lacuna/results are missing" in gap
    shutil.rmtree(root / "_lacuna" / "results")
    (gap,) = read_job_status(root).gaps
    assert "results under _lacuna/results are missing" in gap and "hold 0" in gap

    other = tmp_path / "other"
    _status(other, WINDOWS, {0: {1}})
    shutil.rmtree(other / "_lacuna" / "metrics" / "batch_id=19")  # one batch: a batch in flight
    assert read_job_status(other).gaps == ()
    shutil.rmtree(other / "_lacuna" / "metrics" / "batch_id=18")
    (gap,) = read_job_status(other).gaps
    assert "metrics under _lacuna/metrics are missing" in gap
    shutil.rmtree(other / "_lacuna" / "metrics")
    status = read_job_status(other)
    assert "(no metrics at all)" in status.gaps[0] and status.written_at is None

    first = tmp_path / "first"  # a job's first batch, its results written, its metrics not yet
    _status(first, 1, {})
    shutil.rmtree(first / "_lacuna" / "metrics")
    assert read_job_status(first).gaps == ()


@pytest.mark.parametrize("where", ["metrics", "event", "run"])
def test_a_record_that_is_json_but_not_an_object_is_one_clear_error(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[1, 2]`` in a metrics line, an event file or run.json raised AttributeError: a
    traceback on the page and from ``engine status``."""
    from engine.cli import main

    root = tmp_path / "backup"
    _status(root, 3, {})
    lacuna = root / "_lacuna"
    target = {
        "metrics": lacuna / "metrics" / "batch_id=1" / "part-00000.json",
        "event": lacuna / "events" / "000000000001-alert.json",
        "run": lacuna / "run.json",
    }[where]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("[1, 2]\n")
    with pytest.raises(DataError, match="not a JSON object"):
        read_job_status(root)
    assert main(["status", "--backup", str(root)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_another_json_file_beside_the_plan_versions_is_not_a_version(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _status(root, 3, {})
    (root / "_lacuna" / "plans" / "versions.json").write_text("{}")
    assert [p.version for p in read_job_status(root).versions] == [1]


def test_the_status_says_when_the_newest_batch_was_written(tmp_path: Path) -> None:
    """Event times say nothing of whether a job still runs: the newest metrics file's
    modification time is the wall clock of its last batch, and the page warns when it is
    older than 15 minutes and three triggers."""
    from ui.production import judge_staleness

    root = tmp_path / "backup"
    write_backup(root, 3)  # as the job writes it (no results rewritten: compacted below)
    day_ago = time.time() - 86400
    for f in (root / "_lacuna" / "metrics").rglob("*.json"):
        os.utime(f, (day_ago, day_ago))
    status = read_job_status(root)
    assert status.written_at == pytest.approx(day_ago)
    assert status.summary()["newest_batch_written_at"].startswith(
        datetime.fromtimestamp(day_ago, UTC).strftime("%Y-%m-%dT%H:%M")
    )
    said, warn = judge_staleness(status, day_ago + 86400)
    assert warn and "written 1 d ago" in said and "has stopped or receives nothing" in said
    said, warn = judge_staleness(status, day_ago + 95)
    assert not warn and said.startswith("The newest micro-batch was written 1 min 35 s ago")
    # compacting a stopped job's record rewrites its older metrics now: not a newer batch
    from engine.job.compaction import compact

    assert compact(root, keep=1).batch_dirs == 2
    assert read_job_status(root).written_at == pytest.approx(day_ago)


def test_a_batchs_own_version_pairs_leave_an_older_versions_windows_out() -> None:
    """After a re-plan a batch closes windows that are the older version's record; its
    metrics counted them under the new version (the chart's line for it)."""
    from engine.job.tally import count_own_pairs

    results = pd.DataFrame({
        "backed_up": [False, False, False, True, False],
        "error": [2.0, 0.1, np.nan, 5.0, 3.0],
        "miss": [True, False, False, True, True],
        "plan_version": [1, 2, 2, 2, 2],
    })  # fmt: skip
    assert count_own_pairs(results, 2) == (2, 1)  # not the NaN, the backed-up nor version 1's
    assert count_own_pairs(results, 1) == (1, 1)
