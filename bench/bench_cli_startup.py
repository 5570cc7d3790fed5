"""How long ``python -m engine`` takes to answer before any work: help and rejected input,
and ``status``'s own start-up (its modules load before it refuses a directory).

    python -m bench.bench_cli_startup                  # this checkout (9 runs a command)
    python -m bench.bench_cli_startup --before REF     # and the same commands at REF

Each command runs in a fresh interpreter (``python -m engine ...``), as an operator or a
script starts it. With ``--before REF`` the checkout at REF (a temporary git worktree)
runs the same command in turn with this one, run by run, so a drift of the machine's
speed hits both. Wall seconds from a monotonic clock around the process, CPU seconds
(user + system) from the OS's accounting of the finished child; medians, min and max.
JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, worktree

# What an operator types before any work starts: help, and input the CLI refuses.
COMMANDS: dict[str, tuple[str, ...]] = {
    "help": ("--help",),
    "plan --help": ("plan", "--help"),
    "plan, a flag missing": ("plan", "--eps", "1"),
    "recover, no such file": ("recover", "--config", "missing.json", "--backup", "missing.csv"),
    # a directory with no job's plan book: refused after status's modules have loaded
    "status, not a job": ("status", "--backup", "docs"),
}


def run_once(where: Path, args: tuple[str, ...]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of ``python -m engine ARGS`` in ``where``."""
    env = {**os.environ, "PYTHONPATH": str(where)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "engine", *args], cwd=where, env=env,
                          capture_output=True, check=False)  # fmt: skip
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def summary(samples: list[tuple[float, float, int]]) -> dict[str, Any]:
    walls, cpus = [s[0] for s in samples], [s[1] for s in samples]
    return {
        "wall_median_s": statistics.median(walls),
        "wall_min_s": min(walls),
        "wall_max_s": max(walls),
        "cpu_median_s": statistics.median(cpus),
        "exit_codes": sorted({s[2] for s in samples}),
    }


def measure(trees: dict[str, Path], runs: int) -> dict[str, Any]:
    """Every command ``runs`` times in every tree, in turn (one warm-up run each first)."""
    out: dict[str, Any] = {}
    for name, args in COMMANDS.items():
        for where in trees.values():
            run_once(where, args)  # warm-up: the file cache, not counted
        samples: dict[str, list[tuple[float, float, int]]] = {label: [] for label in trees}
        for _ in range(runs):
            for label, where in trees.items():
                samples[label].append(run_once(where, args))
        out[name] = {label: summary(s) for label, s in samples.items()}
        if "before" in trees:
            before, now = out[name]["before"], out[name]["this checkout"]
            out[name]["speedup_wall"] = before["wall_median_s"] / now["wall_median_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="counted runs a command and tree")
    ap.add_argument("--before", default=None, help="a git ref to measure beside this checkout")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "cli_startup", "cpus": os.cpu_count()}
    if args.before:
        with worktree(args.before) as where:
            result["before_ref"] = args.before
            result["commands"] = measure({"this checkout": ROOT, "before": where}, args.runs)
    else:
        result["commands"] = measure({"this checkout": ROOT}, args.runs)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
