"""Recovery of a lost range: Lacuna's backup against replaying the full backup, one run.

Two data sets, same construction of everything else:

* ``beijing_132``: the 132 channels of the Beijing file, real readings. The
  plan is fitted on the first ``--train-rows`` hours (standardised with their
  mean and standard deviation); the next ``--weeks`` weeks are the stream.
* ``gaussian_1056``: **synthetic**, not real readings: 8 independent networks
  of 132 sensors, each drawn from a Gaussian whose correlation matrix is the
  Beijing training rows' (standardised) correlation matrix; i.i.d. over time,
  on the Beijing file's hourly timestamps. Sensor ``b3_Dongsi_PM2.5`` is
  network 3's copy of that channel's *role*, not of its readings: no two
  sensors share readings. Used only for how recovery scales with n.

Per data set: a plan (``GaussianModel`` on the training rows, the model-only
variance target for (eps, delta, window, avg), ``select_backups(greedy)``);
landing files of one day each (long Parquet ``event_time, sensor, value``);
the production job (``run_job``, ``availableNow``, a week per micro-batch)
writes Lacuna's backup; a plain Spark file sink writes the full backup (every
sensor, same long layout, same ``date`` partitions, same micro-batches).

Then, Spark stopped (``bench/recovery_core.py``), for a lost range of one day, one week,
four weeks and twelve weeks:

* ``lacuna``: ``engine.export.recover.recover_dataset``, what ``python -m
  engine recover --backup DIR --from T1 --to T2`` runs: DuckDB reads the
  backup sensors' files of the range's partitions, pandas pivots, the linear
  map rebuilds every sensor, a wide Parquet file is written;
* ``full_duckdb``: the baseline a user without Lacuna runs: DuckDB reads the
  full backup's partitions of the range (hive filter on ``date``), ``PIVOT``s
  every sensor to wide (sensors listed) and ``COPY``s it to Parquet;
* ``full_pandas``: the full backup through the same reader and pandas pivot
  as ``lacuna`` (separates "less data" from "different code").

Seconds are medians over ``--repeats`` (the kinds interleaved). Bytes: the
Parquet files of the range's partitions (``files_bytes``) and what the process
really read through system calls (``rchar`` of ``/proc/self/io``). Checks: the
recovered backup sensors equal the full backup's values exactly, the baseline
equals the landing readings, and the rebuilt sensors' RMSE against the truth
(standardised units; the plan bounds window averages, not single readings).

``nice -n 10 .venv/bin/python -m bench.bench_recovery > bench/results/recovery.json``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import beijing_wide, print_json  # noqa: E402
from bench.recovery_core import compare_range  # noqa: E402
from engine.backup import read_backup  # noqa: E402
from tests.production_reference import Rows  # noqa: E402

DATA = beijing_wide()
LANDING_SCHEMA = pa.schema(
    [("event_time", pa.timestamp("us", tz="UTC")), ("sensor", pa.string()), ("value", pa.float64())]
)
RANGES = {"1_day": 1, "1_week": 7, "4_weeks": 28, "12_weeks": 84}


# ---------------------------------------------------------------- data


def beijing(train_rows: int, stream_rows: int) -> tuple[Rows, Rows]:
    """Training and stream rows of the 132 channels, standardised on the training rows."""
    from engine.data.history import load_history

    h = load_history(DATA).rows(0, train_rows + stream_rows)
    train = h.values[:train_rows]
    scale = train.std(axis=0)
    scale[scale == 0] = 1.0
    z = (h.values - train.mean(axis=0)) / scale
    return _split(Rows(h.times, z, h.sensors), train_rows)


def block_gaussian(base: Rows, blocks: int, seed: int = 0) -> Rows:
    """``blocks`` independent networks, each Gaussian with ``base``'s correlation matrix.

    Same timestamps as ``base``; i.i.d. over time; sensors ``b<k>_<name>``.
    """
    corr = np.corrcoef(base.values.T)
    w, v = np.linalg.eigh(corr)
    root = v * np.sqrt(np.clip(w, 0.0, None))  # corr = root @ root.T (clipped at 0)
    rng = np.random.default_rng(seed)
    t, n = base.values.shape
    values = np.hstack([rng.standard_normal((t, n)) @ root.T for _ in range(blocks)])
    sensors = tuple(f"b{k}_{s}" for k in range(blocks) for s in base.sensors)
    return Rows(base.times, values, sensors)


def _split(rows: Rows, at: int) -> tuple[Rows, Rows]:
    head = Rows(rows.times[:at], rows.values[:at], rows.sensors)
    return head, Rows(rows.times[at:], rows.values[at:], rows.sensors)


def make_plan(train: Rows, path: Path, eps: float, window: int) -> Any:
    """The plan's config written to ``path`` and loaded back."""
    from engine.export import load_config
    from engine.model.gaussian import GaussianModel
    from engine.planning.guarantee import variance_target
    from engine.selection.greedy import select_backups
    from tests.production_reference import write_config

    model = GaussianModel().fit(train.values, train.sensors)
    sel = select_backups(model.cov_, variance_target(eps, 0.05, window, "avg"), "greedy")
    lm = model.linear_map(sorted(sel.backup))
    write_config(path, train, window=window, slide=window, eps=eps, lm=lm)
    return load_config(path)


