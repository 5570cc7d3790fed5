"""engine.aggregates: each aggregate against a naive reference, partial state, model maths."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.aggregates import Aggregate, aggregate_names, get_aggregate
from engine.errors import ParameterError
from engine.partial_state import Field
from engine.windows import window_aggregates, window_starts

AGGREGATE_NAMES = aggregate_names()

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
@pytest.mark.parametrize("cut", [0, 1, 4, 9])
def test_merged_partial_states_give_the_aggregate_of_the_whole_window(name: str, cut: int) -> None:
    x = np.random.default_rng(4).normal(size=9)
    agg = get_aggregate(name)
    merged = agg.merge(agg.partial(x[:cut]), agg.partial(x[cut:]))
    assert float(agg.finish(merged)) == pytest.approx(NAIVE[name](x))
    assert merged["n"] == 9


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_a_partial_state_leaves_missing_readings_out(name: str) -> None:
    x = np.array([np.nan, 2.0, -1.0, np.nan, 5.0])
    agg = get_aggregate(name)
    state = agg.partial(x)
    assert state["n"] == 3
    assert float(agg.finish(state)) == pytest.approx(NAIVE[name](x[~np.isnan(x)]))


def test_an_incomplete_sum_is_scaled_to_the_window_until_final() -> None:
    agg = get_aggregate("sum")
    state = agg.partial(np.array([1.0, 2.0, 3.0]))
    assert float(agg.finish(state, window=6)) == pytest.approx(12.0)
    assert float(agg.finish(state)) == pytest.approx(6.0)


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_windows_from_partial_states_match_each_aggregates_own_computation(name: str) -> None:
    """The base class's windows (partial, then finish) against the fast paths."""
    x = np.random.default_rng(7).normal(size=(30, 4))
    starts = window_starts(30, 6, 2)
    agg = get_aggregate(name)
    generic = Aggregate.over_windows(agg, x, starts, 6)
    np.testing.assert_allclose(generic, agg.over_windows(x, starts, 6), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", AGGREGATE_NAMES)
def test_the_aggregate_of_ones_is_what_a_linear_rebuild_scales_the_intercept_by(
    name: str,
) -> None:
    agg = get_aggregate(name)
    n = np.array([1.0, 5.0])
    want = NAIVE[name](np.ones(5))
    assert float(agg.finish(agg.constant_state(n))[1]) == pytest.approx(want)


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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3) | st.just(float("nan")), max_size=12),
    st.sampled_from(["sum", "max", "min"]),
    st.integers(0, 3),
)
def test_adding_readings_one_by_one_is_folding_them_at_once(
    values: list[float], reduce: str, power: int
) -> None:
    """The ledger adds late readings one at a time; the job folds batches with NumPy."""
    field = Field("f", reduce, power)  # type: ignore[arg-type]
    one_by_one = field.empty
    for v in values:
        one_by_one = field.add(one_by_one, v)
    at_once = float(field.fold(np.asarray(values, dtype=float)))
    assert one_by_one == pytest.approx(at_once, rel=1e-12, nan_ok=True)
