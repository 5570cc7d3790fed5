"""Would a richer linear reconstruction model pay? A study, not product code.

    python -m bench.honesty_models choose,held-out     # about 3 minutes on 2 cores

The product rebuilds a sensor from the backup sensors' readings at the same time
step (the Gaussian conditional mean). On ``bench.bench_honesty``'s cases, folds,
H, S, windows and eps, this compares out of sample (the S rows after each fold
origin) the window-aggregate error of that map with three richer linear models:

  base : same-time least squares  x_j(t) ~ 1 + x_O(t)   (= the product's map;
         checked against the exported config's coefficients)
  a1   : x_j(t) ~ 1 + x_O(t-1..t+1)   (two-sided lags: recovery is offline)
  a2   : x_j(t) ~ 1 + x_O(t-2..t+2)
  b    : agg_w(x_j) ~ 1 + agg_w(x_O)  (the window aggregate regressed on the backups'
         window aggregates, fitted on every sliding window of the history)
  c    : x_j(t) ~ hour-of-day dummies + x_O(t)

a1, a2, b and c are ridge-regularised on standardised regressors (penalty
lam * T * I); lam is picked per target and fold by an inner time split of the
history only (fit on its first 2/3, score on the last 1/3), then refitted on all
of H. Two backup sets per fold: the product's plan (``run_fold``, method ours)
and ``small``, ceil(0.3 n) sensors by a forward greedy on the history. A small
planner per model (the smallest prefix of the greedy order whose rebuilt sensors
all have a 95th-percentile |window error| <= eps on the inner holdout) gives
each model's savings. JSON in
``bench/results/honesty_models.json``.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_honesty import CASES, case_folds, run_fold, tumbling

RESULTS = Path(__file__).resolve().parent / "results" / "honesty_models.json"

LAMS = [0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]
MODELS = ["base", "a1", "a2", "b", "c"]


def per_reading_eps(case):
    return case.eps / case.window if case.aggregate == "sum" else case.eps


def ridge_fit(X, Y, lam):
    """Ridge on standardised X with free intercept. Returns (coef (p,k), intercept (k,))."""
    mu = X.mean(0)
    sd = X.std(0)
    keep = sd > 1e-12 * (1 + np.abs(mu))
    Z = (X[:, keep] - mu[keep]) / sd[keep]
    ym = Y.mean(0)
    T = Z.shape[0]
    A = Z.T @ Z + lam * T * np.eye(Z.shape[1])
    if lam == 0.0:
        B = np.linalg.lstsq(Z, Y - ym, rcond=None)[0]
    else:
        B = np.linalg.solve(A, Z.T @ (Y - ym))
    coef = np.zeros((X.shape[1], Y.shape[1]))
    coef[keep] = B / sd[keep][:, None]
    icpt = ym - mu @ coef
    return coef, icpt


def lag_features(values, obs, rows, L):
    """Backup columns at t-L..t+L for absolute rows ``rows`` (edge-clipped)."""
    N = values.shape[0]
    cols = [values[np.clip(rows + d, 0, N - 1)][:, obs] for d in range(-L, L + 1)]
    return np.hstack(cols)


def hour_dummies(times, rows):
    hrs = (times[rows].astype("datetime64[h]") - times[rows].astype("datetime64[D]")).astype(int)
    D = np.zeros((len(rows), 24))
    D[np.arange(len(rows)), hrs] = 1.0
    return D[:, 1:]  # hour 0 absorbed by the intercept


def sliding(x, w, agg):
    from numpy.lib.stride_tricks import sliding_window_view

    v = sliding_window_view(x, w, axis=0)  # (T-w+1, n, w)
    return {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}[agg](v, axis=-1)


def design(model, values, times, obs, rows):
    if model in ("base", "c") or model == "b":
        X = values[rows][:, obs]
    elif model == "a1":
        X = lag_features(values, obs, rows, 1)
    elif model == "a2":
        X = lag_features(values, obs, rows, 2)
    if model == "c":
        X = np.hstack([X, hour_dummies(times, rows)])
    return X


def fit_predict(model, case, values, times, obs, tgt, hist, fut, lam):
    """Return predicted tumbling-window aggregates (W, k) of targets on ``fut`` rows."""
    w, agg = case.window, case.aggregate
    if model == "b":
        Xa = sliding(values[hist][:, obs], w, agg)
        Ya = sliding(values[hist][:, tgt], w, agg)
        coef, ic = ridge_fit(Xa, Ya, lam)
        return tumbling(values[fut][:, obs], w, agg) @ coef + ic
    X = design(model, values, times, obs, hist)
    coef, ic = ridge_fit(X, values[hist][:, tgt], lam)
    pred = design(model, values, times, obs, fut) @ coef + ic
    return tumbling(pred, w, agg)


def choose_lams(model, case, values, times, obs, tgt, hist):
    if model == "base":
        return np.zeros(len(tgt))
    cut = hist[0] + (2 * len(hist)) // 3
    inner_fit = np.arange(hist[0], cut)
    inner_val = np.arange(cut, hist[-1] + 1)
    truth = tumbling(values[inner_val][:, tgt], case.window, case.aggregate)
    mse = []
    for lam in LAMS:
        p = fit_predict(model, case, values, times, obs, tgt, inner_fit, inner_val, lam)
        mse.append(((p - truth) ** 2).mean(0))
    return np.array(LAMS)[np.argmin(np.array(mse), axis=0)]


def run_model(model, case, values, times, obs, tgt, hist, fut):
    lams = choose_lams(model, case, values, times, obs, tgt, hist)
    pred = np.zeros((len(fut) // case.window, len(tgt)))
    hist_pred = np.zeros((len(hist) // case.window, len(tgt)))
    for lam in np.unique(lams):
        sel = np.where(lams == lam)[0]
        tsel = [tgt[i] for i in sel]
        pred[:, sel] = fit_predict(model, case, values, times, obs, tsel, hist, fut, lam)
        hist_pred[:, sel] = fit_predict(model, case, values, times, obs, tsel, hist, hist, lam)
    err = pred - tumbling(values[fut][:, tgt], case.window, case.aggregate)
    herr = hist_pred - tumbling(values[hist][:, tgt], case.window, case.aggregate)
    return err, herr, lams


def greedy_small(values_hist, eps_read, k):
    z = values_hist / eps_read
    C = np.cov(z, rowvar=False) + 1e-9 * np.eye(z.shape[1]) * np.mean(
        np.diag(np.cov(z, rowvar=False))
    )
    n = C.shape[0]
    chosen = []
    for _ in range(k):
        best, bv = None, np.inf
        for j in range(n):
            if j in chosen:
                continue
            S = [*chosen, j]
            rest = [i for i in range(n) if i not in S]
            if not rest:
                return S
            Coo = C[np.ix_(S, S)]
            Cro = C[np.ix_(rest, S)]
            v = np.diag(C)[rest] - np.einsum("ij,ji->i", Cro, np.linalg.solve(Coo, Cro.T))
            if v.sum() < bv:
                best, bv = j, v.sum()
        chosen.append(best)
    return chosen


def run_case(case):
    data, names, h, s, origins = case_folds(case)
    values, times = np.asarray(data.values, float), data.times
    n = len(names)
    out = {
        "case": case.name,
        "half": case.half,
        "n": n,
        "agg": case.aggregate,
        "window": case.window,
        "eps": case.eps,
        "H": h,
        "S": s,
        "sets": {},
    }
    for setname in ("plan", "small"):
        res = {m: {"err": [], "herr": [], "lams": []} for m in MODELS}
        backups, checks = [], []
        for t in origins:
            hist = np.arange(t - h, t)
            fut = np.arange(t, t + s)
            if setname == "plan":
                with tempfile.TemporaryDirectory() as tmp:
                    f = run_fold(case, data, int(t), h, s, "ours", Path(tmp))
                cfg = f["config"]
                obs = [names.index(b) for b in cfg["backup_sensors"]]
            else:
                k = max(1, math.ceil(0.3 * n))
                obs = greedy_small(values[hist], per_reading_eps(case), k)
                cfg = None
            tgt = [i for i in range(n) if i not in obs]
            backups.append(len(obs))
            if not tgt:
                continue
            for m in MODELS:
                err, herr, lams = run_model(m, case, values, times, obs, tgt, hist, fut)
                res[m]["err"].append(err.tolist())
                res[m]["herr"].append(herr.tolist())
                res[m]["lams"].append(lams.tolist())
            if cfg is not None:  # check our baseline against the product's exported map
                col = {nm: i for i, nm in enumerate(names)}
                diffs = []
                for j in tgt:
                    e = cfg["reconstruction"][names[j]]
                    v = np.full(s, float(e["intercept"]))
                    for b, c in e["coefficients"].items():
                        v = v + float(c) * values[fut, col[b]]
                    diffs.append(v)
                prod = tumbling(np.array(diffs).T, case.window, case.aggregate) - tumbling(
                    values[fut][:, tgt], case.window, case.aggregate
                )
                checks.append(float(np.max(np.abs(prod - np.array(res["base"]["err"][-1])))))
        out["sets"][setname] = {
            "backups": backups,
            "base_vs_product_maxdiff": checks,
            "models": res,
        }
    out["planner"] = mini_planner(case, values, times, origins, h, s, n)
    return out


def mini_planner(case, values, times, origins, h, s, n):
    """Per model: smallest k (in a fixed greedy order on the history) such that every
    rebuilt sensor's P95 |window error| on the inner holdout of H (fit first 2/3, score last
    1/3, same lam rule) is <= eps; then that set is refitted on all H and scored on S."""
    eps_r = per_reading_eps(case)
    res = {m: {"k": [], "misses": 0, "pairs": 0, "sq": 0.0} for m in MODELS}
    for t in origins:
        hist = np.arange(t - h, t)
        fut = np.arange(t, t + s)
        order = greedy_small(values[hist], eps_r, n)
        cut = hist[0] + (2 * len(hist)) // 3
        fit_rows, val_rows = np.arange(hist[0], cut), np.arange(cut, hist[-1] + 1)
        for m in MODELS:
            kk = n
            for k in range(1, n):
                obs, tgt = order[:k], [i for i in range(n) if i not in order[:k]]
                lams = choose_lams(m, case, values, times, obs, tgt, fit_rows)
                ok = True
                truth = tumbling(values[val_rows][:, tgt], case.window, case.aggregate)
                for lam in np.unique(lams):
                    sel = np.where(lams == lam)[0]
                    p = fit_predict(
                        m, case, values, times, obs, [tgt[i] for i in sel], fit_rows, val_rows, lam
                    )
                    if np.any(np.quantile(np.abs(p - truth[:, sel]), 0.95, axis=0) > case.eps):
                        ok = False
                        break
                if ok:
                    kk = k
                    break
            res[m]["k"].append(kk)
            if kk < n:
                obs, tgt = order[:kk], [i for i in range(n) if i not in order[:kk]]
                err, _, _ = run_model(m, case, values, times, obs, tgt, hist, fut)
                res[m]["misses"] += int((np.abs(err) > case.eps).sum())
                res[m]["pairs"] += int(err.size)
                res[m]["sq"] += float((err**2).sum())
    return res


def summarise(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per backup set: median RMS ratio to base, mean miss fraction, (fold, sensor) pairs
    with a 95th-percentile |error| <= eps in and out of sample; the small planner's mean
    savings and pooled future miss rate per model."""
    out: dict[str, Any] = {}
    for st in ("plan", "small"):
        ratios: dict[str, list[float]] = {m: [] for m in MODELS}
        miss: dict[str, list[float]] = {m: [] for m in MODELS}
        p95h, p95s, tot = dict.fromkeys(MODELS, 0), dict.fromkeys(MODELS, 0), 0
        for r in rs:
            d, eps = r["sets"][st], r["eps"]
            if not d["models"]["base"]["err"]:
                continue  # every sensor backed up
            base_rms = 1.0
            for m in MODELS:
                e = np.concatenate([np.array(x).ravel() for x in d["models"][m]["err"]]) / eps
                rms = float(np.sqrt(np.mean(e**2)))
                base_rms = rms if m == "base" else base_rms
                ratios[m].append(rms / base_rms)
                miss[m].append(float(np.mean(np.abs(e) > 1)))
                for fe, fh in zip(d["models"][m]["err"], d["models"][m]["herr"], strict=True):
                    fe, fh = np.abs(np.array(fe)), np.abs(np.array(fh))
                    p95h[m] += int((np.quantile(fh, 0.95, axis=0) <= eps).sum())
                    p95s[m] += int((np.quantile(fe, 0.95, axis=0) <= eps).sum())
                    tot += fe.shape[1] if m == "base" else 0
        out[st] = {
            "median_rms_ratio": {m: float(np.median(ratios[m])) for m in MODELS},
            "mean_miss_fraction": {m: float(np.mean(miss[m])) for m in MODELS},
            "pairs": tot,
            "p95_within_eps_history": p95h,
            "p95_within_eps_future": p95s,
        }
    planner: dict[str, Any] = {}
    for m in MODELS:
        misses = sum(r["planner"][m]["misses"] for r in rs)
        pairs = sum(r["planner"][m]["pairs"] for r in rs)
        savings = [1 - float(np.mean(r["planner"][m]["k"])) / r["n"] for r in rs]
        planner[m] = {
            "mean_savings": float(np.mean(savings)),
            "pooled_future_miss": misses / max(pairs, 1),
        }
    out["planner"] = planner
    return out


def _summary_row(case: dict[str, Any]) -> dict[str, Any]:
    return {
        "case": case["case"],
        "planner_savings": {m: 1 - float(np.mean(case["planner"][m]["k"])) / case["n"]
                            for m in MODELS},
        "base_vs_product_maxdiff": max(case["sets"]["plan"]["base_vs_product_maxdiff"] or [0.0]),
    }  # fmt: skip


def main(argv: list[str]) -> None:
    halves = argv[0].split(",") if argv else ["choose", "held-out"]
    cases = [c for c in CASES if c.half in halves]
    with ProcessPoolExecutor(2) as pool:
        results = list(pool.map(run_case, cases))
    report = {
        "study": "richer linear reconstruction models against the same-time map",
        "halves": {h: summarise([r for r in results if r["half"] == h]) for h in halves},
        "cases": [_summary_row(r) for r in results],
    }
    text = json.dumps(report, indent=2)
    print(text)
    RESULTS.write_text(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
