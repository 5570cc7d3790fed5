"""What online control costs the production job's driver per micro-batch.

    python -m bench.bench_job_control                  # n = 100 and 1,000
    python -m bench.bench_job_control --sizes 100 --rows 600

``engine.job.control.JobControl.steer`` runs on the driver after every micro-batch:
it rebuilds the closed windows' rows under their plan versions, scores them under the
plan's contract, lets the controller decide and, on a change, writes a plan version;
then the job takes the controller's snapshot to keep with its state (timed with it:
taken again only after the controller changed).
Side by side in one run, on the same rows, the job's crash check of the same windows
(``engine.job.crash_check.crash_misses``), which a crash plan's job runs anyway: the
baseline an operator pays without control.

Data: ``bench.bench_replan.synthetic_history`` (``n`` sensors in groups of 8 sharing
an AR(1) signal, 2,000 hourly rows) and ``--rows`` more of the same process as the
stream, in micro-batches of ``m`` rows (the exposure). The plan is the CLI's crash plan
(avg, window 60, exposure 5, eps 1, delta 0.05) of the history, without its backtest;
the controller's model is that plan (the fit the job makes at its first batch is a
re-plan, timed in ``bench_job_replan``). Windows close every 12 micro-batches; the
figures are per micro-batch that closed a window (wall ms, median and max) and per one
that closed none, with the controller's snapshot the job writes with its state (bytes).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np
import pandas as pd

from bench.bench_replan import GROUP, ROWS, ar1
from bench.common import print_json
from bench.honesty_live import MemoryBook

W, M = 60, 5


def stream_frame(n: int, rows: int, rng: np.random.Generator) -> pd.DataFrame:
    """History and stream of ``n`` sensors, one process (``synthetic_history``'s)."""
    total = ROWS + rows
    latent = ar1(total, (n + GROUP - 1) // GROUP, 0.97, rng)
    loading = rng.uniform(2.0, 6.0, size=n)
    values = latent[:, np.arange(n) // GROUP] * loading + ar1(total, n, 0.8, rng) * 0.6
    values += rng.uniform(-5, 25, size=n)
    frame = pd.DataFrame(values, columns=[f"s{i:04d}" for i in range(n)])
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=total, freq="h"))
    return frame


def bench_size(n: int, rows: int, rng: np.random.Generator) -> dict[str, Any]:
    from engine.data.history import history_from_frame
    from engine.export import BackupConfig, plan_to_config
    from engine.export.plan_book import JobPlan
    from engine.job.control import JobControl
    from engine.job.crash_check import TIME, VERSION, WHOLE, crash_misses
    from engine.job.plans import at_once
    from engine.planning import PlanParameters, make_plan
    from engine.query import WindowQuery

    frame = stream_frame(n, rows, rng)
    params = PlanParameters(WindowQuery(1.0, 0.05, W, aggregate="avg", exposure=M))
    start = time.perf_counter()
    plan = make_plan(history_from_frame(frame[:ROWS]), params, run_backtest_now=False)
    plan_s = time.perf_counter() - start
    config = BackupConfig.from_dict(plan_to_config(plan))
    book = MemoryBook()
    book.add(JobPlan(1, 0, "initial", "the CLI's plan", config))
    step_us = 3_600_000_000
    control = JobControl(book, lambda a, b: frame, lambda e: None, 3600.0, W * step_us,  # type: ignore[arg-type]
                         W * step_us, run=at_once, fit=lambda c, w, p: plan)  # fmt: skip
    stream = frame[ROWS:].rename(columns={"time": TIME}).reset_index(drop=True)
    stream[TIME] = stream[TIME].astype("int64") // 1000
    stream[WHOLE] = 0.0
    closing, quiet, check, snapshot = [], [], [], 0
    done: set[int] = set()
    for k in range(rows // M):
        stream.loc[k * M : k * M + M - 1, VERSION] = float(book.in_force(k).version)
        seen = stream.iloc[max(0, k * M - 2 * W) : k * M + M]
        newest = int(seen[TIME].iloc[-1])
        starts = np.array(
            [s for s in seen[TIME] if (s // step_us) % W == 0 and s + W * step_us <= newest
             and s not in done], dtype=np.int64,
        )  # fmt: skip
        done |= set(starts.tolist())
        t0 = time.perf_counter()
        control.steer(k, seen, starts, newest)
        saved = control.snapshot()  # the sink keeps it with the state after every batch
        spent = time.perf_counter() - t0
        if k == 0:
            continue  # the first batch takes the model
        if starts.size:
            closing.append(spent)
            t0 = time.perf_counter()
            crash_misses(seen, starts, W * step_us, book.in_force(k).config, config.linear_map())
            check.append(time.perf_counter() - t0)
            snapshot = len(json.dumps(saved).encode())
        else:
            quiet.append(spent)
    status = control.status()
    return {
        "n": n,
        "stream_rows": rows,
        "plan_seconds": round(plan_s, 2),
        "backup_first": len(config.backup_sensors),
        "backup_last": status["backup_sensors"],
        "versions": len(book.versions),
        "windows": status["windows"],
        "steer_ms_closing_median": round(1000 * float(np.median(closing)), 2),
        "steer_ms_closing_max": round(1000 * float(np.max(closing)), 2),
        "steer_ms_quiet_median": round(1000 * float(np.median(quiet)), 3),
        "crash_check_ms_median": round(1000 * float(np.median(check)), 2),
        "snapshot_bytes": snapshot,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="comma-separated sensor counts")
    parser.add_argument("--rows", type=int, default=1200, help="stream rows (default 1,200)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    sizes = [int(s) for s in args.sizes.split(",")]
    print_json(
        {
            "benchmark": "job_control",
            "window": W,
            "exposure": M,
            "cpus": os.cpu_count(),
            "load_average": list(os.getloadavg()),
            "sizes": [bench_size(n, args.rows, rng) for n in sizes],
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
