"""Improvement pass of the greedy backup set: pruning and 2-for-1 exchanges.

``improve_backups`` drops chosen sensors the set stays feasible without, then tries
to replace two chosen sensors by one other, until neither shrinks the set
(DESIGN.md section 2). Shapes: ``c`` (n, n), ``tol`` and ``var`` (n,).
"""

from __future__ import annotations

import numpy as np

from engine.selection.core import inverse_cholesky, solve_conditional_variance

_EXCHANGE_WORK = 5e8  # flops of one exchange round above which it is skipped
_EXCHANGE_PAIRS = 32  # pairs checked in full per round (~0.2 ms each)


def improve_backups(
    c: np.ndarray,
    tol: np.ndarray,
    atol: float,
    chosen: list[int],
    var: np.ndarray,
    *,
    rounds: int,
) -> tuple[tuple[int, ...], np.ndarray]:
    """Alternate pruning and 2-for-1 exchanges until neither shrinks the set.

    Exchanges run while a round is cheap (about ``(n - m)^2 m + m^3`` flops within
    ``_EXCHANGE_WORK``) and for at most ``rounds`` rounds: on large instances one
    sensor less is worth little and a round costs a refactorisation. ``chosen`` is
    the greedy set in order of addition, ``var`` its (n,) conditional variances.
    """
    n = c.shape[0]
    for round_ in range(rounds + 1):
        terms = _regression_terms(c, chosen) if chosen else None
        if terms is None:  # nothing chosen, or Sigma_OO numerically singular: keep it
            break
        chosen, var, terms = _prune(chosen, var, tol, terms)
        m = len(chosen)
        if round_ == rounds or (n - m) ** 2 * m + m**3 > _EXCHANGE_WORK:
            break
        swapped = _exchange(c, tol, atol, chosen, var, terms)
        if swapped is None:
            break
        swapped_var = solve_conditional_variance(c, swapped)
        if not np.all(swapped_var <= tol):  # rounding disagreed: keep the verified set
            break
        chosen, var = swapped, swapped_var
    var[chosen] = 0.0
    return tuple(chosen), var


def _regression_terms(c: np.ndarray, chosen: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """``B = Sigma_:O P`` (n, m) and ``P = Sigma_OO^{-1}`` (m, m), or None if singular."""
    solved = inverse_cholesky(c, chosen)
    if solved is None:
        return None
    prec = solved[1].T @ solved[1]
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
