"""What costs savings in the honesty benchmark? Variants of the calibration, measured.

    python -m bench.honesty_variants base choose
    python -m bench.honesty_variants margin=1.0,nodrift choose
    python -m bench.honesty_variants oracle choose   # upper bounds, see below
    python -m bench.honesty_variants horizons held-out appliances_T_avg
    python -m bench.honesty_variants base choose --json /tmp/base.json  # rows, full precision

A study tool, not product code: each variant patches one piece of
``engine.planning`` in this process only, then runs ``bench.bench_honesty``'s
protocol (our method, 8 folds) on the cases of the given halves. Variants
(comma-separated, combinable):

* ``margin=M``: the quantile level ``1 - delta * M`` (the product's M is 0.7).
* ``method=exact``: exhaustive selection instead of greedy with exchanges.
* ``adapt=R``: the online correction's step learnt in the backtest (0: none).
* ``tighten``: the online correction may tighten targets, never relax them.
* ``nodrift``: no latest-horizon drift check (pooled quantile only).
* ``nopb``: no Gaussian prediction bound from the disjoint windows' count (the
  method without it; ``student=disjoint`` measured it).
* ``pi=A``: also bound each sensor by a one-sided ``1 - A`` Student prediction
  bound for the next horizon's quantile from the scored horizons' own quantiles
  (a guard against a horizon worse than the past ones).
* ``neff``: a quantile is measured only if the scored horizons hold enough
  NON-overlapping windows (sliding windows of w readings carry about 1/w of an
  independent sample each); else the sensor is backed up.

* ``pac=G``: a training-conditional (PAC) conformal quantile: the smallest order
  statistic that covers the level with probability ``1 - G / n`` (the worst of n
  sensors) given ``n_eff`` effectively independent scores (disjoint windows,
  shrunk by their lag-1 autocorrelation); infinite (backed up) when none does.
* ``student`` / ``student=disjoint``: also bound each sensor by a Gaussian
  prediction bound on the next window error, ``rms * t_level(m - 1) * sqrt(1 + 1/m)``
  with m = ``n_eff`` (autocorrelation-shrunk) or the disjoint windows' count.
* ``tinfl``: widen the conformal quantile by that bound's small-sample factor
  ``t_level(n_eff - 1) sqrt(1 + 1/n_eff) / z_level`` instead.
* ``ratio=all|last``: the quantile of the errors (every horizon's or the latest's)
  times the change of error scale between consecutive horizons, pooled over
  sensors (drift the history shows, as a distribution).
* ``trend=T``: back up a sensor whose latest horizon's RMS error is over T times
  the earlier horizons' mean.
* ``needfold``: a plan whose backtest could not run one fold (history too short)
  backs up every sensor instead of trusting an unmeasured calibration.
* ``pid=C``: conformal PID control (P: the product's tracking; I: a saturating
  integral with ``C_sat`` = C) of the online correction learnt in the backtest.

* ``shrink=A``: every fitted ``GaussianModel`` (final plan, calibration's forward
  horizons, backtest folds) has its covariance shrunk toward its diagonal,
  ``(1 - A) cov + A diag(cov)`` (after the product's repair; constant sensors keep
  their zero rows). ``shrink=auto``: ``A = min(1, n_sensors / n_samples)`` of that
  fit, an analytic weight (not tuned). Does a better-generalising fit save more?
* ``recent=K``: every fit (the plan's, each calibration horizon's, each backtest
  fold's) learns only from the last ``K * S`` rows before the point it is fitted at
  (S = the horizon in rows; at least ``n + 2`` rows), not all rows before it.
  Calibration still scores the same horizons. Note the benchmark's history is
  H = 3 S, so the latest forward fit already sees at most 2 S rows: ``recent=2``
  changes only the plan's final fit, ``recent=3`` or more changes nothing.

Both contracts: ``exposure=w/12`` (or ``w/4``, ``w``) plans with ``--exposure`` at that
exposure (``bench_honesty.exposures``) and scores the crash contract
(``bench_honesty.score_crash``); without it, the range contract. ``nomirror``: max/min
calibrated on the residual as seen only (not also its mirror, ``Aggregate.sign_blind``).
The other options apply to either contract (``pac``, ``student``, ``tinfl`` and ``ratio``
read signed window errors: range only).

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
from scipy.stats import binom, norm
from scipy.stats import t as student

import bench.bench_honesty as B
import engine.aggregates as A
import engine.planning.backtest as BT
import engine.planning.calibration as C
import engine.planning.parameters as P
import engine.planning.plan as PL
from engine.model import GaussianModel
from engine.planning.horizon import (
    MAX_SCORED_HORIZONS,
    conformal_quantile,
    first_fit_rows,
    forward_models,
    horizon_origins,
    prediction_bound,
)
from engine.planning.scores import window_residuals

_SPEC = P.PlanParameters.spec
_QUANTILES = C._forward_quantiles
_CALIBRATE = C._calibrate
_FIT_STATS = GaussianModel.fit_stats
B_TRACK = BT.track_quantile


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

    def quantiles(
        x: Any, forward: Any, backup: Any, spec: Any, level: float, score: Any = None
    ) -> Any:
        if score is not None:  # another rule's scores (the kept readings'): the product's way
            return _QUANTILES(x, forward, backup, spec, level, score=score)
        h = spec.horizon_rows
        pairs = zip(*forward, strict=True)
        if spec.exposure is None:  # range: signed window errors (some options read the sign)
            res = [window_residuals(x[o : o + h], m, backup, spec) for o, m in pairs]
            neff = sum(r.shape[0] // spec.window + 1 for r in res)
        else:  # crash: the product's scores, w + m - 1 (max/min: twice) per window
            res = [C.calibration_scores(x[o : o + h], m, backup, spec) for o, m in pairs]
            neff = len(res) * ((h - spec.window + 1) // spec.window + 1)
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
        if "neff" in opts and math.ceil((neff + 1) * level) > neff:
            q = np.full_like(q, np.inf)
        if "pac" in opts:
            q = np.maximum(q, pac_quantile(e, effective_count(res, spec.window), level, opts))
        if "nopb" not in opts:  # the product's prediction bound (disjoint windows)
            q = np.maximum(q, prediction_bound(e, neff, level))
        if "student" in opts:
            n_eff = effective_count(res, spec.window, opts["student"] != "disjoint")
            q = np.maximum(q, student_bound(e, n_eff, level))
        if "tinfl" in opts:
            q = q * small_sample_inflation(effective_count(res, spec.window), level)
        if "ratio" in opts and len(res) >= 2:
            q = np.maximum(q, ratio_quantile(res, e, level, opts["ratio"]))
        if "trend" in opts and len(res) >= 2:
            rms = np.array([np.sqrt(np.mean(r**2, axis=0)) for r in res])
            rising = rms[-1] > float(opts["trend"]) * rms[:-1].mean(axis=0)
            q = np.where(rising, np.inf, q)
        return q, e.shape[0]

    def calibrate(x: Any, sensors: Any, spec: Any, model: Any, forward: Any, scale: Any) -> Any:
        scale = np.minimum(scale, 1.0) if "tighten" in opts else scale
        return _CALIBRATE(x, sensors, spec, model, forward, scale)

    if "nomirror" in opts:  # max/min calibrated on the residual as seen, not its mirror too
        A._Extreme.sign_blind = property(lambda self: True)  # type: ignore[assignment,method-assign]
    if "shrink" in opts:
        patch_shrink(opts["shrink"])
    if "recent" in opts:
        patch_recent(float(opts["recent"]))
    if "needfold" in opts:
        patch_need_fold()
    if "pid" in opts:
        BT.track_quantile = pid_tracker(float(opts["pid"] or 1.0))  # type: ignore[assignment]
    P.PlanParameters.spec = spec  # type: ignore[method-assign]
    C._forward_quantiles = quantiles
    C._calibrate = calibrate


def patch_need_fold() -> None:
    """A plan whose backtest could not run a single fold backs up every sensor."""
    folds = [1]

    def backtest(*args: Any, **kw: Any) -> Any:
        out = BT.run_backtest(*args, **kw)
        folds[0] = (out[0] if isinstance(out, tuple) else out).n_folds
        return out

    def plan(x: Any, sensors: Any, spec: Any, scale: Any = None) -> Any:
        if folds[0] == 0 and spec.calibration == "backtest":
            scale = np.zeros(x.shape[1])
        return C.plan_on(x, sensors, spec, scale)

    PL.run_backtest = backtest
    PL.plan_on = plan


def patch_shrink(how: str) -> None:
    """Every ``GaussianModel`` fit shrinks its covariance toward its diagonal.

    ``cov' = (1 - A) cov + A diag(cov)`` with ``A`` given or, for "auto",
    ``min(1, n / T)`` (n sensors, T readings fitted). A convex combination of two
    positive (semi)definite matrices, so the repaired covariance stays valid; the
    zero rows of constant sensors stay zero.
    """

    def fit_stats(self: GaussianModel, stats: Any, sensors: Any = None) -> GaussianModel:
        _FIT_STATS(self, stats, sensors)
        n = self.cov_.shape[0]
        a = min(1.0, n / self.n_samples_) if how == "auto" else float(how)
        self.cov_ = (1.0 - a) * self.cov_ + a * np.diag(np.diag(self.cov_))
        return self

    GaussianModel.fit_stats = fit_stats  # type: ignore[method-assign]


def patch_recent(k: float) -> None:
    """Every fit learns from the last ``K * S`` rows before its point only.

    ``plan_on`` as the product's (same calibration, same scored horizons), but its
    model is fitted on the last ``K * S`` rows of ``x`` and each forward horizon's
    model on the ``K * S`` rows before its origin. Installed wherever ``plan_on``
    is called (the final plan and every backtest fold).
    """

    def rows(spec: Any, n: int) -> int:
        return max(round(k * spec.horizon_rows), n + 2)

    def forward(x: Any, origins: list[int], sensors: Any, keep: int) -> list[GaussianModel]:
        return [GaussianModel().fit(x[max(0, o - keep) : o], sensors) for o in origins]

    def plan_on(x: Any, sensors: Any, spec: Any, scale: Any = None) -> Any:
        keep = rows(spec, x.shape[1])
        model = GaussianModel().fit(x[-keep:], sensors)
        base = C.seed_targets(spec, x.shape[1])
        if spec.calibration == "none":
            info = C.CalibrationInfo("none", "model-only targets, as requested")
            return C.FoldPlan(model, C.select_backups(model.cov_, base, spec.method), base, info)
        horizon = spec.horizon_rows
        first = first_fit_rows(x.shape[1], spec.window, horizon)
        origins = horizon_origins(x.shape[0], first, horizon)[-MAX_SCORED_HORIZONS:]
        need = C.calibration_rows(x.shape[1], spec.window, horizon, spec.level)
        if x.shape[0] < need:
            return C.back_up_everything(model, spec, f"too little history: {x.shape[0]} < {need}")
        fw = (origins, forward(x, origins, sensors, keep))
        return C._calibrate(
            x, sensors, spec, model, fw, np.ones(x.shape[1]) if scale is None else scale
        )

    C.plan_on = plan_on
    BT.plan_on = plan_on
    PL.plan_on = plan_on


def pid_tracker(c_sat: float) -> Any:
    """Conformal PID control (Angelopoulos et al. 2023) of the log-targets.

    The P part is the product's quantile tracking step; the I part a saturating
    integral of each sensor's (misses - aim * windows), ``K_I tan(E log t / (t C_sat))``
    with ``K_I`` the adapt rate, added on top of the P state.
    """
    state: dict[int, tuple[np.ndarray, ...]] = {}

    def track(log_scale: Any, misses: Any, rebuilt: Any, spec: Any) -> None:
        if id(log_scale) not in state or state[id(log_scale)][0] is not log_scale:
            zero = np.zeros_like(log_scale)  # a new backtest: keep the array so ids stay unique
            state[id(log_scale)] = (log_scale, log_scale.copy(), zero, zero.copy())
        _, p_state, excess, count = state[id(log_scale)]
        log_scale[:] = p_state
        B_TRACK(log_scale, misses, rebuilt, spec)
        p_state[:] = log_scale
        scored = np.where(rebuilt, misses.shape[0], 0)
        count += scored
        excess += (misses & rebuilt[None, :]).sum(axis=0) - spec.delta * spec.margin * scored
        t = np.maximum(count, 2.0)
        log_scale -= spec.adapt_rate * np.tan(np.clip(excess * np.log(t) / (t * c_sat), -1.5, 1.5))
        np.clip(log_scale, -BT.MAX_LOG_SCALE, BT.MAX_LOG_SCALE, out=log_scale)

    return track


def effective_count(res: list[np.ndarray], window: int, autocorr: bool = True) -> np.ndarray:
    """(n,) effectively independent window errors in the scored horizons.

    Sliding windows overlap, so each horizon holds ``W // window + 1`` disjoint
    windows; the lag-1 autocorrelation of those disjoint windows' signed errors
    (pooled over horizons, each centred) shrinks the count by ``(1 - r) / (1 + r)``.
    """
    m = sum(r.shape[0] // window + 1 for r in res)
    if not autocorr:
        return np.full(res[0].shape[1], float(m))
    num = den = 0.0
    for r in res:
        d = r[::window] - r[::window].mean(axis=0)
        num = num + (d[1:] * d[:-1]).sum(axis=0)
        den = den + (d**2).sum(axis=0)
    rho = np.clip(num / np.maximum(den, 1e-300), 0.0, 0.95)
    return np.maximum(m * (1 - rho) / (1 + rho), 1.0)


def pac_quantile(e: np.ndarray, n_eff: np.ndarray, level: float, opts: dict[str, str]) -> Any:
    """(n,) training-conditional conformal quantile from ``n_eff`` independent scores.

    The k-th smallest of m iid scores covers ``level`` with probability
    ``P(Binom(m, level) <= k - 1)``; take the smallest k with that >= 1 - gamma / n
    (the worst of n sensors), read at level k / m from all (overlapping) scores;
    infinite (backed up) when even k = m is not enough.
    """
    n = e.shape[1]
    gamma = float(opts["pac"]) / n
    out = np.full(n, np.inf)
    for j in range(n):
        m = int(n_eff[j])
        k = int(binom.ppf(1 - gamma, m, level)) + 1
        if k <= m:
            out[j] = np.quantile(e[:, j], k / m, method="higher")
    return out


def student_bound(e: np.ndarray, n_eff: np.ndarray, level: float) -> Any:
    """(n,) Gaussian prediction bound on the next window error from ``n_eff`` scores.

    ``rms * t_{level}(n_eff - 1) * sqrt(1 + 1 / n_eff)``: thin evidence widens it.
    """
    rms = np.sqrt(np.mean(e**2, axis=0))
    nu = np.maximum(n_eff - 1, 1e-9)
    t = np.where(n_eff >= 2, student.ppf(0.5 + level / 2, nu), np.inf)
    return rms * t * np.sqrt(1 + 1 / n_eff)


def small_sample_inflation(n_eff: np.ndarray, level: float) -> Any:
    """(n,) factor >= 1 by which a quantile from ``n_eff`` independent scores is widened.

    For Gaussian errors of unknown scale the ``level`` prediction bound from m
    samples is ``t_{m-1} * sqrt(1 + 1/m)`` standard deviations against ``z`` for a
    known scale; the ratio goes to 1 with plenty of evidence and is infinite below 2.
    """
    p = 0.5 + level / 2
    t = student.ppf(p, np.maximum(n_eff - 1, 1e-9))
    return np.where(n_eff >= 2, t * np.sqrt(1 + 1 / n_eff) / norm.ppf(p), np.inf)


def ratio_quantile(res: list[np.ndarray], e: np.ndarray, level: float, how: str) -> Any:
    """(n,) ``level`` quantile of the errors times the next horizon's scale change.

    Drift the history shows: the ratios of consecutive horizons' RMS errors, pooled
    over every sensor and pair of horizons (a sensor alone has one or two), form
    the distribution of how a horizon's error scale changes; a sensor's next error
    is one of its scored errors times a ratio drawn from it. ``how``: "all"
    (errors of every horizon) or "last" (the latest horizon's errors).
    """
    rms = np.array([np.sqrt(np.mean(r**2, axis=0)) for r in res])
    ok = (rms[1:] > 0) & (rms[:-1] > 0)
    lr = np.log(rms[1:][ok] / rms[:-1][ok])
    if lr.size == 0:
        return np.zeros(e.shape[1])
    ratios = np.exp(np.quantile(lr, (np.arange(64) + 0.5) / 64))
    base = np.abs(res[-1]) if how == "last" else e
    out = np.empty(e.shape[1])
    for j in range(e.shape[1]):
        prod = np.outer(base[:, j], ratios).ravel()
        rank = min(math.ceil((prod.size + 1) * level), prod.size)
        out[j] = np.partition(prod, rank - 1)[rank - 1]
    return out


def cases(halves: list[str]) -> Any:
    for case in B.CASES:
        if case.half not in halves:
            continue
        yield case, *B.case_folds(case)


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
            conformal_quantile(np.abs(window_residuals(x[o : o + s], m, sub, spec)), spec.level)
            for o, m in zip(ors, forward_models(x, ors, tuple(names)), strict=True)
        ]
        model = GaussianModel().fit(x, tuple(names))
        ahead = window_residuals(x_all[t : t + s], model, sub, spec)
        realised = conformal_quantile(np.abs(ahead), spec.level)
        for j in (j for j in range(n) if j not in sub):
            past = ", ".join(f"{p[j]:.2f}" for p in per)
            print(f"{case.name} fold {t} {names[j]}: horizons {past} -> next {realised[j]:.2f}")


def main(argv: list[str]) -> None:
    out_json = None
    if "--json" in argv:  # per-case rows at full precision (bench.honesty_frontier reads them)
        i = argv.index("--json")
        out_json, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2 :]
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
        label = opts.get("exposure")  # the crash contract at that exposure, else the range
        crash = B.exposures(case.window, (label,)) if label else None
        m = crash[label] if crash and label else None
        with tempfile.TemporaryDirectory() as tmp:
            folds = [B.run_fold(case, data, int(t), h, s, "ours", Path(tmp), m, crash)
                     for t in origins]  # fmt: skip
        r = B.score_crash(folds, names, label) if label else B.score(folds, names)
        rows.append((case.half, r | {"case": case.name}))
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
    if out_json is not None:
        cases_out = [{"case": r["case"], "half": h_} | r for h_, r in rows]
        out_json.write_text(json.dumps({"variant": variant, "cases": cases_out}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
