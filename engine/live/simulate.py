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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from engine.data import SensorHistory
from engine.live.recovery_report import promise_note
from engine.live.split import split_for_replay
from engine.planning import BacktestSettings, PlanParameters, default_history, make_plan
from engine.planning.plan import contract_verdict, contract_verdicts

SIMULATE_BACKTEST_FOLDS = 20  # enough to carry a measured guarantee, quick to compute


def simulate_from_cli(
    history: SensorHistory,
    params: PlanParameters,
    args: argparse.Namespace,
    before_run: Callable[[], None] = lambda: None,
    warn: Callable[[Sequence[str]], None] = lambda _: None,
) -> dict[str, Any]:
    """Plan on a prefix of ``history``, replay the rows after it through Spark, fail at
    ``args.fail_at`` of the replay, recover (``--rows``: replay the last ROWS rows).

    The live monitor re-plans on alerts and every horizon (the plan's) stream rows; the
    report lists the plan versions and the rows each served. ``--disorder DELAYS``:
    readings arrive late by those delays (drawn with ``--seed``) and the disorder stage
    runs (provisional results, corrections, final ones). ``--failure``: a crash (the window
    state survives, the micro-batch in flight is lost) or a machine loss (every open
    window rebuilt); by default a crash for a crash-contract plan (``--exposure``).
    ``before_run`` is called once the run has accepted its input, before its minutes
    (the CLI says its warnings there, not after the run); ``warn`` is given the plan's
    warnings (mixed units under one eps, an unmeasured plan, a backup of no sensor) as
    soon as it is made, and the report's ``plan`` carries them with its verdicts."""
    from engine.disorder import parse_delays
    from engine.live.launch import Disorder
    from engine.live.replanning import replanning_monitor
    from engine.live.simulation import run_simulation
    from engine.live.spec import PipelinePaths, StreamSpec
    from engine.stream.session import SparkSettings

    text = getattr(args, "disorder", None)
    seed = getattr(args, "seed", 0)
    disorder = Disorder(parse_delays(text), np.random.default_rng(seed)) if text else None
    failure = getattr(args, "failure", None) or ("machine" if params.exposure is None else "crash")
    split = split_for_replay(len(history.times), args.rows)
    fit = split.fit(history)
    rows = params.history or default_history(fit.values.shape[0], params.window)
    settings = BacktestSettings(history=rows, max_folds=SIMULATE_BACKTEST_FOLDS)
    plan = make_plan(fit, params, backtest=settings)
    warn(plan.warnings)  # said before the run's minutes, with the input's own
    replay = split.replay(history)
    managers: list[Any] = []  # the run's manager: its status outlives the run
    with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="lacuna-sim-") as tmp:
        root = Path(args.workdir) if args.workdir else Path(tmp)
        report = run_simulation(
            replay,
            StreamSpec.from_plan(plan),
            args.mode,
            args.fail_at,
            PipelinePaths(root, backup=getattr(args, "backup", None)),
            SparkSettings(master=args.master),
            monitor_factory=lambda manager: replanning_monitor(
                _kept(managers, manager),
                history,
                plan,
                first_row=split.fit_rows,
                every_rows=plan.horizon_rows,
            ),
            disorder=disorder,
            failure=failure,
            started=before_run,  # after the run's own refusals: a refusal comes alone
        )
    out = report.to_dict()
    # a crash plan's whole windows rebuilt are measured against its range backtest, not delta
    out["promise"] = promise_note(report, plan) or None
    # Top level: every plan version of the run; the report keeps rows_by_version.
    out["plan_versions"] = out.pop("plan_versions")
    out["horizon_rows"] = plan.horizon_rows
    status = managers[0].status()
    out["live_monitor"] = live_monitor(status)
    if disorder is not None:
        out["disorder"] = disorder_summary(disorder, status)
    out["split"] = {**split.to_dict(), "note": split.describe(history, plan.history_rows)}
    bt = plan.backtest
    out["plan"] = {
        "backup_sensors": list(plan.backup_sensors),
        "backup_fraction": plan.backup_fraction,
        "contract": plan.query.contract,
        # the plan's own contract's verdict, as ``plan`` prints it (None: not measured)
        "verdict": contract_verdict(bt, params.delta) if bt is not None and bt.n_folds else None,
        "verdicts": contract_verdicts(bt, params.delta),
        "warnings": list(plan.warnings),
        "backtest": None if bt is None else bt.to_dict(),
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

    from engine.stream.quiet import exiting

    def interrupt(signum: int, frame: FrameType | None) -> None:
        exiting()  # what py4j logs or PySpark warns from here on is the shutdown
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _kept(managers: list[Any], manager: Any) -> Any:
    managers.append(manager)
    return manager


def live_monitor(status: Any) -> dict[str, Any]:
    """The shadow check's tallies at the end of the run: overall and per plan version."""
    return {
        "windows": status.shadow_windows,
        "violation_rate_overall": status.shadow_violation_rate,
        "worst_sensor_rate_overall": status.shadow_worst_rate,
        "by_version": {str(k): v for k, v in status.shadow_by_version.items()},
        "last_alert": status.last_alert,
    }


def disorder_summary(disorder: Any, status: Any) -> dict[str, Any]:
    """What the disorder stage did over the run: the delays, late readings, its results."""
    return {
        "delays": disorder.delays.describe(),
        "late_readings": status.late_rows,
        "provisional_results": status.provisional_results,
        "corrected_results": status.corrected_results,
        "k_seconds": status.k_s,
    }
