"""Backup-set selection: the smallest ``O`` with ``var_{i|O} <= target_i`` for every i.

Methods (DESIGN.md section 2):

* ``paper``: the seed's greedy, literally: add the sensor that most reduces
  ``max_i var_{i|O}``, each candidate scored with a fresh matrix solve. Baseline.
* ``greedy``: ours. Sensors that no other sensors can bring within target are in
  every feasible set and are added first, as one block. Then it keeps the
  conditional covariance ``C``, adds the sensor that minimises the total excess
  variance ``sum_i max(0, var_{i|O+j} - t_i)`` and downdates
  ``C <- C - C[:, j] C[j, :] / C[j, j]`` (O(n^2) per step). Finally it drops
  sensors the set stays feasible without, and tries 2-for-1 exchanges
  (``engine.selection.exchange``).
* ``exact``: branch and bound over set sizes, for small ``n`` (``engine.selection.exact``).

``cov`` is (n, n) symmetric positive semi-definite, ``targets`` a scalar or (n,).
A variance is feasible when ``var <= target (1 + 1e-9) + 1e-12 s``, with ``s`` the mean
variance (the scale of ``cov``). Sensors whose conditional variance is below that
absolute tolerance are never chosen: they are already known to within rounding.
Tolerances and direct solves shared by these modules live in ``engine.selection.core``.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg

from engine.errors import ParameterError
from engine.selection.core import (
    SCREEN_MIN_SENSORS,
    alone_variance_of,
    compute_abs_tol,
    compute_tolerance,
    is_clearly_above,
    screened_alone_variance,
    solve_conditional_variance,
)
from engine.selection.exact import select_exact
from engine.selection.exchange import improve_backups

Method = Literal["paper", "greedy", "exact"]
METHODS: tuple[str, ...] = ("greedy", "paper", "exact")  # the default first
BRUTE_FORCE_MAX_N = 16
_BLOCK_BYTES = 1 << 20  # column block of the candidate scoring: stays in cache
_PARALLEL_MIN = 1 << 18  # stored entries above which scoring uses two threads
_EXCHANGE_ROUNDS = 10  # most prune-and-exchange rounds after the greedy


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
        backup, var = select_exact(c, t, _select_greedy(c, t))
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
    tol = compute_tolerance(c, t)
    for size in range(n + 1):
        for subset in itertools.combinations(range(n), size):
            var = solve_conditional_variance(c, list(subset))
            if np.all(var <= tol):
                return _make_selection(c, t, subset, var, "brute_force")
    raise AssertionError("unreachable: backing up every sensor is always feasible")


def _check_inputs(cov: np.ndarray, targets: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(cov, dtype=float)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] < 1:
        raise ParameterError(f"cov must be a non-empty square (n, n) matrix, got shape {c.shape}")
    scale, asym = _scale_and_asymmetry(c)
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
    # Exactly symmetric (a fitted model's covariance always is): ``(c + c.T) / 2`` would
    # be the same values, in a copy (two n x n temporaries: 1.6 GB at 10,000 sensors).
    # Nothing here writes to ``c``.
    return (c if asym == 0.0 else (c + c.T) / 2.0), t


def _scale_and_asymmetry(c: np.ndarray) -> tuple[float, float]:
    """``max |c|`` and ``max |c - c.T|`` of a square ``c``, block by block (no n x n
    temporary); ``ParameterError`` when an entry is not finite."""
    n, width = c.shape[0], 1024
    scale = asym = 0.0
    for i in range(0, n, width):
        for j in range(i, n, width):
            upper, lower = c[i : i + width, j : j + width], c[j : j + width, i : i + width]
            if not (np.isfinite(upper).all() and np.isfinite(lower).all()):
                raise ParameterError("cov must be finite, got NaN or infinite entries")
            scale = max(scale, float(np.abs(upper).max()), float(np.abs(lower).max()))
            asym = max(asym, float(np.abs(upper - lower.T).max()))
    return scale, asym


def _make_selection(
    c: np.ndarray, t: np.ndarray, backup: tuple[int, ...], var: np.ndarray, method: str
) -> Selection:
    var = np.maximum(np.asarray(var, dtype=float), 0.0)
    var[list(backup)] = 0.0
    feasible = bool(np.all(var <= compute_tolerance(c, t)))
    return Selection(tuple(int(j) for j in backup), var, t.copy(), method, feasible)


# ----------------------------------------------------------------------------- paper
def _select_paper(c: np.ndarray, t: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """The seed's greedy: minimise ``max_i var_{i|O+j}``, one fresh solve per candidate."""
    n = c.shape[0]
    tol = compute_tolerance(c, t)
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
        if state.complete:  # every sensor is in every feasible set: nothing to choose or prune
            return tuple(state.chosen), state.var
        while np.any(state.var > state.tol):
            state.add(state.best_candidate())
    return improve_backups(
        c, state.tol, state.atol, state.chosen, state.var, rounds=_EXCHANGE_ROUNDS
    )


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
        self.cov, self.tol, self.atol = c, compute_tolerance(c, t), compute_abs_tol(c)
        self.scale = max(float(np.mean(np.diag(c))), 1e-300)
        forced, live = self._indispensable()
        # Every informative sensor indispensable (all targets 0, as when a miss rate cannot
        # be measured): the answer is all of them, with no factor to build (at 10,000
        # sensors that factor and its solve took minutes).
        self.complete = len(forced) == live
        self.chosen: list[int] = list(forced)
        if self.complete:  # the others' variance is within the absolute tolerance already
            self.var = np.diag(c).copy()
            self.var[forced] = 0.0
            return
        # Sensors nothing else can cover are in every feasible set: add them as one
        # block (BLAS-3) instead of one rank-one step each. lines = L^T, one row each.
        lines = np.zeros((0, n))
        if forced:
            factor = scipy.linalg.cholesky(
                c[np.ix_(forced, forced)], lower=True, check_finite=False
            )
            lines = scipy.linalg.solve_triangular(factor, c[forced, :], lower=True)
        self.lines = np.vstack([lines, np.zeros((max(8, len(forced)), n))])
        self.var = np.maximum(np.diag(c) - np.einsum("ij,ij->j", lines, lines), 0.0)
        self.var[forced] = 0.0
        self.rows = np.flatnonzero(self.var > self.tol)
        self.cols = np.setdiff1d(np.arange(n), forced)
        self.pending: np.ndarray | None = None
        self._rebuild()

    def _indispensable(self) -> tuple[list[int], int]:
        """Sensors whose variance given all the others is still above target, and the
        number of informative sensors (variance above the absolute tolerance).

        From ``SCREEN_MIN_SENSORS`` on, a sensor whose variance given a few of the others
        is within target is not one of them (``screened_alone_variance``): only the rest
        need the whole block factorised, and none at all when every sensor is covered.
        """
        diag = np.diag(self.cov)
        live = [int(i) for i in np.flatnonzero(diag > self.atol)]
        if not live:
            return [], 0
        unsure = np.arange(len(live))
        if len(live) >= SCREEN_MIN_SENSORS:
            bound = screened_alone_variance(self.cov, live, self.pool)
            unsure = np.flatnonzero(~(bound <= self.tol[live]))
            if unsure.size == 0:
                return [], len(live)
        var = alone_variance_of(self.cov, live, unsure)
        if var is None:
            return [], len(live)
        idx = np.asarray(live)[unsure]
        above = is_clearly_above(var, self.tol[idx], diag[idx], self.atol)
        return [int(i) for i in idx[above]], len(live)

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
        score = np.empty(self.cols.size, dtype=np.float32)
        self._by_column_halves(self._score_range, pivots, excess, score)
        self.pending = None
        return score

    def _by_column_halves(self, work: Callable[..., None], *args: np.ndarray) -> None:
        """``work(lo, hi, *args)`` over every stored column: the two halves on two threads
        when the block is large (NumPy releases the GIL in its heavy calls)."""
        ncols = self.cols.size
        if self.rows.size * ncols < _PARALLEL_MIN or self.pool is None:
            work(0, ncols, *args)
            return
        half = ncols // 2
        jobs = [self.pool.submit(work, lo, hi, *args) for lo, hi in ((0, half), (half, ncols))]
        for job in jobs:
            job.result()

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
        """Recompute the float32 block ``C[rows, cols] / s`` from ``L`` in float64.

        Written a few columns at a time (on two threads when the block is large):
        column ``j`` of the (Fortran-ordered) block is row ``j`` of the symmetric ``C``,
        read contiguously, and no float64 copy of the whole block is made (800 MB at
        10,000 sensors, and three passes over it).
        """
        transposed = np.empty((self.cols.size, self.rows.size), dtype=np.float32)
        self._by_column_halves(self._rebuild_range, transposed)
        self.block = transposed.T
        self.pending = None

    def _rebuild_range(self, lo: int, hi: int, transposed: np.ndarray) -> None:
        """Rows ``lo:hi`` of ``transposed`` (the block's columns ``lo:hi``)."""
        m, rows = len(self.chosen), self.rows
        step = max(1, _BLOCK_BYTES * 16 // (8 * max(rows.size, 1)))
        for start in range(lo, hi, step):
            part = self.cols[start : min(start + step, hi)]
            exact = self.cov.take(part, axis=0).take(rows, axis=1)
            exact -= self.lines[:m, part].T @ self.lines[:m, rows]
            np.divide(
                exact, self.scale, out=transposed[start : start + part.size], casting="same_kind"
            )


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
