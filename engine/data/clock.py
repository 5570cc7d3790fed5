"""One clock for sensors read at other times than each other (``LoadOptions.clock_s``)."""

from __future__ import annotations

import numpy as np

from engine.data.options import step_text


def put_on_clock(
    notes: list[str], stamps: np.ndarray, values: np.ndarray, step_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Move every reading to the step of one clock nearest its time (a time halfway
    between two steps goes to the later) and average a sensor's readings in one step,
    NaN (missing) left out. Sensors read at other times than each other (loggers on
    their own clocks) then share rows. ``stamps`` are int64 ns, ``values`` finite or NaN;
    returns the steps' times (ns) and readings, and says what it did in ``notes``."""
    step = round(step_s * 1e9)
    times = stamps.astype(np.int64)
    slot = (times // step) + (times % step >= step - step // 2)  # nearest, ties later
    steps, row = np.unique(slot, return_inverse=True)
    held = ~np.isnan(values)
    counts = np.empty((steps.size, values.shape[1]))
    merged = np.empty_like(counts)
    for j in range(values.shape[1]):  # a bincount a sensor: O(rows), no (rows, n) temporaries
        counts[:, j] = np.bincount(row, weights=held[:, j], minlength=steps.size)
        sums = np.bincount(
            row, weights=np.where(held[:, j], values[:, j], 0.0), minlength=steps.size
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            merged[:, j] = sums / counts[:, j]  # 0 / 0: no reading in that step, NaN
    shared = int((counts > 1).sum())
    notes.append(
        f"put {times.size:,} rows onto one clock of {step_text(step / 1e9)} steps (each "
        f"reading at the step nearest its time): {steps.size:,} rows"
        + (
            f"; {shared:,} (step, sensor) pairs held more than one reading, averaged"
            if shared
            else ""
        )
    )
    return steps * step, merged
