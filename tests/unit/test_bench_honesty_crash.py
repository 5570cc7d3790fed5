"""The honesty benchmark's crash scoring (built window by window) against the engine's
``Aggregate.exposure_errors`` (prefix sums, sparse tables): two implementations, one answer."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_honesty import crash_misses, exposures
from engine.aggregates import aggregate_names, get_aggregate
from engine.windows import window_starts


@pytest.mark.parametrize("name", aggregate_names())
@pytest.mark.parametrize(("window", "exposure"), [(6, 1), (6, 2), (24, 6), (4, 4)])
def test_bench_crash_misses_match_the_engine(name: str, window: int, exposure: int) -> None:
    rng = np.random.default_rng(2)
    truth = np.cumsum(rng.normal(size=(10 * window + 3, 3)), axis=0)
    recovered = truth + rng.normal(scale=0.8, size=truth.shape)
    starts = window_starts(truth.shape[0], window, window)
    err = get_aggregate(name).exposure_errors(truth, recovered, starts, window, exposure)
    eps = np.quantile(np.abs(err), [0.5, 0.8, 0.95], axis=(0, 1)).diagonal()  # some miss
    got = crash_misses(truth, recovered, window, name, exposure, eps)
    np.testing.assert_allclose(got, (np.abs(err) > eps).mean(axis=1), atol=1e-12)
    assert got.shape == (10, 3) and 0 < got.mean() < 1


def test_exposures_are_w_over_12_w_over_4_and_w_rounded_half_up() -> None:
    assert exposures(24) == {"w/12": 2, "w/4": 6, "w": 24}
    assert exposures(6) == {"w/12": 1, "w/4": 2, "w": 6}
    assert exposures(10) == {"w/12": 1, "w/4": 3, "w": 10}
    assert exposures(32) == {"w/12": 3, "w/4": 8, "w": 32}
    assert exposures(4, ("w",)) == {"w": 4}
