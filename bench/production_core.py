"""Data, landing files and timed runs of ``bench/bench_production.py``.

A landing file holds ``rows`` time steps of *all* sensors (long Parquet
``event_time, sensor, value``, microsecond UTC times as the feeder writes), so
a file of 10,000 rows at 132 sensors is 1.32 M readings. When a run needs more
time steps than the data has, the data is tiled in time: copy ``k`` is shifted
by ``k`` times the data's span, so event time keeps increasing. The readings'
clock is a parameter (``interval_s``): the Beijing readings are hourly, but a
micro-batch of 10,000 hourly rows spans 417 days, so 417 ``date`` partitions
to write per batch, which is a backfill, not a stream (see the README).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tests.production_reference import Rows

SCHEMA = "event_time timestamp, sensor string, value double"
LANDING_SCHEMA = pa.schema(
    [("event_time", pa.timestamp("us", tz="UTC")), ("sensor", pa.string()), ("value", pa.float64())]
)


def tiled_rows(rows: Rows, count: int, interval_s: float) -> Rows:
    """``count`` time steps: ``rows`` repeated, one every ``interval_s`` seconds from its start."""
    reps = -(-count // len(rows.times))
    start = rows.times[0].astype("datetime64[us]")
    times = start + (np.arange(count) * round(interval_s * 1e6)).astype("timedelta64[us]")
    values = np.vstack([rows.values] * reps)[:count]
    return Rows(times, values, rows.sensors)


def write_landing(
    rows: Rows, rows_per_file: int, files: int, landing: Path, interval_s: float
) -> int:
    """``files`` files of ``rows_per_file`` time steps each, increasing mtimes; readings."""
    landing.mkdir(parents=True)
    stream = tiled_rows(rows, rows_per_file * files, interval_s)
    n = len(rows.sensors)
    names = pa.array(np.asarray(rows.sensors, dtype=object), pa.string())
    stamp = time.time_ns() - 10**12
    for i in range(files):
        lo, hi = i * rows_per_file, (i + 1) * rows_per_file
        times = pd.DatetimeIndex(np.repeat(stream.times[lo:hi], n)).tz_localize("UTC")
        table = pa.table(
            {
                "event_time": pa.array(times).cast(LANDING_SCHEMA.field("event_time").type),
                "sensor": pa.concat_arrays([names] * (hi - lo)),
                "value": pa.array(stream.values[lo:hi].reshape(-1)),
            }
        )
        path = landing / f"part-{i:06d}.parquet"
        pq.write_table(table, path)
        os.utime(path, ns=(stamp + i * 10**7, stamp + i * 10**7))
    return rows_per_file * files * n


def parquet_bytes(root: Path) -> int:
    """Parquet bytes of a dataset (logs, markers and ``_lacuna`` results excluded)."""
    return sum(
        f.stat().st_size
        for f in root.rglob("*.parquet")
        if not any(p.startswith(("_", ".")) for p in f.relative_to(root).parts)
    )


def steady(progress: list[dict[str, Any]], readings_per_row: int = 1) -> dict[str, Any]:
    """Readings/s over the micro-batches after the first, from Spark's own durations.

    ``triggerExecution`` covers a whole micro-batch (planning, reading, writing,
    ``foreachBatch``, commit); the first batch carries class loading and JIT warm-up.
    """
    batches = [p for p in progress if int(p.get("numInputRows") or 0) > 0]
    tail = batches[1:] or batches
    ms = sum(float(p["durationMs"]["triggerExecution"]) for p in tail)
    rows = sum(int(p["numInputRows"]) for p in tail) * readings_per_row
    phases: dict[str, float] = {}
    for p in tail:
        for k, v in p["durationMs"].items():
            phases[k] = phases.get(k, 0.0) + float(v) / len(tail)
    return {
        "batches": len(batches),
        "no_data_batches": len(progress) - len(batches),
        "steady_readings_per_s": round(rows / (ms / 1e3), 1) if ms else None,
        "mean_ms_per_batch": {k: round(v, 1) for k, v in sorted(phases.items())},
    }


def plain_query(
    spark: Any,
    kind: str,
    landing: Path,
    out: Path,
    backup: tuple[str, ...],
    window_s: float = 0.0,
    files_per_trigger: int = 1,
) -> Any:
    """What a user writes without Lacuna: the file sink, every sensor or the backup ones;
    or (``plain_windows``) Spark's own windowed avg per sensor with a watermark."""
    from pyspark.sql import functions as F

    readings = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_trigger)
    readings = readings.parquet(str(landing))
    by: tuple[str, ...] = ("date",)  # the backups are partitioned as ours
    if kind == "plain_windows":
        by = ()
        frame = (
            readings.withWatermark("event_time", "0 seconds")
            .groupBy(F.window("event_time", f"{window_s:g} seconds"), "sensor")
            .agg(F.avg("value").alias("value"), F.count("value").alias("n"))
            .select(F.col("window.start").alias("window_start"), "sensor", "value", "n")
        )
    else:
        if kind == "plain_approx":
            readings = readings.filter(F.col("sensor").isin(list(backup)))
        frame = readings.withColumn("date", F.date_format("event_time", "yyyy-MM-dd"))
    return (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .partitionBy(*by)
        .option("checkpointLocation", str(out) + "_ck")
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )


