"""Backup-set selection: the smallest ``O`` with ``var_{i|O} <= target_i`` for every i.

Methods (DESIGN.md section 2):

* ``paper``: the seed's greedy, literally: add the sensor that most reduces
  ``max_i var_{i|O}``, each candidate scored with a fresh matrix solve. Baseline.
* ``greedy``: ours. Sensors that no other sensors can bring within target are in
  every feasible set and are added first, as one block. Then it keeps the
  conditional covariance ``C``, adds the sensor that minimises the total excess
  variance ``sum_i max(0, var_{i|O+j} - t_i)`` and downdates
  ``C <- C - C[:, j] C[j, :] / C[j, j]`` (O(n^2) per step). Finally it drops
  sensors the set stays feasible without, and tries 2-for-1 exchanges.
* ``exact``: branch and bound over set sizes, for small ``n``.

``cov`` is (n, n) symmetric positive semi-definite, ``targets`` a scalar or (n,).
A variance is feasible when ``var <= target (1 + 1e-9) + 1e-12 s``, with ``s`` the mean
variance (the scale of ``cov``). Sensors whose conditional variance is below that
absolute tolerance are never chosen: they are already known to within rounding.
"""

from __future__ import annotations

import itertools
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg

from engine.errors import ParameterError

Method = Literal["paper", "greedy", "exact"]
METHODS: tuple[str, ...] = ("paper", "greedy", "exact")
REL_TOL = 1e-9
ABS_TOL = 1e-12  # times the mean variance
BRUTE_FORCE_MAX_N = 16
_BLOCK_BYTES = 1 << 20  # column block of the candidate scoring: stays in cache
_PARALLEL_MIN = 1 << 18  # stored entries above which scoring uses two threads
_EXCHANGE_WORK = 5e8  # flops of one exchange round above which it is skipped
_EXCHANGE_ROUNDS = 10
_EXCHANGE_PAIRS = 32  # pairs checked in full per round (~0.2 ms each)


@dataclass(frozen=True, eq=False)
class Selection:
    """A chosen backup set and what it achieves.

    Attributes
    ----------
    backup : indices of the backed-up sensors, in the order they were added.
    conditional_variance : (n,) ``var_{i|O}``, 0 for backed-up sensors.
    targets : (n,) per-sensor variance targets.
    method : ``paper``, ``greedy``, ``exact`` or ``brute_force``.
    feasible : every conditional variance is within its target (with tolerance).
    """

    backup: tuple[int, ...]
    conditional_variance: np.ndarray
    targets: np.ndarray
    method: str
    feasible: bool

    @property
    def cost(self) -> int:
        """Number of backed-up sensors ``|O|``."""
        return len(self.backup)


def select_backups(
    cov: np.ndarray,
    targets: np.ndarray | float,
    method: Method = "greedy",
    *,
    exact_max_n: int = 24,
) -> Selection:
    """Choose the sensors to back up.

    Parameters
    ----------
    cov : (n, n) covariance of the sensors.
    targets : scalar or (n,) largest acceptable conditional variance per sensor (>= 0).
    method : ``paper``, ``greedy`` or ``exact``.
    exact_max_n : largest ``n`` accepted by ``exact``.

    Returns
    -------
    ``Selection``; ``feasible`` is True for every method on valid input.
    """
    c, t = _check_inputs(cov, targets)
    if method == "paper":
        backup, var = _select_paper(c, t)
    elif method == "greedy":
        backup, var = _select_greedy(c, t)
    elif method == "exact":
        if c.shape[0] > exact_max_n:
            raise ParameterError(
                f"exact selection is limited to n <= {exact_max_n} sensors, got n={c.shape[0]}; "
                "use method='greedy'"
            )
        backup, var = _select_exact(c, t)
    else:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    return _make_selection(c, t, backup, var, method)


