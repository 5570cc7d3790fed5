"""Profile ``load_config`` and ``recover_dataset`` on the recovery benchmark's 1,056-sensor plan.

No Spark: the plan is ``bench_recovery``'s synthetic case (same code), and the
two backup datasets are written with pyarrow in the job's long,
``date``-partitioned layout (as ``tests/unit/test_bench_recovery.py`` does), so
a profile takes seconds rather than the full benchmark's minutes.

``nice -n 5 .venv/bin/python -m bench.profile_recovery --work /tmp/rf [--cprofile]``
prints median seconds per step (and the top of a cProfile listing with
``--cprofile``). ``--work`` is kept between runs so the plan is built once.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_recovery import _split, beijing, block_gaussian, make_plan  # noqa: E402
from bench.recovery_core import write_dataset  # noqa: E402
from tests.production_reference import Rows, long_readings  # noqa: E402


def build(work: Path, blocks: int, weeks: int) -> Rows:
    """Plan and backup dataset under ``work`` (reused when already there); the stream rows."""
    train, stream = beijing(24 * 167, weeks * 7 * 24)
    whole = Rows(np.concatenate([train.times, stream.times]),
                 np.vstack([train.values, stream.values]), train.sensors)  # fmt: skip
    big_train, big_stream = _split(block_gaussian(whole, blocks), 24 * 167)
    if not (work / "backup").exists():
        work.mkdir(parents=True, exist_ok=True)
        config = make_plan(big_train, work / "plan.json", 0.25, 24)
        long = long_readings(big_stream)
        write_dataset(long[long["sensor"].isin(config.backup_sensors)], work / "backup")
    return big_stream


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return round(statistics.median(runs), 4)


def main() -> None:
    from engine.export import load_config
    from engine.export.recover import recover_dataset

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--weeks", type=int, default=16)
    p.add_argument("--days", type=int, default=7, help="length of the recovered range")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cprofile", action="store_true")
    args = p.parse_args()
    stream = build(args.work, args.blocks, args.weeks)
    plan, backup, out = args.work / "plan.json", args.work / "backup", args.work / "out.parquet"
    t1 = pd.Timestamp(stream.times[0]).ceil("D") + pd.Timedelta(days=14)
    t2 = t1 + timedelta(days=args.days)
    first, last = t1.isoformat(), t2.isoformat()
    steps: dict[str, Callable[[], object]] = {
        "load_config": lambda: load_config(plan),
        "recover_dataset": lambda: recover_dataset(plan, backup, out, first, last),
    }
    print({name: median_seconds(fn, args.repeats) for name, fn in steps.items()})
    if args.cprofile:
        for name, fn in steps.items():
            prof = cProfile.Profile()
            prof.runcall(fn)
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(25)
            print(f"---- {name}\n" + text.getvalue())


if __name__ == "__main__":
    main()
