"""Backup-selection benchmark: speed and quality of paper greedy, our greedy and exact.

Run from the repository root: ``python -m bench.bench_selection [--quick] [--seed S]``.
Prints one JSON object:

* ``speed``: the seed's literal greedy (a solve per candidate per step) against ours
  on the same instances in the same run (wall and CPU seconds, |O|, speed-up);
* ``scale``: our greedy alone at large n;
* ``quality``: |O| of each heuristic over the exact optimum on random n=16 instances;
* ``replan``: latency of one ``select_backups`` call at n=200.

Instances come from ``bench.common.random_covariance`` (factor, cluster, AR/Toeplitz,
near-singular; sensor variances differ by up to ~50x). Speed, scale and re-planning
use one scalar target ``f * median_i Sigma_ii``, as one ``eps`` for all sensors gives;
quality alternates scalar and per-sensor targets (as calibration produces).

BLAS runs single-threaded unless ``OPENBLAS_NUM_THREADS`` is already set: both
methods then get the same BLAS, the only parallelism is the greedy's own two
scoring threads, and BLAS thread wake-ups on a shared machine do not swamp the
paper method's many small solves.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads OpenBLAS

import argparse
import platform
import time
from typing import Any

import numpy as np

from bench.common import STRUCTURES, print_json, random_covariance
from engine.selection import select_backups

TARGET_FRACTION = 0.3


def scalar_target(cov: np.ndarray, fraction: float) -> float:
    """One variance target for every sensor: a fraction of the median variance."""
    return float(fraction * np.median(np.diag(cov)))


def timed(
    cov: np.ndarray, targets: np.ndarray | float, method: str
) -> tuple[int, float, float, bool]:
    """(|O|, wall seconds, CPU seconds, feasible) of one select_backups call."""
    wall, cpu = time.perf_counter(), time.process_time()
    sel = select_backups(cov, targets, method)  # type: ignore[arg-type]
    return sel.cost, time.perf_counter() - wall, time.process_time() - cpu, sel.feasible


def bench_speed(sizes: list[int], rng: np.random.Generator) -> list[dict[str, Any]]:
    """Paper vs ours on the same instance, one per structure and size."""
    rows = []
    for n in sizes:
        for structure in STRUCTURES:
            cov = random_covariance(n, rng, structure)
            targets = scalar_target(cov, TARGET_FRACTION)
            p_cost, p_wall, p_cpu, p_ok = timed(cov, targets, "paper")
            g_cost, g_wall, g_cpu, g_ok = timed(cov, targets, "greedy")
            rows.append(
                {
                    "n": n,
                    "structure": structure,
                    "paper": {"seconds": p_wall, "cpu_seconds": p_cpu, "backup": p_cost},
                    "greedy": {"seconds": g_wall, "cpu_seconds": g_cpu, "backup": g_cost},
                    "speedup": p_wall / g_wall,
                    "speedup_cpu": p_cpu / g_cpu,
                    "speedup_per_step": (p_wall / max(p_cost, 1)) / (g_wall / max(g_cost, 1)),
                    "feasible": p_ok and g_ok,
                }
            )
    return rows


def bench_scale(sizes: list[int], rng: np.random.Generator) -> list[dict[str, Any]]:
    """Our greedy alone at large n, every structure and two target levels."""
    rows = []
    for n in sizes:
        for structure in STRUCTURES:
            cov = random_covariance(n, rng, structure)
            for fraction in (TARGET_FRACTION, 0.05):
                cost, wall, cpu, ok = timed(cov, scalar_target(cov, fraction), "greedy")
                rows.append(
                    {
                        "n": n,
                        "structure": structure,
                        "target_fraction": fraction,
                        "seconds": wall,
                        "cpu_seconds": cpu,
                        "backup": cost,
                        "feasible": ok,
                    }
                )
    return rows


def quality_instance(k: int, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Instance ``k``: structures cycle, target kinds alternate, every second block of
    four has equal-scale sensors; targets are redrawn until the optimum is non-trivial."""
    structure = STRUCTURES[k % len(STRUCTURES)]
    cov = random_covariance(n, rng, structure, scaled=(k // len(STRUCTURES)) % 2 == 0)
    while True:
        if k % 2:
            targets = rng.uniform(0.05, 0.5, size=n) * np.diag(cov)
        else:
            targets = np.full(n, rng.uniform(0.05, 0.4) * np.mean(np.diag(cov)))
        if 2 <= select_backups(cov, targets, "exact").cost <= n - 3:
            return cov, targets


def bench_quality(count: int, n: int, rng: np.random.Generator) -> dict[str, Any]:
    """|O| of paper and greedy relative to the exact optimum."""
    costs: dict[str, list[int]] = {"paper": [], "greedy": [], "exact": []}
    exact_seconds = []
    for k in range(count):
        cov, targets = quality_instance(k, rng, n)
        for method in costs:
            cost, wall, _, ok = timed(cov, targets, method)
            if not ok:
                raise RuntimeError(f"{method} returned an infeasible set on instance {k}")
            costs[method].append(cost)
            if method == "exact":
                exact_seconds.append(wall)
    opt = np.array(costs["exact"], dtype=float)
    out: dict[str, Any] = {"instances": count, "n": n, "mean_optimum": float(opt.mean())}
    kinds = {"all": np.ones(count, bool), "scalar_target": np.arange(count) % 2 == 0}
    kinds["per_sensor_target"] = ~kinds["scalar_target"]
    kinds["equal_scales"] = (np.arange(count) // len(STRUCTURES)) % 2 == 1
    kinds["unequal_scales"] = ~kinds["equal_scales"]
    for method in ("paper", "greedy"):
        ratio = np.array(costs[method], dtype=float) / opt
        out[method] = {
            kind: {
                "mean_ratio": float(np.mean(ratio[mask])),
                "max_ratio": float(np.max(ratio[mask])),
                "fraction_optimal": float(np.mean(ratio[mask] == 1.0)),
            }
            for kind, mask in kinds.items()
        }
    out["exact_seconds_mean"] = float(np.mean(exact_seconds))
    out["exact_seconds_max"] = float(np.max(exact_seconds))
    return out


def bench_replan(n: int, repeats: int, rng: np.random.Generator) -> dict[str, Any]:
    """Latency of one greedy select_backups call (median of repeats), per structure."""
    per = {}
    for structure in STRUCTURES:
        cov = random_covariance(n, rng, structure)
        targets = scalar_target(cov, TARGET_FRACTION)
        times = [timed(cov, targets, "greedy")[1] for _ in range(repeats)]
        per[structure] = float(np.median(times))
    return {"n": n, "median_seconds": per, "worst_median_seconds": max(per.values())}


def summarise(result: dict[str, Any]) -> dict[str, float]:
    """The headline numbers, against the targets in the brief."""
    n_speed = max(r["n"] for r in result["speed"])
    n_scale = max(r["n"] for r in result["scale"])
    big = [r for r in result["scale"] if r["n"] == n_scale]
    return {
        "speed_n": n_speed,
        "min_speedup_at_speed_n": min(r["speedup"] for r in result["speed"] if r["n"] == n_speed),
        "scale_n": n_scale,
        "greedy_seconds_at_scale_n_default_target_worst": max(
            r["seconds"] for r in big if r["target_fraction"] == TARGET_FRACTION
        ),
        "greedy_seconds_at_scale_n_worst": max(r["seconds"] for r in big),
        "greedy_over_exact": result["quality"]["greedy"]["all"]["mean_ratio"],
        "paper_over_exact": result["quality"]["paper"]["all"]["mean_ratio"],
        "greedy_fraction_optimal": result["quality"]["greedy"]["all"]["fraction_optimal"],
        "paper_fraction_optimal": result["quality"]["paper"]["all"]["fraction_optimal"],
        "replan_seconds_n200_worst": result["replan"]["worst_median_seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--seed", type=int, default=20240501)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    quick = args.quick
    started = time.perf_counter()
    result = {
        "benchmark": "selection",
        "quick": quick,
        "seed": args.seed,
        "target_fraction": TARGET_FRACTION,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        },
        "load_average_start": os.getloadavg(),
        "speed": bench_speed([50, 100] if quick else [100, 200, 400], rng),
        "scale": bench_scale([500] if quick else [1000, 2000], rng),
        "quality": bench_quality(8 if quick else 50, 16, rng),
        "replan": bench_replan(200, 3 if quick else 7, rng),
    }
    result["summary"] = summarise(result)
    result["load_average_end"] = os.getloadavg()
    result["total_seconds"] = time.perf_counter() - started
    print_json(result)


if __name__ == "__main__":
    main()
