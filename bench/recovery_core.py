"""The Spark-free half of ``bench/bench_recovery.py``: time and check recovering a range.

Given a plan, Lacuna's backup dataset and a full backup dataset (every sensor,
the same long layout and ``date`` partitions), ``compare_range`` times three
ways of getting every sensor of ``[t1, t2)`` back as a wide Parquet file
(``KINDS``), counts the bytes each reads, and checks the outputs against each
other.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.backup import TimeRange, committed_files, read_backup, read_backup_arrow
from engine.export.recover import recover_dataset


def range_files(root: Path, span: TimeRange) -> list[Path]:
    """The committed files a reader of ``span`` opens (its ``date``/``hour`` partitions)."""
    out = []
    for f in committed_files(root):
        keys = dict(p.split("=", 1) for p in f.relative_to(root).parts[:-1] if "=" in p)
        if span.keeps(keys):
            out.append(f)
    return out


def recover_lacuna(config_path: Path, backup: Path, full: Path, out: Path,
                   t1: datetime, t2: datetime, sensors: tuple[str, ...]) -> None:  # fmt: skip
    """What ``python -m engine recover --backup`` runs."""
    recover_dataset(config_path, backup, out, t1.isoformat(), t2.isoformat())


def replay_full_duckdb(config_path: Path, backup: Path, full: Path, out: Path,
                       t1: datetime, t2: datetime, sensors: tuple[str, ...]) -> None:  # fmt: skip
    """The user's query without Lacuna: every sensor's rows of the range, pivoted, to Parquet."""
    last_day = (t2 - timedelta(microseconds=1)).date().isoformat()
    listed = ", ".join("'" + s.replace("'", "''") + "'" for s in sensors)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        f"""COPY (
          PIVOT (
            SELECT CAST(event_time AS TIMESTAMP) AS time, sensor, value
            FROM read_parquet('{full}/date=*/*.parquet', hive_partitioning = true)
            WHERE CAST(date AS VARCHAR) >= '{t1.date().isoformat()}'
              AND CAST(date AS VARCHAR) <= '{last_day}'
              AND CAST(event_time AS TIMESTAMP) >= TIMESTAMP '{t1:%Y-%m-%d %H:%M:%S}'
              AND CAST(event_time AS TIMESTAMP) < TIMESTAMP '{t2:%Y-%m-%d %H:%M:%S}'
          ) ON sensor IN ({listed}) USING first(value) GROUP BY time ORDER BY time
        ) TO '{out}' (FORMAT parquet)"""
    )
    con.close()


def replay_full_pandas(config_path: Path, backup: Path, full: Path, out: Path,
                       t1: datetime, t2: datetime, sensors: tuple[str, ...]) -> None:  # fmt: skip
    """The full backup through ``read_backup`` and pandas' pivot (``recover``'s path until
    the numpy one), no rebuilding."""
    long = read_backup(full, TimeRange(t1, t2))
    wide = long.pivot_table(index="event_time", columns="sensor", values="value", aggfunc="last")
    wide = wide.reindex(columns=list(sensors)).rename_axis("time").reset_index()
    wide.to_parquet(out, index=False)


KINDS: dict[str, Callable[..., None]] = {
    "lacuna": recover_lacuna,
    "full_duckdb": replay_full_duckdb,
    "full_pandas": replay_full_pandas,
}


def rchar() -> int:
    """Bytes this process has read through system calls (Linux), or -1."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def compare_range(config_path: Path, config: Any, backup: Path, full: Path, t1: datetime,
                  t2: datetime, repeats: int, work: Path) -> dict:  # fmt: skip
    """Time every kind on ``[t1, t2)`` (medians, interleaved) and check the outputs."""
    sensors = tuple(config.sensors)
    seconds: dict[str, list[float]] = {k: [] for k in KINDS}
    read: dict[str, list[int]] = {k: [] for k in KINDS}
    for r in range(repeats):
        for kind, fn in KINDS.items():
            out = work / f"{kind}_{r}.parquet"
            before, t0 = rchar(), time.perf_counter()
            fn(config_path, backup, full, out, t1, t2, sensors)
            seconds[kind].append(time.perf_counter() - t0)
            read[kind].append(rchar() - before)
    span = TimeRange(t1, t2)
    steps = lacuna_steps(config_path, backup, span, repeats)
    files = {"lacuna": range_files(backup, span), "full": range_files(full, span)}
    result: dict[str, Any] = {
        "from": t1.isoformat(),
        "to": t2.isoformat(),
        "repeats": repeats,
        "seconds_median": {k: round(statistics.median(v), 4) for k, v in seconds.items()},
        "seconds_all": {k: [round(s, 4) for s in v] for k, v in seconds.items()},
        "rchar_bytes_median": {k: int(statistics.median(v)) for k, v in read.items()},
        "lacuna_steps_seconds_median": steps,
        "files_touched": {k: len(v) for k, v in files.items()},
        "files_bytes": {k: sum(f.stat().st_size for f in v) for k, v in files.items()},
    }
    med = result["seconds_median"]
    result["speedup_vs_full_duckdb"] = round(med["full_duckdb"] / med["lacuna"], 2)
    result["speedup_vs_full_pandas"] = round(med["full_pandas"] / med["lacuna"], 2)
    fb = result["files_bytes"]
    result["bytes_fraction"] = round(fb["lacuna"] / fb["full"], 4) if fb["full"] else None
    result["checks"] = check_outputs(
        config, work / "lacuna_0.parquet", work / "full_duckdb_0.parquet",
        work / "full_pandas_0.parquet",
    )  # fmt: skip
    return result


