"""Planning speed at many sensors: ``make_plan`` at n = 10,000, this checkout against another.

    python -m bench.bench_plan_scale                       # n = 10,000, this checkout
    python -m bench.bench_plan_scale --before REF          # and the same run at REF
    python -m bench.bench_plan_scale --n 2000 --profile    # where the time goes (cProfile)

Protocol: synthetic correlated readings (40 AR(1) latent factors, loadings and sensor
noise drawn once from a fixed seed), one reading a minute, a window of 30 readings,
``avg``, eps 1.0, delta 0.05, every other setting at ``plan``'s default. The file holds
exactly the rows the default history learns from (``default_history``): 11,442 rows at
n = 10,000 (a first calibration fit needs n + 2 rows, plus one horizon). That is also
too short for one backtest fold, so the plan is unmeasured and backs up every sensor:
what ``plan`` gives an operator on such a file. Then the model-only plan of the same
file (``--calibration none``, the JSON's ``model_only``), which rebuilds sensors: the
cost of a plan that needs the whole covariance (the Gram product, its repair, the
selection's factorisations).

Each figure is taken in a fresh interpreter that imports ``engine`` before numpy, as
``python -m engine plan`` does, so BLAS runs under the engine's threading rule (numpy
loaded first would start every BLAS call on every core). ``--before REF`` checks REF
out into a temporary git worktree and runs the same measurement there (same data, same
seed), so both figures come from one run on the same machine. Prints one JSON object:
wall and CPU seconds of ``make_plan`` (data generation not included), then of turning
the plan into the config ``plan`` prints and writes (``export_seconds``: what the plan
left for its first reader), the backup size, the load average.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WINDOW, EPS, DELTA, INTERVAL_S, FACTORS = 30, 1.0, 0.05, 60, 40


def readings(n: int, rows: int, seed: int) -> np.ndarray:
    """(rows, n) readings: AR(1) latent factors through random loadings, plus noise."""
    rng = np.random.default_rng(seed)
    load = rng.normal(size=(n, FACTORS)) * rng.uniform(0.3, 1.0, size=FACTORS)
    shocks = rng.normal(size=(rows, FACTORS))
    factors = np.empty_like(shocks)
    factors[0] = shocks[0]
    for t in range(1, rows):
        factors[t] = 0.95 * factors[t - 1] + shocks[t]
    noise = rng.normal(size=(rows, n)) * rng.uniform(0.2, 1.0, size=n)
    return np.asarray(factors @ load.T + noise)


def _parameters(cls: Any, **more: Any) -> Any:
    """The request in this checkout's API: a ``WindowQuery`` held by ``PlanParameters``,
    or (a checkout before it, measured with ``--before``) the flat fields."""
    try:
        from engine.query import WindowQuery
    except ImportError:
        return cls(eps=EPS, delta=DELTA, window=WINDOW, aggregate="avg", **more)
    return cls(WindowQuery(EPS, DELTA, WINDOW, aggregate="avg"), **more)


def measure(n: int, seed: int, profile: bool, model_only: bool = True) -> dict[str, Any]:
    """Time ``make_plan`` on the synthetic file in this interpreter's checkout, then the
    config of the plan (``plan_to_config``); with ``model_only``, then a model-only plan
    of the same file with its config (the JSON's ``model_only``)."""
    from engine.data.history import DataReport, SensorHistory
    from engine.export import plan_to_config
    from engine.planning import PlanParameters, default_history, make_plan
    from engine.planning.parameters import resolve_horizon

    params = _parameters(PlanParameters)
    rows = default_history(10**9, WINDOW, n, resolve_horizon(params, 10**9, INTERVAL_S))
    x = readings(n, rows, seed)
    step = np.timedelta64(INTERVAL_S, "s")
    times = (np.datetime64("2024-01-01T00:00:00", "ns") + np.arange(rows) * step).astype(
        "datetime64[ns]"
    )
    sensors = tuple(f"s{i:05d}" for i in range(n))
    report = DataReport("synthetic", "wide", "time", rows, rows, sensors, float(INTERVAL_S), 0,
                        0, dict.fromkeys(sensors, 0.0), (), (), "drop", 0, 0, ())  # fmt: skip
    history = SensorHistory(times, x, sensors, report)
    profiler = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    plan = make_plan(history, params)
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    export_wall, export_cpu = time.perf_counter(), time.process_time()
    plan_to_config(plan)
    out: dict[str, Any] = {
        "n": n,
        "rows": rows,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "export_seconds": time.perf_counter() - export_wall,
        "export_cpu_seconds": time.process_time() - export_cpu,
        "backup": len(plan.backup_sensors),
        "measured": plan.measured,
        "load_average": os.getloadavg(),
    }
    del plan
    if model_only:
        # The same file planned by the model alone (``--calibration none``): a plan that
        # rebuilds sensors, so it fits the covariance and selects from all of it.
        seed_params = _parameters(PlanParameters, calibration="none")
        wall, cpu = time.perf_counter(), time.process_time()
        plan = make_plan(history, seed_params)
        plan_to_config(plan)
        out["model_only"] = {
            "seconds": time.perf_counter() - wall,
            "cpu_seconds": time.process_time() - cpu,
            "backup": len(plan.backup_sensors),
            "load_average": os.getloadavg(),
        }
    if profiler:  # both plans: the model-only one is where the time goes
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
        out["profile"] = text.getvalue().splitlines()
    return out


def measure_in(where: Path, n: int, seed: int, profile: bool) -> dict[str, Any]:
    """``measure`` in a fresh interpreter whose ``engine`` is the checkout at ``where``,
    imported before numpy (as the CLI runs)."""
    # This file is loaded by its path; ``engine`` must come from ``where`` only (first on
    # the path, and the interpreter started there).
    env = {**os.environ, "PYTHONPATH": str(where)}
    code = ("import engine, importlib.util, json; "
            f"assert engine.__file__.startswith({str(where)!r}); "
            f"spec = importlib.util.spec_from_file_location('scale', {__file__!r}); "
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); "
            f"print(json.dumps(mod.measure({n}, {seed}, {profile})))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=where, env=env,
                          check=True, capture_output=True, text=True)  # fmt: skip
    return dict(json.loads(done.stdout.splitlines()[-1]))


def measure_at(ref: str, n: int, seed: int) -> dict[str, Any]:
    """``measure_in`` a temporary worktree of ``ref``."""
    from bench.common import worktree  # here: ``measure`` runs this file at other revisions

    with worktree(ref) as where:
        return measure_in(where, n, seed, False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=20240501)
    ap.add_argument("--before", default=None, help="a git ref to measure beside this checkout")
    ap.add_argument("--profile", action="store_true", help="add cProfile's top 30 (this run)")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "plan_scale", "cpus": os.cpu_count()}
    if args.before:
        result["before"] = {"ref": args.before, **measure_at(args.before, args.n, args.seed)}
    result["after"] = measure_in(ROOT, args.n, args.seed, args.profile)
    if args.before:
        result["speedup"] = result["before"]["seconds"] / result["after"]["seconds"]
        result["speedup_cpu"] = result["before"]["cpu_seconds"] / result["after"]["cpu_seconds"]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
