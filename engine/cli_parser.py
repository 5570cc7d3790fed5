"""python -m engine <command>: plan, backtest, recover, simulate, disorder, run, status,
compact.

JSON on stdout. Bad input or parameters: one line on stderr and exit code 2,
never a traceback. Progress of long work goes to stderr: on a terminal one
line rewritten in place, elsewhere (a log, a pipe) one line every 5 %.

plan and backtest run at most {folds} backtest folds, evenly spaced and ending at
the last, unless --max-folds N says otherwise (--max-folds 0: every fold). Each
fold keeps its plan for a whole horizon (backtest --step: that many rows) and
scores every window in it: with a day's horizon of 10-second readings and a
minute's window that is thousands of windows per sensor, with hourly readings and
a day's window a few per fold. A 2-million-row file would otherwise offer tens of
thousands of folds.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from engine.aggregates import aggregate_names
from engine.errors import ParameterError
from engine.job.flags import KEEP, add_run_flags
from engine.planning.folds import DEFAULT_BACKTEST_FOLDS as DEFAULT_MAX_FOLDS

__all__ = ["FOLDS_HELP", "build_parser", "seed"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise ParameterError(f"{self.prog}: {message}")


def seed(text: str) -> int:
    """``--seed``: a whole number >= 0 (NumPy's generators refuse a negative seed)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


DELAYS_HELP = "exp:MEAN, pareto:SHAPE,SCALE, const:SECONDS, mix:... or file:PATH (seconds)"


def _agg_help() -> str:
    return f"window aggregate: {', '.join(aggregate_names())} (default avg)"


def _add_plan_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="CSV or Parquet sensor history")
    p.add_argument("--eps", type=float, required=True, help="tolerance, in the aggregate's unit")
    p.add_argument("--delta", type=float, required=True, help="allowed miss rate, in (0, 1)")
    p.add_argument("--window", type=int, required=True, help="window length, in readings")
    p.add_argument("--slide", type=int, default=None, help="slide in readings (default: window)")
    p.add_argument("--agg", default="avg", help=_agg_help())
    p.add_argument("--method", default="greedy", help="greedy (default), paper or exact")
    p.add_argument(
        "--calibration",
        default="backtest",
        help="backtest (default) or none (the published model-only bound, uncalibrated)",
    )
    p.add_argument(
        "--history", type=int, default=None, help="rows to learn from (default: all, up to a cap)"
    )
    p.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="rows the plan is used before re-planning (default: whole windows covering a "
        "day, at least 4 windows, at most a quarter of the history)",
    )
    p.add_argument(
        "--exposure",
        type=int,
        default=None,
        help="the most consecutive rows one failure can lose (crash contract: the windows' "
        "state survives and a failure loses the micro-batch that did not commit); default: "
        "whole windows rebuilt (range contract)",
    )
    p.add_argument("--sensors", default=None, help="comma-separated names or globs, e.g. '*_TEMP'")
    p.add_argument(
        "--eps-by-unit",
        default=None,
        help="one eps per unit group, e.g. 'degC=1,ug/m3=20,hPa=0.5'; units are guessed from "
        "the sensor names (_TEMP, _degC, _PM2.5, _hPa, ...); other sensors use --eps",
    )
    p.add_argument("--layout", default="auto", help="auto, wide or long")
    p.add_argument("--time-column", default=None, help="name of the time column")
    p.add_argument(
        "--time-unit",
        default=None,
        choices=("ns", "us", "ms", "s", "min", "h"),
        help="unit of a numeric time column since 1970-01-01: ns, us, ms, s, min or h (not "
        "given: s, or h for a column named with 'hour'; and numbers that are certainly "
        "dates, YYYYMMDD or Excel serial days, are refused)",
    )
    _add_clock(p)


def _add_clock(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--clock",
        default=None,
        metavar="STEP",
        help="put the readings onto one clock of this step, e.g. 1min or 30s: each reading "
        "moves to the nearest step and a sensor's readings in one step are averaged (for "
        "sensors read at other times than each other); default: times as read",
    )


FOLDS_HELP = f"cap the backtest folds, evenly spaced (default {DEFAULT_MAX_FOLDS}; 0: all)"


