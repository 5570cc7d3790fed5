"""Online control: its decision latency, and the controller in the honesty protocol's loop.

    python -m bench.bench_control                     # latency and every honesty case
    python -m bench.bench_control --latency-only
    python -m bench.bench_control --cases eeg_avg,room_temp_avg --folds 3
    python -m bench.bench_control --no-latency --exposure w/12   # the crash contract

**Latency** (n = 100 and 1,000; wall and CPU milliseconds per decision, the CPU
figure being what a shared machine's load does not inflate): a factor-model
covariance (``bench.common``), the greedy's set for a target of 0.3 x the median
variance, then windows close one at a time with per-sensor miss rates drawn from
Beta(0.5, 10) (mean 0.048; a few sensors miss often), counterfactual misses at the
same rates. Each window: the controller's ``observe`` (ours: incremental
re-selection) and, on the same effective targets, a greedy ``select_backups`` from
scratch (today's way), both timed; their set sizes and how many sensors each changes
per window.

**Honesty, range contract** (``bench.bench_honesty``'s cases, folds, H and S, eps and
windows; read its docstring). Per fold the plan is made as the CLI's ``plan`` makes it
(the H rows written to CSV and loaded, ``--horizon S``, every other setting at its
default), and the same plan is used three ways over the S test rows, side by side:

* ``static``: its exported config alone (bench_honesty's ``ours``, the same protocol);
* ``monitored``: the product's shadow monitor and alert re-plans (``bench.honesty_live``);
* ``control``: ``engine.planning.control.SensorController`` from the plan's model,
  calibrated targets and set, with its default constants (fixed before any run, not
  tuned): after each tumbling window closes, every rebuilt sensor's miss
  (``|recovered - true| > eps``) and every backed-up sensor's counterfactual miss
  (rebuilt from the others in the set by the model) go in, and its set governs the
  next window (feedback delay 0). The model is not refitted.

Scored as bench_honesty scores: misses over rebuilt (window, sensor) pairs, honest =
pooled rate <= delta and the worst sensor's binomial test not rejecting at 1 %;
savings averaged over the windows; backup-set changes per day (windows whose set
differs from the one before, per day of test rows). Prints one JSON object.

**Honesty, crash contract** (``--exposure w/12``, ``w/4`` or ``w``: m rows, as
bench_honesty rounds them). The plan is the CLI's with ``--exposure m``; ``static`` is
its config applied alone and ``control`` the controller fed, after each window, every
rebuilt sensor's fraction of the ``w + m - 1`` m-row losses touching the window that
put it more than eps off (``engine.planning.feedback.window_misses``, as the live
pipeline feeds it) and every backed-up sensor's counterfactual fraction. Both are
scored as bench_honesty scores the crash contract (``score_crash``: rates over
(failure position, window, rebuilt sensor) triples, the worst sensor's test over
windows). The shadow monitor's re-plans (``monitored``) are for whole windows and are
left out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import engine  # noqa: F401  (single-threaded BLAS before numpy loads)
from bench import bench_honesty as honesty
from bench.common import random_covariance
from bench.honesty_live import run_live_fold
from bench.honesty_oracle import case_eps
from engine.aggregates import leave_out
from engine.cli import parse_eps_by_unit
from engine.data import load_history
from engine.data.units import eps_for_units
from engine.export import plan_to_config
from engine.model import GaussianModel
from engine.planning import (
    BacktestSettings,
    ControlConfig,
    PlanParameters,
    SensorController,
    ShadowFeedback,
    make_plan,
)
from engine.planning.feedback import window_misses
from engine.planning.steering import kept_indices
from engine.query import WindowQuery
from engine.selection import select_backups

RESULTS = Path(__file__).resolve().parent / "results" / "control.json"


# ------------------------------------------------------------------ latency
def bench_latency(n: int, windows: int, greedy_windows: int, seed: int) -> dict[str, Any]:
    """Per-window decision time: the controller's ``observe`` against a fresh greedy."""
    rng = np.random.default_rng(seed)
    cov = random_covariance(n, rng, "factor")
    targets = np.full(n, 0.3 * np.median(np.diag(cov)))
    start_set = select_backups(cov, targets).backup
    ctl = SensorController(ControlConfig(delta=0.05), cov, targets, start_set)
    rate = rng.beta(0.5, 10.0, size=n)
    ours, ours_cpu, greedy, greedy_cpu = [], [], [], []
    sizes, churn, greedy_churn = [], [], []
    last_greedy: set[int] | None = None
    for k in range(windows):
        rebuilt = ~np.isin(np.arange(n), ctl.backup)
        miss = np.where(rebuilt, rng.random(n) < rate, 0.0).astype(float)
        counter = np.where(rebuilt, np.nan, rng.random(n) < rate)
        start, cpu = time.perf_counter(), time.thread_time()
        decision = ctl.observe([ShadowFeedback(k, miss, rebuilt, counter)])
        ours.append(time.perf_counter() - start)
        ours_cpu.append(time.thread_time() - cpu)
        sizes.append(len(decision.backup))
        churn.append(len(decision.added) + len(decision.released))
        if k < greedy_windows:
            start, cpu = time.perf_counter(), time.process_time()
            fresh = select_backups(cov, ctl.effective_targets())
            greedy.append(time.perf_counter() - start)
            greedy_cpu.append(time.process_time() - cpu)  # its scoring uses two threads
            chosen = set(fresh.backup)
            if last_greedy is not None:
                greedy_churn.append(len(chosen ^ last_greedy))
            last_greedy = chosen
            sizes_greedy = fresh.cost
    return {
        "n": n,
        "windows": windows,
        "ours_ms": _quantiles(ours),
        "ours_cpu_ms": _quantiles(ours_cpu),
        "greedy_ms": _quantiles(greedy) | {"windows": greedy_windows},
        "greedy_cpu_ms": _quantiles(greedy_cpu),
        "load_average": os.getloadavg(),
        "speedup_median": float(np.median(greedy) / np.median(ours)),
        "ours_backup_mean": float(np.mean(sizes)),
        "greedy_backup_last": sizes_greedy,
        "ours_backup_at_greedy_last": sizes[greedy_windows - 1],
        "ours_sensors_changed_per_window": float(np.mean(churn)),
        "greedy_sensors_changed_per_window": float(np.mean(greedy_churn)),
    }


