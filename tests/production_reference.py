"""Shared by the production-job tests: a plan config, a landing directory, and a
pure-Python reference of what the job must produce on the same data.

The reference takes a different route from the job on purpose: it rebuilds every
reading with the linear map and aggregates the rebuilt readings per window
(plain loops over epoch-aligned windows), while the job aggregates first and
combines aggregates (avg/sum) or runs ``applyInPandas`` (max/min).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.model import LinearMap
from engine.query import WindowQuery
from tests.helpers import SMALL_BACKUP, SMALL_SAMPLE, SMALL_SENSORS, fit_map

SAMPLE, SENSORS, BACKUP = SMALL_SAMPLE, SMALL_SENSORS, SMALL_BACKUP


@dataclass(frozen=True)
class Rows:
    times: np.ndarray
    values: np.ndarray
    sensors: tuple[str, ...]


def sample_rows(n_rows: int = 96) -> Rows:
    from engine.data import load_history

    full = load_history(SAMPLE)
    return Rows(full.times[:n_rows], full.select(SENSORS).values[:n_rows], SENSORS)


def write_config(
    path: Path,
    rows: Rows,
    backup: tuple[str, ...] = BACKUP,
    window: int = 8,
    slide: int = 4,
    aggregate: str = "avg",
    eps: float = 1.0,
    lm: LinearMap | None = None,
    sampling_interval_s: float = 3600.0,
    exposure: int | None = None,
) -> dict[str, Any]:
    """A schema-v1 config (valid for ``load_config``); the map is a least-squares fit
    unless ``lm`` is given. With ``exposure``, a schema-v3 crash-contract config of that
    exposure, valid far past the rows (so the job never finds it expired)."""
    from engine.export import production_snippets, validate_config

    lm = lm or fit_map(rows.values, rows.sensors, backup)
    backup = lm.backup
    config = {
        "schema_version": 1,
        "created_at": "2026-01-01T00:00:00+00:00",
        "data_fingerprint": "sha256:" + "0" * 64,
        "parameters": {
            "eps": eps,
            "delta": 0.05,
            "window": window,
            "slide": slide,
            "aggregate": aggregate,
            "sampling_interval_s": sampling_interval_s,
        },
        "sensors": list(rows.sensors),
        "backup_sensors": list(backup),
        "reconstruction": {
            t: {
                "intercept": float(lm.intercept[i]),
                "coefficients": {b: float(lm.coef[i, j]) for j, b in enumerate(backup)},
                "conditional_variance": float(lm.conditional_variance[i]),
            }
            for i, t in enumerate(lm.targets)
        },
        "guarantee": {
            "method": "greedy",
            "calibration": {"method": "none", "reason": "test map: least squares"},
            "history_rows": len(rows.times),
            "model": {"worst_violation_probability": None, "note": "test", "repair": None},
            "backtest": None,
            "verdict": "not measured",
            "backtest_note": "not run",
        },
        "savings": _savings(len(backup), len(rows.sensors)),
        "production": production_snippets(backup, slide * sampling_interval_s),
    }
    if exposure is not None:
        _crash_contract(config, rows, exposure)
    validate_config(config)
    path.write_text(json.dumps(config))
    return config


def _crash_contract(config: dict[str, Any], rows: Rows, exposure: int) -> None:
    """Make ``config`` a schema-v3 config for the crash contract at ``exposure`` rows."""
    params = config["parameters"]
    stamp = [pd.Timestamp(t).strftime("%Y-%m-%dT%H:%M:%SZ") for t in rows.times[[0, -1]]]
    horizon = 100 * len(rows.times)
    seconds = horizon * params["sampling_interval_s"]
    until = pd.Timestamp(rows.times[-1]) + pd.Timedelta(seconds=seconds)
    config["schema_version"] = 3
    params["eps_by_sensor"] = dict.fromkeys(rows.sensors, params["eps"])
    params["units"] = dict.fromkeys(rows.sensors, "unknown:test")
    params["exposure"] = exposure
    config["guarantee"].update(contract="crash", exposure_rows=exposure)
    config["validity"] = {
        "fit_start": stamp[0],
        "fit_end": stamp[1],
        "horizon_rows": horizon,
        "horizon_seconds": seconds,
        "valid_until": until.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _savings(m: int, n: int) -> dict[str, float]:
    full, kept = 24.0 * n, 24.0 * m
    return {
        "readings_per_day_full": full,
        "readings_per_day_backup": kept,
        "readings_per_day_saved": full - kept,
        "bytes_per_reading": 16.0,
        "bytes_per_day_full": 16 * full,
        "bytes_per_day_backup": 16 * kept,
        "bytes_per_day_saved": 16 * (full - kept),
        "fraction_saved": 1 - m / n,
    }


def feed(
    rows: Rows, landing: Path, rows_per_file: int = 12, start: int = 0, stop: int | None = None
):
    from engine.live.feeder import Feeder, FeedOptions

    options = FeedOptions(rows_per_file=rows_per_file, start_row=start, stop_row=stop)
    return Feeder(rows, rows.sensors, landing, None, options).run()


def landed_sample(tmp: Path, n_rows: int, **feed_kw: Any) -> Rows:
    """The sample's first ``n_rows`` with ``write_config``'s default plan at
    ``tmp/plan.json``, fed to ``tmp/landing`` (``feed_kw``: ``feed``'s options)."""
    rows = sample_rows(n_rows)
    write_config(tmp / "plan.json", rows)
    feed(rows, tmp / "landing", **feed_kw)
    return rows


def land_long(frame: pd.DataFrame, path: Path) -> None:
    """Long readings (``event_time``, ``sensor``, ``value``) as one landing file, typed as
    the feeder writes them: microsecond UTC times; a NaN value stays NaN, not null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "event_time": pa.array(frame["event_time"], type=pa.timestamp("us", tz="UTC")),
            "sensor": pa.array(frame["sensor"], type=pa.string()),
            "value": pa.array(frame["value"].to_numpy(), from_pandas=False),
        }
    )
    pq.write_table(table, path)


def long_readings(rows: Rows) -> pd.DataFrame:
    t, n = rows.values.shape
    return pd.DataFrame(
        {
            "event_time": np.repeat(rows.times, n),
            "sensor": np.tile(np.asarray(rows.sensors, dtype=object), t),
            "value": rows.values.reshape(-1),
        }
    )


def reference_results(
    rows: Rows,
    lm: LinearMap,
    window_s: float,
    slide_s: float,
    aggregate: str,
    eps: float,
    watermark_s: float = 0.0,
    recovered: np.ndarray | None = None,
) -> pd.DataFrame:
    """Every (window, sensor) the job must emit, with true and rebuilt aggregates.

    ``recovered``: the readings a recovery returns, a row per time (default: every row
    rebuilt by ``lm``, its backups as read); see ``recovered_readings``."""
    rebuilt = recovered_readings(rows, lm) if recovered is None else recovered
    seconds = rows.times.astype("datetime64[s]").astype(np.int64)
    horizon = seconds.max() - watermark_s  # Spark emits a window once its end <= watermark
    members: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(seconds):
        k = math.floor(t / slide_s)
        while k * slide_s > t - window_s:
            members[int(k * slide_s)].append(i)
            k -= 1
    out = []
    for start, idx in sorted(members.items()):
        if start + window_s > horizon:
            continue
        for j, sensor in enumerate(rows.sensors):
            true, rec = _agg(rows.values[idx, j], aggregate), _agg(rebuilt[idx, j], aggregate)
            out.append((start, start + window_s, sensor, len(idx), true, rec))
    frame = pd.DataFrame(out, columns=["start_s", "end_s", "sensor", "n", "value", "rebuilt"])
    frame["error"] = frame["rebuilt"] - frame["value"]
    frame["miss"] = frame["error"].abs() > eps
    return frame


def recovered_readings(rows: Rows, lm: LinearMap, stored: tuple[str, ...] = ()) -> np.ndarray:
    """``rows`` as a recovery returns them under ``lm``: its backups and ``stored`` as
    read, every other sensor rebuilt reading by reading."""
    rebuilt = lm.apply(rows.values[:, [rows.sensors.index(b) for b in lm.backup]])
    exact = [j for j, s in enumerate(rows.sensors) if s in (*lm.backup, *stored)]
    rebuilt[:, exact] = rows.values[:, exact]
    return rebuilt


def _agg(values: np.ndarray, aggregate: str) -> float:
    return float({"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}[aggregate](values))


def read_results(backup: Path) -> pd.DataFrame:
    """The job's results, read back with DuckDB as an operator would."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    pattern = str(backup / "_lacuna" / "results" / "*" / "part-*")  # Parquet named .pq
    frame = con.execute(
        "SELECT epoch(window_start)::BIGINT AS start_s, epoch(window_end)::BIGINT AS end_s, "
        "sensor, n, value, rebuilt, error, miss, backed_up, plan_version, batch_id "
        f"FROM read_parquet('{pattern}', hive_partitioning = true) ORDER BY start_s, sensor"
    ).df()
    return frame


def job_settings(tmp: Path, **kw: Any) -> Any:
    """``JobSettings`` reading ``tmp/landing``, backup and checkpoint under ``tmp``; online
    control off unless ``control=True`` (on by default in the product: its own tests,
    ``test_production_control``, turn it on; the others test what it leaves alone and
    would pay its model fit and row collection in every run)."""
    from engine.job.run import JobSettings

    return JobSettings(
        source=str(tmp / "landing"),
        backup=str(tmp / "backup"),
        checkpoint=(tmp / "checkpoint").as_uri(),
        **{"control": False, **kw},
    )


def run_landed(spark: Any, tmp: Path, config: Path, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``run_job`` on ``tmp/landing`` until what landed is done (availableNow), backup and
    checkpoint under ``tmp``; returns its report and every logged event."""
    import threading

    from engine.export import load_config
    from engine.job.run import run_job

    settings = job_settings(tmp, available_now=True, **kw)
    logged: list[dict[str, Any]] = []
    report = run_job(spark, load_config(config), settings, threading.Event(), log=logged.append)
    return report, logged


def wrong_map_config(path: Path) -> tuple[Any, dict[str, Any]]:
    """A calibrated plan of the small sample (eps 20, window 8, avg, horizon 48) whose map
    is wrong: every rebuilt target off by 1,000, so every rebuilt window misses. Written to
    ``path``; returns the sample's history and the config."""
    from engine.data import load_history
    from engine.export import plan_to_config
    from engine.export.seal import seal_config
    from engine.planning import PlanParameters, make_plan

    history = load_history(SAMPLE)
    params = PlanParameters(WindowQuery(20.0, 0.05, 8, aggregate="avg", horizon=48))
    config = plan_to_config(make_plan(history.rows(0, 600), params))
    for target in config["reconstruction"].values():
        target["intercept"] += 1000.0
    seal_config(config)  # the wrong map on purpose: sealed again, or the loader refuses it
    path.write_text(json.dumps(config))
    return history, config
