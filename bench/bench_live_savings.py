"""Does the live pipeline keep the plan's savings? ``simulate`` approx against full.

A stationary stream (20 correlated sensors in clusters of four, AR(1) factors and
noise, one reading a minute) is planned on its first half and replayed through the
real Spark pipeline twice in one run: ``--mode approx`` (the plan's backup set, re-planned
every horizon) and ``--mode full`` (every sensor, the baseline an operator would pick
instead), each with one failure and recovery. Reported: every plan version's backup
set against the first one's, and the approx backup's bytes against full's beside the
plan's backup fraction |O|/n and the share of the readings it really stored (versions
change the set, and after a failure every sensor is backed up for a while): the bytes at
rest (``backup_bytes``, after the pipeline's compaction) and the bytes Spark wrote, one
directory a micro-batch. Both contracts: the range plan (whole windows) and a
crash plan (``--exposure``, a crash of the batch in flight).

Run from the repository root::

    .venv/bin/python -m bench.bench_live_savings [--rows 8000] [--replay 2400]

JSON to ``bench/results/live_savings.json``.
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

from bench.common import ROOT

RESULTS = ROOT / "bench" / "results" / "live_savings.json"


def stationary_frame(rows: int, sensors: int, seed: int, unit: str = "") -> pd.DataFrame:
    """Correlated sensors that never change regime (clusters of four share an AR(1)
    factor; each adds its own AR(1) noise, so errors are autocorrelated in time), one
    reading a minute; columns ``time`` and ``s00{unit}``, ``s01{unit}``, ..."""
    rng = np.random.default_rng(seed)

    def ar1(n: int) -> np.ndarray:
        out = np.empty((rows, n))
        out[0] = rng.standard_normal(n)
        for t in range(1, rows):
            out[t] = 0.9 * out[t - 1] + np.sqrt(1 - 0.81) * rng.standard_normal(n)
        return out

    factors = ar1(sensors // 4)
    values = np.repeat(factors, 4, axis=1) + rng.uniform(0.15, 0.35, sensors) * ar1(sensors)
    frame = {f"s{i:02d}{unit}": 20.0 + 5.0 * values[:, i] for i in range(sensors)}
    times = pd.date_range("2024-01-01", periods=rows, freq="min")
    return pd.DataFrame({"time": times, **frame})


def stationary_csv(path: Path, rows: int, sensors: int, seed: int) -> Path:
    """``stationary_frame`` (in degC) written to ``path``."""
    stationary_frame(rows, sensors, seed, unit="_degC").to_csv(path, index=False)
    return path


def simulate(data: Path, mode: str, replay: int, extra: list[str], workdir: Path) -> dict[str, Any]:
    """``simulate``'s report, with what its store holds: backup readings, the bytes Spark
    wrote (one directory a micro-batch) and the bytes at rest (after compaction)."""
    from engine.cli import COMMANDS
    from engine.cli_parser import build_parser
    from engine.export import json_safe
    from engine.live.store import BackupStore

    args = ["simulate", "--data", str(data), "--eps", "3", "--delta", "0.05", "--window", "30"]
    args += ["--mode", mode, "--rows", str(replay), "--workdir", str(workdir), *extra]
    start = time.perf_counter()
    parsed = build_parser().parse_args(args)
    out = json.loads(json.dumps(json_safe(COMMANDS["simulate"](parsed)), default=str))
    out["seconds"] = round(time.perf_counter() - start, 1)
    with BackupStore(workdir / "store.duckdb") as store:
        totals, size = store.totals(), store.size()
    out["stored"] = {
        "readings": size.backup_rows,
        "bytes_written": totals["backup_bytes"],
        "bytes_at_rest": size.backup_bytes,
    }
    return out


def summary(approx: dict[str, Any], full: dict[str, Any], n: int) -> dict[str, Any]:
    versions = approx["plan_versions"]
    sizes = [len(v["backup_sensors"]) for v in versions]
    first = set(versions[0]["backup_sensors"])
    moved = [len(first ^ set(v["backup_sensors"])) for v in versions]
    fraction = len(approx["plan"]["backup_sensors"]) / n
    ratio = approx["backup_bytes"] / full["backup_bytes"]
    share = {k: approx["stored"][k] / full["stored"][k] for k in approx["stored"]}
    return {
        "versions": len(versions),
        "backup_set_sizes": sizes,
        "symmetric_difference_from_first": moved,
        "sizes_within_2_of_first": all(abs(s - sizes[0]) <= 2 for s in sizes),
        "plan_backup_fraction": round(fraction, 4),
        "approx_over_full_readings": round(share["readings"], 4),
        "approx_over_full_bytes_written": round(share["bytes_written"], 4),
        "approx_over_full_bytes": round(ratio, 4),
        "bytes_within_fraction_plus_5_points": ratio <= fraction + 0.05,
        "bytes_within_readings_plus_5_points": ratio <= share["readings"] + 0.05,
        "recovery": {
            "failure": approx.get("failure"),
            "contract": approx.get("contract"),
            "lost_rows": approx["lost_rows"],
            "violation_rate": approx["violation_rate"],
        },
        "seconds": {"approx": approx["seconds"], "full": full["seconds"]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8000)
    parser.add_argument("--replay", type=int, default=2400)
    parser.add_argument("--sensors", type=int, default=20)
    parser.add_argument(
        "--horizon", type=int, default=300, help="rows between scheduled re-plans (default 300)"
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    out: dict[str, Any] = {"rows": args.rows, "replay": args.replay, "sensors": args.sensors}
    horizon = ["--horizon", str(args.horizon)]
    out["horizon"] = args.horizon
    with tempfile.TemporaryDirectory(prefix="lacuna-live-savings-") as tmp:
        data = stationary_csv(Path(tmp) / "stationary.csv", args.rows, args.sensors, seed=3)
        for name, extra in (("range", horizon), ("crash", [*horizon, "--exposure", "8"])):
            approx = simulate(data, "approx", args.replay, extra, Path(tmp) / f"{name}-approx")
            full = simulate(data, "full", args.replay, extra, Path(tmp) / f"{name}-full")
            out[name] = summary(approx, full, args.sensors)
            print(name, json.dumps(out[name]), flush=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
