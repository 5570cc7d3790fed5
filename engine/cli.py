"""``python -m engine <command>``: the commands and ``main`` (one line on stderr, exit 2).

The parser, its flags and the help text (this CLI's description) are
``engine.cli_parser``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from engine.cli_parser import build_parser
from engine.errors import EngineError, ParameterError

if TYPE_CHECKING:  # pragma: no cover
    from engine.data.history import SensorHistory
    from engine.planning import PlanParameters

EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a reader that stopped early
ALL_FOLDS = 10**9  # --max-folds 0
PROGRESS_STEP = 0.05  # off a terminal: one progress line per 5 %


class Progress:
    """Progress on stderr: rewritten in place on a terminal, else a line every 5 %."""

    def __init__(self) -> None:
        self._next = 0.0
        self._last = -1.0

    def __call__(self, fraction: float, message: str) -> None:
        if sys.stderr.isatty():
            end = "\n" if fraction >= 1 else ""
            print(f"\r{message} ({fraction:.0%})", end=end, file=sys.stderr, flush=True)
            return
        if fraction < self._last:  # a new phase starts again from 0 %
            self._next = 0.0
        self._last = fraction
        if fraction >= self._next:
            print(f"{message} ({fraction:.0%})", file=sys.stderr, flush=True)
            self._next = (int(fraction / PROGRESS_STEP + 1e-9) + 1) * PROGRESS_STEP


def _max_folds(args: argparse.Namespace) -> int | None:
    """``--max-folds``: None (the plan's default budget), N, or 0 for every fold."""
    if args.max_folds is not None and args.max_folds < 0:
        raise ParameterError(f"--max-folds must be >= 0, got {args.max_folds!r}")
    if args.max_folds == 0:
        return ALL_FOLDS
    return args.max_folds


def _say_budget(
    args: argparse.Namespace, n_rows: int, window: int, settings: Any, horizon: int
) -> None:
    """One stderr line when the default fold budget leaves folds out."""
    from dataclasses import replace

    from engine.planning import fold_origins

    available = fold_origins(n_rows, window, replace(settings, max_folds=None), horizon).size
    if args.max_folds is None and available > (settings.max_folds or available):
        print(
            f"backtest: {settings.max_folds} of {available:,} folds, evenly spaced "
            "(--max-folds N to change, 0 for all)",
            file=sys.stderr,
        )


DROPPED_SHARE = 0.05  # rows the loader dropped, of those read, above which it is a warning


# Commands that plan need two sensors (one backed up, one rebuilt); ``disorder`` replays
# each sensor on its own, so one will do.
PLANNING_COMMANDS = ("plan", "backtest", "simulate")


def _history(args: argparse.Namespace) -> SensorHistory:
    from engine.data.history import LoadOptions, load_history
    from engine.data.options import parse_step

    layout = getattr(args, "layout", "auto")
    if layout not in ("auto", "wide", "long"):
        raise ParameterError(f"--layout must be auto, wide or long, got {layout!r}")
    chosen = tuple(args.sensors.split(",")) if args.sensors else None
    clock = getattr(args, "clock", None)
    history = load_history(
        args.data,
        LoadOptions(
            layout=cast(Any, layout),
            time_column=getattr(args, "time_column", None),
            numeric_time_unit=getattr(args, "time_unit", None),
            sensors=chosen,  # chosen before the row minimum: 3 of 10,000 columns need 5 rows
            clock_s=None if clock is None else parse_step(clock),
        ),
    )
    planning = getattr(args, "command", "plan") in PLANNING_COMMANDS
    if chosen is not None and planning and len(history.sensors) < 2:
        raise ParameterError(
            f"--sensors must select at least 2 sensors, got {len(history.sensors)}"
        )
    report = history.report
    filled = report.mostly_filled()
    dropped = (
        f"{report.n_rows_dropped:,} of {report.n_rows_raw:,} rows dropped: a sensor had no "
        "reading to fill them from (a gap at the start or end of the file longer than the "
        "loader fills); the history is the other rows"
        if report.n_rows_dropped >= DROPPED_SHARE * report.n_rows_raw > 0
        else None
    )
    for said in [*report.warning_notes(), *(s for s in (filled, dropped) if s)]:
        _warn([said])  # one line each
    return history


def resolve_sensors(available: Sequence[str], spec: str) -> list[str]:
    """Expand comma-separated names and globs; an unmatched item is a ``ParameterError``."""
    from engine.data.names import resolve_sensors as resolve

    return resolve(available, spec.split(","), minimum=2)


def _params(args: argparse.Namespace) -> PlanParameters:
    from engine.planning import PlanParameters
    from engine.query import WindowQuery

    query = WindowQuery(
        args.eps,
        args.delta,
        args.window,
        slide=args.slide,
        aggregate=args.agg,
        horizon=args.horizon,
        exposure=getattr(args, "exposure", None),
    )
    if args.horizon is not None and args.horizon < args.window:  # horizon_rows' one rule
        _warn([f"--horizon {args.horizon} is shorter than a window: planned for one window "
               f"({args.window} rows)"])  # fmt: skip
    return PlanParameters(
        query, method=args.method, calibration=args.calibration, history=args.history
    )


def parse_eps_by_unit(text: str) -> dict[str, float]:
    """``'degC=1,ug/m3=20'`` -> ``{"degC": 1.0, "ug/m3": 20.0}``; each eps as ``--eps``
    takes it (finite, within ``engine.query.MIN_EPS .. MAX_EPS``); a unit given twice is a
    ``ParameterError``."""
    from engine.query import check_eps

    out: dict[str, float] = {}
    for item in (i.strip() for i in text.split(",")):
        unit, sep, value = item.partition("=")
        try:
            eps = float(value)
        except ValueError:
            eps = float("nan")
        if not sep or not unit.strip() or not eps > 0 or eps == float("inf"):
            raise ParameterError(f"--eps-by-unit items must be UNIT=EPS with EPS > 0, got {item!r}")
        check_eps(eps, f"--eps-by-unit {unit.strip()!r}")
        if unit.strip() in out:  # as a key given twice in a config: never the last one silently
            raise ParameterError(
                f"--eps-by-unit gives unit {unit.strip()!r} twice "
                f"({out[unit.strip()]:g} and {eps:g}): give each unit once"
            )
        out[unit.strip()] = eps
    return out


def _with_unit_eps(
    params: PlanParameters, history: SensorHistory, args: argparse.Namespace
) -> PlanParameters:
    """``params`` with the per-sensor eps that ``--eps-by-unit`` asks for."""
    from engine.data.units import eps_for_units

    text = getattr(args, "eps_by_unit", None)
    if not text:
        return params
    per = eps_for_units(history.sensors, parse_eps_by_unit(text), params.units)
    return params.with_query(eps_by_sensor=per)


def cmd_plan(args: argparse.Namespace) -> dict[str, Any]:
    from engine.export import check_config_out, plan_to_config, write_config
    from engine.export.snippets import ProductionPaths
    from engine.planning import BacktestSettings
    from engine.planning.plan import make_plan

    params = _params(args)  # validate parameters before reading the file
    if args.eps_by_unit:
        parse_eps_by_unit(args.eps_by_unit)
    if args.out:
        check_config_out(args.out)  # not after a minute of planning
    history = _history(args)
    params = _with_unit_eps(params, history, args)
    if params.horizon is not None and len(history.times):  # not after a minute of planning
        from engine.export.config import valid_until

        valid_until(history.times[-1], params.horizon, history.report.sampling_interval_s)
    plan = make_plan(
        history,
        params,
        backtest=BacktestSettings(max_folds=_max_folds(args)),
        run_backtest_now=not args.no_backtest,
        progress=Progress(),
    )
    _warn(plan.warnings)
    # the snippets' --config names the file written (beside which the operator runs them)
    paths = ProductionPaths(config=Path(args.out).name) if args.out else None
    config = plan_to_config(plan, paths=paths)
    if args.out:
        config["written_to"] = str(write_config(config, args.out))
    out = summarise_config(config)
    out["horizon_rows"] = plan.horizon_rows
    out["warnings"] = list(plan.warnings)
    # what the loader found and did (infinite values made missing, rows sorted, gaps
    # filled or dropped), as recover reports it
    out["data_notes"] = list(history.report.notes)
    return out


# Warnings of the command running, said once it succeeds: a refusal comes alone, not
# after a warning about input it then refused (two stderr lines for one mistake).
_PENDING: list[str] = []


def _warn(warnings: Sequence[str]) -> None:
    """One line on stderr, never a silent fallback; printed when the command succeeds
    (or, for ``simulate``, before its run), once however often its input was checked."""
    line = "warning: " + "; ".join(warnings)
    if warnings and line not in _PENDING:
        _PENDING.append(line)


def _say_warnings() -> None:
    """Say the warnings so far now: a command whose input has all been accepted and that
    then runs for minutes (``simulate``) should not keep them to its end."""
    for line in _PENDING:
        print(line, file=sys.stderr, flush=True)
    _PENDING.clear()


def summarise_config(config: dict[str, Any]) -> dict[str, Any]:
    """The plan summary printed by ``plan``: no per-sensor coefficients."""
    keep = ("parameters", "sensors", "backup_sensors", "guarantee", "savings", "data_fingerprint")
    out = {k: config[k] for k in keep}
    out["validity"] = config.get("validity")
    out["n_sensors"] = len(config["sensors"])
    out["n_backup"] = len(config["backup_sensors"])
    if "written_to" in config:
        out["config"] = config.pop("written_to")
    return out


def cmd_backtest(args: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import replace

    from engine.planning import BacktestSettings, default_history, run_backtest
    from engine.planning.parameters import resolve_horizon
    from engine.planning.plan import (
        contract_assessment,
        contract_verdict,
        contract_verdicts,
        eps_units,
        plan_backtest_settings,
    )

    params = _params(args)
    history = _history(args)
    params = _with_unit_eps(params, history, args)
    _warn([w for w in [params.unit_warning(history.sensors)] if w])  # as ``plan`` says it
    n_rows = history.values.shape[0]
    params.check_fits(n_rows)  # the same refusals as ``plan``
    horizon = resolve_horizon(params, n_rows, history.report.sampling_interval_s)
    x, unit_spec = eps_units(history, params)  # per-sensor eps: backtest in eps units
    spec = replace(unit_spec, horizon=horizon)
    rows = params.history or default_history(n_rows, params.window, x.shape[1], horizon)
    given = BacktestSettings(step=args.step, max_folds=_max_folds(args))
    settings = plan_backtest_settings(n_rows, x.shape[1], spec, min(rows, n_rows), given)
    _say_budget(args, n_rows, spec.window, settings, horizon)
    result = run_backtest(x, history.sensors, spec, settings, Progress())
    if result.n_folds == 0:
        _warn([f"backtest not run: {result.note}"])
    return {
        "parameters": params.to_dict(),
        "data_notes": list(history.report.notes),  # what the loader filled, dropped, sorted
        "horizon_rows": horizon,
        "verdict": contract_verdict(result, params.delta),
        "verdict_state": contract_assessment(result, params.delta).state,
        "verdicts": contract_verdicts(result, params.delta),
        **result.to_dict(),
    }


def cmd_recover(args: argparse.Namespace) -> dict[str, Any]:
    from engine.export.recover import is_backup_dataset, recover_dataset, recover_file

    if is_backup_dataset(args.backup):
        result: Any = recover_dataset(
            args.config, args.backup, args.out, args.start, args.end, args.allow_incomplete
        )
    elif args.start or args.end:
        raise ParameterError(
            f"--from and --to choose a range of a production job's backup directory; "
            f"{args.backup!r} is not a directory (a wide backup file is rebuilt whole)"
        )
    else:
        result = recover_file(args.config, args.backup, args.out)
    for warning in result.warnings:
        _warn([warning])
    return result.to_dict()


def cmd_status(args: argparse.Namespace) -> dict[str, Any]:
    from engine.job import read_job_status

    if args.events < 0:
        raise ParameterError(f"--events must be >= 0, got {args.events!r}")
    return read_job_status(args.backup).to_dict(events=args.events)


def cmd_compact(args: argparse.Namespace) -> dict[str, Any]:
    from engine.job import compact

    return compact(args.backup, keep=args.keep).to_dict()


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from engine.job import run_from_args

    return run_from_args(args)


def cmd_simulate(args: argparse.Namespace) -> dict[str, Any]:
    from engine.live import simulate_from_cli

    if args.mode not in ("approx", "full", "none"):
        raise ParameterError(f"--mode must be approx, full or none, got {args.mode!r}")
    if not 0.0 < args.fail_at < 1.0:
        raise ParameterError(f"--fail-at must be in (0, 1), got {args.fail_at!r}")
    if args.disorder:
        from engine.disorder import parse_delays

        parse_delays(args.disorder)  # a bad spec says so before the data is read
    _params(args)  # the same: parameters before the data
    history = _history(args)
    params = _with_unit_eps(_params(args), history, args)
    return simulate_from_cli(history, params, args, before_run=_say_warnings, warn=_warn)


def cmd_disorder(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from engine.disorder.experiment import run_disorder_experiment

    if args.rows is not None and args.rows < 1:  # 0 replayed every row, as if not given
        raise ParameterError(f"--rows must be >= 1, got {args.rows!r}")
    history = _history(args)
    if args.rows is not None:
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
    "run": cmd_run,
    "status": cmd_status,
    "compact": cmd_compact,
}


def main(argv: Sequence[str] | None = None) -> int:
    code = _main(argv)
    plans = sys.modules.get("engine.job.plans")  # loaded by a job: it may plan in the background
    return code if plans is None else int(plans.leave(code))


def _main(argv: Sequence[str] | None) -> int:
    _PENDING.clear()  # what a direct call of a command left
    try:
        args = build_parser().parse_args(argv)
        result = COMMANDS[args.command](args)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    else:
        _say_warnings()
    finally:
        _PENDING.clear()
    from engine.export import json_safe

    try:
        print(json.dumps(json_safe(result), indent=2, default=_default), flush=True)
    except BrokenPipeError:  # the reader stopped early (`| head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return 0


def _default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
