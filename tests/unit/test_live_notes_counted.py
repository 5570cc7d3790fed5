"""What a crash plan's shadow misses count is said as every rate is (``pct``): a few
misses among many failure positions are not "0.0 %", nearly all are not "100.0 %"."""

from __future__ import annotations

import pytest

from ui.format import shadow_counted


@pytest.mark.parametrize(
    ("misses", "windows", "said"),
    [
        (0.3, 1000, "< 0.1 % of the failures touching its 1,000 shadow windows"),
        (999.7, 1000, "> 99.9 % of the failures touching its 1,000 shadow windows"),
        (0.0, 1000, "0.0 % of the failures touching its 1,000 shadow windows"),
        (20.0, 1000, "2.0 % of the failures touching its 1,000 shadow windows"),
        (0.0, 0, "0.0 % of the failures touching its 0 shadow windows"),
    ],
)
def test_a_crash_share_is_never_rounded_onto_0_or_100_percent(
    misses: float, windows: int, said: str
) -> None:
    assert shadow_counted(misses, windows, "crash") == said


def test_a_range_count_is_whole_windows() -> None:
    assert shadow_counted(3.0, 1200, "range") == "3 of 1,200 shadow windows"
