"""Incremental re-selection: keep a backup set feasible as its targets move.

Why: an online controller changes a few sensors' variance targets after every
closed window. A greedy run from scratch costs O(n^2 |O|) and may answer with a
very different set (every change is a backup-set change for the pipeline); here
the set ``O`` is patched instead, one sensor at a time, each change O(n^2):

* ``repair``: while some rebuilt sensor's conditional variance is above its
  target, add the sensor that removes the most excess variance (the criterion of
  ``engine.selection.greedy``); a sensor whose target is 0 is added itself;
* ``release``: drop backed-up sensors, one at a time, whose removal keeps every
  rebuilt sensor within its target (a sensor whose variance rises must stay within
  ``margin`` times its target, so that a small move of the targets does not undo
  the release at once).

State for the set ``O`` of ``m`` informative sensors (``Sigma_jj > 0``) over ``n``:

    P = Sigma_OO^{-1}                      (m, m) precision of the backed-up block
    B = Sigma_:O P                         (n, m) regression of every sensor on O
    C = Sigma - B Sigma_O:                 (n, n) conditional covariance given O

Adding ``j`` (``c = C[:, j]``, ``u = B[j, :]``)::

    C <- C - c c^T / c_j        B <- [B - c u^T / c_j, c / c_j]
    P <- [[P + u u^T / c_j, -u / c_j], [-u^T / c_j, 1 / c_j]]

Removing the ``k``-th backed-up sensor (``p = P_kk``, ``b = B[:, k]``)::

    C <- C + b b^T / p          B <- B_rest - b P[k, rest] / p
    P <- P_rest - P[rest, k] P[k, rest] / p

so ``var_{i | O - k} = C_ii + b_i^2 / p`` for every sensor (``1 / p`` for the
removed one) is read off without a solve. Rounding drifts with every change, so
the state is recomputed from ``Sigma`` (a Cholesky solve, O(n^2 m)) every
``refresh_every`` changes. Sensors with zero variance (constant) carry no
information: they may sit in ``O`` but are left out of ``P`` and ``B``.

Feasibility uses the tolerance of ``engine.selection.core``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import scipy.linalg

from engine.errors import ParameterError
from engine.selection.core import compute_abs_tol

REFRESH_EVERY = 64  # changes between recomputations from Sigma (bounds rounding drift)
_REL_TOL = 1e-9  # as engine.selection.core.REL_TOL


class IncrementalSelection:
    """A backup set ``O`` and its conditional covariance, patched one sensor at a time.

    Parameters
    ----------
    cov : (n, n) symmetric positive semi-definite covariance of the sensors.
    backup : the starting set ``O`` (indices; any order).
    refresh_every : changes between recomputations from ``cov``.
    """

    def __init__(
        self, cov: np.ndarray, backup: Iterable[int] = (), refresh_every: int = REFRESH_EVERY
    ) -> None:
        c = np.asarray(cov, dtype=float)
        if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] < 1:
            raise ParameterError(f"cov must be a non-empty square (n, n) matrix, got {c.shape}")
        if not np.all(np.isfinite(c)) or np.any(np.diag(c) < 0):
            raise ParameterError("cov must be finite with a non-negative diagonal")
        if (
            isinstance(refresh_every, bool)
            or not isinstance(refresh_every, int)
            or (refresh_every < 1)
        ):
            raise ParameterError(f"refresh_every must be an integer >= 1, got {refresh_every!r}")
        self.cov = (c + c.T) / 2.0
        self.n = c.shape[0]
        self.atol = compute_abs_tol(self.cov)
        self.refresh_every = refresh_every
        start = _check_indices(backup, self.n)
        self.inert: set[int] = {j for j in start if self.cov[j, j] <= self.atol}
        self.order: list[int] = [j for j in start if j not in self.inert]  # columns of P, B
        self._changes = 0
        self.P: np.ndarray
        self.B: np.ndarray
        self.C: np.ndarray
        self.refresh()

    # ----------------------------------------------------------------- reading
    @property
    def backup(self) -> tuple[int, ...]:
        """The backed-up sensors, ascending."""
        return tuple(sorted([*self.order, *self.inert]))

    @property
    def variance(self) -> np.ndarray:
        """(n,) ``var_{i|O}``, 0 for backed-up sensors."""
        var = np.maximum(np.diag(self.C).copy(), 0.0)
        var[list(self.backup)] = 0.0
        return var

    def __contains__(self, j: object) -> bool:
        """Whether sensor ``j`` is backed up."""
        return j in self.inert or j in self.order

    def tolerance(self, targets: np.ndarray) -> np.ndarray:
        """(n,) largest variance counted as within ``targets`` (n,)."""
        return targets * (1.0 + _REL_TOL) + self.atol

    def removal_variance(self, j: int) -> np.ndarray:
        """(n,) ``var_{i | O - j}`` for a backed-up ``j`` (``var_{j | O - j}`` at ``j``)."""
        return self._removal_variances([j])[:, 0]

    # ----------------------------------------------------------------- changes
    def add(self, j: int) -> None:
        """Back up sensor ``j`` (rank-one downdate of ``C``, O(n^2))."""
        j = _check_indices([j], self.n)[0]
        if j in self:
            return
        c = self.C[:, j].copy()
        pivot = c[j]
        if pivot <= self.atol:  # nothing left to learn from j: it carries no information
            self.inert.add(j)
            return
        u = self.B[j, :].copy()
        _rank_one(self.C, c, -1.0 / pivot)
        m = len(self.order)
        p_new = np.empty((m + 1, m + 1))
        p_new[:m, :m] = self.P + np.outer(u, u) / pivot
        p_new[:m, m] = p_new[m, :m] = -u / pivot
        p_new[m, m] = 1.0 / pivot
        self.P = p_new
        self.B = np.hstack([self.B - np.outer(c, u) / pivot, (c / pivot)[:, None]])
        self.order.append(j)
        self._zero([j])
        self._count_change()

    def remove(self, j: int) -> None:
        """Stop backing up sensor ``j`` (rank-one update of ``C``, O(n^2))."""
        j = _check_indices([j], self.n)[0]
        if j in self.inert:
            self.inert.discard(j)
            return
        if j not in self.order:
            return
        k = self.order.index(j)
        p, b = self.P[k, k], self.B[:, k].copy()
        rest = [q for q in range(len(self.order)) if q != k]
        row = self.P[k, rest]
        self.B = self.B[:, rest] - np.outer(b, row) / p
        self.P = self.P[np.ix_(rest, rest)] - np.outer(row, row) / p
        self.order.pop(k)
        b[[*self.order, *self.inert]] = 0.0  # the others stay backed up: their rows stay 0
        _rank_one(self.C, b, 1.0 / p)
        self._count_change()

    def repair(self, targets: np.ndarray) -> list[int]:
        """Add sensors until every ``var_{i|O} <= targets_i``; returns those added, in order.

        A sensor whose target is 0 is added itself first (nothing else can rebuild it
        exactly); then the greedy adds the sensor removing the most excess variance.
        """
        t = self._check_targets(targets)
        added = [int(i) for i in np.flatnonzero(t <= 0.0) if int(i) not in self]
        for i in added:
            self.add(i)
        while True:
            tol = self.tolerance(t)
            var = self.variance
            rows = np.flatnonzero(var > tol)
            if rows.size == 0:
                return added
            j = self._best_candidate(var, tol, rows)
            self.add(j)
            added.append(j)

    def release(
        self,
        targets: np.ndarray,
        candidates: Sequence[int],
        margin: float = 1.0,
        limit: int | None = None,
    ) -> list[int]:
        """Drop ``candidates`` (backed-up sensors) whose removal keeps every target met.

        A removal is kept only if every sensor whose conditional variance rises ends
        at most ``margin * targets_i`` (``0 < margin <= 1``). Among the removable
        candidates the one leaving the most slack (smallest largest ratio of
        variance to target) goes first; repeated until none is removable, or
        ``limit`` sensors are released.
        """
        t = self._check_targets(targets)
        if not 0.0 < margin <= 1.0:
            raise ParameterError(f"margin must be in (0, 1], got {margin!r}")
        pool = [j for j in _check_indices(candidates, self.n) if j in self]
        released: list[int] = []
        while pool and (limit is None or len(released) < limit):
            j = self._best_release(t, pool, margin)
            if j is None:
                return released
            self.remove(j)
            pool.remove(j)
            released.append(j)
        return released

    def refresh(self) -> None:
        """Recompute ``P``, ``B`` and ``C`` from ``Sigma`` (drops accumulated rounding).

        At 1,000 sensors with 280 backed up this is the slowest step of a controller's
        decision (every ``refresh_every`` changes), so it computes only what is not known
        exactly: with ``L^{-1}`` (LAPACK's ``trtri``) of the backed-up block's factor,
        ``P = L^{-T} L^{-1}``, ``W = L^{-1} Sigma_OR`` for the other sensors ``R``,
        ``B_R = W^T L^{-1}`` and ``C_RR = Sigma_RR - W^T W`` (symmetric products); the
        backed-up rows of ``B`` are the identity and those of ``C`` zero (about 20 ms there).
        """
        n, order = self.n, self.order
        if not order:
            self.P, self.B, self.C = np.zeros((0, 0)), np.zeros((n, 0)), self.cov.copy()
        else:
            held = np.asarray(order)
            rest = np.flatnonzero(~np.isin(np.arange(n), held))  # rebuilt and inert
            try:
                factor = scipy.linalg.cholesky(
                    self.cov[np.ix_(held, held)], lower=True, check_finite=False
                )
            except np.linalg.LinAlgError:
                raise ParameterError(_NOT_DEFINITE) from None
            inv = _inverse_factor(factor)
            self.P = inv.T @ inv  # NumPy's symmetric product: exactly symmetric
            w = inv @ self.cov[np.ix_(held, rest)]
            self.B = np.zeros((n, held.size))
            self.B[held, np.arange(held.size)] = 1.0
            self.B[rest] = w.T @ inv
            conditional = self.cov[np.ix_(rest, rest)]
            conditional -= w.T @ w
            if not np.array_equal(conditional, conditional.T):  # (C + C^T) / 2 is C if so
                conditional = (conditional + conditional.T) / 2.0
            self.C = np.zeros((n, n))
            self.C[np.ix_(rest, rest)] = conditional
        self._zero(list(self.inert))
        self._changes = 0

    # ----------------------------------------------------------------- inside
    def _best_candidate(self, var: np.ndarray, tol: np.ndarray, rows: np.ndarray) -> int:
        """The sensor whose addition removes the most excess variance
        ``sum_i min(var_i - tol_i, C_ij^2 / C_jj)`` (ties: largest total drop, lowest index)."""
        usable = np.flatnonzero(var > self.atol)
        block = self.C[np.ix_(rows, usable)]
        square = block**2 / var[usable]
        excess = (var[rows] - tol[rows])[:, None]
        gain = np.minimum(square, excess).sum(axis=0)
        tied = gain >= gain.max() * (1 - 1e-9) - self.atol
        drop = (self.C[:, usable[tied]] ** 2).sum(axis=0) / var[usable[tied]]
        return int(usable[tied][np.argmax(drop)])

    def _best_release(self, t: np.ndarray, pool: list[int], margin: float) -> int | None:
        """The removable candidate leaving the most slack, or None."""
        tol = self.tolerance(t)
        base = self.variance
        raised = self._removal_variances(pool)  # (n, len(pool))
        rose = raised > base[:, None] * (1 + 1e-12) + self.atol
        ok = np.all(~rose | (raised <= margin * tol[:, None]), axis=0)
        if not ok.any():
            return None
        ratio = raised / np.maximum(tol, 1e-300)[:, None]
        worst = ratio.max(axis=0)
        worst[~ok] = np.inf
        return pool[int(np.argmin(worst))]

    def _removal_variances(self, idx: Sequence[int]) -> np.ndarray:
        """(n, len(idx)): column q is ``var_{i | O - idx[q]}`` for backed-up ``idx[q]``."""
        var = self.variance
        out = np.repeat(var[:, None], len(idx), axis=1)
        position = {j: k for k, j in enumerate(self.order)}
        cols = [q for q, j in enumerate(idx) if j in position]
        if cols:
            ks = [position[idx[q]] for q in cols]
            pivots = np.diag(self.P)[ks]
            out[:, cols] += self.B[:, ks] ** 2 / pivots
            out[np.ix_(list(self.backup), cols)] = 0.0  # the others stay backed up, exactly
            out[[idx[q] for q in cols], cols] = 1.0 / pivots
        return out

    def _zero(self, idx: list[int]) -> None:
        """Rows and columns of backed-up sensors ``idx`` are exactly 0 in ``C``."""
        self.C[idx, :] = 0.0
        self.C[:, idx] = 0.0

    def _count_change(self) -> None:
        self._changes += 1
        if self._changes >= self.refresh_every:
            self.refresh()

    def _check_targets(self, targets: np.ndarray) -> np.ndarray:
        t = np.asarray(targets, dtype=float)
        if t.shape != (self.n,) or not np.all(np.isfinite(t)) or np.any(t < 0):
            raise ParameterError(
                f"targets must be ({self.n},) finite and >= 0, got shape {t.shape}"
            )
        return t


_NOT_DEFINITE = (
    "the backed-up sensors' covariance is not positive definite "
    "(duplicate or collinear sensors in the backup set)"
)


def _inverse_factor(factor: np.ndarray) -> np.ndarray:
    """``L^{-1}`` of a lower Cholesky factor ``L`` (LAPACK's ``trtri``; lower triangle)."""
    inv, info = scipy.linalg.lapack.dtrtri(factor, lower=1)
    if info != 0:
        raise ParameterError(_NOT_DEFINITE)
    return np.tril(inv)


def _rank_one(c: np.ndarray, x: np.ndarray, alpha: float) -> None:
    """``c += alpha x x^T`` in place (BLAS ``dger`` on the Fortran view: no n x n temporary)."""
    out = scipy.linalg.blas.dger(alpha, x, x, a=c.T, overwrite_a=True)
    if not np.shares_memory(out, c):  # not updated in place (c not C-contiguous)
        c[...] = out.T


def _check_indices(idx: Iterable[int], n: int) -> list[int]:
    out = []
    for j in idx:
        if isinstance(j, bool) or not isinstance(j, int | np.integer) or not 0 <= j < n:
            raise ParameterError(f"sensor indices must be integers in [0, {n}), got {j!r}")
        out.append(int(j))
    if len(set(out)) != len(out):
        raise ParameterError(f"sensor indices must be distinct, got {out!r}")
    return out
