"""``python -m engine <command>``: plan, backtest, recover, simulate, disorder.

JSON on stdout. Bad input or parameters: one line on stderr and exit code 2,
never a traceback. Progress of long work goes to stderr.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from engine.errors import EngineError, ParameterError

if TYPE_CHECKING:  # pragma: no cover
    from engine.data import SensorHistory
    from engine.plan import PlanParameters

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise ParameterError(f"{self.prog}: {message}")


def _add_plan_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="CSV or Parquet sensor history")
    p.add_argument("--eps", type=float, required=True, help="tolerance, in the aggregate's unit")
    p.add_argument("--delta", type=float, required=True, help="allowed miss rate, in (0, 1)")
    p.add_argument("--window", type=int, required=True, help="window length, in readings")
    p.add_argument("--slide", type=int, default=None, help="slide in readings (default: window)")
    p.add_argument("--agg", default="avg", help="avg, sum, max or min")
    p.add_argument("--method", default="greedy", help="greedy (default), paper or exact")
    p.add_argument(
        "--calibration", default="backtest", help="backtest (default) or none (seed bound)"
    )
    p.add_argument(
        "--history", type=int, default=None, help="rows to learn from (default: all, up to a cap)"
    )
    p.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="rows the plan is used before re-planning (default: whole windows of about a day)",
    )
    p.add_argument("--sensors", default=None, help="comma-separated names or globs, e.g. '*_TEMP'")
    p.add_argument("--layout", default="auto", help="auto, wide or long")
    p.add_argument("--time-column", default=None, help="name of the time column")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="choose the backup set and write the backup config")
    _add_plan_flags(plan)
    plan.add_argument("--out", default=None, help="write the backup config (.json or .yaml)")
    plan.add_argument("--no-backtest", action="store_true", help="skip the backtest (unmeasured)")
    plan.add_argument("--max-folds", type=int, default=None, help="cap the backtest folds")
    bt = sub.add_parser("backtest", help="rolling-origin backtest of the planning procedure")
    _add_plan_flags(bt)
    bt.add_argument("--step", type=int, default=None, help="rows per test slice (default: window)")
    bt.add_argument("--max-folds", type=int, default=None, help="cap the folds (evenly spaced)")
    rec = sub.add_parser("recover", help="rebuild all sensors from a config and the backup")
    rec.add_argument("--config", required=True)
    rec.add_argument("--backup", required=True, help="file with the backup sensors' columns")
    rec.add_argument("--out", required=True, help="CSV or Parquet to write all sensors to")
    sim = sub.add_parser("simulate", help="live Spark pipeline with one failure and recovery")
    _add_plan_flags(sim)
    sim.add_argument("--mode", default="approx", help="approx, full or none")
    sim.add_argument("--fail-at", type=float, default=0.5, help="fraction of the feed")
    sim.add_argument("--rows", type=int, default=None, help="replay only the last ROWS rows")
    sim.add_argument("--workdir", default=None, help="landing/backup directory (default: temp)")
    sim.add_argument("--master", default=None, help="Spark master (default local[*])")
    dis = sub.add_parser("disorder", help="out-of-order replay: ours against the baselines")
    dis.add_argument("--data", required=True)
    dis.add_argument("--delays", required=True, help="exp:MEAN, pareto:SHAPE,SCALE or file:PATH")
    dis.add_argument("--eps-thr", type=float, required=True)
    dis.add_argument("--delta", type=float, required=True)
    dis.add_argument("--window", type=int, required=True)
    dis.add_argument("--agg", default="avg")
    dis.add_argument("--sensors", default=None)
    dis.add_argument("--rows", type=int, default=None, help="replay only the first ROWS rows")
    dis.add_argument("--seed", type=int, default=0)
    return parser


def _progress(fraction: float, message: str) -> None:
    print(f"\r{message} ({fraction:.0%})", end="\n" if fraction >= 1 else "", file=sys.stderr)


def _history(args: argparse.Namespace) -> SensorHistory:
    from engine.data import LoadOptions, load_history

    layout = getattr(args, "layout", "auto")
    if layout not in ("auto", "wide", "long"):
        raise ParameterError(f"--layout must be auto, wide or long, got {layout!r}")
    history = load_history(
        args.data,
        LoadOptions(layout=cast(Any, layout), time_column=getattr(args, "time_column", None)),
    )
    if args.sensors:
        history = history.select(resolve_sensors(history.sensors, args.sensors))
    return history


def resolve_sensors(available: Sequence[str], spec: str) -> list[str]:
    """Expand comma-separated names and globs; an unmatched item is a ``ParameterError``."""
    chosen: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        hits = (
            [s for s in available if fnmatch.fnmatchcase(s, item)]
            if any(c in item for c in "*?[")
            else ([item] if item in available else [])
        )
        if not hits:
            raise ParameterError(f"unknown sensor {item!r} (the data has {len(available)} sensors)")
        chosen += [h for h in hits if h not in chosen]
    if len(chosen) < 2:
        raise ParameterError(f"--sensors must select at least 2 sensors, got {len(chosen)}")
    return chosen


def _params(args: argparse.Namespace) -> PlanParameters:
    from engine.plan import PlanParameters

    return PlanParameters(
        eps=args.eps,
        delta=args.delta,
        window=args.window,
        slide=args.slide,
        aggregate=args.agg,
        method=args.method,
        calibration=args.calibration,
        history=args.history,
        horizon=args.horizon,
    )


def cmd_plan(args: argparse.Namespace) -> dict[str, Any]:
    from engine.calibration import BacktestSettings
    from engine.export import plan_to_config, write_config
    from engine.plan import make_plan

    params = _params(args)  # validate parameters before reading the file
    history = _history(args)
    plan = make_plan(
        history,
        params,
        backtest=BacktestSettings(max_folds=args.max_folds),
        run_backtest_now=not args.no_backtest,
        progress=_progress,
    )
    _warn(plan.warnings)
    config = plan_to_config(plan)
    if args.out:
        config["written_to"] = str(write_config(config, args.out))
    out = summarise_config(config)
    out["horizon_rows"] = plan.horizon_rows
    out["warnings"] = list(plan.warnings)
    return out


def _warn(warnings: Sequence[str]) -> None:
    """One line on stderr, never a silent fallback."""
    if warnings:
        print("warning: " + "; ".join(warnings), file=sys.stderr)


def summarise_config(config: dict[str, Any]) -> dict[str, Any]:
    """The plan summary printed by ``plan``: no per-sensor coefficients."""
    keep = ("parameters", "sensors", "backup_sensors", "guarantee", "savings", "data_fingerprint")
    out = {k: config[k] for k in keep}
    out["n_sensors"] = len(config["sensors"])
    out["n_backup"] = len(config["backup_sensors"])
    if "written_to" in config:
        out["config"] = config.pop("written_to")
    return out


def cmd_backtest(args: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import replace

    from engine.calibration import BacktestSettings, run_backtest
    from engine.plan import default_history, plan_backtest_settings, resolve_horizon

    params = _params(args)
    history = _history(args)
    x = history.values
    horizon = resolve_horizon(params, x.shape[0], history.report.sampling_interval_s)
    spec = replace(params.spec(), horizon=horizon)
    rows = params.history or default_history(x.shape[0], params.window, x.shape[1], horizon)
    given = BacktestSettings(step=args.step, max_folds=args.max_folds)
    settings = plan_backtest_settings(x.shape[0], x.shape[1], spec, min(rows, x.shape[0]), given)
    result = run_backtest(x, history.sensors, spec, settings, _progress)
    if result.n_folds == 0:
        _warn([f"backtest not run: {result.note}"])
    return {
        "parameters": params.to_dict(),
        "horizon_rows": horizon,
        "verdict": result.verdict(params.delta),
        **result.to_dict(),
    }


def cmd_recover(args: argparse.Namespace) -> dict[str, Any]:
    from engine.recover import recover_file

    return recover_file(args.config, args.backup, args.out).to_dict()


def cmd_simulate(args: argparse.Namespace) -> dict[str, Any]:
    from engine.simulate import simulate_from_cli

    if args.mode not in ("approx", "full", "none"):
        raise ParameterError(f"--mode must be approx, full or none, got {args.mode!r}")
    if not 0.0 < args.fail_at < 1.0:
        raise ParameterError(f"--fail-at must be in (0, 1), got {args.fail_at!r}")
    params = _params(args)
    return simulate_from_cli(_history(args), params, args)


def cmd_disorder(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from engine.disorder_eval import run_disorder_experiment

    history = _history(args)
    if args.rows:
        history = history.rows(0, args.rows)
    report = run_disorder_experiment(
        history,
        args.delays,
        eps_thr=args.eps_thr,
        delta=args.delta,
        window=args.window,
        aggregate=args.agg,
        rng=np.random.default_rng(args.seed),
    )
    return report.to_dict()


COMMANDS = {
    "plan": cmd_plan,
    "backtest": cmd_backtest,
    "recover": cmd_recover,
    "simulate": cmd_simulate,
    "disorder": cmd_disorder,
}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        result = COMMANDS[args.command](args)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    from engine.export import json_safe

    print(json.dumps(json_safe(result), indent=2, default=_default))
    return 0


def _default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
