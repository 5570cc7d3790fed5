"""Exact backup-set selection: branch and bound over set sizes, for small ``n``.

Split out of ``engine.selection.greedy``, which calls ``select_exact`` with the greedy
set as the upper bound. Shapes: ``c`` (n, n), ``t`` (n,).
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.linalg

from engine.selection.core import (
    compute_abs_tol,
    compute_tolerance,
    is_clearly_above,
    solve_alone_variance,
    solve_conditional_variance,
)


def select_exact(
    c: np.ndarray, t: np.ndarray, upper: tuple[tuple[int, ...], np.ndarray]
) -> tuple[tuple[int, ...], np.ndarray]:
    """Branch and bound: the smallest size ``k`` for which a feasible set exists.

    The greedy set ``upper`` (backup, (n,) conditional variance) bounds the answer
    from above. Sensors that even all the other sensors together cannot bring
    within target are in every feasible set, so they are fixed first. For each
    size below the greedy's, a depth-first search over sets in index order prunes
    a branch when (a) a skipped sensor stays infeasible even if every remaining
    candidate is added (conditional variance only shrinks as sensors are added),
    or (b) more candidates are individually indispensable than slots remain. Both
    tests use a safety margin, so rounding can only make the search prune less,
    never wrongly.
    """
    n = c.shape[0]
    greedy_backup, greedy_var = upper
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
            return backup, solve_conditional_variance(c, list(backup))
    return greedy_backup, greedy_var


class _Search:
    """Depth-first search state for ``select_exact`` (tolerances and margins)."""

    def __init__(self, c: np.ndarray, t: np.ndarray) -> None:
        self.tol = compute_tolerance(c, t)
        self.atol = compute_abs_tol(c)

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
        solved = solve_alone_variance(cond, live)
        if solved is None:
            return []
        factor, alone = solved
        if skipped:
            proj = scipy.linalg.solve_triangular(factor, cond[np.ix_(live, skipped)], lower=True)
            rest = diag[skipped] - np.einsum("ij,ij->j", proj, proj)
            if np.any(is_clearly_above(rest, self.tol[skipped], diag[skipped], self.atol)):
                return None
        above = is_clearly_above(alone, self.tol[live], diag[live], self.atol)
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