def write_landing(stream: Rows, landing: Path, steps_per_file: int = 24) -> int:
    """One long Parquet file per ``steps_per_file`` time steps, increasing mtimes."""
    landing.mkdir(parents=True)
    t, n = stream.values.shape
    stamp = time.time_ns() - 10**12
    for i, lo in enumerate(range(0, t, steps_per_file)):
        hi = min(lo + steps_per_file, t)
        part = pd.DataFrame(
            {
                "event_time": pd.DatetimeIndex(np.repeat(stream.times[lo:hi], n)).tz_localize(
                    "UTC"
                ),
                "sensor": np.tile(np.asarray(stream.sensors, dtype=object), hi - lo),
                "value": stream.values[lo:hi].reshape(-1),
            }
        )
        path = landing / f"part-{i:06d}.parquet"
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False).cast(LANDING_SCHEMA), path)
        os.utime(path, ns=(stamp + i * 10**7, stamp + i * 10**7))
    return t * n


# ---------------------------------------------------------------- backups (Spark)


def lacuna_backup(spark: Any, config: Any, landing: Path, out: Path, files_per_batch: int) -> dict:
    from engine.job import JobSettings, run_job

    settings = JobSettings(
        source=str(landing),
        backup=str(out),
        checkpoint=str(out) + "_ck",
        available_now=True,
        max_files_per_trigger=files_per_batch,
        replan=False,  # one plan for the whole stream: the checks compare against its backup set
    )
    t0 = time.perf_counter()
    report = run_job(spark, config, settings, threading.Event(), log=lambda _r: None)
    return {
        "seconds": round(time.perf_counter() - t0, 2),
        "batches": report.batches,
        "misses": report.misses,
        "windows": report.windows,
    }


