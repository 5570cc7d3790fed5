"""How much could ANY plan save and still pass the honesty benchmark? A hindsight bound.

    python -m bench.honesty_oracle                        # every case of at most 16 sensors
    python -m bench.honesty_oracle --cases eeg_avg,beijing_TEMP_avg

The targets are every case honest AND mean savings of at least 40 %. This
module asks how much a plan could save on ``bench.bench_honesty``'s cases if it
knew the scored weeks in advance, so that the savings target can be read
against what the data allow.

Per case and fold (the benchmark's H, S, window, eps and 8 fold origins): the
model the product fits (a Gaussian on the H history rows; missing readings
set to their column's mean) and, for EVERY backup set ``O`` (exhaustive), the
misses of the rebuilt sensors' tumbling-window aggregates over the next S rows
(``|recovered - true| > eps``, as the benchmark scores them). Per fold and
backup count ``k`` the fewest misses any ``O`` of that size gives. Then the
bound: the fewest backups per fold, averaged as the benchmark averages savings,
such that the pooled miss rate over ALL folds is <= delta. That is a
multiple-choice knapsack (one backup count per fold, their excess misses
``misses - delta * rebuilt windows`` summing to <= 0), solved exactly by a
dynamic programme over the total backup count.

What it leaves out makes it an upper bound for every plan of this model class
(a same-time linear map fitted on the history; richer linear models were
measured no better, ``bench.honesty_models``): it knows the future, it may
choose a different set in every fold, a fold may exceed delta where another
makes up for it, and the worst-sensor test is not applied. A plan that must
choose from the past alone saves less.

JSON in ``bench/results/honesty_oracle.json``: per case the bound, the
benchmark's measured savings of our method and of the seed's (from
``bench/results/honesty.json``), and per half the means.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import time
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg

import bench.bench_honesty as B
from engine.aggregates import get_aggregate
from engine.cli import parse_eps_by_unit
from engine.data.units import eps_for_units
from engine.model import GaussianModel

RESULTS = Path(__file__).resolve().parent / "results" / "honesty_oracle.json"
MAX_SENSORS = 16  # exhaustive: 2 ** n backup sets a fold


def rebuild(model: GaussianModel, observed: tuple[int, ...], x: np.ndarray) -> np.ndarray:
    """(T, n) conditional-mean reconstruction of ``x`` from its ``observed`` columns: the
    product's ``model.linear_map(observed).apply`` (constant observed sensors get
    coefficient 0), solved directly because the search below calls it 2 ** n times a
    fold (``tests/unit/test_bench_honesty_oracle.py`` checks it against the product's)."""
    mu, cov = model.mean_, model.cov_
    out = np.tile(mu, (x.shape[0], 1))
    targets = [j for j in range(len(mu)) if j not in observed]
    informative = [j for j in observed if not model.constant_[j]]
    if informative and targets:
        coef = scipy.linalg.solve(
            cov[np.ix_(informative, informative)],
            cov[np.ix_(informative, targets)],
            assume_a="pos",
        )
        out[:, targets] += (x[:, informative] - mu[informative]) @ coef
    out[:, list(observed)] = x[:, list(observed)]
    return out


def fewest_misses_by_size(x: np.ndarray, future: np.ndarray, case: B.Case) -> np.ndarray:
    """(n + 1,) the fewest rebuilt-window misses over the next rows of any backup set of
    each size k = 0..n (the model fitted on the history ``x``, as the product does).

    Sizes above the first one with no miss are left infinite: dominated in the bound.
    """
    return fewest_by_contract(x, future, case, {})["range"]


def case_eps(case: B.Case, names: list[str]) -> np.ndarray:
    """(n,) each sensor's eps: the case's, or its unit's for a case of mixed units."""
    if not case.eps_by_unit:
        return np.full(len(names), case.eps)
    given = dict(eps_for_units(names, parse_eps_by_unit(case.eps_by_unit)))
    return np.array([given.get(x, case.eps) for x in names])


def fewest_by_contract(
    x: np.ndarray,
    future: np.ndarray,
    case: B.Case,
    crash: dict[str, int],
    names: list[str] | None = None,
) -> dict[str, np.ndarray]:
    """Per contract, (n + 1,) the fewest misses over the next rows of any backup set of each
    size: "range" (whole windows rebuilt) and each label of ``crash`` (a failure loses that
    many rows): misses in windows, each counting its fraction of failure positions that
    missed (``bench_honesty.crash_misses``). Sizes above the first one with no miss in a
    contract are left infinite there."""
    n = x.shape[1]
    if n > MAX_SENSORS:
        raise ValueError(f"{case.name}: {n} sensors, exhaustive search stops at {MAX_SENSORS}")
    filled = np.where(np.isnan(x), np.nanmean(x, axis=0), x)
    model = GaussianModel().fit(filled, tuple(f"s{j}" for j in range(n)))
    truth = B.tumbling(future, case.window, case.aggregate)
    # avg and sum are linear: rebuilding the window means equals the mean of the rebuilt
    # readings, so the search rebuilds W window rows instead of S readings
    linear = case.aggregate in ("avg", "sum")
    source = B.tumbling(future, case.window, "avg") if linear else future
    scale = case.window if case.aggregate == "sum" else 1.0
    starts = np.arange(0, future.shape[0] - case.window + 1, case.window)
    agg = get_aggregate(case.aggregate)
    eps = case_eps(case, names) if names else np.full(n, case.eps)
    best = {c: np.full(n + 1, np.inf) for c in ("range", *crash)}
    done = set()
    for b in best.values():
        b[n] = 0.0  # everything backed up: nothing rebuilt, nothing missed
    for k in range(n):
        for sub in itertools.combinations(range(n), k):
            rebuilt = [j for j in range(n) if j not in sub]
            if "range" not in done:
                rec = rebuild(model, sub, source)
                agg_rec = rec * scale if linear else B.tumbling(rec, case.window, case.aggregate)
                misses = np.sum(np.abs(agg_rec[:, rebuilt] - truth[:, rebuilt]) > eps[rebuilt])
                best["range"][k] = min(best["range"][k], float(misses))
            if set(crash) - done:
                full = rebuild(model, sub, future)
                for c, m in crash.items():
                    if c in done:
                        continue
                    err = agg.exposure_errors(future, full, starts, case.window, m)
                    lost = (np.abs(err[:, :, rebuilt]) > eps[rebuilt]).mean(axis=1)
                    best[c][k] = min(best[c][k], float(lost.sum()))
            if all(best[c][k] == 0 for c in best if c not in done):
                break
        # No miss with k backups: more backups can only rebuild fewer windows with no
        # fewer misses, so every larger size is dominated (left infinite, never chosen).
        done |= {c for c in best if best[c][k] == 0}
        if len(done) == len(best):
            break
    return best


def pooled_bound(fewest: list[np.ndarray], windows: int, n: int, delta: float) -> float:
    """Largest mean savings ``1 - k_f / n`` over folds f with the pooled miss rate over all
    folds <= ``delta``: one backup count k_f per fold, ``sum_f excess_f(k_f) <= 0``, where
    ``excess_f(k) = fewest_f[k] - delta * (n - k) * windows`` (exact: a programme over
    the total backup count, keeping the least total excess for each)."""
    least: dict[int, float] = {0: 0.0}  # total backups so far -> least total excess
    for misses in fewest:
        step: dict[int, float] = {}
        for total, excess in least.items():
            for k in range(n + 1):
                e = excess + misses[k] - delta * (n - k) * windows
                if e < step.get(total + k, np.inf):
                    step[total + k] = e
        least = step
    total = min(t for t, e in least.items() if e <= 1e-9)  # all backed up always qualifies
    return 1.0 - total / (n * len(fewest))


def case_bound(case: B.Case, labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """The hindsight bound of the case under the range contract and, per exposure label,
    the crash contract (``bench_honesty.exposures``)."""
    data, names, h, s, origins = B.case_folds(case)
    values, n, windows = data.values, len(names), s // case.window
    crash = B.exposures(case.window, labels)
    fewest = [fewest_by_contract(values[t - h : t], values[t : t + s], case, crash, names)
              for t in origins]  # fmt: skip
    per_fold = [  # each fold alone at <= delta, for comparison
        1.0 - min(k for k in range(n + 1) if f["range"][k] <= B.DELTA * (n - k) * windows) / n
        for f in fewest
    ]
    out = {
        "sensors": n,
        "windows_per_fold": windows,
        "hindsight_savings": pooled_bound([f["range"] for f in fewest], windows, n, B.DELTA),
        "hindsight_savings_each_fold": float(np.mean(per_fold)),
    }
    if crash:
        out["crash"] = {
            c: {"exposure": m,
                "hindsight_savings": pooled_bound([f[c] for f in fewest], windows, n, B.DELTA)}
            for c, m in crash.items()
        }  # fmt: skip
    return out


def measured(name: str) -> dict[str, Any]:
    """Our method's and the seed's savings and verdict in the benchmark's last run, under
    the range contract and (``crash``) per exposure label."""
    try:
        runs = json.loads(B.RESULTS.read_text())["cases"]
    except (OSError, KeyError, ValueError):
        return {}
    row = next((c for c in runs if c.get("case") == name), None)
    if row is None:
        return {}
    out: dict[str, Any] = {
        who: {"savings": row[who]["savings"], "honest": row[who]["honest"]}
        for who in ("ours", "seed")
        if who in row
    }
    if "crash" in row:
        out["measured_crash"] = {
            c: {who: {"savings": v[who]["savings"], "honest": v[who]["honest"]}
                for who in ("ours", "seed")}
            for c, v in row["crash"].items()
        }  # fmt: skip
    return out


@functools.cache
def _sensors_of(dataset: str) -> tuple[str, ...]:
    return tuple(B.load_history(B.DATASETS / dataset / "wide.csv").sensors)


def boundable(cases: list[B.Case]) -> tuple[list[B.Case], list[str]]:
    """(the cases of at most ``MAX_SENSORS`` sensors, the names of the others): the
    exhaustive search tries 2 ** n backup sets a fold, so a whole network is left out."""

    def size(case: B.Case) -> int:
        return sum(any(fnmatchcase(x, g) for g in case.sensors) for x in _sensors_of(case.dataset))

    small = [c for c in cases if size(c) <= MAX_SENSORS]
    return small, [c.name for c in cases if c not in small]


BOUND_KEYS = ("sensors", "windows_per_fold", "hindsight_savings", "hindsight_savings_each_fold")


def run(
    cases: list[B.Case], labels: tuple[str, ...] = (), known: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Each case's bounds (from ``known``, an earlier report's rows by name, when they hold
    every label asked for) beside the benchmark's measured figures."""
    for case in cases:
        started = time.monotonic()
        old = (known or {}).get(case.name)
        if old is not None and set(labels) <= set(old.get("crash", {})):
            bound = {k: old[k] for k in BOUND_KEYS}
            bound["crash"] = {c: old["crash"][c] for c in labels}
        else:
            bound = case_bound(case, labels)
        out = {"name": case.name, "half": case.half, **bound, **measured(case.name)}
        out["seconds"] = round(time.monotonic() - started, 1)
        print(
            f"{case.name:20s} n={out['sensors']:2d} hindsight {out['hindsight_savings']:.0%}"
            f" (each fold {out['hindsight_savings_each_fold']:.0%})"
            + (f", ours {out['ours']['savings']:.0%}" if "ours" in out else "")
            + "".join(
                f"; crash {c} {v['hindsight_savings']:.0%}" for c, v in out.get("crash", {}).items()
            ),
            file=sys.stderr,
            flush=True,
        )
        yield out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    halves = [*dict.fromkeys(c.half for c in B.CASES if c.half in {r["half"] for r in rows})]
    out = {}
    for half in [*halves, "all"]:
        rs = [r for r in rows if half in ("all", r["half"])]
        out[half] = {
            "cases": len(rs),
            "hindsight_savings": float(np.mean([r["hindsight_savings"] for r in rs])),
            "cases_at_40_percent_or_more": sum(r["hindsight_savings"] >= 0.4 for r in rs),
            **{
                f"{who}_savings": float(np.mean([r[who]["savings"] for r in rs]))
                for who in ("ours", "seed")
                if all(who in r for r in rs)
            },
        }
        labels = [c for c, _ in B.EXPOSURES if rs and all(c in r.get("crash", {}) for r in rs)]
        for c in labels:
            part: dict[str, Any] = {
                "hindsight_savings": float(
                    np.mean([r["crash"][c]["hindsight_savings"] for r in rs])
                )
            }
            if all(c in r.get("measured_crash", {}) for r in rs):
                for who in ("ours", "seed"):
                    got = [r["measured_crash"][c][who] for r in rs]
                    part[f"{who}_savings"] = float(np.mean([g["savings"] for g in got]))
                    part[f"{who}_honest"] = f"{sum(g['honest'] for g in got)}/{len(got)}"
            out[half][f"crash {c}"] = part
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--exposures",
        default=",".join(c for c, _ in B.EXPOSURES),
        help="crash-contract exposures to bound (w/12,w/4,w; empty: the range contract only)",
    )
    parser.add_argument(
        "--bounds",
        type=Path,
        default=None,
        help="an earlier report: its cases' bounds are reused, the measured figures re-read",
    )
    args = parser.parse_args(argv)
    labels = tuple(c for c in args.exposures.split(",") if c)
    known = (
        {r["name"]: r for r in json.loads(args.bounds.read_text())["cases"]}
        if args.bounds
        else None
    )
    try:
        cases, large = boundable(B.chosen_cases(args.cases))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if large and args.cases:
        print(f"error: over {MAX_SENSORS} sensors, no exhaustive bound: {', '.join(large)}",
              file=sys.stderr)  # fmt: skip
        return 2
    if large:
        print(f"left out (over {MAX_SENSORS} sensors): {', '.join(large)}", file=sys.stderr)
    rows = list(run(cases, labels, known))
    report = {
        "what": "hindsight upper bound on mean savings with the pooled miss rate <= delta",
        "delta": B.DELTA,
        "folds": B.FOLDS,
        "summary": summary(rows),
        "left_out": {"over_sensors": MAX_SENSORS, "cases": large},
        "cases": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