def lacuna_steps(config_path: Path, backup: Path, span: TimeRange, repeats: int) -> dict:
    """Where ``lacuna``'s time goes: loading the plan, reading the range (medians).

    ``read_backup_arrow`` is the reader ``recover_dataset`` uses; the rest of its
    time is widening, rebuilding and writing.
    """
    from engine.export import load_config

    load, read = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        load_config(config_path)
        t1 = time.perf_counter()
        read_backup_arrow(backup, span)
        load.append(t1 - t0)
        read.append(time.perf_counter() - t1)
    return {
        "load_config": round(statistics.median(load), 4),
        "read_backup_arrow": round(statistics.median(read), 4),
        "config_bytes": config_path.stat().st_size,
    }


def check_outputs(config: Any, lacuna: Path, duck: Path, pandas_out: Path) -> dict[str, Any]:
    """Backup sensors equal exactly; both baselines agree; rebuilt sensors' RMSE vs truth."""
    rec = pd.read_parquet(lacuna).set_index("time")
    truth = pd.read_parquet(duck).set_index("time")
    other = pd.read_parquet(pandas_out).set_index("time")
    rec.index, truth.index, other.index = (pd.DatetimeIndex(x.index).tz_localize(None)
                                           for x in (rec, truth, other))  # fmt: skip
    backup = list(config.backup_sensors)
    targets = [s for s in config.sensors if s not in set(backup)]
    same_rows = rec.index.equals(truth.index)
    err = (rec[targets] - truth[targets]).to_numpy() if same_rows else np.array([np.nan])
    per_sensor = np.sqrt(np.nanmean(err**2, axis=0)) if same_rows else np.array([np.nan])
    return {
        "rows": len(rec),
        "same_time_steps": bool(same_rows),
        "backup_sensors_exact": bool(same_rows and rec[backup].equals(truth[backup])),
        "baselines_agree_exactly": bool(
            other.index.equals(truth.index) and other[list(config.sensors)].equals(truth)
        ),
        "baseline_complete": bool(not truth.isna().to_numpy().any()),
        "rebuilt_sensors": len(targets),
        "rebuilt_rmse": round(float(np.sqrt(np.nanmean(err**2))), 4),
        "rebuilt_rmse_worst_sensor": round(float(np.nanmax(per_sensor)), 4),
        "rmse_units": "standard deviations of the training rows",
    }


def write_dataset(long: pd.DataFrame, root: Path) -> None:
    """``long`` as the job writes it, without Spark: one file per ``date`` partition,
    plan_version 1 (for the recovery tests and the profiling script)."""
    frame = long.assign(
        event_time=pd.DatetimeIndex(long["event_time"]).tz_localize("UTC"),
        plan_version=np.int32(1),
        date=pd.DatetimeIndex(long["event_time"]).strftime("%Y-%m-%d"),
    )
    for day, part in frame.groupby("date"):
        folder = root / f"date={day}"
        folder.mkdir(parents=True)
        table = pa.Table.from_pandas(part.drop(columns="date"), preserve_index=False)
        pq.write_table(table, folder / "part-00000.parquet")