def full_backup(spark: Any, landing: Path, out: Path, files_per_batch: int) -> dict:
    """Every reading through Spark's Parquet file sink, the backup's long layout."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    readings = (
        spark.readStream.schema("event_time timestamp, sensor string, value double")
        .option("maxFilesPerTrigger", files_per_batch)
        .parquet(str(landing))
        .withColumn("plan_version", F.lit(1))
        .withColumn("date", F.date_format("event_time", "yyyy-MM-dd"))
    )
    t0 = time.perf_counter()
    query = (
        readings.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(out) + "_ck")
        .partitionBy("date")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return {"seconds": round(time.perf_counter() - t0, 2)}


# ---------------------------------------------------------------- run


def build_case(spark: Any, name: str, train: Rows, stream: Rows, args: argparse.Namespace,
               root: Path) -> dict:  # fmt: skip
    """Plan, landing files and both backups of one data set."""
    case = root / name
    case.mkdir()
    config = make_plan(train, case / "plan.json", args.eps, args.window)
    readings = write_landing(stream, case / "landing")
    info: dict[str, Any] = {
        "sensors": len(stream.sensors),
        "backup_sensors": len(config.backup_sensors),
        "backup_fraction": round(len(config.backup_sensors) / len(stream.sensors), 4),
        "train_rows": len(train.times),
        "stream_rows": len(stream.times),
        "stream_from": str(stream.times[0]),
        "readings": readings,
        "landing_files": len(list((case / "landing").iterdir())),
    }
    info["lacuna_job"] = lacuna_backup(spark, config, case / "landing", case / "backup", 7)
    info["full_sink"] = full_backup(spark, case / "landing", case / "full", 7)
    info["backup_rows"] = len(read_backup(case / "backup"))
    info["full_rows"] = len(read_backup(case / "full"))
    info["checks"] = {
        "backup_rows_are_backup_readings": info["backup_rows"]
        == len(stream.times) * len(config.backup_sensors),
        "full_rows_are_all_readings": info["full_rows"] == readings,
    }
    return info


def time_case(name: str, stream: Rows, args: argparse.Namespace, root: Path) -> dict:
    from engine.export import load_config

    case = root / name
    config = load_config(case / "plan.json")
    first_midnight = pd.Timestamp(stream.times[0]).ceil("D").tz_localize("UTC").to_pydatetime()
    t1 = first_midnight + timedelta(days=args.offset_days)
    last = pd.Timestamp(stream.times[-1]).tz_localize("UTC").to_pydatetime()
    out: dict[str, Any] = {}
    for label, days in RANGES.items():
        t2 = t1 + timedelta(days=days)
        if t2 > last:
            out[label] = {"skipped": f"the stream ends at {last.isoformat()}, before {t2}"}
            continue
        work = case / f"recover_{label}"
        work.mkdir()
        out[label] = compare_range(
            case / "plan.json", config, case / "backup", case / "full", t1, t2, args.repeats, work
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--train-rows", type=int, default=24 * 167, help="hours to fit the plan on")
    p.add_argument("--weeks", type=int, default=16, help="weeks of stream (the backup's span)")
    p.add_argument("--blocks", type=int, default=8, help="networks of the synthetic case")
    p.add_argument("--window", type=int, default=24)
    p.add_argument("--eps", type=float, default=0.25, help="in standard deviations")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--offset-days", type=int, default=14, help="lost range starts after")
    args = p.parse_args()
    from engine.stream import SparkSettings, get_spark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    load_start = os.getloadavg()
    train, stream = beijing(args.train_rows, args.weeks * 7 * 24)
    whole = Rows(
        np.concatenate([train.times, stream.times]),
        np.vstack([train.values, stream.values]),
        train.sensors,
    )
    big_train, big_stream = _split(block_gaussian(whole, args.blocks), args.train_rows)
    cases = {
        "beijing_132": (train, stream),
        f"gaussian_{len(big_stream.sensors)}": (big_train, big_stream),
    }
    with tempfile.TemporaryDirectory(prefix="bench_recovery_") as tmp:
        root = Path(tmp)
        spark = get_spark(SparkSettings(master="local[2]", shuffle_partitions=2))
        built = {
            name: build_case(spark, name, tr, st, args, root) for name, (tr, st) in cases.items()
        }
        spark.stop()
        for name, (_tr, st) in cases.items():
            built[name]["recovery"] = time_case(name, st, args, root)
    print_json(
        {
            "benchmark": "recovery of a lost range",
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
            "uptime_end": os.popen("uptime").read().strip(),
            "machine": {"cpus": os.cpu_count()},
            "settings": vars(args),
            "data": {
                "beijing_132": f"real: {DATA.name} of beijing_multisite_aq, all 132 channels",
                f"gaussian_{132 * args.blocks}": f"synthetic: {args.blocks} independent "
                "Gaussian networks with the Beijing training rows' 132x132 correlation "
                "matrix, i.i.d. over time, on the Beijing file's timestamps",
            },
            "cases": built,
        }
    )


if __name__ == "__main__":
    main()
