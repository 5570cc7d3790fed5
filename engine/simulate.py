"""``python -m engine simulate``: plan, then run the live Spark pipeline with one
failure and recovery, and report how recovery did against the truth.

The temporary work directory is removed on a normal end, an error, Ctrl-C and
SIGTERM (turned into ``KeyboardInterrupt`` while the simulation runs). SIGKILL
cannot be caught: a killed run leaves ``$TMPDIR/lacuna-sim-*`` behind.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from engine.calibration import BacktestSettings
from engine.data import SensorHistory
from engine.plan import PlanParameters, default_history, make_plan

SIMULATE_BACKTEST_FOLDS = 20  # enough to carry a measured guarantee, quick to compute


def simulate_from_cli(
    history: SensorHistory, params: PlanParameters, args: argparse.Namespace
) -> dict[str, Any]:
    """Plan on ``history``, replay it through Spark, fail at ``args.fail_at``, recover."""
    from engine.stream.session import SparkSettings
    from engine.stream.simulation import run_simulation
    from engine.stream.spec import PipelinePaths, StreamSpec

    rows = params.history or default_history(history.values.shape[0], params.window)
    settings = BacktestSettings(history=rows, max_folds=SIMULATE_BACKTEST_FOLDS)
    plan = make_plan(history, params, backtest=settings)
    replay = (
        history
        if not args.rows
        else history.rows(max(0, len(history.times) - args.rows), len(history.times))
    )
    with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="lacuna-sim-") as tmp:
        root = Path(args.workdir) if args.workdir else Path(tmp)
        report = run_simulation(
            replay,
            StreamSpec.from_plan(plan),
            args.mode,
            args.fail_at,
            PipelinePaths(root),
            SparkSettings(master=args.master),
        )
    out = report.to_dict()
    out["plan"] = {
        "backup_sensors": list(plan.backup_sensors),
        "backup_fraction": plan.backup_fraction,
        "backtest": None if plan.backtest is None else plan.backtest.to_dict(),
        "model_worst_violation_probability": plan.model_worst_probability,
    }
    return out


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises ``KeyboardInterrupt`` so cleanup code runs.

    Only the main thread can install signal handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
