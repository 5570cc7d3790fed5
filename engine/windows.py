"""Windows counted in readings, whatever the aggregate: window ``w``, slide ``l``;
window ``j`` covers rows ``[j*l, j*l + w)``; only complete windows are produced.

Their geometry (``check_window``, ``window_starts``), every window's aggregate of a
(T, n) block of readings (``window_aggregates``, asking the ``engine.aggregates``
object), the recovered windows' errors and the miss rates against eps.
"""

from __future__ import annotations

import numpy as np

from engine.aggregates import get_aggregate
from engine.errors import ParameterError

__all__ = [
    "check_window",
    "count_unheld",
    "violation_rates",
    "window_aggregates",
    "window_errors",
    "window_starts",
]


def count_unheld(held: np.ndarray, first: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """(W, n) how many rows ``first[w] <= r < stop[w]`` of each sensor ``held`` (R, n) bool
    does not hold: 0 where a window's readings of a sensor are all held (backed up, say).
    One pass of cumulative sums, whatever the windows' overlap."""
    gaps = np.vstack([np.zeros((1, held.shape[1]), dtype=np.int64), np.cumsum(~held, axis=0)])
    return np.asarray(gaps[stop] - gaps[first])


def check_window(window: int, slide: int) -> None:
    """Raise ``ParameterError`` unless ``1 <= slide <= window``."""
    if isinstance(window, bool) or not isinstance(window, int | np.integer) or window < 1:
        raise ParameterError(f"window must be an integer >= 1, got {window!r}")
    if isinstance(slide, bool) or not isinstance(slide, int | np.integer) or slide < 1:
        raise ParameterError(f"slide must be an integer >= 1, got {slide!r}")
    if slide > window:
        raise ParameterError(f"slide must not exceed window ({window}), got {slide!r}")


def window_starts(n_rows: int, window: int, slide: int) -> np.ndarray:
    """First row of every complete window: (W,) int."""
    check_window(window, slide)
    if n_rows < window:
        return np.zeros(0, dtype=int)
    return np.arange(0, n_rows - window + 1, slide)


def window_aggregates(values: np.ndarray, window: int, slide: int, aggregate: str) -> np.ndarray:
    """Aggregate every complete sliding window.

    Parameters
    ----------
    values : (T, n) readings (a 1-D array is treated as one sensor).
    window, slide : in readings.
    aggregate : a name of ``AGGREGATES``.

    Returns
    -------
    (W, n) window aggregates.
    """
    agg = get_aggregate(aggregate)
    x = np.asarray(values, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    starts = window_starts(x.shape[0], window, slide)
    if starts.size == 0:
        return np.zeros((0, x.shape[1]))
    return agg.over_windows(x, starts, window)


def window_errors(
    truth: np.ndarray, recovered: np.ndarray, window: int, slide: int, aggregate: str
) -> np.ndarray:
    """Absolute error of every recovered window aggregate: (W, n)."""
    if np.shape(truth) != np.shape(recovered):
        raise ParameterError(
            f"truth and recovered shapes differ: {np.shape(truth)} vs {np.shape(recovered)}"
        )
    a = window_aggregates(truth, window, slide, aggregate)
    b = window_aggregates(recovered, window, slide, aggregate)
    return np.abs(a - b)


def violation_rates(errors: np.ndarray, eps: float | np.ndarray) -> np.ndarray:
    """Fraction of windows whose error exceeds ``eps`` (scalar or (n,)), per sensor: (n,).

    A sensor with no window has rate ``nan`` (nothing was measured).
    """
    e = np.asarray(errors, dtype=float)
    if e.shape[0] == 0:
        return np.full(e.shape[1] if e.ndim == 2 else 1, np.nan)
    return (e > eps).mean(axis=0)
