"""The numeric range a reading may take, so the model's statistics stay finite and meaningful.

Two limits, both checked by the loader before any filling, naming the sensor and
the time of the first offending reading:

- absolute: ``|x| <= MAX_ABS_READING`` (1e100). The model sums squares and
  cross-products of readings over up to millions of rows; at 1e100 those sums
  stay below 1e200 x rows, far from float64's 1.8e308, where 1e154 readings
  already overflow into an infinite covariance (and a plan from it).
- relative to the column's own scale: the reading farthest from the column's
  median may be at most ``MAX_RELATIVE_DEVIATION`` (1e9) times the mean absolute
  deviation of the *other* readings. No instrument spans nine orders of
  magnitude around its own level; a rain gauge that reads 0 for weeks and then
  300 mm is four orders, far inside. Leaving that one reading out of the scale
  means a single 1e50 cannot inflate its own yardstick. A column with fewer
  than three readings, or whose other readings all equal the median, has no
  scale to compare with and is checked against the absolute limit only.

If the farthest reading passes, every other reading of the column passes too
(its deviation is smaller and its leave-one-out scale is at least as large).
"""

from __future__ import annotations

import numpy as np

from engine.data.reader import format_ns
from engine.errors import DataError

MAX_ABS_READING = 1e100
MAX_RELATIVE_DEVIATION = 1e9


def check_range(
    source: str, times: np.ndarray, values: np.ndarray, sensors: tuple[str, ...]
) -> None:
    """Raise ``DataError`` for the first reading outside either limit.

    ``times`` (T,) int64 ns sorted, ``values`` (T, n) with NaN for missing.
    """
    with np.errstate(invalid="ignore"):
        outside = np.abs(values) > MAX_ABS_READING
    if outside.any():
        i, j = np.argwhere(outside)[0]
        raise DataError(
            f"{source}: sensor {sensors[j]!r} at {format_ns(times[i])}: reading "
            f"{values[i, j]:.6g} is outside +-{MAX_ABS_READING:g}, beyond which the model's "
            "sums of squares overflow"
        )
    _check_relative(source, times, values, sensors)


def _check_relative(
    source: str, times: np.ndarray, values: np.ndarray, sensors: tuple[str, ...]
) -> None:
    present = ~np.isnan(values)
    count = present.sum(axis=0)
    usable = np.flatnonzero(count >= 3)
    if usable.size == 0:
        return
    x = values[:, usable]
    dev = np.abs(x - np.nanmedian(x, axis=0))
    top = np.argmax(np.where(np.isnan(dev), -1.0, dev), axis=0)
    columns = np.arange(usable.size)
    largest = dev[top, columns].copy()
    dev[top, columns] = np.nan  # summed without it: a 1e50 would swamp the others' sum
    rest = np.nansum(dev, axis=0) / (count[usable] - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(rest > 0, largest / rest, 0.0)
    bad = np.flatnonzero(ratio > MAX_RELATIVE_DEVIATION)
    if bad.size:
        k = bad[0]
        i, j = top[k], usable[k]
        raise DataError(
            f"{source}: sensor {sensors[j]!r} at {format_ns(times[i])}: reading "
            f"{values[i, j]:.6g} is {ratio[k]:.1e} times the column's typical deviation from "
            f"its median (limit {MAX_RELATIVE_DEVIATION:g})"
        )
