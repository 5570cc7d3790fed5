"""engine.aggregates: each aggregate against a naive reference, partial state, model maths."""

from __future__ import annotations

import numpy as np
import pytest

from engine.aggregates import (
    AGGREGATE_NAMES,
    get_aggregate,
    window_aggregates,
    window_starts,
)
from engine.errors import ParameterError

NAIVE = {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
@pytest.mark.parametrize(("window", "slide"), [(1, 1), (5, 2), (7, 7)])
def test_window_aggregates_match_a_loop_over_windows(name: str, window: int, slide: int) -> None:
    x = np.random.default_rng(3).normal(size=(40, 3))
    got = window_aggregates(x, window, slide, name)
    want = np.array(
        [NAIVE[name](x[s : s + window], axis=0) for s in window_starts(40, window, slide)]
    )
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_partial_state_gives_the_aggregate_of_a_complete_window(name: str) -> None:
    x = np.random.default_rng(4).normal(size=9)
    agg = get_aggregate(name)
    got = agg.from_partial(x.size, x.sum(), x.max(), x.min(), window=9, final=True)
    assert got == pytest.approx(NAIVE[name](x))


def test_an_incomplete_sum_is_scaled_to_the_window_until_final() -> None:
    agg = get_aggregate("sum")
    assert agg.from_partial(3, 6.0, 3.0, 1.0, window=6, final=False) == pytest.approx(12.0)
    assert agg.from_partial(3, 6.0, 3.0, 1.0, window=6, final=True) == pytest.approx(6.0)


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
@pytest.mark.parametrize("delta", [0.01, 0.05, 0.3])
def test_miss_probability_at_the_variance_target_is_delta(name: str, delta: float) -> None:
    agg = get_aggregate(name)
    target = agg.variance_target(eps=2.0, delta=delta, window=12)
    assert float(agg.miss_probability(np.array(target), 2.0, 12)) == pytest.approx(delta, rel=1e-9)


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_model_miss_probability_matches_monte_carlo_for_independent_errors(name: str) -> None:
    rng = np.random.default_rng(5)
    agg, w, eps, var = get_aggregate(name), 8, 1.0, 0.3
    errors = rng.normal(0.0, np.sqrt(var), size=(200_000, w))
    truth = rng.normal(size=(200_000, w))
    if name in ("avg", "sum"):
        miss = np.abs(NAIVE[name](errors, axis=1)) > eps
        p = float(np.mean(miss))
        assert float(agg.miss_probability(np.array(var), eps, w)) == pytest.approx(p, abs=0.004)
    else:
        # The seed's max/min bound: every reading within eps implies the extreme is.
        all_within = np.all(np.abs(errors) <= eps, axis=1)
        assert float(agg.miss_probability(np.array(var), eps, w)) == pytest.approx(
            1 - np.mean(all_within), abs=0.004
        )
        extreme = NAIVE[name]
        real = np.mean(np.abs(extreme(truth + errors, axis=1) - extreme(truth, axis=1)) > eps)
        assert real <= 1 - np.mean(all_within) + 0.004


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_prefix_errors_match_recomputing_each_prefix(name: str) -> None:
    x = np.random.default_rng(6).normal(size=10)
    agg = get_aggregate(name)
    full = NAIVE[name](x)
    scale = x.size if name == "sum" else 1
    want = [
        abs((np.mean(x[:n]) * scale if name in ("avg", "sum") else NAIVE[name](x[:n])) - full)
        for n in range(1, x.size + 1)
    ]
    np.testing.assert_allclose(agg.prefix_errors(x), want, atol=1e-12)


@pytest.mark.parametrize("bad", ["median", "", None, 3])
def test_unknown_aggregate_is_a_parameter_error_naming_it(bad: object) -> None:
    with pytest.raises(ParameterError, match=repr(bad).replace("(", r"\(")):
        get_aggregate(bad)
