"""What a scheduled re-plan costs a streaming production job: the wait between batches.

Run from the repository root: ``python -m bench.bench_job_replan`` (about 3 min here).
Prints one JSON object. Side by side in one run, on the same landing files:

* ``inside``: the re-plan runs inside the micro-batch that finds the plan
  expired (``JobSettings.replan_wait=True``, what ``--available-now`` does and
  what every streaming job did before);
* ``background``: it runs on a thread while batches go on (the default for a
  stream).

Data: the 132 Beijing channels (hourly, standardised on the first half), a plan
fitted on the first 8,000 rows (eps 0.5 sd, delta 0.05, avg over 24 rows, a
horizon of 240 rows; ``make_plan`` caps its history at 7,575 rows), so the
re-plan reads 7,575 rows x 132 sensors from the landing directory and plans
with its backtest. The rows up to just before ``valid_until`` land first (files
of 1,000 rows); then a file of 24 rows lands every ``--pace`` seconds, as a
live feed would, while the job runs with a 0.2 s trigger, one file a batch.

Per mode: the gaps between consecutive batches' completions (median, 95th
percentile, max), the gap across the batch that started the re-plan, how long
the re-plan took from start to the version being written, and how many batches
ran in between. Every batch's metrics line is timed as the job logs it. Online
control is off (``--no-control``): it would fit a model of its own at the first batch.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.bench_production import beijing, load_avg
from bench.common import print_json
from tests.production_reference import Rows, feed, job_settings

FIT_ROWS, HORIZON, FIRST_FILE, FILE_ROWS = 8_000, 240, 1_000, 24


def make_config(rows: Rows, path: Path) -> Any:
    import json

    from engine.data import history_from_frame
    from engine.export import json_safe, load_config, plan_to_config
    from engine.planning import PlanParameters, make_plan
    from engine.query import WindowQuery

    frame = pd.DataFrame(rows.values[:FIT_ROWS], columns=list(rows.sensors))
    frame.insert(0, "time", rows.times[:FIT_ROWS])
    history = history_from_frame(frame, source="Beijing, standardised")
    params = PlanParameters(WindowQuery(0.5, 0.05, 24, aggregate="avg", horizon=HORIZON))
    path.write_text(json.dumps(json_safe(plan_to_config(make_plan(history, params)))))
    return load_config(path)


def one_mode(spark: Any, rows: Rows, config: Any, root: Path, wait: bool, pace: float) -> dict:
    from engine.job import run_job

    landing = root / "landing"
    first = FIT_ROWS + HORIZON - 2 * FILE_ROWS  # just before valid_until
    for start in range(0, first, FIRST_FILE):
        stop = min(first, start + FIRST_FILE)
        feed(rows, landing, rows_per_file=FIRST_FILE, start=start, stop=stop)
    # online control off: its own model fit at the first batch is a second background
    # plan, and this measures one re-plan's gap (control's cost: bench_job_control)
    settings = job_settings(
        root, trigger_s=0.2, max_files_per_trigger=1, replan_wait=wait, control=False
    )
    logged: list[dict[str, Any]] = []

    def log(record: dict[str, Any]) -> None:
        logged.append({**record, "_t": time.monotonic()})

    halt = threading.Event()
    args = (spark, config, settings, halt)
    job = threading.Thread(target=run_job, args=args, kwargs={"log": log})
    job.start()
    try:
        caught_up = -(-first // FIRST_FILE) - 1  # the batch of the last pre-landed file
        while job.is_alive() and not any(
            r["event"] == "shadow" and r["batch_id"] >= caught_up for r in logged
        ):
            time.sleep(0.2)
        start = first
        while job.is_alive() and start + FILE_ROWS <= len(rows.times):
            feed(rows, landing, rows_per_file=FILE_ROWS, start=start, stop=start + FILE_ROWS)
            start += FILE_ROWS
            time.sleep(pace)
            replanned = [r for r in logged if r["event"] == "replan"]
            if replanned and any(
                r["event"] == "shadow" and r["batch_id"] >= replanned[0]["first_batch"] + 5
                for r in logged
            ):
                break
    finally:
        halt.set()
        job.join(timeout=120)
    return summarise(logged, caught_up)


def summarise(logged: list[dict[str, Any]], caught_up: int) -> dict[str, Any]:
    shadows = [r for r in logged if r["event"] == "shadow"]
    started = next(r for r in logged if r["event"] == "replan_started")
    done = next(r for r in logged if r["event"] == "replan")
    live = [r for r in shadows if r["batch_id"] > caught_up]  # the trickle
    t = np.array([r["_t"] for r in live])
    gaps = np.diff(t)
    after = next(r for r in shadows if r["batch_id"] == started["batch_id"] + 1)
    return {
        "batches": len(shadows),
        "gap_s": {
            "median": round(float(np.median(gaps)), 3),
            "p95": round(float(np.percentile(gaps, 95)), 3),
            "max": round(float(gaps.max()), 3),
        },
        "gap_after_replan_start_s": round(after["_t"] - started["_t"], 3),
        "replan_s": round(done["_t"] - started["_t"], 3),
        "started_batch": started["batch_id"],
        "first_batch_of_new_version": done["first_batch"],
        "batches_while_planning": done["first_batch"] - started["batch_id"] - 1,
    }


def main() -> None:
    from engine.stream import SparkSettings, get_spark

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pace", type=float, default=0.4, help="seconds between landing files")
    args = p.parse_args()
    base = beijing()
    rows = Rows(base.times, base.values, base.sensors)
    spark = get_spark(SparkSettings(master="local[2]", shuffle_partitions=2))
    out: dict[str, Any] = {"command": "python -m bench.bench_job_replan"}
    out["uptime_before"] = load_avg()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = make_config(rows, Path(tmp) / "plan.json")
            out["backup_sensors"] = len(config.backup_sensors)
            out["sensors"] = len(config.sensors)
            for name, wait in (("inside", True), ("background", False)):
                out[name] = one_mode(spark, rows, config, Path(tmp) / name, wait, args.pace)
    finally:
        spark.stop()
    out["uptime_after"] = load_avg()
    print_json(out)


if __name__ == "__main__":
    main()
