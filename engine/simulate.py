"""``python -m engine simulate``: plan, then run the live Spark pipeline with one
failure and recovery, and report how recovery did against the truth."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from engine.calibration import BacktestSettings
from engine.data import SensorHistory
from engine.plan import PlanParameters, default_history, make_plan
from engine.stream.split import split_for_replay

SIMULATE_BACKTEST_FOLDS = 20  # enough to carry a measured guarantee, quick to compute


def simulate_from_cli(
    history: SensorHistory, params: PlanParameters, args: argparse.Namespace
) -> dict[str, Any]:
    """Plan on a prefix of ``history``, replay the rows after it through Spark, fail at
    ``args.fail_at`` of the replay, recover (``--rows``: replay the last ROWS rows)."""
    from engine.stream.manager import run_simulation
    from engine.stream.session import SparkSettings
    from engine.stream.spec import PipelinePaths, StreamSpec

    split = split_for_replay(len(history.times), args.rows)
    fit = split.fit(history)
    rows = params.history or default_history(fit.values.shape[0], params.window)
    settings = BacktestSettings(history=rows, max_folds=SIMULATE_BACKTEST_FOLDS)
    plan = make_plan(fit, params, backtest=settings)
    replay = split.replay(history)
    with tempfile.TemporaryDirectory(prefix="lacuna-sim-") as tmp:
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
    out["split"] = {**split.to_dict(), "note": split.describe(history)}
    out["plan"] = {
        "backup_sensors": list(plan.backup_sensors),
        "backup_fraction": plan.backup_fraction,
        "backtest": None if plan.backtest is None else plan.backtest.to_dict(),
        "model_worst_violation_probability": plan.model_worst_probability,
    }
    return out
