"""End to end: load the 132-sensor Beijing file and plan for every sensor.

    python -m bench.bench_end_to_end

Eps is per sensor group in practice (units differ); to plan all 132 channels
with one eps we standardise nothing and pick eps = 5 with avg over 24 h, which
makes the plan non-trivial. Reported: load time, planning time for the seed's
model-only plan and for the calibrated plan (no backtest), and the calibrated
plan with a 20-fold backtest, each with its backup fraction.
"""

from __future__ import annotations

import json
import sys
import time

import engine  # noqa: F401  (single-threaded BLAS before numpy loads)
from bench.common import beijing_wide
from engine.data import load_history
from engine.planning import BacktestSettings, PlanParameters, make_plan
from engine.query import WindowQuery

WIDE = beijing_wide()


def timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t0, 3)


def main() -> int:
    if not WIDE.exists():
        print(f"dataset not found: {WIDE}", file=sys.stderr)
        return 2
    history, load_s = timed(lambda: load_history(WIDE))
    params = PlanParameters(WindowQuery(5.0, 0.05, 24))
    result: dict = {
        "benchmark": "end_to_end",
        "rows": int(history.values.shape[0]),
        "sensors": len(history.sensors),
        "load_seconds": load_s,
        "loader_notes": list(history.report.notes)[:5],
    }
    for label, p, backtest in (
        (
            "seed_model_only",
            PlanParameters(WindowQuery(5.0, 0.05, 24), calibration="none"),
            False,
        ),
        ("calibrated_no_backtest", params, False),
        ("calibrated_backtest_20_folds", params, True),
    ):
        plan, seconds = timed(
            lambda p=p, b=backtest: make_plan(
                history, p, backtest=BacktestSettings(history=336, max_folds=20), run_backtest_now=b
            )
        )
        entry = {
            "seconds": seconds,
            "backup_sensors": len(plan.backup_sensors),
            "backup_fraction": round(plan.backup_fraction, 4),
        }
        if plan.backtest is not None:
            entry["verdict"] = plan.backtest.verdict(0.05)
        result[label] = entry
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
