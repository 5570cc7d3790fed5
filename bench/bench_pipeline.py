"""Live pipeline benchmark: throughput, backup bytes and recovery time per backup mode.

One run, same data, same Spark session: the first ``--rows`` rows of the
132-sensor Beijing file (``--rows 5000`` = 660k readings), standardised with
the first half's mean and standard deviation so that one ``eps`` means the same
for every sensor. The approximate plan: ``GaussianModel`` fitted on the first
half, the seed's model-only variance target for (eps, delta, window, avg) and
``select_backups(method="greedy")`` (uncalibrated; the live shadow check says
how it really does).

For each mode the whole feed is written first, then one query with
``availableNow`` processes it as fast as it can (``maxFilesPerTrigger`` files
per micro-batch); throughput = readings / wall time from start to termination.
Recovery is timed for the same failure in every mode (the query dies after
``--fail-at`` of the feed; the lost rows are those of the open windows), and
for a replay of the whole feed from the backup (read everything that is
there, rebuild, re-aggregate every window).

Prints one JSON object. ``python bench/bench_pipeline.py --rows 5000``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import beijing_wide, print_json  # noqa: E402
from engine.data.history import load_history  # noqa: E402
from engine.live import (  # noqa: E402  # noqa: E402  # noqa: E402
    BackupStore,
    Feeder,
    FeedOptions,
    LivePipeline,
    LostRange,
    PipelineOptions,
    PipelinePaths,
    StreamSpec,
    recover_lost_range,
    score_recovery,
)
from engine.model.gaussian import GaussianModel  # noqa: E402
from engine.planning.guarantee import variance_target  # noqa: E402
from engine.query import WindowQuery  # noqa: E402
from engine.selection.greedy import select_backups  # noqa: E402
from engine.stream import SparkSettings, get_spark  # noqa: E402

DATA = beijing_wide()
MODES = ("none", "full", "approx")


@dataclass(frozen=True)
class History:
    times: np.ndarray
    values: np.ndarray
    sensors: tuple[str, ...]


def load(rows: int) -> History:
    full = load_history(DATA)  # gaps interpolated linearly in time (engine.data.history default)
    h = full.rows(0, rows)
    train = h.values[: rows // 2]
    scale = train.std(axis=0)
    scale[scale == 0] = 1.0
    return History(h.times, (h.values - train.mean(axis=0)) / scale, h.sensors)


def make_spec(h: History, args: argparse.Namespace) -> tuple[StreamSpec, dict[str, Any]]:
    t0 = time.perf_counter()
    train = h.values[: len(h.values) // 2]
    model = GaussianModel().fit(train, h.sensors)
    target = variance_target(args.eps, args.delta, args.window, "avg")
    sel = select_backups(model.cov_, target, "greedy")
    linear_map = model.linear_map(sorted(sel.backup))
    spec = StreamSpec(
        h.sensors,
        linear_map.backup,
        linear_map,
        WindowQuery(
            args.eps, args.delta, args.window, slide=args.slide or args.window, aggregate="avg"
        ),
    )
    info = {
        "method": "GaussianModel on first half (standardised) + variance_target(avg, "
        "model-only, uncalibrated) + select_backups(greedy)",
        "backup_sensors": len(spec.backup_sensors),
        "sensors": len(spec.sensors),
        "backup_fraction": len(spec.backup_sensors) / len(spec.sensors),
        "feasible": bool(sel.feasible),
        "planning_seconds": time.perf_counter() - t0,
    }
    return spec, info


def stream_once(
    spark: Any,
    h: History,
    spec: StreamSpec,
    mode: str,
    root: Path,
    args: argparse.Namespace,
    fail_after: int | None = None,
) -> dict[str, Any]:
    """Feed everything, then process it with one availableNow query; measure."""
    paths = PipelinePaths(root).ensure()
    t0 = time.perf_counter()
    Feeder(
        h, spec.sensors, paths.landing_dir, None, FeedOptions(rows_per_file=args.rows_per_file)
    ).run()
    feed_seconds = time.perf_counter() - t0
    options = PipelineOptions(
        max_files_per_trigger=args.files_per_trigger,
        available_now=True,
        fail_after_readings=fail_after,
    )
    store = BackupStore(paths.store_file)
    pipeline = LivePipeline(spark, spec, mode, paths, store, options=options)
    t0 = time.perf_counter()
    pipeline.start()
    try:
        pipeline.await_termination(3600)
    finally:
        seconds = time.perf_counter() - t0
        pipeline.stop()
    time.sleep(0.5)  # the listener's last progress event is asynchronous
    status = pipeline.board.snapshot()
    size = store.size()
    return {
        "store": store,
        "paths": paths,
        "pipeline": pipeline,
        "seconds": seconds,
        "feed_seconds": feed_seconds,
        "readings": status.input_rows,
        "batches": status.batches,
        "readings_per_second": status.input_rows / seconds,
        "backup_rows": size.backup_rows,
        "backup_bytes": size.backup_bytes,
        "store_file_bytes": size.file_bytes,
        "windows": status.windows_emitted,
        "profile": status.profile,
        "shadow_violation_rate": status.shadow_violation_rate,
        "shadow_worst_sensor_rate": status.shadow_worst_rate,
    }


def profile_summary(profile: dict[str, float], seconds: float) -> dict[str, float]:
    """Where the wall time went, in seconds (Spark phases from the listener)."""
    keys = (
        "to_pandas",
        "windows_and_shadow",
        "backup_write",
        "store",
        "spark_addBatch",
        "spark_getBatch",
        "spark_queryPlanning",
        "spark_latestOffset",
        "spark_walCommit",
        "spark_commitOffsets",
        "spark_triggerExecution",
    )
    out = {k: round(profile.get(k, 0.0), 3) for k in keys}
    python = out["to_pandas"] + out["windows_and_shadow"] + out["backup_write"] + out["store"]
    out["spark_addBatch_outside_python"] = round(out["spark_addBatch"] - python, 3)
    out["wall"] = round(seconds, 3)
    return out


def warm_up(spark: Any, h: History, spec: StreamSpec, root: Path, args: argparse.Namespace) -> None:
    """The JVM's JIT and the Python workers warm up over the first full-size queries
    and jobs (a first run is 2-3x slower): run every mode once, untimed."""
    for mode in MODES:
        store = stream_once(spark, h, spec, mode, root / mode, args)["store"]
        if mode != "none":
            recover_lost_range(spark, store, spec, mode, LostRange(0, 0, 1499), run=90)
        store.close()


def recovery_times(
    spark: Any, h: History, spec: StreamSpec, mode: str, root: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """The same failure in every mode, then a replay of everything from the backup."""
    total = h.values.size
    run = stream_once(spark, h, spec, mode, root, args, fail_after=int(args.fail_at * total))
    store = run["store"]
    lost = LostRange(
        store.last_window() + 1, (store.last_window() + 1) * spec.slide, store.horizon()
    )
    t0 = time.perf_counter()
    outcome = recover_lost_range(spark, store, spec, mode, lost, run=99)
    seconds = time.perf_counter() - t0
    everything = LostRange(0, 0, lost.last_row)
    t0 = time.perf_counter()
    replay = recover_lost_range(spark, store, spec, mode, everything, run=98)
    replay_seconds = time.perf_counter() - t0
    report = score_recovery(
        store,
        spec,
        mode,
        everything,
        h.values,
        spark_version=spark.version,
        seconds=replay_seconds,
        rows_read=replay.rows_read,
        input_rows=0,
    )
    store.close()
    return {
        "lost_rows": lost.rows,
        "rows_read": outcome.rows_read,
        "recovery_seconds": round(seconds, 3),
        "replay_all_rows": everything.rows,
        "replay_all_rows_read": replay.rows_read,
        "replay_all_seconds": round(replay_seconds, 3),
        "replay_all_windows": report.windows_recovered,
        "replay_all_max_abs_error": report.max_abs_error,
        "replay_all_violation_rate": report.violation_rate,
        "replay_all_worst_sensor_violation_rate": report.violation_rate_worst_sensor,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=5000)
    p.add_argument("--window", type=int, default=24)
    p.add_argument("--slide", type=int, default=None)
    p.add_argument("--eps", type=float, default=0.25, help="in standard deviations")
    p.add_argument("--delta", type=float, default=0.05)
    # 10 rows per file and 25 files per trigger: 250-row micro-batches that do not
    # line up with 24-row windows, so the failure lands inside an open window.
    p.add_argument("--rows-per-file", type=int, default=10)
    p.add_argument("--files-per-trigger", type=int, default=25)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fail-at", type=float, default=0.55)
    args = p.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    t0 = time.perf_counter()
    h = load(args.rows)
    load_seconds = time.perf_counter() - t0
    spec, plan = make_spec(h, args)
    spark = get_spark(SparkSettings())
    out: dict[str, Any] = {
        "data": f"{DATA.name}: first {args.rows} rows x {len(h.sensors)} sensors = "
        f"{h.values.size} readings (standardised)",
        "spark_version": spark.version,
        "master": spark.sparkContext.master,
        "cores": os.cpu_count(),
        "load_seconds": round(load_seconds, 2),
        "parameters": {k: v for k, v in vars(args).items()},
        "plan": plan,
    }
    with tempfile.TemporaryDirectory(prefix="lacuna-bench-") as tmp:
        warm_up(spark, h, spec, Path(tmp) / "warmup", args)
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        # Rotate the order (none, full, approx), (full, approx, none), ... so that no
        # mode always runs first or last.
        order = [MODES[(r + k) % 3] for r in range(args.repeats) for k in range(3)]
        for i, mode in enumerate(order):
            result = stream_once(spark, h, spec, mode, Path(tmp) / f"{mode}-{i}", args)
            result["store"].close()
            runs[mode].append(result)
        out["modes"] = {m: summarise(runs[m]) for m in MODES}
        out["recovery"] = {
            m: recovery_times(spark, h, spec, m, Path(tmp) / f"rec-{m}", args) for m in MODES
        }
    out["comparison"] = compare(out, plan)
    print_json(out)


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["readings_per_second"] for r in results]
    # The profile is the median run's, so that it matches readings_per_second.
    median_run = sorted(results, key=lambda r: r["readings_per_second"])[len(results) // 2]
    return {
        "readings": median_run["readings"],
        "batches": median_run["batches"],
        "readings_per_second_each": [round(x) for x in rates],
        "readings_per_second": round(float(np.median(rates))),
        "readings_per_second_best": round(max(rates)),
        "seconds_each": [round(r["seconds"], 2) for r in results],
        "backup_rows": median_run["backup_rows"],
        "backup_bytes": median_run["backup_bytes"],
        "store_file_bytes": median_run["store_file_bytes"],
        "windows": median_run["windows"],
        "shadow_violation_rate": median_run["shadow_violation_rate"],
        "shadow_worst_sensor_rate": median_run["shadow_worst_sensor_rate"],
        "feed_write_seconds": round(median_run["feed_seconds"], 2),
        "profile_seconds": profile_summary(median_run["profile"], median_run["seconds"]),
    }


def compare(out: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    m, rec = out["modes"], out["recovery"]
    base = m["none"]["readings_per_second"]
    ratio = m["approx"]["backup_bytes"] / max(1, m["full"]["backup_bytes"])
    store = {k: m[k]["profile_seconds"]["store"] for k in MODES}
    return {
        "store_seconds_per_million_readings": {
            k: round(v / m[k]["readings"] * 1e6, 3) for k, v in store.items()
        },
        "overhead_vs_none": {
            k: round(1 - m[k]["readings_per_second"] / base, 4) for k in ("full", "approx")
        },
        "approx_bytes_over_full": round(ratio, 4),
        "target_bytes_ratio": round(plan["backup_fraction"] + 0.05, 4),
        "approx_bytes_within_target": ratio <= plan["backup_fraction"] + 0.05,
        "approx_throughput_not_below_full": (
            m["approx"]["readings_per_second"] >= m["full"]["readings_per_second"]
        ),
        "recovery_seconds_approx_over_full": round(
            rec["approx"]["recovery_seconds"] / rec["full"]["recovery_seconds"], 3
        ),
        "replay_all_seconds_approx_over_full": round(
            rec["approx"]["replay_all_seconds"] / rec["full"]["replay_all_seconds"], 3
        ),
    }


if __name__ == "__main__":
    main()
