"""The operator's window query (eps, delta, window, slide, aggregate), validated in one place.

``eps`` (in the aggregate's unit), ``delta``, ``window`` and ``slide`` (in
readings) and the aggregate travel together through planning, the live
pipeline and the disorder stage. ``PlanParameters`` checks them here (through
``engine.planning.guarantee.check_parameters``); the stream spec and the
disorder config still carry their own checks.
"""

from __future__ import annotations

import math

import numpy as np

from engine.aggregates import check_window, get_aggregate
from engine.errors import ParameterError


def _is_real(x: object) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


MAX_EPS = 1e100  # a variance target squares it (and readings stay within 1e60: engine.data.range)


def check_eps(eps: object, name: str = "eps") -> None:
    """A tolerance is a finite number > 0, at most ``MAX_EPS`` (its square must not overflow)."""
    if not _is_real(eps) or not math.isfinite(float(eps)) or float(eps) <= 0:  # type: ignore[arg-type]
        raise ParameterError(f"{name} must be a finite number > 0, got {eps!r}")
    if float(eps) > MAX_EPS:  # type: ignore[arg-type]
        raise ParameterError(f"{name} must be at most {MAX_EPS:g}, got {eps!r}")


# Below this the guarantee's quantile levels (1 - 0.7 delta, (1 - delta) ** (1 / w) for
# max/min over long windows) round to 1 in double precision, so every target would be 0
# or a division by zero; and no history could measure so small a rate anyway.
MIN_DELTA = 1e-12


def check_delta(delta: object) -> None:
    """An error rate is strictly between 0 and 1, and at least ``MIN_DELTA``."""
    if not _is_real(delta) or not 0.0 < float(delta) < 1.0:  # type: ignore[arg-type]
        raise ParameterError(f"delta must be a number strictly between 0 and 1, got {delta!r}")
    if float(delta) < MIN_DELTA:  # type: ignore[arg-type]
        raise ParameterError(
            f"delta must be at least {MIN_DELTA:g} (a smaller miss rate rounds to 0 in the "
            f"guarantee's arithmetic and no history can measure it), got {delta!r}"
        )


def check_window_query(
    eps: object, delta: object, window: int, slide: int | None, aggregate: object
) -> None:
    """Raise ``ParameterError`` naming the first bad value (``slide=None``: tumbling)."""
    check_eps(eps)
    check_delta(delta)
    check_window(window, window if slide is None else slide)
    get_aggregate(aggregate)
