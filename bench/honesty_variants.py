"""What costs savings in the honesty benchmark? Variants of the calibration, measured.

    python -m bench.honesty_variants base choose
    python -m bench.honesty_variants margin=1.0,nodrift choose
    python -m bench.honesty_variants oracle choose   # upper bounds, see below
    python -m bench.honesty_variants horizons held-out appliances_T_avg

A study tool, not product code: each variant patches one piece of
``engine.planning`` in this process only, then runs ``bench.bench_honesty``'s
protocol (our method, 8 folds) on the cases of the given halves. Variants
(comma-separated, combinable):

* ``margin=M``: the quantile level ``1 - delta * M`` (the product's M is 0.7).
* ``method=exact``: exhaustive selection instead of greedy with exchanges.
* ``adapt=R``: the online correction's step learnt in the backtest (0: none).
* ``tighten``: the online correction may tighten targets, never relax them.
* ``nodrift``: no latest-horizon drift check (pooled quantile only).
* ``pi=A``: also bound each sensor by a one-sided ``1 - A`` Student prediction
  bound for the next horizon's quantile from the scored horizons' own quantiles
  (a guard against a horizon worse than the past ones).
* ``neff``: a quantile is measured only if the scored horizons hold enough
  NON-overlapping windows (sliding windows of w readings carry about 1/w of an
  independent sample each); else the sensor is backed up.

``oracle`` prints two bounds per case instead: the fewest backups with which the
pooled miss rate over the NEXT S rows is <= delta (hindsight: no method can do
better with this model class), and the fewest backups whose forward-horizon
quantiles on the history (what calibration sees) are all within eps (what a
perfect selection under the product's own calibration could reach).

``horizons`` prints, per fold and rebuilt sensor of our plan, the error quantile
of each scored horizon of the history and the quantile realised over the next S
rows: can a trend across the calibration's horizons foresee a failure?
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import t as student

import bench.bench_honesty as B
import engine.planning.calibration as C
import engine.planning.parameters as P
from engine.model import GaussianModel
from engine.planning.horizon import (
    MAX_SCORED_HORIZONS,
    conformal_quantile,
    first_fit_rows,
    forward_models,
    horizon_origins,
)

_SPEC = P.PlanParameters.spec
_QUANTILES = C._forward_quantiles
_CALIBRATE = C._calibrate


def patch(opts: dict[str, str]) -> None:
    """Install the variant ``opts`` in ``engine.planning`` (this process only)."""

    def spec(self: Any) -> Any:
        kw: dict[str, Any] = {}
        if "margin" in opts:
            kw["margin"] = float(opts["margin"])
        if "method" in opts:
            kw["method"] = opts["method"]
        if "adapt" in opts:
            kw["adapt_rate"] = float(opts["adapt"])
        return replace(_SPEC(self), **kw)

    def quantiles(x: Any, forward: Any, backup: Any, spec: Any, level: float) -> Any:
        h = spec.horizon_rows
        pairs = zip(*forward, strict=True)
        res = [C._window_residuals(x[o : o + h], m, backup, spec) for o, m in pairs]
        e = np.abs(np.vstack(res))
        q = conformal_quantile(e, level)
        if "nodrift" not in opts:
            last = conformal_quantile(np.abs(res[-1]), level)
            q = np.where(np.isfinite(last), np.maximum(q, last), q)
        per = np.array([conformal_quantile(np.abs(r), level) for r in res])
        if "pi" in opts and per.shape[0] >= 2 and np.all(np.isfinite(per)):
            k, a = per.shape[0], float(opts["pi"])
            spread = per.std(axis=0, ddof=1) * math.sqrt(1 + 1 / k)
            q = np.maximum(q, per.mean(axis=0) + student.ppf(1 - a, k - 1) * spread)
        neff = sum(r.shape[0] // spec.window + 1 for r in res)
        if "neff" in opts and math.ceil((neff + 1) * level) > neff:
            q = np.full_like(q, np.inf)
        return q, e.shape[0]

    def calibrate(x: Any, sensors: Any, spec: Any, model: Any, forward: Any, scale: Any) -> Any:
        scale = np.minimum(scale, 1.0) if "tighten" in opts else scale
        return _CALIBRATE(x, sensors, spec, model, forward, scale)

    P.PlanParameters.spec = spec  # type: ignore[method-assign]
    C._forward_quantiles = quantiles
    C._calibrate = calibrate


def cases(halves: list[str]) -> Any:
    for case in B.CASES:
        if case.half not in halves:
            continue
        data = B.load_history(B.DATASETS / case.dataset / "wide.csv")
        names = [x for x in data.sensors if any(B.fnmatchcase(x, g) for g in case.sensors)]
        data = data.select(names)
        h, s = B.history_and_horizon(case, data.values.shape[0])
        origins = np.linspace(h, data.values.shape[0] - s, B.FOLDS).round().astype(int)
        yield case, data, names, h, s, origins


def oracle(case: Any, data: Any, names: list[str], h: int, s: int, origins: Any) -> str:
    x_all, n = data.values, len(names)
    spec = C.PlanningSpec(case.eps, B.DELTA, case.window, case.window, case.aggregate, horizon=s)
    hind, past = [], []
    for t in origins:
        x = x_all[t - h : t]
        x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)
        model = GaussianModel().fit(x, tuple(names))
        fut = x_all[t : t + s]
        truth = B.tumbling(fut, case.window, case.aggregate)
        ors = horizon_origins(h, first_fit_rows(n, case.window, s), s)[-MAX_SCORED_HORIZONS:]
        fw = (ors, forward_models(x, ors, tuple(names)))
        best_h = best_p = n
        for k in range(n):  # ascending: the first size at which some subset passes
            for sub in itertools.combinations(range(n), k):
                keep = [j for j in range(n) if j not in sub]
                rec = np.tile(model.mean_, (s, 1))
                if sub:
                    rec = model.linear_map(list(sub)).apply(fut[:, list(sub)])
                    rec[:, list(sub)] = fut[:, list(sub)]
                miss = np.abs(B.tumbling(rec, case.window, case.aggregate) - truth) > case.eps
                if best_h == n and miss[:, keep].mean() <= B.DELTA:
                    best_h = k
                if best_p == n:
                    q, _ = _QUANTILES(x, fw, sub, spec, spec.level)
                    best_p = k if np.all(q[keep] <= case.eps) else n
            if best_h < n and best_p < n:
                break
        hind.append(1 - best_h / n)
        past.append(1 - best_p / n)
    return f"hindsight {np.mean(hind):.0%}, past-only {np.mean(past):.0%}"


def horizons(case: Any, data: Any, names: list[str], h: int, s: int, origins: Any) -> None:
    x_all, n = data.values, len(names)
    spec = C.PlanningSpec(case.eps, B.DELTA, case.window, case.window, case.aggregate, horizon=s)
    for t in origins:
        with tempfile.TemporaryDirectory() as tmp:
            B.run_fold(case, data, int(t), h, s, "ours", Path(tmp))
            config = json.loads((Path(tmp) / "plan_ours.json").read_text())
        sub = tuple(sorted(names.index(b) for b in config["backup_sensors"]))
        x = x_all[t - h : t]
        ors = horizon_origins(h, first_fit_rows(n, case.window, s), s)[-MAX_SCORED_HORIZONS:]
        per = [
            conformal_quantile(np.abs(C._window_residuals(x[o : o + s], m, sub, spec)), spec.level)
            for o, m in zip(ors, forward_models(x, ors, tuple(names)), strict=True)
        ]
        model = GaussianModel().fit(x, tuple(names))
        ahead = C._window_residuals(x_all[t : t + s], model, sub, spec)
        realised = conformal_quantile(np.abs(ahead), spec.level)
        for j in (j for j in range(n) if j not in sub):
            past = ", ".join(f"{p[j]:.2f}" for p in per)
            print(f"{case.name} fold {t} {names[j]}: horizons {past} -> next {realised[j]:.2f}")


def main(argv: list[str]) -> None:
    variant, halves = argv[0], argv[1].split(",")
    only = set(argv[2].split(",")) if len(argv) > 2 else None
    opts = dict([*kv.split("="), ""][:2] for kv in variant.split(",") if kv != "base")
    if "oracle" not in opts and "horizons" not in opts:
        patch(opts)
    rows = []
    for case, data, names, h, s, origins in cases(halves):
        if only and case.name not in only:
            continue
        if "horizons" in opts:
            horizons(case, data, names, h, s, origins)
            continue
        if "oracle" in opts:
            print(f"{case.name:20s} oracle {oracle(case, data, names, h, s, origins)}", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            folds = [B.run_fold(case, data, int(t), h, s, "ours", Path(tmp)) for t in origins]
        r = B.score(folds, names)
        rows.append((case.half, r))
        print(
            f"{variant} {case.name:20s} {r['pooled_rate']:.3f}/{r['worst_rate']:.3f} "
            f"{'ok ' if r['honest'] else 'NOT'} savings {r['savings']:.0%}",
            flush=True,
        )
    for half in halves:
        rs = [r for h_, r in rows if h_ == half]
        if rs:
            print(
                f"{variant} {half}: honest {sum(r['honest'] for r in rs)}/{len(rs)}, "
                f"mean savings {np.mean([r['savings'] for r in rs]):.1%}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
