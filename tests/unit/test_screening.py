"""The production job's input checks, on hand-made partials and results."""

from __future__ import annotations

import pandas as pd

from engine.job.screening import late_readings, overfull_windows, screen_partials


def test_partials_of_unplanned_sensors_are_counted_and_left_out() -> None:
    partials = pd.DataFrame(
        {
            "sensor": ["a", "b", "NEW", "NEW", "OTHER"],
            "readings": [4, 4, 3, 2, 1],
            "missing": [1, 0, 0, 0, 0],
        }
    )
    got = screen_partials(partials, ("a", "b"), unusable=5)
    assert got.partials["sensor"].tolist() == ["a", "b"]
    assert got.counts == {
        "readings": 4 + 4 + 3 + 2 + 1 + 5,
        "unusable_readings": 5,
        "unplanned_readings": 6,
        "missing_values": 1,
    }
    assert got.unplanned_sensors == ["NEW", "OTHER"]
    assert got.event is not None and got.event["unplanned_sensor_count"] == 2

    clean = screen_partials(partials.iloc[:2].assign(missing=0), ("a", "b"), unusable=0)
    assert clean.event is None and clean.counts["readings"] == 8


def test_windows_with_more_readings_than_time_steps_are_said() -> None:
    results = pd.DataFrame({"sensor": ["a", "a", "b", "c"], "n": [8, 12, 9, 7]})
    pairs, event = overfull_windows(results, window_rows=8)
    assert pairs == 2 and event is not None
    assert event["excess_readings"] == 4 + 1 and event["sensors"] == ["a", "b"]
    assert overfull_windows(results[results["n"] <= 8], window_rows=8) == (0, None)


def test_readings_of_windows_closed_before_the_batch_are_counted_late() -> None:
    hour = 3_600_000_000
    partials = pd.DataFrame(
        {
            "window_start": [0, 0, 8 * hour, 16 * hour],
            "window_end": [8 * hour, 8 * hour, 16 * hour, 24 * hour],
            "readings": [8, 7, 8, 3],
        }
    )
    count, event = late_readings(partials, watermark_us=16 * hour)  # two windows closed
    assert count == 8 + 7 + 8 and event is not None and event["windows"] == 2
    assert late_readings(partials, watermark_us=8 * hour - 1) == (0, None)


def test_readings_late_for_some_of_their_sliding_windows_are_counted_per_window() -> None:
    """Windows of 8 hours sliding by 4: a reading at hour 6 falls in [0, 8) and [4, 12).
    A sensor's file a batch behind the others finds [0, 8) closed: its readings there
    reach [4, 12) (their latest window, so not late for every window) but [0, 8) was
    published without them. The event counts those pairs."""
    hour = 3_600_000_000
    partials = pd.DataFrame(
        {
            "window_start": [0, 4 * hour],
            "window_end": [8 * hour, 12 * hour],
            "n": [4, 4],  # hours 4-7 in both windows
            "readings": [0, 4],  # each counted in its latest window only
        }
    )
    count, event = late_readings(partials, watermark_us=8 * hour)
    assert count == 0 and event is not None
    assert event["late_window_readings"] == 4 and event["windows"] == 1
