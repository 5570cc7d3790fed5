"""The live results and a disorder stage's as one frame: an empty side takes no part
(pandas deprecates letting an empty frame's dtypes into a concatenation)."""

from __future__ import annotations

import warnings

import pandas as pd

from engine.live.operator_state import with_stage_results


def _results(n: int) -> pd.DataFrame:
    times = pd.date_range("2024-01-01", periods=n, freq="h", tz="UTC")
    return pd.DataFrame(
        {"window_start": times, "window_end": times + pd.Timedelta("1h"),
         "sensor": ["a"] * n, "value": [1.0] * n, "kind": ["live"] * n}
    )  # fmt: skip


def test_an_empty_side_is_left_out_and_the_times_are_naive_utc() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        empty = pd.DataFrame(columns=_results(0).columns)  # a stage with nothing: no dtypes
        for live, staged in ((_results(2), empty), (empty, _results(2))):
            both = with_stage_results(live, staged)
            assert len(both) == 2 and list(both.index) == [0, 1]
            assert both["value"].dtype == float and both["window_start"].dt.tz is None
        both = with_stage_results(_results(2), _results(3))
        assert len(both) == 5 and both["window_end"].dt.tz is None