def _quantiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1e3
    return {"median": float(np.median(ms)), "p95": float(np.quantile(ms, 0.95)),
            "max": float(ms.max())}  # fmt: skip


# ------------------------------------------------------------------ honesty
def plan_like_cli(
    case: honesty.Case, data: Any, t: int, h: int, s: int, tmp: Path, exposure: int | None = None
) -> Any:
    """The plan ``plan --data CSV --eps E --delta D --window W --agg A --horizon S
    [--exposure M] [--eps-by-unit U]`` makes (a case of mixed units takes one eps per
    unit, as ``bench_honesty`` passes it to the CLI)."""
    csv = tmp / "history.csv"
    honesty.write_history(csv, data.times[t - h : t], data.values[t - h : t], list(data.sensors))
    query = WindowQuery(case.eps, honesty.DELTA, case.window, aggregate=case.aggregate,
                        horizon=s, exposure=exposure)  # fmt: skip
    params, history = PlanParameters(query), load_history(csv)
    if case.eps_by_unit:
        per = eps_for_units(history.sensors, parse_eps_by_unit(case.eps_by_unit), params.units)
        params = params.with_query(eps_by_sensor=per)
    return make_plan(history, params, backtest=BacktestSettings(max_folds=None))


def rebuild_all(model: GaussianModel, backup: tuple[int, ...], x: np.ndarray) -> np.ndarray:
    """(T, n) readings as recovery rebuilds them from ``backup``; a backed-up sensor's
    column is what it would be were it dropped (from the rest of the set)."""
    out = model.linear_map(list(backup)).apply(x[:, list(backup)])
    informative = [j for j in backup if not model.constant_[j]]
    if informative:
        precision = np.linalg.inv(model.cov_[np.ix_(informative, informative)])
        centred = x[:, informative] - model.mean_[informative]
        out[:, informative] = x[:, informative] - (centred @ precision) / np.diag(precision)
    constant = [j for j in backup if model.constant_[j]]
    out[:, constant] = model.mean_[constant]
    return out


