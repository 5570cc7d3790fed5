"""From an error tolerance to a variance target, and back (DESIGN.md section 2).

A zero-mean Gaussian error with variance ``v`` lies in ``[-eps, eps]`` with
probability ``2 Phi(eps / sqrt(v)) - 1``. The targets below are the seed's: they
assume reconstruction errors are independent over time, which real sensor data
violates (DESIGN.md section 3). They are the *model-only* guarantee; calibration
corrects them.

``eps`` is in the unit of the aggregate, variances in that unit squared, ``window``
in readings.
"""

from __future__ import annotations

from typing import overload

import numpy as np

from engine.aggregates import get_aggregate
from engine.aggregates import z_value as aggregate_z_value
from engine.errors import ParameterError
from engine.query import check_delta, check_eps
from engine.windows import check_window


def z_value(delta: float) -> float:
    """``Phi^{-1}(1 - delta/2)``: the two-sided standard normal quantile."""
    check_delta(delta)
    return aggregate_z_value(delta)


def variance_target(eps: float, delta: float, window: int, aggregate: str) -> float:
    """Largest per-reading conditional variance that meets ``(eps, delta)``.

    ``avg``: ``w v*``; ``sum``: ``v* / w``; ``max``/``min``: every reading of the
    window within ``eps``, ``(eps / Phi^{-1}((1 + (1-delta)^{1/w}) / 2))^2``;
    with ``v* = (eps / z_value(delta))^2``.
    """
    check_eps(eps)
    check_delta(delta)
    check_window(window, 1)
    return get_aggregate(aggregate).variance_target(eps, delta, window)


@overload
def window_violation_probability(var: float, eps: float, window: int, aggregate: str) -> float: ...
@overload
def window_violation_probability(
    var: np.ndarray, eps: float, window: int, aggregate: str
) -> np.ndarray: ...
def window_violation_probability(
    var: float | np.ndarray, eps: float, window: int, aggregate: str
) -> float | np.ndarray:
    """Model probability that a recovered window aggregate misses by more than ``eps``.

    The inverse of ``variance_target`` under the seed's independence assumption:
    ``avg`` error variance ``v / w``, ``sum`` ``w v``; ``max``/``min`` use the same
    union-style bound as the target, ``1 - (2 Phi(eps / sqrt v) - 1)^w``.

    Parameters
    ----------
    var : per-reading conditional variance, scalar or array of any shape (>= 0).

    Returns
    -------
    Probability with the shape of ``var`` (a float for a scalar). 0 where ``var == 0``.
    """
    check_eps(eps)
    check_window(window, 1)
    agg = get_aggregate(aggregate)
    v = np.asarray(var, dtype=float)
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise ParameterError(f"variance must be finite and >= 0, got {var!r}")
    tail = agg.miss_probability(v, eps, window)
    out = np.asarray(tail, dtype=float)
    return float(out) if out.ndim == 0 else out
