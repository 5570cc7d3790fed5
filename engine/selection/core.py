"""Tolerances and direct solves shared by the backup-set selection modules.

A variance is feasible when ``var <= target (1 + REL_TOL) + ABS_TOL s``, with ``s``
the mean variance (the scale of ``cov``). Split out of ``engine.selection.greedy`` so that
the greedy, the exchange pass and the exact search share one definition.
"""

from __future__ import annotations

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
