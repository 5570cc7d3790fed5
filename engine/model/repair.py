"""Repair of a sample covariance: symmetric, constant sensors zeroed, positive definite.

A sensor whose variance is at rounding level is constant (known exactly, reconstructed
by its mean). The rest must be positive definite for the Cholesky factorisations and
rank-one downdates of selection and reconstruction; a near-singular covariance
(duplicate or collinear sensors) gets a ridge on its diagonal, sized on its mean
variance. The repair works in place: at 10,000 sensors each n x n copy is 800 MB.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import scipy.linalg

from engine.errors import named

# A sensor whose sample variance is below this fraction of its squared level is
# indistinguishable from rounding, so it is treated as constant: known exactly,
# reconstructed by its mean. Centred moments (two-pass, or Chan's merges of centred
# parts: every path the product fits by) err by the mean's rounding only, about
# (1e-16 x log2(rows) x level)^2, so the floor sits five orders above that: a sensor
# at 1e8 that varies by more than 1e-4 varies. Raw sums (``MomentStats.from_sums``)
# lose ~1e-16 of the squared level to cancellation and keep the wider floor; at the
# wider floor a sensor at 1e8 varying by 10 would count as constant.
CONSTANT_REL = 1e-24
RAW_SUMS_REL = 1e-13
# Repair is triggered when the smallest eigenvalue of the (non-constant) covariance
# is below RIDGE_TRIGGER x mean variance, and then lifts it to RIDGE_FLOOR x mean
# variance: a condition number of ~1e9 keeps Cholesky and rank-one downdates stable.
RIDGE_TRIGGER = 1e-10
RIDGE_FLOOR = 1e-9
# Rows and columns per block of the in-place symmetrisation (8 MB per block).
_BLOCK = 1024


def constant_sensors(cov: np.ndarray, mean: np.ndarray, rel: float = CONSTANT_REL) -> np.ndarray:
    """(n,) True where a sensor's variance (the diagonal of ``cov``) is at rounding level
    of its mean (``rel`` of its square: the moments' rounding floor): such a sensor is
    constant."""
    return constant_by_variance(np.diag(cov), mean, rel)


def constant_by_variance(
    variance: np.ndarray, mean: np.ndarray, rel: float = CONSTANT_REL
) -> np.ndarray:
    """``constant_sensors`` from the (n,) variances alone."""
    return np.asarray(variance <= rel * mean**2)


def constant_note(constant: np.ndarray, names: tuple[str, ...]) -> str:
    """The repair note's part on constant sensors ("" when there is none)."""
    if not constant.any():
        return ""
    listed = named([names[i] for i in np.flatnonzero(constant)])
    return f"constant sensor(s) {listed} are reconstructed by their mean"


def sentence(parts: list[str]) -> str:
    """Note parts as one sentence ("" for none)."""
    parts = [p for p in parts if p]
    return "" if not parts else (parts[0][0].upper() + "; ".join(parts)[1:] + ".")


def repair_covariance(
    cov: np.ndarray,
    mean: np.ndarray,
    names: tuple[str, ...],
    ridge: float | None,
    rel: float = CONSTANT_REL,
) -> tuple[np.ndarray, float, str]:
    """Symmetrise, zero constant sensors, and add a ridge if (or as) asked, in place.

    Parameters
    ----------
    cov : (n, n) sample covariance; overwritten with the repaired one.
    mean : (n,) sensor means (the constant test is relative to them).
    names : the n sensor names, for the note.
    ridge : the ridge asked for, or None to add one only when near-singular.
    rel : the moments' rounding floor for the constant test (``CONSTANT_REL``, or
        ``RAW_SUMS_REL`` for moments from raw sums).

    Returns ``cov`` repaired, the ridge added and a one-sentence note ("" if nothing).
    """
    _symmetrise(cov)
    constant = constant_sensors(cov, mean, rel)
    cov[constant, :] = 0.0
    cov[:, constant] = 0.0
    active = np.flatnonzero(~constant)
    parts = [constant_note(constant, names)]
    added = 0.0
    if active.size:
        block = cov if active.size == cov.shape[0] else cov[np.ix_(active, active)]
        mean_var = float(np.trace(block)) / active.size
        added = 0.0 if ridge is None else ridge
        smallest = _smallest_eigenvalue_below(block, RIDGE_TRIGGER * mean_var - added) + added
        if smallest < RIDGE_TRIGGER * mean_var:
            added += RIDGE_FLOOR * mean_var - smallest
            parts.append(
                f"a ridge of {added:.3g} ({added / mean_var:.1e} of the mean variance) was "
                f"added because the covariance is near-singular (smallest eigenvalue "
                f"{smallest - (ridge or 0.0):.3g}, e.g. duplicate or collinear sensors)"
            )
        elif added > 0:
            parts.append(f"the requested ridge of {added:.3g} was added to the diagonal")
        cov[active, active] += added
    return cov, added, sentence(parts)


def _symmetrise(cov: np.ndarray) -> None:
    """``cov = (cov + cov.T) / 2`` in place, block by block: bit for bit the same values
    as the expression (addition commutes exactly), without its two n x n temporaries."""
    n = cov.shape[0]
    for i in range(0, n, _BLOCK):
        rows = slice(i, i + _BLOCK)
        for j in range(i, n, _BLOCK):
            cols = slice(j, j + _BLOCK)
            both = cov[rows, cols] + cov[cols, rows].T
            both *= 0.5
            cov[rows, cols] = both
            cov[cols, rows] = both.T


def _smallest_eigenvalue_below(block: np.ndarray, level: float) -> float:
    """The smallest eigenvalue of the symmetric ``block`` if it is below ``level``; else inf.

    A Cholesky factorisation of ``block - level I`` succeeds exactly when every
    eigenvalue is above ``level`` (to rounding): a third of the flops of one
    eigenvalue solve and far faster (10,000 sensors: 9 s against over 100 s on one
    core), and a fitted covariance is nearly always well above the repair level. Only
    a failed factorisation pays for the eigenvalue, which sizes the ridge.
    """
    shifted = block.copy()
    shifted.flat[:: block.shape[0] + 1] -= level
    try:  # the transpose (it is symmetric) is in LAPACK's column order: factorised in
        # place, where the C-ordered copy would be copied again (10,000 sensors: 800 MB)
        scipy.linalg.cholesky(shifted.T, lower=False, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError:
        return float(np.linalg.eigvalsh(block)[0])
    return float("inf")


class LazyRepair:
    """A covariance repaired on the first ``get()``, once, under a lock (the repair works
    in place, and the live pipeline reads models from two threads).

    Either from a sample covariance (``LazyRepair(cov, mean, names, ridge)``, which
    takes ``cov`` over, or computes it on the first ``get()`` when ``cov`` is a
    function), or from another one scaled by ``f f^T`` (``LazyRepair.scaled(other, f)``:
    its ridge and note as the other's).
    """

    def __init__(
        self,
        cov: np.ndarray | Callable[[], np.ndarray],
        mean: np.ndarray,
        names: tuple[str, ...],
        ridge: float | None,
        rel: float = CONSTANT_REL,
    ) -> None:
        sample = cov if callable(cov) else partial(np.asarray, cov)
        self._start(lambda: repair_covariance(sample(), mean, names, ridge, rel))

    @classmethod
    def scaled(cls, other: LazyRepair, f: np.ndarray) -> LazyRepair:
        out = cls.__new__(cls)
        out._start(partial(_scale, other, f))
        return out

    def _start(self, pending: Callable[[], tuple[np.ndarray, float, str]]) -> None:
        self._lock = threading.Lock()
        self._pending: Callable[[], tuple[np.ndarray, float, str]] | None = pending
        self._result: tuple[np.ndarray, float, str] | None = None

    def get(self) -> tuple[np.ndarray, float, str]:
        """The repaired (n, n) covariance, the ridge added and the note."""
        with self._lock:
            if self._result is None:
                assert self._pending is not None
                self._result, self._pending = self._pending(), None
            return self._result

    def __getstate__(self) -> dict[str, Any]:
        """Pickled repaired, without the lock."""
        return {"_result": self.get()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock, self._pending, self._result = threading.Lock(), None, state["_result"]


def _scale(other: LazyRepair, f: np.ndarray) -> tuple[np.ndarray, float, str]:
    cov, ridge, note = other.get()
    return cov * np.outer(f, f), ridge, note