def build_parser() -> argparse.ArgumentParser:
    description = (__doc__ or "").format(folds=DEFAULT_MAX_FOLDS)
    parser = _Parser(prog="python -m engine", description=description)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="choose the backup set and write the backup config")
    _add_plan_flags(plan)
    plan.add_argument("--out", default=None, help="write the backup config (.json or .yaml)")
    plan.add_argument("--no-backtest", action="store_true", help="skip the backtest (unmeasured)")
    plan.add_argument("--max-folds", type=int, default=None, help=FOLDS_HELP)
    bt = sub.add_parser("backtest", help="rolling-origin backtest of the planning procedure")
    _add_plan_flags(bt)
    bt.add_argument(
        "--step",
        type=int,
        default=None,
        help="rows each fold keeps its plan and scores (default: the horizon)",
    )
    bt.add_argument("--max-folds", type=int, default=None, help=FOLDS_HELP)
    rec = sub.add_parser("recover", help="rebuild all sensors from a config and the backup")
    rec.add_argument("--config", required=True, help="the exported backup config (.json/.yaml)")
    rec.add_argument(
        "--backup", required=True, help="file with the backup sensors' columns, or the job's backup"
    )
    rec.add_argument("--out", required=True, help="CSV or Parquet to write all sensors to")
    rec.add_argument("--from", dest="start", default=None, help="ISO time (inclusive, UTC)")
    rec.add_argument("--to", dest="end", default=None, help="ISO time (exclusive, UTC)")
    rec.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="rebuild around a committed batch that is not whole (a lost _SUCCESS or part "
        "file), naming it in a warning (default: refuse)",
    )
    st = sub.add_parser("status", help="what a production job did: versions, live rates, alerts")
    st.add_argument("--backup", required=True, help="the job's --backup (a local or mounted path)")
    st.add_argument("--events", type=int, default=20, help="latest events to show (default 20)")
    co = sub.add_parser(
        "compact", help="fold a production job's old micro-batch directories into one"
    )
    co.add_argument("--backup", required=True, help="the job's --backup (a local or mounted path)")
    co.add_argument(
        "--keep", type=int, default=KEEP, help=f"newest micro-batches left alone (default {KEEP})"
    )
    run = sub.add_parser("run", help="the production Spark job (backup, windows, shadow check)")
    add_run_flags(run)
    sim = sub.add_parser("simulate", help="live Spark pipeline with one failure and recovery")
    _add_plan_flags(sim)
    sim.add_argument("--mode", default="approx", help="approx, full or none")
    sim.add_argument("--fail-at", type=float, default=0.5, help="fraction of the feed")
    sim.add_argument(
        "--rows",
        type=int,
        default=None,
        help="replay the last ROWS rows (default: the second half); the plan learns from the rest",
    )
    sim.add_argument("--workdir", default=None, help="landing/backup directory (default: temp)")
    sim.add_argument(
        "--backup",
        default=None,
        help="where Spark writes the Parquet backup: a path or URI (default: WORKDIR/backup)",
    )
    sim.add_argument("--master", default=None, help="Spark master (default local[*])")
    sim.add_argument(
        "--disorder",
        default=None,
        metavar="DELAYS",
        help="readings arrive late by these delays and the disorder stage runs: " + DELAYS_HELP,
    )
    sim.add_argument("--seed", type=seed, default=0, help="seed of the --disorder delays")
    sim.add_argument(
        "--failure",
        default=None,
        choices=("crash", "machine"),
        help="crash: the window state survives, the micro-batch in flight is lost and its "
        "rows rebuilt (the crash contract); machine: the state is lost with the machine and "
        "every open window rebuilt (the range contract). Default: crash with --exposure, "
        "machine without",
    )
    dis = sub.add_parser("disorder", help="out-of-order replay: ours against the baselines")
    dis.add_argument("--data", required=True, help="CSV or Parquet sensor history")
    dis.add_argument("--delays", required=True, help=DELAYS_HELP)
    dis.add_argument(
        "--eps-thr",
        type=float,
        required=True,
        help="tolerance of a window's provisional result, in the aggregate's unit",
    )
    dis.add_argument(
        "--delta",
        type=float,
        required=True,
        help="allowed share of provisional results past it, in (0, 1)",
    )
    dis.add_argument("--window", type=int, required=True, help="window length, in readings")
    dis.add_argument("--agg", default="avg", help=_agg_help())
    dis.add_argument(
        "--sensors", default=None, help="comma-separated names or globs, e.g. '*_PM2.5'"
    )
    _add_clock(dis)
    dis.add_argument(
        "--rows", type=int, default=None, help="replay only the first ROWS rows (at least 1)"
    )
    dis.add_argument("--seed", type=seed, default=0, help="seed of the delays (an integer >= 0)")
    return parser
