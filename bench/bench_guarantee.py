"""Savings at an honest guarantee: the seed's model-only plan against Lacuna's
calibrated plan, on the same rolling-origin folds of real data, in one run.

    python -m bench.bench_guarantee            # all cases (several minutes)
    python -m bench.bench_guarantee --quick    # every 4th fold
    python -m bench.bench_guarantee --held-out # series not used to choose the method

Protocol: delta = 0.05, history H = 336 rows, step S = 24 rows,
tumbling windows. Missing readings are filled by the loader (linear
interpolation in time; see its report); no rows are dropped, so windows stay
aligned with the clock.

Savings are ``1 - backup fraction`` (raw readings not persisted). A sensor's
violation rate is over all its windows (a backed-up sensor is recovered
exactly); the rate over only the windows where it was rebuilt is reported too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import engine  # noqa: F401  (sets single-threaded BLAS before numpy loads)
from bench.common import datasets_dir
from engine.data import load_history
from engine.planning import BacktestSettings, PlanningSpec, run_backtest

DATASETS = datasets_dir()
BEIJING = DATASETS / "beijing_multisite_aq" / "wide.csv"
INTEL = DATASETS / "intel_lab_subset" / "wide.csv"

CASES = [
    # name, file, sensor suffix, aggregate, window, eps, history, step
    ("beijing_TEMP_avg", BEIJING, "_TEMP", "avg", 24, 1.0, 336, 24),
    ("beijing_PM2.5_avg", BEIJING, "_PM2.5", "avg", 24, 20.0, 336, 24),
    ("beijing_TEMP_max", BEIJING, "_TEMP", "max", 24, 1.0, 336, 24),
    ("beijing_PM2.5_max", BEIJING, "_PM2.5", "max", 24, 20.0, 336, 24),
    # Intel: 240 half-hourly rows; a day (48 rows) of history, windows of 6 rows (3 h)
    ("intel_avg", INTEL, None, "avg", 6, 0.5, 48, 6),
]

# Series never used to choose the calibration's form; eps set by each quantity's unit
# before any run.
HELD_OUT = [
    ("beijing_PM10_avg", BEIJING, "_PM10", "avg", 24, 20.0, 336, 24),
    ("beijing_NO2_avg", BEIJING, "_NO2", "avg", 24, 5.0, 336, 24),
    ("beijing_O3_avg", BEIJING, "_O3", "avg", 24, 10.0, 336, 24),
    ("beijing_CO_avg", BEIJING, "_CO", "avg", 24, 100.0, 336, 24),
    ("beijing_DEWP_avg", BEIJING, "_DEWP", "avg", 24, 1.0, 336, 24),
    ("beijing_PRES_avg", BEIJING, "_PRES", "avg", 24, 1.0, 336, 24),
    ("beijing_PM10_max", BEIJING, "_PM10", "max", 24, 20.0, 336, 24),
    ("beijing_DEWP_max", BEIJING, "_DEWP", "max", 24, 1.0, 336, 24),
]


def run_case(case: tuple, max_folds: int | None) -> dict:
    _, path, suffix, agg, window, eps, history, step = case
    data = load_history(path)
    if suffix:
        data = data.select([s for s in data.sensors if s.endswith(suffix)])
    settings = BacktestSettings(history=history, step=step, max_folds=max_folds)
    out: dict = {
        "sensors": len(data.sensors),
        "rows": int(data.values.shape[0]),
        "aggregate": agg,
        "window": window,
        "eps": eps,
        "delta": 0.05,
    }
    for label, calibration in (("seed", "none"), ("lacuna", "backtest")):
        spec = PlanningSpec(
            eps=eps, delta=0.05, window=window, slide=window, aggregate=agg, calibration=calibration
        )
        t0 = time.perf_counter()
        r = run_backtest(data.values, data.sensors, spec, settings)
        out[label] = {
            "savings": round(1.0 - r.backup_fraction_mean, 4),
            "backup_fraction": round(r.backup_fraction_mean, 4),
            "violation_rate_mean": round(r.violation_rate_mean, 4),
            "violation_rate_worst_sensor": round(r.violation_rate_worst_sensor, 4),
            "violation_rate_worst_sensor_ucb95": round(r.violation_rate_worst_sensor_ucb95, 4),
            "violation_rate_worst_sensor_when_rebuilt": round(
                r.violation_rate_worst_sensor_when_rebuilt, 4
            ),
            "worst_sensor": r.worst_sensor,
            "n_folds": r.n_folds,
            "seconds": round(time.perf_counter() - t0, 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="at most 300 folds per case")
    parser.add_argument("--case", action="append", help="run only these case names")
    parser.add_argument(
        "--held-out", action="store_true", help="the series not used to choose the calibration"
    )
    args = parser.parse_args(argv)
    if not BEIJING.exists():
        print(f"datasets not found at {DATASETS}", file=sys.stderr)
        return 2
    results = {}
    for case in HELD_OUT if args.held_out else CASES:
        if args.case and case[0] not in args.case:
            continue
        results[case[0]] = run_case(case, 300 if args.quick else None)
        print(f"{case[0]} done", file=sys.stderr)
    name = "guarantee_held_out" if args.held_out else "guarantee"
    print(json.dumps({"benchmark": name, "quick": args.quick, "cases": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
