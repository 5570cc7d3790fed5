"""The listener's rates: Spark gives the first batch's input rate as NaN (or null); the
Live page's "Readings in" tile and the timeline must show neither "nan/s" nor a 0 the
readings never had."""

from __future__ import annotations

import math

from engine.live.listener import spark_rate


def test_a_rate_spark_does_not_give_is_none_not_zero() -> None:
    assert spark_rate(None) is None
    assert spark_rate(math.nan) is None
    assert spark_rate(40.5) == 40.5
    assert spark_rate(0.0) == 0.0
