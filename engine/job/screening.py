"""What a production micro-batch held besides the plan's sensors' readings: pure pandas.

Two checks, each returning the frame to go on with and the event to log (None
when there is nothing to say):

* ``screen_partials``: a batch's partials (``partials.collected_partials``)
  before the merge. Readings without a sensor or a time cannot be windowed or
  rebuilt (counted and dropped upstream); null or NaN values are counted
  (``missing``); sensors outside the plan were backed up in full by the job and
  are left out of the shadow check. Event ``input_anomaly``.
* ``late_readings``: partials of windows that closed in an earlier batch (the
  watermark, the latest event time less ``--watermark``, passed their end):
  kept in the backup, left out of their windows' aggregates and shadow checks,
  as Spark's own watermark drops them. Files that land out of time order do
  this. Event ``late_readings``.
* ``future_readings``: partials of windows that start more than ``FUTURE_S``
  after the wall clock: kept in the backup, left out of the windows and the
  watermark. Event ``future_readings``.
* ``overfull_windows``: closed windows' results with more readings than the
  window has time steps: a reading that landed twice (two files) is counted
  twice by the aggregate and the shadow check (recovery keeps one), and so is a
  sensor sampling faster than the plan. Said, not repaired: de-duplicating
  would shuffle every reading of every batch, and a duplicate in a later batch
  would still pass. Event ``overfull_windows``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pandas as pd

FUTURE_S = 86_400.0  # a reading stamped more than a day ahead of the clock is not believed


@dataclass(frozen=True)
class Screened:
    """The plan's sensors' partials, the batch's counts and the event to log."""

    partials: pd.DataFrame
    counts: dict[str, int]  # readings, unusable_readings, unplanned_readings, missing_values
    unplanned_sensors: list[str]
    event: dict[str, Any] | None


def screen_partials(partials: pd.DataFrame, planned: Collection[str], unusable: int) -> Screened:
    """Keep the ``planned`` sensors' partials; count what else the batch held."""
    outside = ~partials["sensor"].isin(set(planned))
    kept = partials[~outside]
    counts = {
        "readings": int(partials["readings"].sum()) + unusable,
        "unusable_readings": unusable,
        "unplanned_readings": int(partials.loc[outside, "readings"].sum()),
        "missing_values": int(kept["missing"].sum()),
    }
    names = sorted(set(partials.loc[outside, "sensor"].astype(str)))
    event = None
    if counts["unusable_readings"] or counts["unplanned_readings"] or counts["missing_values"]:
        event = {
            "event": "input_anomaly",
            **counts,
            "unplanned_sensors": names[:20],
            "unplanned_sensor_count": len(names),
            "what": (
                "readings without a sensor or a time were dropped; null or NaN "
                "values were left out of their windows' aggregates; sensors "
                "outside the plan were backed up in full and are not "
                "shadow-checked (plan again with them to include them)"
            ),
        }
    return Screened(kept.reset_index(drop=True), counts, names, event)


def overfull_windows(results: pd.DataFrame, window_rows: int) -> tuple[int, dict[str, Any] | None]:
    """(window, sensor) pairs with more than ``window_rows`` readings, and the event."""
    over = results[results["n"] > window_rows]
    if over.empty:
        return 0, None
    return len(over), {
        "event": "overfull_windows",
        "pairs": len(over),
        "excess_readings": int((over["n"] - window_rows).sum()),
        "sensors": sorted(set(over["sensor"].astype(str)))[:20],
        "what": (
            f"windows with more than their {window_rows} readings: readings that "
            "landed twice, or a sensor sampling faster than the plan; their "
            "aggregates and shadow check count every reading"
        ),
    }


def late_readings(partials: pd.DataFrame, watermark_us: int) -> tuple[int, dict[str, Any] | None]:
    """Readings too late for every window they fall in (their latest window closed
    before this batch), and the event. The event also counts the (window, reading)
    pairs left out (``late_window_readings``): with sliding windows a reading can miss
    its earlier windows and still reach its latest, and those earlier windows were
    published without it."""
    late = partials["window_end"] <= watermark_us
    count = int(partials.loc[late, "readings"].sum())
    pairs = int(partials.loc[late, "n"].sum()) if "n" in partials else count
    if not count and not pairs:
        return 0, None
    return count, {
        "event": "late_readings",
        "late_readings": count,
        "late_window_readings": pairs,
        "windows": int(partials.loc[late, "window_start"].nunique()),
        "watermark": str(pd.Timestamp(watermark_us, unit="us", tz="UTC")),
        "what": (
            "readings whose windows had already closed (they landed later than "
            "--watermark allows, e.g. a sensor's file a batch behind the others) are in "
            "the backup but left out of those windows' aggregates and shadow checks: the "
            "windows were published without them. late_readings missed every window they "
            "fall in, late_window_readings counts each (window, reading) left out; raise "
            "--watermark if files land out of order"
        ),
    }


def future_readings(
    partials: pd.DataFrame, cutoff_us: int
) -> tuple[pd.DataFrame, int, dict[str, Any] | None]:
    """Partials of windows that start after ``cutoff_us`` (the wall clock plus
    ``FUTURE_S``) dropped: readings stamped in the future (a wrong clock, 2099 for
    1999) would move the watermark there, and every later reading would be late for
    good. Returns the partials to go on with, how many readings were dropped, and the
    event."""
    ahead = partials["window_start"] > cutoff_us
    count = int(partials.loc[ahead, "readings"].sum())
    if not count:
        return partials, 0, None
    return (
        partials[~ahead],
        count,
        {
            "event": "future_readings",
            "future_readings": count,
            "latest": str(
                pd.Timestamp(int(partials.loc[ahead, "max_event_us"].max()), unit="us", tz="UTC")
            ),
            "sensors": sorted(map(str, partials.loc[ahead, "sensor"].unique()))[:20],
            "what": (
                "readings stamped more than a day ahead of this machine's clock are in the "
                "backup but left out of the windows, the shadow check and the watermark "
                "(which they would move past every later reading); check the sender's clock"
            ),
        },
    )