def run_control_fold(
    plan: Any,
    case: honesty.Case,
    truth: np.ndarray,
    config: ControlConfig,
    exposure: int | None = None,
) -> dict[str, Any]:
    """The controller in the loop over the fold's test rows ``truth`` (S, n); with
    ``exposure`` m it is fed and scored under the crash contract (fractions of the m-row
    losses touching each window)."""
    n, w = truth.shape[1], case.window
    backup = tuple(plan.sensors.index(x) for x in plan.backup_sensors)
    ctl = SensorController(config, plan.model.cov_, plan.targets, backup)
    misses, pairs = np.zeros(n, dtype=float), np.zeros(n, dtype=int)
    sizes, changes = [], 0
    eps = case_eps(case, list(plan.sensors))
    # every sensor the plan measured keeping its readings: once released, a crash keeps
    # them (the live loop and the job score it so)
    kept = np.isin(np.arange(n), kept_indices(plan))
    for k in range(truth.shape[0] // w):
        rows = truth[k * w : (k + 1) * w]
        current = ctl.backup
        rebuilt = ~np.isin(np.arange(n), current)
        recovered = rebuild_all(plan.model, current, rows)
        if exposure is not None:  # a crash leaves the kept sensors' lost readings out
            recovered = leave_out(recovered, kept, case.aggregate)
        miss = window_misses(rows, recovered, 1, w, w, case.aggregate, eps, exposure)[0]
        misses += np.where(rebuilt, miss, 0.0)
        pairs += rebuilt
        sizes.append(len(current))
        feedback = ShadowFeedback(k, np.where(rebuilt, miss, 0.0), rebuilt,
                                  np.where(rebuilt, np.nan, miss))  # fmt: skip
        changes += ctl.observe([feedback]).changed
    out = {"misses": misses, "pairs": pairs, "backup": float(np.mean(sizes)),
           "changes": changes, "warnings": []}  # fmt: skip
    return out | {"crash": {"m": dict(out)}} if exposure is not None else out


def run_static_fold(config: dict[str, Any], case: honesty.Case, truth: np.ndarray,
                    sensors: list[str]) -> dict[str, Any]:  # fmt: skip
    """bench_honesty's scoring of the exported config applied alone."""
    recovered, rebuilt = honesty.recover_from_config(config, truth, sensors)
    eps = honesty.eps_vector(config, sensors)  # one per sensor (a case of mixed units)
    miss = np.abs(honesty.tumbling(recovered, case.window, case.aggregate)
                  - honesty.tumbling(truth, case.window, case.aggregate)) > eps  # fmt: skip
    return {"misses": np.where(rebuilt, miss.sum(axis=0), 0),
            "pairs": np.where(rebuilt, miss.shape[0], 0),
            "backup": len(config["backup_sensors"]), "warnings": []}  # fmt: skip


def run_case(
    case: honesty.Case, folds: int, config: ControlConfig, fraction: str | None = None
) -> dict[str, Any]:
    """The three ways (range contract), or static and control under the crash contract at
    the exposure ``fraction`` (``w/12``, ``w/4``, ``w``) of the window."""
    data, names, h, s, origins = honesty.case_folds(case, folds)
    m = None if fraction is None else honesty.exposures(case.window, [fraction])[fraction]
    out: dict[str, Any] = {
        "case": case.name,
        "half": case.half,
        "sensors": len(names),
        "aggregate": case.aggregate,
        "window": case.window,
        "H": h,
        "S": s,
    }
    ways = ("static", "monitored", "control") if m is None else ("static", "control")
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for t in (int(o) for o in origins):
            plan = plan_like_cli(case, data, t, h, s, Path(tmp), m)
            exported = json.loads(json.dumps(plan_to_config(plan)))
            truth = data.values[t : t + s]
            if m is None:
                runs["static"].append(run_static_fold(exported, case, truth, names))
                live = run_live_fold(exported, data.times, data.values, names, t, s,
                                     case.window, case.aggregate)  # fmt: skip
                runs["monitored"].append(live)
            else:
                runs["static"].append(honesty.score_config(exported, truth, case, names, {"m": m}))
            runs["control"].append(run_control_fold(plan, case, truth, config, m))
    days = s * data.report.sampling_interval_s / 86400.0
    if m is not None:
        out["exposure"] = m
    for name, fold in runs.items():
        out[name] = (
            honesty.score(fold, names) if m is None else honesty.score_crash(fold, names, "m")
        )
        if name == "control":
            out[name]["changes_per_day"] = float(np.mean([f["changes"] for f in fold]) / days)
        if name == "monitored":
            out[name]["changes_per_day"] = float(np.mean([len(f["replans"]) for f in fold]) / days)
    out["seconds"] = time.perf_counter() - start
    return out


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for half in [*honesty.HALVES, "all"]:
        rs = [r for r in results if half in ("all", r["half"])]
        if not rs:
            continue
        ways = [m for m in ("static", "monitored", "control") if m in rs[0]]
        out[half] = {m: _summary(rs, m) for m in ways}
    return out


def _summary(rs: list[dict[str, Any]], m: str) -> dict[str, Any]:
    return {
        "honest": f"{sum(r[m]['honest'] for r in rs)}/{len(rs)}",
        "mean_savings": float(np.mean([r[m]["savings"] for r in rs])),
        "changes_per_day": float(np.mean([r[m].get("changes_per_day", 0.0) for r in rs])),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=None, help="comma-separated honesty case names")
    ap.add_argument("--folds", type=int, default=honesty.FOLDS)
    ap.add_argument("--latency-only", action="store_true")
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--seed", type=int, default=20240501)
    ap.add_argument(
        "--exposure",
        default=None,
        choices=("w/12", "w/4", "w"),
        help="the crash contract at this exposure (default: the range contract)",
    )
    ap.add_argument(
        "--out",
        default=None,
        help=f"default {RESULTS.name} (range), control_crash_<w12|w4|w>.json (crash)",
    )
    args = ap.parse_args(argv)
    if args.out is None:
        tag = "" if args.exposure is None else "_crash_" + args.exposure.replace("/", "")
        args.out = str(RESULTS.with_name(f"control{tag}.json"))
    try:
        chosen = [] if args.latency_only else honesty.chosen_cases(args.cases)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    config = ControlConfig(delta=honesty.DELTA)
    report: dict[str, Any] = {"benchmark": "control", "config": config.__dict__,
                              "contract": "range" if args.exposure is None else "crash",
                              "exposure": args.exposure}  # fmt: skip
    if not args.no_latency:
        report["latency"] = [bench_latency(100, 300, 300, args.seed),
                             bench_latency(1000, 300, 20, args.seed)]  # fmt: skip
    results = []
    for case in chosen:
        results.append(run_case(case, args.folds, config, args.exposure))
        r = results[-1]
        print(f"{case.name}: " + "; ".join(
            f"{m} {'honest' if r[m]['honest'] else 'NOT'} {r[m]['savings']:.0%}"
            for m in ("static", "monitored", "control") if m in r) + f" ({r['seconds']:.0f} s)",
            file=sys.stderr, flush=True)  # fmt: skip
    if results:
        report["folds"] = args.folds
        report["summary"] = summarise(results)
        report["cases"] = results
    text = json.dumps(report, indent=2, default=_plain)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def _plain(x: Any) -> Any:
    if isinstance(x, np.integer | np.bool_):
        return x.item()
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"cannot serialise {type(x).__name__}")


if __name__ == "__main__":
    sys.exit(main())
