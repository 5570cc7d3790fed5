"""Tolerances and direct solves shared by the backup-set selection modules.

A variance is feasible when ``var <= target (1 + REL_TOL) + ABS_TOL s``, with ``s``
the mean variance (the scale of ``cov``). Split out of ``engine.selection.greedy`` so that
the greedy, the exchange pass and the exact search share one definition.
"""

from __future__ import annotations

from concurrent.futures import Executor

import numpy as np
import scipy.linalg

REL_TOL = 1e-9
ABS_TOL = 1e-12  # times the mean variance


def compute_abs_tol(c: np.ndarray) -> float:
    """Absolute feasibility slack: ``ABS_TOL`` times the mean variance of ``c`` (n, n)."""
    return ABS_TOL * max(float(np.mean(np.diag(c))), 1e-300)


def compute_tolerance(c: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(n,) largest variance counted as feasible."""
    return t * (1.0 + REL_TOL) + compute_abs_tol(c)


def solve_conditional_variance(c: np.ndarray, subset: list[int]) -> np.ndarray:
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


def is_clearly_above(var: np.ndarray, tol: np.ndarray, ref: np.ndarray, atol: float) -> np.ndarray:
    """``var > tol`` by a margin larger than any rounding of ``var`` (scale ``ref``)."""
    return var > tol * (1 + 1e-6) + 1e-7 * ref + 1e3 * atol


def inverse_cholesky(c: np.ndarray, idx: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Lower Cholesky factor ``L`` of ``c[idx, idx]`` and its inverse; ``None`` when the
    block is not numerically positive definite. ``inv(L).T @ inv(L)`` is the block's inverse.
    """
    try:
        factor = scipy.linalg.cholesky(c[np.ix_(idx, idx)], lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    inv_factor, info = scipy.linalg.lapack.dtrtri(factor, lower=1)
    if info != 0:
        return None
    return factor, inv_factor


def solve_alone_variance(cond: np.ndarray, live: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Cholesky factor of ``cond[live, live]`` and ``var_{i | live without i}`` for i in live.

    ``None`` when the block is not numerically positive definite (undecidable).
    """
    solved = inverse_cholesky(cond, live)
    if solved is None:
        return None
    factor, inv_factor = solved
    return factor, 1.0 / np.einsum("ij,ij->j", inv_factor, inv_factor)


SCREEN_MIN_SENSORS = 1024  # fewer: the whole inverse is cheap (0.2 s at 2,000 sensors)
SCREEN_SOURCES = 64  # sensors each bound conditions on
_SCREEN_CHUNK = 512  # sensors bounded at once: (512, 64, 64) blocks, 17 MB
_SCREEN_PIVOT = 1e-6  # smallest squared pivot of a bound's block, relative to its diagonal


def screened_alone_variance(
    c: np.ndarray, live: list[int], pool: Executor | None = None
) -> np.ndarray:
    """(len(live),) an upper bound on ``var_{i | live without i}`` for each i in ``live``:
    ``var_{i | S_i}``, with ``S_i`` the ``SCREEN_SOURCES`` sensors of ``live`` most
    correlated with i. Conditioning on fewer sensors never lowers a variance, so a bound
    within target proves the sensor can be covered without factorising the whole block
    (at 10,000 sensors a Cholesky and a triangular inverse, about 13 s).

    ``inf`` where ``S_i``'s block is not clearly positive definite (a squared Cholesky
    pivot below ``_SCREEN_PIVOT`` times its largest variance): a bound whose rounding
    could reach the margin of ``is_clearly_above`` is not given.

    ``pool``: bound chunks of sensors on its threads.
    """
    idx = np.asarray(live, dtype=int)
    k = min(SCREEN_SOURCES, idx.size - 1)
    out = np.full(idx.size, np.inf)
    if k < 1:
        return out
    whole = idx.size == c.shape[0] and bool(np.all(idx == np.arange(idx.size)))
    sub = c if whole else c[np.ix_(idx, idx)]
    diag = np.diag(sub).copy()
    inv_sd = 1.0 / np.sqrt(diag)

    def bound_rows(start: int) -> None:
        rows = np.arange(start, min(start + _SCREEN_CHUNK, idx.size))
        score = np.abs(sub[rows]) * inv_sd  # |correlation| times a per-row constant
        score[np.arange(rows.size), rows] = -1.0  # never a sensor's own source
        src = np.argpartition(score, -k, axis=1)[:, -k:]
        blocks = sub[src[:, :, None], src[:, None, :]]
        cross = sub[rows[:, None], src]
        factor, ok = _batched_cholesky(blocks)
        solved = np.linalg.solve(factor, cross[:, :, None])[:, :, 0]
        bound = np.maximum(diag[rows] - np.einsum("rk,rk->r", solved, solved), 0.0)
        out[rows] = np.where(ok, bound, np.inf)

    starts = range(0, idx.size, _SCREEN_CHUNK)
    if pool is None:
        for start in starts:
            bound_rows(start)
    else:  # chunks are independent, and NumPy releases the GIL in their heavy calls
        list(pool.map(bound_rows, starts))
    return out


def _batched_cholesky(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower factors of a stack of blocks (r, k, k), and (r,) whether each block is
    clearly positive definite (an identity factor stands in where it is not)."""
    scale = np.diagonal(blocks, axis1=1, axis2=2).max(axis=1)
    try:
        factor = np.linalg.cholesky(blocks)
    except np.linalg.LinAlgError:  # one block is not: factor them one by one
        factor = np.empty_like(blocks)
        for j, block in enumerate(blocks):
            try:
                factor[j] = np.linalg.cholesky(block)
            except np.linalg.LinAlgError:
                factor[j] = np.eye(block.shape[0])
    pivots = np.diagonal(factor, axis1=1, axis2=2) ** 2
    ok = (pivots.min(axis=1) > _SCREEN_PIVOT * scale) & np.isfinite(factor).all(axis=(1, 2))
    factor[~ok] = np.eye(blocks.shape[1])
    return factor, ok


def alone_variance_of(c: np.ndarray, live: list[int], which: np.ndarray) -> np.ndarray | None:
    """``var_{i | live without i}`` for the positions ``which`` of ``live``; ``None`` when
    ``c[live, live]`` is not numerically positive definite (undecidable).

    For a few positions: one Cholesky and a triangular solve of their unit vectors
    (``(Sigma^-1)_ii = |L^-1 e_i|^2``) instead of the whole inverse factor.
    """
    if 4 * len(which) >= len(live):
        solved = solve_alone_variance(c, live)
        return None if solved is None else solved[1][which]
    try:
        factor = scipy.linalg.cholesky(c[np.ix_(live, live)], lower=True, check_finite=False)
        units = np.zeros((len(live), len(which)))
        units[which, np.arange(len(which))] = 1.0
        lines = scipy.linalg.solve_triangular(factor, units, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    return np.asarray(1.0 / np.einsum("ij,ij->j", lines, lines))
