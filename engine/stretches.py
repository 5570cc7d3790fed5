"""A failure's lost stretch inside windows: which rows each window loses, and maxima.

Under the crash contract a failure loses ``m`` consecutive rows (the exposure). A
window starting at row ``a`` is touched by the stretches starting at ``s = a + d`` for
the ``w + m - 1`` offsets ``d = -(m - 1) .. w - 1`` and loses its rows
``[a + max(d, 0), a + min(d + m, w))``. ``engine.aggregates`` computes each
aggregate's error from these rows.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def exposure_offsets(window: int, exposure: int) -> np.ndarray:
    """(K,) offsets ``d = s - a`` of the stretches ``[s, s + m)`` touching a window at ``a``.

    ``-(m - 1) .. w - 1``: ``K = w + m - 1`` failure positions per window.
    """
    return np.arange(1 - exposure, window)


def lost_rows(starts: np.ndarray, window: int, exposure: int) -> tuple[np.ndarray, np.ndarray]:
    """(W, K) first and end (exclusive) row each window loses at each offset.

    Rows ``[a + max(d, 0), a + min(d + m, w))``: the stretch clipped to the window.
    """
    d = exposure_offsets(window, exposure)
    a = np.asarray(starts)[:, None]
    return a + np.clip(d, 0, window), a + np.clip(d + exposure, 0, window)


def range_max(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, longest: int) -> np.ndarray:
    """Column maxima of ``x[lo:hi]`` (T, n) for every pair of row bounds: (*lo.shape, n).

    ``-inf`` where ``lo == hi``; every ``hi - lo`` is at most ``longest``. A sparse
    table (maxima of ``2^k`` rows) answers each range with two lookups.
    """
    levels, span = [np.asarray(x, dtype=float)], 1
    while 2 * span <= longest:
        prev = levels[-1]
        nxt = np.full_like(prev, -np.inf)
        valid = prev.shape[0] - 2 * span + 1
        if valid > 0:
            nxt[:valid] = np.maximum(prev[:valid], prev[span : span + valid])
        levels.append(nxt)
        span *= 2
    table = np.stack(levels)
    length = np.asarray(hi) - np.asarray(lo)
    level = np.floor(np.log2(np.maximum(length, 1))).astype(int)
    last = table.shape[1] - 1
    first = table[level, np.clip(lo, 0, last)]
    second = table[level, np.clip(np.asarray(hi) - (1 << level), 0, last)]
    return np.where((length > 0)[..., None], np.maximum(first, second), -np.inf)


def in_windows(x: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
    """(W, w, n) the windows of ``x`` (T, n) starting at rows ``starts``, contiguous."""
    return np.ascontiguousarray(np.moveaxis(sliding_window_view(x, window, axis=0)[starts], -1, 1))


def kept_max(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(W, K, n) maxima of every window of ``v`` (W, w, n) outside its rows ``[lo, hi)``.

    ``lo``, ``hi`` (K,) are rows of the window: the prefix maximum before ``lo`` against
    the suffix maximum from ``hi``; ``-inf`` where nothing is kept.
    """
    pad = np.full((v.shape[0], 1, v.shape[2]), -np.inf)
    prefix = np.concatenate([pad, np.maximum.accumulate(v, axis=1)], axis=1)
    suffix = np.concatenate([np.maximum.accumulate(v[:, ::-1], axis=1)[:, ::-1], pad], axis=1)
    return np.maximum(prefix[:, lo], suffix[:, hi])
