"""``engine status``'s "above delta" per sensor is the job monitor's own test: valid
however often it is checked, Bonferroni over the version's rebuilt sensors, on the
windows' disjoint share.

The job's layout is written by PyArrow (``bench.bench_compaction``), its shadow results
then set to chosen misses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from bench.bench_compaction import write_backup
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