def brute_force_min_backup(cov: np.ndarray, targets: np.ndarray | float) -> Selection:
    """Reference: a minimum-cardinality feasible set by enumeration (n <= 16).

    Sizes are tried in increasing order and sets of one size in lexicographic
    order, so the answer is the lexicographically smallest optimum. Each set is
    scored with a direct solve, independent of the incremental code.
    """
    c, t = _check_inputs(cov, targets)
    n = c.shape[0]
    if n > BRUTE_FORCE_MAX_N:
        raise ParameterError(f"brute force is limited to n <= {BRUTE_FORCE_MAX_N}, got n={n}")
    tol = _tolerance(c, t)
    for size in range(n + 1):
        for subset in itertools.combinations(range(n), size):
            var = _direct_conditional_variance(c, list(subset))
            if np.all(var <= tol):
                return _make_selection(c, t, subset, var, "brute_force")
    raise AssertionError("unreachable: backing up every sensor is always feasible")


def _check_inputs(cov: np.ndarray, targets: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(cov, dtype=float)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] < 1:
        raise ParameterError(f"cov must be a non-empty square (n, n) matrix, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ParameterError("cov must be finite, got NaN or infinite entries")
    scale = float(np.max(np.abs(c))) if c.size else 0.0
    asym = float(np.max(np.abs(c - c.T)))
    if asym > 1e-8 * max(scale, 1e-300):
        raise ParameterError(f"cov must be symmetric, got max |cov - cov.T| = {asym:.3g}")
    if np.any(np.diag(c) < 0):
        raise ParameterError(f"cov must have a non-negative diagonal, got {np.diag(c).min()!r}")
    t = np.asarray(targets, dtype=float)
    if t.ndim == 0:
        t = np.full(c.shape[0], float(t))
    if t.shape != (c.shape[0],):
        raise ParameterError(f"targets must be a scalar or shape ({c.shape[0]},), got {t.shape}")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ParameterError(f"targets must be finite and >= 0, got {targets!r}")
    return (c + c.T) / 2.0, t


def _abs_tol(c: np.ndarray) -> float:
    return ABS_TOL * max(float(np.mean(np.diag(c))), 1e-300)


def _tolerance(c: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(n,) largest variance counted as feasible."""
    return t * (1.0 + REL_TOL) + _abs_tol(c)


def _make_selection(
    c: np.ndarray, t: np.ndarray, backup: tuple[int, ...], var: np.ndarray, method: str
) -> Selection:
    var = np.maximum(np.asarray(var, dtype=float), 0.0)
    var[list(backup)] = 0.0
    feasible = bool(np.all(var <= _tolerance(c, t)))
    return Selection(tuple(int(j) for j in backup), var, t.copy(), method, feasible)


def _direct_conditional_variance(c: np.ndarray, subset: list[int]) -> np.ndarray:
    """``var_{i|O}`` (n,) by one solve with ``Sigma_OO`` (least squares if singular)."""
    var = np.diag(c).copy()
    if subset:
        block, cross = c[np.ix_(subset, subset)], c[subset, :]
        try:
            sol = np.linalg.solve(block, cross)
        except np.linalg.LinAlgError:
            sol = np.linalg.lstsq(block, cross, rcond=None)[0]
        var -= np.einsum("ij,ij->j", cross, sol)
        var[subset] = 0.0
    return np.maximum(var, 0.0)


def _clearly_above(var: np.ndarray, tol: np.ndarray, ref: np.ndarray, atol: float) -> np.ndarray:
    """``var > tol`` by a margin larger than any rounding of ``var`` (scale ``ref``)."""
    return var > tol * (1 + 1e-6) + 1e-7 * ref + 1e3 * atol


def _alone_variance(cond: np.ndarray, live: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Cholesky factor of ``cond[live, live]`` and ``var_{i | live without i}`` for i in live.

    ``None`` when the block is not numerically positive definite (undecidable).
    """
    try:
        factor = scipy.linalg.cholesky(cond[np.ix_(live, live)], lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    inv_factor, info = scipy.linalg.lapack.dtrtri(factor, lower=1)
    if info != 0:
        return None
    return factor, 1.0 / np.einsum("ij,ij->j", inv_factor, inv_factor)


# ----------------------------------------------------------------------------- paper
def _select_paper(c: np.ndarray, t: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """The seed's greedy: minimise ``max_i var_{i|O+j}``, one fresh solve per candidate."""
    n = c.shape[0]
    tol = _tolerance(c, t)
    chosen: list[int] = []
    var = np.diag(c).copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
        while not np.all(var <= tol):
            best_j, best_score, best_var = -1, np.inf, var
            for j in range(n):
                if j in chosen:
                    continue
                cand = _paper_candidate_variance(c, [*chosen, j])
                if cand is not None and cand.max() < best_score:
                    best_j, best_score, best_var = j, float(cand.max()), cand
            if best_j < 0:  # every candidate singular: cannot happen for PSD input
                break
            chosen.append(best_j)
            var = best_var
    return tuple(chosen), var


def _paper_candidate_variance(c: np.ndarray, subset: list[int]) -> np.ndarray | None:
    try:
        sol = scipy.linalg.solve(c[np.ix_(subset, subset)], c[subset, :], assume_a="pos")
    except np.linalg.LinAlgError:
        return None
    var = np.diag(c) - np.einsum("ij,ij->j", c[subset, :], sol)
    var[subset] = 0.0
    return np.maximum(var, 0.0)


# ---------------------------------------------------------------------------- greedy
def _select_greedy(c: np.ndarray, t: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """Excess-variance greedy with rank-one downdates, then pruning and exchanges."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        state = _Greedy(c, t, pool if c.shape[0] ** 2 >= _PARALLEL_MIN else None)
        while np.any(state.var > state.tol):
            state.add(state.best_candidate())
    return _improve(c, state.tol, state.atol, state.chosen, state.var)


class _Greedy:
    """Incremental conditional covariance for the excess-variance greedy.

    The pivoted Cholesky factor ``L`` (``C = Sigma - L L^T``) and the conditional
    variances are kept in float64: they decide feasibility. Candidate scoring only
    ranks, so it reads a float32 copy of ``C[rows, cols] / s`` (``s`` the mean
    variance), with ``rows`` the sensors still above target (a sensor within target
    stays there, so its row never scores again) and ``cols`` those not chosen.
    The copy is downdated lazily, fused with the scoring pass over cache-sized
    column blocks (one read and write per step, O(|rows| |cols|)), and rebuilt
    from ``L`` in float64 whenever a quarter of it has gone stale, which also
    bounds float32 drift. Near-ties are re-ranked in float64.
    """

    def __init__(self, c: np.ndarray, t: np.ndarray, pool: ThreadPoolExecutor | None) -> None:
        n = c.shape[0]
        self.pool = pool
        self.cov, self.tol, self.atol = c, _tolerance(c, t), _abs_tol(c)
        self.scale = max(float(np.mean(np.diag(c))), 1e-300)
        forced = self._indispensable()
        # Sensors nothing else can cover are in every feasible set: add them as one
        # block (BLAS-3) instead of one rank-one step each. lines = L^T, one row each.
        lines = np.zeros((0, n))
        if forced:
            factor = scipy.linalg.cholesky(
                c[np.ix_(forced, forced)], lower=True, check_finite=False
            )
            lines = scipy.linalg.solve_triangular(factor, c[forced, :], lower=True)
        self.lines = np.vstack([lines, np.zeros((max(8, len(forced)), n))])
        self.chosen: list[int] = list(forced)
        self.var = np.maximum(np.diag(c) - np.einsum("ij,ij->j", lines, lines), 0.0)
        self.var[forced] = 0.0
        self.rows = np.flatnonzero(self.var > self.tol)
        self.cols = np.setdiff1d(np.arange(n), forced)
        self.pending: np.ndarray | None = None
        self._rebuild()

    def _indispensable(self) -> list[int]:
        """Sensors whose variance given all the others is still above target."""
        diag = np.diag(self.cov)
        live = [int(i) for i in np.flatnonzero(diag > self.atol)]
        solved = _alone_variance(self.cov, live) if live else None
        if solved is None:
            return []
        above = _clearly_above(solved[1], self.tol[live], diag[live], self.atol)
        return [live[p] for p in np.flatnonzero(above)]

    def best_candidate(self) -> int:
        """Candidate whose addition removes the most excess variance.

        The excess removed by ``j`` is ``sum_i min(excess_i, C_ij^2 / C_jj)``; ties go
        to the largest drop of total variance ``sum_i C_ij^2 / C_jj``, then lowest index.
        """
        self._compact()
        cols = self.cols
        usable = self.var[cols] > self.atol
        pivots = np.where(usable, self.var[cols], self.scale) / self.scale
        excess = np.maximum(self.var[self.rows] - self.tol[self.rows], 0.0) / self.scale
        score = self._score(pivots.astype(np.float32), excess.astype(np.float32)[:, None])
        score[~usable] = -np.inf
        best = float(score.max())
        near = cols[score >= best - 1e-5 * abs(best)]  # float32 only ranks coarsely
        if near.size == 1:
            return int(near[0])
        return self._break_tie(near)

    def _break_tie(self, near: np.ndarray) -> int:
        """Re-score near-ties in float64; then largest drop of total variance, lowest index."""
        square = self._columns(near) ** 2 / self.var[near]
        excess = np.maximum(self.var - self.tol, 0.0)[:, None]
        gain = np.minimum(square, excess).sum(axis=0)
        tied = gain >= gain.max() * (1 - 1e-9) - self.atol
        drop = square[:, tied].sum(axis=0)
        return int(near[tied][np.argmax(drop)])  # argmax: first of equal drops

    def _score(self, pivots: np.ndarray, excess: np.ndarray) -> np.ndarray:
        """Apply the pending downdate and score every stored column (float32).

        Large blocks are split in two column halves scored on two threads (NumPy
        releases the GIL inside ufuncs).
        """
        ncols = self.cols.size
        score = np.empty(ncols, dtype=np.float32)
        args = (pivots, excess, score)
        if self.rows.size * ncols < _PARALLEL_MIN or self.pool is None:
            self._score_range(0, ncols, *args)
        else:
            half = ncols // 2
            jobs = [
                self.pool.submit(self._score_range, lo, hi, *args)
                for lo, hi in ((0, half), (half, ncols))
            ]
            for job in jobs:
                job.result()
        self.pending = None
        return score

    def _score_range(
        self, lo: int, hi: int, pivots: np.ndarray, excess: np.ndarray, score: np.ndarray
    ) -> None:
        """Columns ``lo:hi``, in cache-sized blocks: downdate, then excess removed."""
        width = max(16, _BLOCK_BYTES // (4 * max(self.rows.size, 1)))
        buf = np.empty((self.rows.size, width), dtype=np.float32, order="F")
        if self.pending is not None:
            line = (self.pending / np.sqrt(self.scale)).astype(np.float32)
            down_rows, down_cols = line[self.rows][:, None], line[self.cols]
        for start in range(lo, hi, width):
            stop = min(start + width, hi)
            block, out = self.block[:, start:stop], buf[:, : stop - start]
            if self.pending is not None:
                np.multiply(down_rows, down_cols[start:stop], out=out)
                block -= out
            np.square(block, out=out)
            out /= pivots[start:stop]
            np.minimum(out, excess, out=out)
            out.sum(axis=0, out=score[start:stop])

    def add(self, j: int) -> None:
        """Observe sensor ``j``: extend the factor (float64); the block downdate waits."""
        m = len(self.chosen)
        row = self.cov[j, :] - _gram(self.lines[:m, [j]], self.lines[:m])[0]
        if m == self.lines.shape[0]:
            self.lines = np.vstack([self.lines, np.zeros_like(self.lines)])
        line = row / np.sqrt(row[j])
        line[self.chosen] = 0.0
        self.lines[m] = line
        self.chosen.append(j)
        self.var = np.maximum(self.var - line**2, 0.0)
        self.var[self.chosen] = 0.0
        self.pending = line

    def _columns(self, idx: np.ndarray) -> np.ndarray:
        """Columns ``C[:, idx]`` (n, len(idx)) of the current conditional covariance."""
        m = len(self.chosen)
        return self.cov[:, idx] - _gram(self.lines[:m], self.lines[:m, idx])

    def _compact(self) -> None:
        """Drop rows within target and chosen columns once a quarter is stale."""
        keep_rows = self.var[self.rows] > self.tol[self.rows]
        keep_cols = ~np.isin(self.cols, self.chosen)
        if keep_rows.sum() > 0.75 * keep_rows.size and keep_cols.sum() > 0.75 * keep_cols.size:
            return
        self.rows, self.cols = self.rows[keep_rows], self.cols[keep_cols]
        self._rebuild()

    def _rebuild(self) -> None:
        """Recompute the float32 block ``C[rows, cols] / s`` from ``L`` in float64."""
        m = len(self.chosen)
        exact = self.cov[np.ix_(self.rows, self.cols)]
        exact -= self.lines[:m, self.rows].T @ self.lines[:m, self.cols]
        self.block = np.asfortranarray(exact / self.scale, dtype=np.float32)
        self.pending = None


def _gram(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a.T @ b`` (p, q) for a (k, p), b (k, q), summed over chunks of 64 rows.

    Each chunk stays below OpenBLAS's threading threshold: for these thin
    products, waking its threads costs more than the product (10x on a busy
    2-core machine).
    """
    out = np.zeros((a.shape[1], b.shape[1]))
    for start in range(0, a.shape[0], 64):
        out += a[start : start + 64].T @ b[start : start + 64]
    return out


def _improve(
    c: np.ndarray, tol: np.ndarray, atol: float, chosen: list[int], var: np.ndarray
) -> tuple[tuple[int, ...], np.ndarray]:
    """Alternate pruning and 2-for-1 exchanges until neither shrinks the set.

    Exchanges run while a round is cheap (about ``(n - m)^2 m + m^3`` flops within
    ``_EXCHANGE_WORK``) and for at most ``_EXCHANGE_ROUNDS`` rounds: on large
    instances one sensor less is worth little and a round costs a refactorisation.
    """
    n = c.shape[0]
    for round_ in range(_EXCHANGE_ROUNDS + 1):
        terms = _regression_terms(c, chosen) if chosen else None
        if terms is None:  # nothing chosen, or Sigma_OO numerically singular: keep it
            break
        chosen, var, terms = _prune(chosen, var, tol, terms)
        m = len(chosen)
        if round_ == _EXCHANGE_ROUNDS or (n - m) ** 2 * m + m**3 > _EXCHANGE_WORK:
            break
        swapped = _exchange(c, tol, atol, chosen, var, terms)
        if swapped is None:
            break
        swapped_var = _direct_conditional_variance(c, swapped)
        if not np.all(swapped_var <= tol):  # rounding disagreed: keep the verified set
            break
        chosen, var = swapped, swapped_var
    var[chosen] = 0.0
    return tuple(chosen), var


def _regression_terms(c: np.ndarray, chosen: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """``B = Sigma_:O P`` (n, m) and ``P = Sigma_OO^{-1}`` (m, m), or None if singular."""
    try:
        factor = scipy.linalg.cholesky(c[np.ix_(chosen, chosen)], lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    inv_factor, info = scipy.linalg.lapack.dtrtri(factor, lower=1)
    if info != 0:
        return None
    prec = inv_factor.T @ inv_factor
    return c[:, chosen] @ prec, prec


def _prune(
    chosen: list[int], var: np.ndarray, tol: np.ndarray, terms: tuple[np.ndarray, np.ndarray]
) -> tuple[list[int], np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Drop chosen sensors (latest first) whose removal keeps every target met.

    With ``P = Sigma_OO^{-1}`` and ``B = Sigma_:O P``, removing ``k`` raises each
    conditional variance by ``B[:, k]^2 / P_kk``; ``P`` and ``B`` are then downdated
    (block inverse), so the pass costs O(n m^2).
    """
    coef, prec = terms
    keep = list(range(len(chosen)))
    for pos in reversed(range(len(chosen))):
        k = keep.index(pos)
        raised = var + coef[:, k] ** 2 / prec[k, k]
        raised[chosen[pos]] = 1.0 / prec[k, k]
        if not np.all(raised <= tol):
            continue
        rest = [q for q in range(len(keep)) if q != k]
        coef = coef[:, rest] - np.outer(coef[:, k], prec[k, rest]) / prec[k, k]
        prec = prec[np.ix_(rest, rest)] - np.outer(prec[rest, k], prec[k, rest]) / prec[k, k]
        keep.pop(k)
        var = raised
    return [chosen[p] for p in keep], var, (coef, prec)


def _exchange(
    c: np.ndarray,
    tol: np.ndarray,
    atol: float,
    chosen: list[int],
    var: np.ndarray,
    terms: tuple[np.ndarray, np.ndarray],
) -> list[int] | None:
    """One 2-for-1 exchange: drop two chosen sensors, add one other, stay feasible.

    Removing ``a`` alone leaves violators; the sensors that could repair them,
    ``F_a``, come from the conditional covariance given ``O - a``. A sensor that
    repairs ``O - a - b`` also repairs ``O - a`` and ``O - b``, so only pairs that
    share a repairer are checked in full (latest additions first, at most
    ``_EXCHANGE_PAIRS``). Returns the new set, or None.
    """
    coef, prec = terms
    n, m = c.shape[0], len(chosen)
    free = np.setdiff1d(np.arange(n), chosen)
    cond = np.zeros((n, n))  # C given O: zero on chosen rows and columns
    picked = np.asarray(chosen)
    cond[np.ix_(free, free)] = c[np.ix_(free, free)] - coef[free] @ c[np.ix_(picked, free)]
    repairs = np.zeros((m, n))
    for p in range(m):
        repairs[p, _repairers(cond, var, tol, atol, coef[:, [p]], prec[[p]][:, [p]])] = 1.0
    shared = np.triu(repairs @ repairs.T, 1)
    for p, q in np.argwhere(shared > 0)[::-1][:_EXCHANGE_PAIRS]:
        pair = [int(p), int(q)]
        common = np.flatnonzero(repairs[p] * repairs[q])
        found = _repairers(cond, var, tol, atol, coef[:, pair], prec[np.ix_(pair, pair)], common)
        if found.size:
            return [x for k, x in enumerate(chosen) if k not in pair] + [int(found[0])]
    return None


def _repairers(
    cond: np.ndarray,
    var: np.ndarray,
    tol: np.ndarray,
    atol: float,
    coef: np.ndarray,
    prec: np.ndarray,
    candidates: np.ndarray | None = None,
) -> np.ndarray:
    """Sensors ``j`` that make ``O - R + j`` feasible, for removed positions ``R``.

    Removing ``R`` (columns ``coef = B[:, R]``, ``prec = P[R, R]``) gives the
    conditional covariance ``C + B_R P_RR^{-1} B_R^T``.
    """
    if prec.shape == (1, 1):
        lift = coef / prec[0, 0]
    else:  # 2 x 2: closed-form inverse, far cheaper than a LAPACK call at this size
        (a, b), (_, d) = prec
        lift = coef @ (np.array([[d, -b], [-b, a]]) / (a * d - b * b))
    var_r = var + (lift * coef).sum(axis=1)
    bad = np.flatnonzero(var_r > tol)
    if candidates is None:
        candidates = np.flatnonzero(var_r > atol)
    cand = candidates[var_r[candidates] > atol]
    rows = cond[bad][:, cand] + lift[bad] @ coef[cand].T
    after = var_r[bad][:, None] - rows**2 / var_r[cand]
    after[bad[:, None] == cand[None, :]] = 0.0
    ok = np.all(after <= tol[bad][:, None], axis=0)
    return cand[ok]


# ----------------------------------------------------------------------------- exact
def _select_exact(c: np.ndarray, t: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """Branch and bound: the smallest size ``k`` for which a feasible set exists.

    The greedy set bounds the answer from above. Sensors that even all the other
    sensors together cannot bring within target are in every feasible set, so they
    are fixed first. For each size below the greedy's, a depth-first search over
    sets in index order prunes a branch when (a) a skipped sensor stays infeasible
    even if every remaining candidate is added (conditional variance only shrinks
    as sensors are added), or (b) more candidates are individually indispensable
    than slots remain. Both tests use a safety margin, so rounding can only make
    the search prune less, never wrongly.
    """
    n = c.shape[0]
    greedy_backup, greedy_var = _select_greedy(c, t)
    search = _Search(c, t)
    forced = search.indispensable(c, [], list(range(n))) or []
    free = [i for i in range(n) if i not in set(forced)]
    base = c
    for j in forced:
        base = search.downdate(base, j)
    for size in range(len(forced), len(greedy_backup)):
        found = search.dfs(base, list(forced), free, 0, size)
        if found is not None:
            backup = tuple(sorted(found))
            return backup, _direct_conditional_variance(c, list(backup))
    return greedy_backup, greedy_var


class _Search:
    """Depth-first search state for ``_select_exact`` (tolerances and margins)."""

    def __init__(self, c: np.ndarray, t: np.ndarray) -> None:
        self.tol = _tolerance(c, t)
        self.atol = _abs_tol(c)

    def downdate(self, cond: np.ndarray, j: int) -> np.ndarray:
        """Conditional covariance after also observing ``j``."""
        if cond[j, j] <= self.atol:  # already known to rounding: carries no information
            out = cond.copy()
        else:
            out = cond - np.outer(cond[:, j], cond[j, :]) / cond[j, j]
        out[j, :] = 0.0
        out[:, j] = 0.0
        return out

    def indispensable(
        self, cond: np.ndarray, skipped: list[int], pool: list[int]
    ) -> list[int] | None:
        """Members of ``pool`` that nothing else can cover ([] if undecidable).

        ``None`` when the branch is dead: a ``skipped`` sensor stays infeasible even
        with all of ``pool`` added. ``cond`` is the current conditional covariance.
        """
        live = [i for i in pool if cond[i, i] > self.atol]
        diag = np.diag(cond)
        if not live:
            return None if skipped and np.any(diag[skipped] > self.tol[skipped]) else []
        solved = _alone_variance(cond, live)
        if solved is None:
            return []
        factor, alone = solved
        if skipped:
            proj = scipy.linalg.solve_triangular(factor, cond[np.ix_(live, skipped)], lower=True)
            rest = diag[skipped] - np.einsum("ij,ij->j", proj, proj)
            if np.any(_clearly_above(rest, self.tol[skipped], diag[skipped], self.atol)):
                return None
        above = _clearly_above(alone, self.tol[live], diag[live], self.atol)
        return [live[p] for p in np.flatnonzero(above)]

    def dfs(
        self, cond: np.ndarray, chosen: list[int], free: list[int], start: int, size: int
    ) -> list[int] | None:
        """First feasible set of at most ``size`` extending ``chosen`` with ``free[start:]``."""
        diag = np.diag(cond)
        if np.all(diag <= self.tol):
            return chosen
        slots = size - len(chosen)
        pool = free[start:]
        if slots <= 0 or len(pool) == 0:
            return None
        taken = set(chosen)
        skipped = [i for i in free[:start] if i not in taken]
        must = self.indispensable(cond, skipped, pool)
        if must is None or len(must) > slots:
            return None
        if slots <= 3:
            return self._finish(cond, chosen, pool, slots)
        # Skipping an indispensable sensor kills the branch: branch only up to the first.
        last = free.index(must[0]) if must else len(free) - 1
        for pos in range(start, min(last, len(free) - slots) + 1):
            j = free[pos]
            found = self.dfs(self.downdate(cond, j), [*chosen, j], free, pos + 1, size)
            if found is not None:
                return found
        return None

    def _finish(
        self, cond: np.ndarray, chosen: list[int], pool: list[int], slots: int
    ) -> list[int] | None:
        """Try every completion by ``min(slots, len(pool))`` pool sensors at once.

        Adding sensors never hurts, so only completions of the largest size are
        checked. Each is a batch of rank-one downdates (a zero pivot: no
        information), vectorised over all completions: (N, n, n) work.
        """
        combos = np.array(list(itertools.combinations(pool, min(slots, len(pool)))))
        batch = np.broadcast_to(cond, (len(combos), *cond.shape)).copy()
        index = np.arange(len(combos))
        for step in range(combos.shape[1]):
            j = combos[:, step]
            col = batch[index, :, j]  # (N, n)
            piv = col[index, j]
            scale = np.where(piv > self.atol, 1.0 / np.where(piv > 0, piv, 1.0), 0.0)
            batch -= (col * scale[:, None])[:, :, None] * col[:, None, :]
        var = np.diagonal(batch, axis1=1, axis2=2).copy()
        var[index[:, None], combos] = 0.0
        ok = np.flatnonzero(np.all(var <= self.tol, axis=1))
        return [*chosen, *map(int, combos[ok[0]])] if ok.size else None
