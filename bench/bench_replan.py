"""Re-planning latency as the operator tunes: what the Tune page waits for.

Run from the repository root: ``python -m bench.bench_replan [--sizes 50,100,200,400]``.
Prints one JSON object with, per number of sensors n:

* ``fit_ms``: ``make_plan(..., run_backtest_now=False)`` with calibration (fit the
  model on the learning rows, calibrate the targets on held-out blocks, select):
  what a change of delta, window, slide or aggregate costs, once per structure;
* ``retarget_ms``: ``retarget(plan, eps)`` (re-select for a new eps on the fitted
  model): what every eps or method change costs; median, 90th percentile and max
  over an eps grid (0.5 .. 16), with the backup fraction at each eps (best of
  ``--repeat`` timings per eps);
* ``whatif_ms``: the Tune page's two what-if curves (17 eps + 10 delta retargets).

Data: synthetic correlated sensors, hourly, 2,000 rows: groups of 8 share an
AR(1) latent signal (so window errors are correlated in time, as on real
sensors) plus their own AR(1) noise. The target is retarget < 200 ms at n = 200.
"""

from __future__ import annotations

import os

# As the app does: one BLAS thread, set before numpy loads (bench.common imports it).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import platform
from typing import Any

import numpy as np
import pandas as pd

from bench.common import print_json, time_call
from engine.data import SensorHistory, history_from_frame
from engine.planning import (
    DELTA_GRID,
    PlanParameters,
    eps_grid,
    make_plan,
    retarget,
    whatif_delta,
    whatif_eps,
)
from engine.query import WindowQuery

ROWS, GROUP, TARGET_MS, TARGET_N = 2000, 8, 200.0, 200
EPS_GRID = np.geomspace(0.5, 16.0, 11)  # spans near-full to a few per cent backed up


def ar1(rows: int, cols: int, phi: float, rng: np.random.Generator) -> np.ndarray:
    """(rows, cols) unit-variance AR(1) series."""
    shocks = rng.normal(size=(rows, cols)) * np.sqrt(1 - phi * phi)
    out = np.empty((rows, cols))
    out[0] = rng.normal(size=cols)
    for t in range(1, rows):
        out[t] = phi * out[t - 1] + shocks[t]
    return out


def synthetic_history(n: int, rng: np.random.Generator) -> SensorHistory:
    """``n`` sensors in groups of ``GROUP`` sharing a latent AR(1) signal."""
    groups = (n + GROUP - 1) // GROUP
    latent = ar1(ROWS, groups, 0.97, rng)
    loading = rng.uniform(2.0, 6.0, size=n)
    values = latent[:, np.arange(n) // GROUP] * loading + ar1(ROWS, n, 0.8, rng) * 0.6
    values += rng.uniform(-5, 25, size=n)
    frame = pd.DataFrame(values, columns=[f"s{i:03d}" for i in range(n)])
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=ROWS, freq="h"))
    return history_from_frame(frame, source=f"synthetic-{n}")


def bench_size(n: int, rng: np.random.Generator, repeat: int) -> dict[str, Any]:
    history = synthetic_history(n, rng)
    params = PlanParameters(WindowQuery(1.0, 0.05, 24))
    base, fit_s = time_call(lambda: make_plan(history, params, run_backtest_now=False))
    times, fractions = [], []
    for eps in EPS_GRID:
        plan, seconds = time_call(lambda e=eps: retarget(base, eps=float(e)), repeat)
        times.append(1000 * seconds)
        fractions.append(plan.backup_fraction)
    _, curves_s = time_call(
        lambda: (whatif_eps(base, eps_grid(1.0)), whatif_delta(base, DELTA_GRID)), 1
    )
    return {
        "n": n,
        "rows": ROWS,
        "fit_ms": round(1000 * fit_s, 1),
        "retarget_ms_median": round(float(np.median(times)), 2),
        "retarget_ms_p90": round(float(np.percentile(times, 90)), 2),
        "retarget_ms_max": round(float(np.max(times)), 2),
        "by_eps": [
            {"eps": round(float(e), 3), "backup_fraction": round(f, 3), "ms": round(t, 2)}
            for e, f, t in zip(EPS_GRID, fractions, times, strict=True)
        ],
        "backup_fraction_at_eps_1": round(base.backup_fraction, 3),
        "whatif_ms": round(1000 * curves_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100,200,400")
    parser.add_argument("--repeat", type=int, default=3, help="best of REPEAT timings")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = [bench_size(int(n), rng, args.repeat) for n in args.sizes.split(",")]
    at_target = [r for r in rows if r["n"] == TARGET_N]
    print_json(
        {
            "benchmark": "replan",
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            },
            "target": f"retarget < {TARGET_MS:g} ms at n = {TARGET_N}",
            "target_met": bool(at_target) and at_target[0]["retarget_ms_max"] < TARGET_MS,
            "sizes": rows,
        }
    )


if __name__ == "__main__":
    main()
