"""``engine status``'s "above delta" per sensor is the job monitor's own test: valid
however often it is checked, Bonferroni over the version's rebuilt sensors, on the
windows' disjoint share.

The job's layout is written by PyArrow (``bench.bench_compaction``), its shadow results
then set to chosen misses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.bench_compaction import write_backup
from engine.job.status import read_job_status
from engine.planning.monitor import ViolationMonitor

WINDOWS = 20


def test_above_delta_is_the_monitors_alert_not_a_per_check_bound(tmp_path: Path) -> None:
    """Sensor A missed 6 of 20 windows: its 95 % lower bound (13.5 %) is above delta 5 %,
    which the status once called "above delta"; over 112 rebuilt sensors, checked after
    every batch, that is too little evidence, and the monitor does not alert. Sensor B
    missed 15 of 20: above delta by either rule."""
    root = tmp_path / "backup"
    write_backup(root, WINDOWS)
    results = sorted((root / "_lacuna" / "results").glob("batch_id=*/part-00000.pq"))
    assert len(results) == WINDOWS
    table = pq.read_table(results[0])
    sensors = table.column("sensor").to_pylist()
    a, b = sensors[0], sensors[1]
    misses = {a: set(range(6)), b: set(range(15))}
    frame = np.zeros((WINDOWS, len(sensors)), dtype=bool)
    for batch, path in enumerate(sorted(results, key=lambda p: int(p.parent.name.split("=")[1]))):
        t = pq.read_table(path)
        miss = [batch in misses.get(s, set()) for s in t.column("sensor").to_pylist()]
        frame[batch] = miss
        pq.write_table(t.set_column(t.schema.get_field_index("miss"), "miss", [miss]), path)

    rates = read_job_status(root).rates.set_index("sensor")
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
