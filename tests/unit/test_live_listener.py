"""The listener's rates: Spark gives the first batch's input rate as NaN (or null); the
Live page's "Readings in" tile and the timeline must not show "nan/s"."""

from __future__ import annotations

import math

from engine.live.listener import spark_rate


def test_a_rate_spark_does_not_give_is_zero() -> None:
    assert spark_rate(None) == 0.0
    assert spark_rate(math.nan) == 0.0
    assert spark_rate(40.5) == 40.5
