"""The numeric range a reading may take, so the model's statistics stay finite and meaningful.

Two limits, both checked by the loader before any filling, naming the sensor and
the time of the first offending reading:

- absolute: ``|x| <= MAX_ABS_READING`` (1e60). The model sums squares and
  cross-products of readings (up to 1e120 x rows), and selection squares those
  covariances again (readings to the fourth power: 1e240 x sensors), far from
  float64's 1.8e308. At 1e77 that second square overflows, and a plan from it
  is a plan from infinities. Measured: a sensor at 1e59 beside sensors near 1
  gives the same plan and backtest as at 1e6 (tests/hostile).
- relative to the column's own scale: the reading farthest from the column's
  median (taken over up to 4,096 evenly spaced rows) may be at most
  ``MAX_RELATIVE_DEVIATION`` (1e9) times the mean absolute deviation of the
  *other* readings. No instrument spans nine orders of
  magnitude around its own level; a rain gauge that reads 0 for weeks and then
  300 mm is four orders, far inside (the shipped samples' worst column is at
  9.6). Leaving that one reading out of the scale
  means a single 1e50 cannot inflate its own yardstick. A column with fewer
  than three readings, or whose other readings all equal the median, has no
  scale to compare with and is checked against the absolute limit only.

If the farthest reading passes, every other reading of the column passes too
(its deviation is smaller and its leave-one-out scale is at least as large).
"""

from __future__ import annotations

import warnings

import numpy as np

from engine.data.reader import format_ns
from engine.errors import DataError, ParameterError

MAX_ABS_READING = 1e60
MAX_RELATIVE_DEVIATION = 1e9
MEDIAN_SAMPLE = 4096  # rows the reference median is taken over
CHUNK_VALUES = 1 << 18  # readings per block: temporaries stay small (fresh big arrays are slow)


def check_range(
    source: str, times: np.ndarray, values: np.ndarray, sensors: tuple[str, ...]
) -> None:
    """Raise ``DataError`` for the first reading outside either limit.

    ``times`` (T,) int64 ns sorted, ``values`` (T, n) with NaN for missing.
    """
    n_rows, n = values.shape
    reference = _reference(values)
    scan = _Scan(n)
    step = max(1, CHUNK_VALUES // max(n, 1))
    for start in range(0, n_rows, step):
        block = values[start : start + step]
        with np.errstate(invalid="ignore"):
            outside = np.abs(block) > MAX_ABS_READING
        if outside.any():
            i, j = np.argwhere(outside)[0]
            raise DataError(
                f"{source}: sensor {sensors[j]!r} at {format_ns(times[start + i])}: reading "
                f"{block[i, j]:.6g} is outside +-{MAX_ABS_READING:g}, beyond which the "
                "model's squares overflow"
            )
        scan.add(start, block, reference)
    ratio = scan.ratio()
    bad = np.flatnonzero(ratio > MAX_RELATIVE_DEVIATION)
    if bad.size:
        j, i = bad[0], scan.top[bad[0]]
        raise DataError(
            f"{source}: sensor {sensors[j]!r} at {format_ns(times[i])}: reading "
            f"{values[i, j]:.6g} is {ratio[j]:.1e} times the column's typical deviation "
            f"from its median (limit {MAX_RELATIVE_DEVIATION:g})"
        )


class _Scan:
    """Per column, block by block: the largest deviation, where, and the sum of the others.

    The others' sum never subtracts the largest from a total, so a 1e50 cannot
    cancel the small deviations it would otherwise swamp.
    """

    def __init__(self, n: int) -> None:
        self.largest = np.full(n, -1.0)
        self.top = np.zeros(n, dtype=np.int64)
        self.rest = np.zeros(n)
        self.count = np.zeros(n, dtype=np.int64)

    def add(self, start: int, block: np.ndarray, reference: np.ndarray) -> None:
        dev = np.abs(block - reference)
        missing = np.isnan(dev)
        dev[missing] = 0.0  # a missing reading deviates by nothing
        self.count += block.shape[0] - missing.sum(axis=0)
        where = dev.argmax(axis=0)
        columns = np.arange(dev.shape[1])
        peak = dev[where, columns].copy()
        dev[where, columns] = 0.0
        others = dev.sum(axis=0)
        better = peak > self.largest
        self.rest += others + np.where(better, np.maximum(self.largest, 0.0), peak)
        self.largest = np.where(better, peak, self.largest)
        self.top = np.where(better, where + start, self.top)

    def ratio(self) -> np.ndarray:
        """Largest deviation over the others' mean: (n,), 0 where there is no scale."""
        mean = self.rest / np.maximum(self.count - 1, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((mean > 0) & (self.count >= 3), self.largest / mean, 0.0)


def _reference(values: np.ndarray) -> np.ndarray:
    """Each column's median over at most ``MEDIAN_SAMPLE`` evenly spaced rows: (n,).

    A sample is plenty for a reference level and keeps the check to one pass
    over the data; a column the sample sees only missing gets its full median.
    """
    rows = np.unique(np.linspace(0, values.shape[0] - 1, MEDIAN_SAMPLE).astype(np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN sample columns, handled below
        reference = np.nanmedian(values[rows], axis=0)
        unseen = np.flatnonzero(np.isnan(reference))
        if unseen.size:
            reference[unseen] = np.nanmedian(values[:, unseen], axis=0)
    return reference


def check_eps_units(values: np.ndarray, sensors: tuple[str, ...], eps: dict[str, float]) -> None:
    """``ParameterError`` when a sensor's readings divided by its own eps pass
    ``MAX_ABS_READING``.

    A per-sensor eps is planned on readings in eps units (each divided by its eps,
    ``engine.planning.plan``), whose squares the same limit keeps finite: a tiny eps
    (1e-100 for readings near 30) overflowed there with ``RuntimeWarning`` lines and a
    plan from infinities. ``values`` (T, n) finite, ``eps`` by sensor (the others: none).
    """
    index = [j for j, s in enumerate(sensors) if s in eps]
    if not index or not values.shape[0]:
        return
    top = np.abs(values[:, index]).max(axis=0)
    scaled = top / np.array([eps[sensors[j]] for j in index])
    k = int(np.argmax(scaled))
    if scaled[k] > MAX_ABS_READING:
        name = sensors[index[k]]
        raise ParameterError(
            f"an eps of {eps[name]!r} for sensor {name!r} puts its readings (up to "
            f"{top[k]:.3g}) at {scaled[k]:.1e} eps units, beyond the readings' limit of "
            f"+-{MAX_ABS_READING:g}: use an eps of at least {top[k] / MAX_ABS_READING:.1e}"
        )
