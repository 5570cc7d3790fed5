"""Production job against the plain Spark jobs a user would write, same landing files.

One run, same data: the first ``--rows`` rows of the 132-sensor Beijing file
(standardised with the first half's mean and standard deviation), written as
long Parquet landing files of 100, 1,000 and 10,000 readings each. The plan:
``GaussianModel`` on the first half, the model-only variance target for
(eps, delta, window, avg), ``select_backups(greedy)``.

Per file size, each job processes the same ``--files`` files with
``availableNow`` and one file per micro-batch (``maxFilesPerTrigger=1``):

* ``lacuna``: ``engine.stream.job.run_job`` (backup through the file sink,
  windowed avg with a watermark, linear shadow check, results and metrics);
* ``plain_full``: every reading through Spark's Parquet file sink;
* ``plain_approx``: the same, filtered to the backup sensors;
* ``plain_windows``: native windowed avg per sensor with a watermark, Parquet sink.

readings/s = readings / wall time from start to termination. Backup bytes =
Parquet bytes written (the log excluded). Every result is checked against a
pure-Python count on the same data (backup rows, windows, shadow misses).
``--cluster 1,2`` repeats the ``lacuna`` and ``plain_full`` jobs on a standalone
cluster of 1 and 2 one-core workers.

Prints one JSON object. ``python bench/bench_production.py --rows 800 --files 8``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_json  # noqa: E402
from engine.data.history import load_history  # noqa: E402
from engine.export.config import load_config  # noqa: E402
from engine.model.gaussian import GaussianModel  # noqa: E402
from engine.planning.guarantee import variance_target  # noqa: E402
from engine.selection.greedy import select_backups  # noqa: E402
from engine.stream.job import JobSettings, run_job  # noqa: E402
from tests.production_reference import Rows, reference_results, write_config  # noqa: E402

DATA = Path("/work/shared/datasets/beijing_multisite_aq/wide.csv")
SIZES = (100, 1_000, 10_000)
SCHEMA = "event_time timestamp, sensor string, value double"
LANDING_SCHEMA = pa.schema(
    [("event_time", pa.timestamp("us", tz="UTC")), ("sensor", pa.string()), ("value", pa.float64())]
)


def load(rows: int) -> Rows:
    h = load_history(DATA).rows(0, rows)
    train = h.values[: rows // 2]
    scale = train.std(axis=0)
    scale[scale == 0] = 1.0
    return Rows(h.times, (h.values - train.mean(axis=0)) / scale, h.sensors)


def plan(rows: Rows, args: argparse.Namespace, path: Path) -> Any:
    model = GaussianModel().fit(rows.values[: len(rows.values) // 2], rows.sensors)
    sel = select_backups(model.cov_, variance_target(args.eps, 0.05, args.window, "avg"), "greedy")
    lm = model.linear_map(sorted(sel.backup))
    if not lm.backup:
        raise SystemExit(f"eps {args.eps} needs no backup sensor: choose a smaller --eps")
    write_config(path, rows, window=args.window, slide=args.window, eps=args.eps, lm=lm)
    return load_config(path)


def write_landing(rows: Rows, per_file: int, files: int, landing: Path) -> pd.DataFrame:
    """``files`` files of ``per_file`` readings (time-ordered), increasing mtimes."""
    t, n = rows.values.shape
    long = pd.DataFrame(
        {
            "event_time": pd.DatetimeIndex(np.repeat(rows.times, n)).tz_localize("UTC"),
            "sensor": np.tile(np.asarray(rows.sensors, dtype=object), t),
            "value": rows.values.reshape(-1),
        }
    ).iloc[: per_file * files]
    landing.mkdir(parents=True)
    stamp = time.time_ns() - 10**12
    for i in range(files):
        part = long.iloc[i * per_file : (i + 1) * per_file]
        path = landing / f"part-{i:06d}.parquet"
        table = pa.Table.from_pandas(part, preserve_index=False)
        # microseconds, as the feeder writes: Spark cannot read nanosecond timestamps
        pq.write_table(table.cast(LANDING_SCHEMA), path)
        os.utime(path, ns=(stamp + i * 10**7, stamp + i * 10**7))
    return long


def parquet_bytes(root: Path) -> int:
    return sum(
        f.stat().st_size
        for f in root.rglob("*.parquet")
        if not any(p.startswith(("_", ".")) for p in f.relative_to(root).parts)
    )


def plain_job(spark: Any, kind: str, landing: Path, out: Path, config: Any, spec: Any) -> Any:
    from pyspark.sql import functions as F

    readings = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(landing))
    if kind == "plain_approx":
        readings = readings.filter(F.col("sensor").isin(list(config.backup_sensors)))
    if kind == "plain_windows":
        readings = (
            readings.withWatermark("event_time", "0 seconds")
            .groupBy(F.window("event_time", f"{spec.window_s:g} seconds"), "sensor")
            .agg(F.avg("value").alias("avg"))
        )
    else:
        readings = readings.withColumn("date", F.date_format("event_time", "yyyy-MM-dd"))
    writer = readings.writeStream.format("parquet").option("path", str(out))
    if kind != "plain_windows":
        writer = writer.partitionBy("date")
    return (
        writer.option("checkpointLocation", str(out) + "_ck")
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )


def run_plain(spark: Any, kind: str, landing: Path, out: Path, config: Any, spec: Any) -> dict:
    t0 = time.perf_counter()
    q = plain_job(spark, kind, landing, out, config, spec)
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    rows = spark.read.parquet(str(out)).count()
    return {"seconds": seconds, "rows_written": rows, "bytes": parquet_bytes(out)}


def run_lacuna(spark: Any, config: Any, landing: Path, out: Path) -> dict:
    settings = JobSettings(
        source=str(landing),
        backup=str(out),
        checkpoint=str(out) + "_ck",
        available_now=True,
        max_files_per_trigger=1,
    )
    t0 = time.perf_counter()
    report = run_job(spark, config, settings, threading.Event(), log=lambda _r: None)
    seconds = time.perf_counter() - t0
    from engine.export.backup_dataset import read_backup

    return {
        "seconds": seconds,
        "rows_written": len(read_backup(out)),
        "bytes": parquet_bytes(out),
        "windows": report.windows,
        "misses": report.misses,
        "batches": report.window_batches,
    }


def one_size(spark: Any, rows: Rows, config: Any, per_file: int, args: argparse.Namespace,
             root: Path, kinds: tuple[str, ...]) -> dict:  # fmt: skip
    from engine.stream.transforms import WindowSpec

    spec = WindowSpec.from_parameters(config.parameters, 0.0)
    landing = root / f"landing_{per_file}"
    long = write_landing(rows, per_file, args.files, landing)
    out: dict[str, Any] = {"readings": len(long), "files": args.files}
    for kind in kinds:
        target = root / f"{kind}_{per_file}"
        run = (
            run_lacuna(spark, config, landing, target)
            if kind == "lacuna"
            else run_plain(spark, kind, landing, target, config, spec)
        )
        run["readings_per_s"] = round(len(long) / run["seconds"], 1)
        out[kind] = run
    out["checks"] = check(out, long, rows, config, spec)
    return out


def check(out: dict, long: pd.DataFrame, rows: Rows, config: Any, spec: Any) -> dict[str, bool]:
    """Each Spark result against a pure-Python count on the same readings."""
    n_backup = int(long["sensor"].isin(config.backup_sensors).sum())
    whole = len(long) // len(rows.sensors)  # complete time steps fed
    part = Rows(rows.times[:whole], rows.values[:whole], rows.sensors)
    ref = reference_results(part, config.linear_map(), spec.window_s, spec.slide_s, "avg", spec.eps)
    checks = {}
    if "lacuna" in out:
        lac = out["lacuna"]
        checks["lacuna_backup_rows"] = lac["rows_written"] == n_backup
        checks["lacuna_windows_at_least_reference"] = lac["windows"] >= ref["start_s"].nunique()
    if "plain_full" in out:
        checks["plain_full_rows"] = out["plain_full"]["rows_written"] == len(long)
    if "plain_approx" in out:
        checks["plain_approx_rows"] = out["plain_approx"]["rows_written"] == n_backup
    return checks


def ratios(size: dict) -> dict[str, float]:
    lac = size["lacuna"]["readings_per_s"]
    return {
        f"lacuna_over_{k}": round(lac / size[k]["readings_per_s"], 3)
        for k in ("plain_full", "plain_approx", "plain_windows")
        if k in size
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=800, help="history rows (x132 readings)")
    p.add_argument("--files", type=int, default=8, help="landing files per size")
    p.add_argument("--window", type=int, default=24)
    p.add_argument("--eps", type=float, default=0.25, help="in standard deviations")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--cluster", default="", help="e.g. 1,2: also on a standalone cluster")
    args = p.parse_args()
    from engine.stream.session import SparkSettings, get_spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    rows = load(args.rows)
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = ("lacuna", "plain_full", "plain_approx", "plain_windows")
    with tempfile.TemporaryDirectory(prefix="bench_production_") as tmp:
        root = Path(tmp)
        config = plan(rows, args, root / "plan.json")
        spark = get_spark(SparkSettings(master="local[2]", shuffle_partitions=2))
        one_size(spark, rows, config, 1_000, argparse.Namespace(files=2), root / "warm", kinds)
        local = {
            str(s): one_size(spark, rows, config, s, args, root / "local", kinds) for s in sizes
        }
        for size in local.values():
            size["ratios"] = ratios(size)
        spark.stop()
        clusters = run_clusters(rows, config, args, root, sizes)
    print_json(
        {
            "note": "PRELIMINARY: measured while ~8 developers shared this 2-core machine "
            "(load average 15-25); ratios within one run are more meaningful than absolutes",
            "data": {"sensors": len(rows.sensors), "rows": args.rows, "file": str(DATA)},
            "plan": {
                "backup_sensors": len(config.backup_sensors),
                "backup_fraction": len(config.backup_sensors) / len(rows.sensors),
                "window": args.window,
                "eps": args.eps,
            },
            "micro_batch": "one landing file per micro-batch (maxFilesPerTrigger=1), availableNow",
            "local[2]": local,
            "standalone": clusters,
        }
    )


def run_clusters(rows: Rows, config: Any, args: argparse.Namespace, root: Path,
                 sizes: list[int]) -> dict:  # fmt: skip
    if not args.cluster:
        return {"skipped": "run with --cluster 1,2"}
    from engine.stream.session import SparkSettings, get_spark
    from tests.cluster.standalone import ClusterError, StandaloneCluster

    out: dict[str, Any] = {}
    for workers in (int(w) for w in args.cluster.split(",")):
        try:
            cluster = StandaloneCluster(root / f"cluster{workers}", workers=workers).start()
        except ClusterError as err:
            out[f"{workers}_workers"] = {"error": str(err).splitlines()[0]}
            continue
        try:
            spark = get_spark(SparkSettings(master=cluster.url, shuffle_partitions=2))
            kinds = ("lacuna", "plain_full")
            work = root / f"c{workers}"
            out[f"{workers}_workers"] = {
                str(s): one_size(spark, rows, config, s, args, work, kinds) for s in sizes
            }
            spark.stop()
        finally:
            cluster.stop()
    return out


if __name__ == "__main__":
    main()
