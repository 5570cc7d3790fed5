"""The crash contract's rules, as the live pipeline keeps them.

A crash-contract plan (``query.exposure = m``) promises its miss rate for a failure
that loses at most ``m`` consecutive rows of the rebuilt sensors: the micro-batch in
flight, whose input is gone while the open windows' state and the batch's backup
survive. That holds only while the pipeline keeps these rules, which
``stored_sensors`` applies to every micro-batch (approx mode):

* a micro-batch holding more than ``m`` rows (a backlog after downtime, a large
  landing file) backs up every sensor: a crash inside it would lose more rows
  than the plan covers;
* after a recovery, every sensor is backed up until the windows open at the
  failure have closed: a second failure in one of them would lose rows a second
  time (the rebuilt rows live in the window state, which that failure may take).

A range-contract plan (``exposure`` None) is calibrated for whole windows rebuilt,
which covers any loss inside them: neither rule applies. ``BatchBackup.reason``
says why a batch backed up everything; the pipeline reports it (status, timeline).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from engine.live.batch import WindowState
from engine.live.run_config import default_rows_per_file
from engine.live.spec import PipelineOptions, StreamSpec

__all__ = [
    "BATCHES_PER_WINDOW",
    "BatchBackup",
    "batch_rows",
    "default_exposure",
    "feed_within_exposure",
    "repair_window_end",
    "stored_sensors",
]

# The app's replay commits a micro-batch about every quarter window by default: that is
# the exposure a crash-contract plan is made for unless the operator says otherwise.
BATCHES_PER_WINDOW = 4
OVER_EXPOSURE = "over exposure"
AFTER_RECOVERY = "after recovery"


@dataclass(frozen=True)
class BatchBackup:
    """The sensors one micro-batch backs up, and why all of them when it is all."""

    sensors: tuple[str, ...]
    reason: str | None = None  # None: the plan's own set
    rows: int = 0  # the batch's rows (distinct readings indices)
    text: str = ""  # one line for the operator when ``reason`` is set


def batch_rows(pdf: pd.DataFrame) -> int:
    """Rows (distinct reading indices) a micro-batch carries."""
    return int(pdf["seq"].nunique()) if len(pdf) else 0


def repair_window_end(damaged_until: int, window: int, slide: int) -> int:
    """The last row of the last window holding a row ``<= damaged_until`` (-1 if none).

    Every window that holds a rebuilt row of the last failure has closed once the
    stream is past this row.
    """
    if damaged_until < 0:
        return -1
    return (damaged_until // slide) * slide + window - 1


def stored_sensors(
    pdf: pd.DataFrame, spec: StreamSpec, mode: str, state: WindowState
) -> BatchBackup:
    """What the micro-batch ``pdf`` backs up under ``spec`` in ``mode``, given the
    window state before it (``state.damaged_until``: rows the last failure lost)."""
    planned = spec.stored_sensors(mode)
    rows = batch_rows(pdf)
    m = spec.query.exposure
    if mode != "approx" or m is None or rows == 0 or set(planned) == set(spec.sensors):
        return BatchBackup(planned, None, rows)
    if rows > m:
        text = (
            f"a micro-batch of {rows} rows exceeds the plan's exposure of {m} row"
            f"{'' if m == 1 else 's'}: every sensor backed up for it"
        )
        return BatchBackup(spec.sensors, OVER_EXPOSURE, rows, text)
    end = repair_window_end(state.damaged_until, spec.window, spec.slide)
    if int(pdf["seq"].min()) <= end:
        text = (
            f"windows open at the last failure close at row {end}: every sensor backed up "
            "until then"
        )
        return BatchBackup(spec.sensors, AFTER_RECOVERY, rows, text)
    return BatchBackup(planned, None, rows)


def feed_within_exposure(
    spec: StreamSpec, rows_per_file: int | None, options: PipelineOptions | None
) -> tuple[int, PipelineOptions]:
    """Landing files and a trigger whose micro-batches hold at most the plan's exposure.

    A replayed feed commits ``max_files_per_trigger`` files of ``rows_per_file`` rows at
    most per micro-batch: that is the exposure the pipeline gives a failure. For a
    crash-contract plan both are cut to fit its exposure ``m``: files of at most ``m``
    rows, as many a trigger as fit in ``m``. A batch that still holds more (late
    readings of earlier rows) backs up every sensor (``stored_sensors``).
    """
    rows = rows_per_file or default_rows_per_file(spec)
    opts = options or PipelineOptions()
    m = spec.query.exposure
    if m is None:
        return rows, opts
    rows = min(rows, m)
    return rows, replace(
        opts, max_files_per_trigger=max(1, min(opts.max_files_per_trigger, m // rows))
    )


def default_exposure(window: int) -> int:
    """The rows one failure loses when the feed commits ``BATCHES_PER_WINDOW`` micro-batches
    a window: ``ceil(window / BATCHES_PER_WINDOW)``, at least 1."""
    return max(1, -(-int(window) // BATCHES_PER_WINDOW))