def run_plain(spark: Any, kind: str, landing: Path, out: Path, *more: Any) -> dict:
    """Run ``plain_query(spark, kind, landing, out, *more)`` to its end and measure it."""
    t0 = time.perf_counter()
    q = plain_query(spark, kind, landing, out, *more)
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    rows = spark.read.parquet(str(out)).count()
    run = {"seconds": seconds, "rows_written": rows, "bytes": parquet_bytes(out)}
    return {**run, **steady(q.recentProgress)}


def run_lacuna(
    spark: Any, config: Any, landing: Path, out: Path, files_per_trigger: int = 1
) -> dict:
    from engine.backup import read_backup
    from engine.job import JobSettings, run_job

    settings = JobSettings(
        source=str(landing),
        backup=str(out),
        checkpoint=str(out) + "_ck",
        available_now=True,
        max_files_per_trigger=files_per_trigger,
        # The per-batch cost is measured with one plan: a re-plan (scheduled or on an
        # alert) is a plan and backtest once per horizon (bench_guarantee, README), and
        # the landing files' clock is re-stamped, so valid_until means nothing here.
        # The live monitor still runs on every batch.
        replan=False,
    )
    logged: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    report = run_job(spark, config, settings, threading.Event(), log=logged.append)
    seconds = time.perf_counter() - t0
    # Spark's numInputRows counts each of a batch's two scans: the job's own count instead
    readings = {r["batch_id"]: r["readings"] for r in logged if r.get("event") == "shadow"}
    progress = [
        {**r, "numInputRows": readings.get(r["batchId"], 0)}
        for r in logged
        if r.get("event") == "progress"
    ]
    return {
        "seconds": seconds,
        "rows_written": len(read_backup(out)),
        "bytes": parquet_bytes(out),
        "windows": report.windows,
        "rebuilt_pairs": report.rebuilt_pairs,
        "misses": report.misses,
        "spark_jobs_per_batch": _jobs_per_batch(logged),
        "foreach_batch_phase_s": _phases(logged),
        **steady(progress),
    }


def _jobs_per_batch(logged: list[dict[str, Any]]) -> float | None:
    counts = [r["spark_jobs"] for r in logged if "spark_jobs" in r]
    return round(sum(counts) / len(counts), 2) if counts else None


def _phases(logged: list[dict[str, Any]]) -> dict[str, float]:
    """Mean wall seconds per phase of ``foreachBatch``, batches after the first."""
    batches = [r["phase_seconds"] for r in logged if "phase_seconds" in r][1:]
    keys = {k for b in batches for k in b}
    return {k: round(sum(b.get(k, 0.0) for b in batches) / len(batches), 3) for k in sorted(keys)}
