"""What compaction buys the readers of a long-running job's backup.

Run from the repository root: ``python -m bench.bench_compaction [--batches 10000]``
(10,000 one-minute batches, a week: about 1.5 min here). Prints one JSON object:
per reader, seconds before and after ``engine compact`` on the same backup, in one
run, and the compaction's own time.

The backup is the production job's layout for ``--batches`` one-minute
micro-batches of 20 backup sensors out of 132 (one reading each per batch):
``batch_id=N/date=D/part-00000.parquet`` with ``_SUCCESS``, each batch's
results (one closed one-minute window of 112 rebuilt sensors every batch) and
metrics line (listing the batch's file, as the job does), and a real plan
book (the shipped Beijing sample's plan). It is written here by PyArrow, not
by Spark, to build thousands of batches in seconds: the readers only list and
open files, whoever wrote them.

Readers: ``read_job_status`` (what ``engine status`` and the Production page
read), ``read_backup`` of everything and of the last hour (what ``recover
--backup`` reads). Each timed as the best of 3.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import print_json

SENSORS, BACKUP = 132, 20
START = pd.Timestamp("2026-01-01T00:00:00")


def write_backup(root: Path, batches: int, slide: int | None = None) -> None:
    """A job's backup of ``batches`` one-minute micro-batches under ``root``, with its
    plan book (windows of 8 readings sliding by ``slide``; None: tumbling) and shadow
    results."""
    from engine.data import load_history
    from engine.export import BackupConfig, json_safe, plan_to_config
    from engine.export.plan_book import JobPlan, plan_file
    from engine.planning import PlanParameters, make_plan
    from engine.query import WindowQuery
    from tests.helpers import SMALL_SAMPLE

    params = PlanParameters(WindowQuery(20.0, 0.05, 8, slide, aggregate="avg", horizon=48))
    config = BackupConfig.from_dict(
        json_safe(plan_to_config(make_plan(load_history(SMALL_SAMPLE).rows(0, 400), params)))
    )
    plans = root / "_lacuna" / "plans"
    plans.mkdir(parents=True)
    (plans / plan_file(1)).write_bytes(JobPlan(1, 0, "initial", "bench", config).to_bytes())
    rng = np.random.default_rng(0)
    backup = [f"s{i:03d}" for i in range(BACKUP)]
    rebuilt = [f"s{i:03d}" for i in range(BACKUP, SENSORS)]
    for b in range(batches):
        t = (START + pd.Timedelta(minutes=b)).tz_localize("UTC")
        folder = root / f"batch_id={b}" / f"date={t:%Y-%m-%d}"
        folder.mkdir(parents=True)
        rows = pa.table(
            {
                "event_time": pa.array([t] * BACKUP, pa.timestamp("us", tz="UTC")),
                "sensor": backup,
                "value": rng.normal(size=BACKUP),
                "plan_version": pa.array([1] * BACKUP, pa.int32()),
            }
        )
        pq.write_table(rows, folder / "part-00000.parquet")
        (root / f"batch_id={b}" / "_SUCCESS").write_bytes(b"")
        part = folder / "part-00000.parquet"
        written = {f"date={t:%Y-%m-%d}/{part.name}": part.stat().st_size}  # as the job lists
        error = rng.normal(scale=0.5, size=len(rebuilt))
        results = pa.table(
            {
                "window_start": pa.array([t] * len(rebuilt), pa.timestamp("us", tz="UTC")),
                "window_end": pa.array([t] * len(rebuilt), pa.timestamp("us", tz="UTC")),
                "sensor": rebuilt,
                "n": [1] * len(rebuilt),
                "value": rng.normal(size=len(rebuilt)),
                "rebuilt": rng.normal(size=len(rebuilt)),
                "error": error,
                "miss": np.abs(error) > 1.0,
                "backed_up": [False] * len(rebuilt),
                "plan_version": pa.array([1] * len(rebuilt), pa.int32()),
            }
        )
        out = root / "_lacuna" / "results" / f"batch_id={b}"
        out.mkdir(parents=True)
        pq.write_table(results, out / "part-00000.pq")
        metrics = root / "_lacuna" / "metrics" / f"batch_id={b}"
        metrics.mkdir(parents=True)
        misses = int((np.abs(error) > 1).sum())
        line = {"event": "shadow", "batch_id": b, "plan_version": 1, "readings": SENSORS,
                "windows": 1, "rebuilt_pairs": len(rebuilt), "misses": misses,
                "seconds": 0.3, "last_window_end": str(t),
                "backup_files": written}  # fmt: skip
        (metrics / "part-00000.json").write_text(json.dumps(line) + "\n")


def best_of(fn: Any, repeats: int = 3) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return round(min(times), 3), out


def readers(root: Path, batches: int) -> dict[str, Any]:
    from engine.backup import TimeRange, committed_files, read_backup
    from engine.job import read_job_status

    end = START + pd.Timedelta(minutes=batches)
    hour = TimeRange((end - pd.Timedelta(hours=1)).tz_localize("UTC"), end.tz_localize("UTC"))
    status_s, status = best_of(lambda: read_job_status(root))
    all_s, everything = best_of(lambda: read_backup(root))
    hour_s, last = best_of(lambda: read_backup(root, hour))
    return {
        "status_s": status_s,
        "read_all_s": all_s,
        "read_last_hour_s": hour_s,
        "batches_seen": len(status.batches),
        "rows_all": len(everything),
        "rows_last_hour": len(last),
        "rebuilt_windows": int(status.rates["windows"].sum()),
        "backup_bytes": sum(f.stat().st_size for f in committed_files(root)),
    }


def main() -> None:
    from engine.job import compact

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=10_000, help="one-minute micro-batches")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "backup"
        t0 = time.perf_counter()
        write_backup(root, args.batches)
        built = round(time.perf_counter() - t0, 1)
        before = readers(root, args.batches)
        t0 = time.perf_counter()
        report = compact(root)
        compact_s = round(time.perf_counter() - t0, 3)
        after = readers(root, args.batches)
    same = all(before[k] == after[k] for k in before if not k.endswith(("_s", "_bytes")))
    print_json(
        {
            "command": f"python -m bench.bench_compaction --batches {args.batches}",
            "batches": args.batches,
            "built_s": built,
            "before": before,
            "compact_s": compact_s,
            "compaction": report.to_dict(),
            "after": after,
            "same_answers": same,
            "speedup": {
                k: round(before[k] / after[k], 1) for k in before if k.endswith("_s") and after[k]
            },
        }
    )


if __name__ == "__main__":
    main()
