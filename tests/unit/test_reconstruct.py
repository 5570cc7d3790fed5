"""Reconstruction and window maths against plain NumPy loops."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ParameterError
from engine.model import LinearMap, column_indices
from engine.windows import violation_rates, window_aggregates, window_errors, window_starts

REDUCE = {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}


@pytest.mark.parametrize("aggregate", ["avg", "sum", "max", "min"])
@pytest.mark.parametrize(("window", "slide"), [(1, 1), (5, 5), (7, 3), (10, 1)])
def test_window_aggregates_match_a_loop(aggregate: str, window: int, slide: int) -> None:
    x = np.random.default_rng(0).normal(size=(53, 4))
    got = window_aggregates(x, window, slide, aggregate)
    starts = range(0, 53 - window + 1, slide)
    want = np.array([REDUCE[aggregate](x[s : s + window], axis=0) for s in starts])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_window_starts_only_complete_windows() -> None:
    assert window_starts(10, 4, 3).tolist() == [0, 3, 6]
    assert window_starts(3, 4, 1).size == 0


@pytest.mark.parametrize(("window", "slide"), [(0, 1), (3, 0), (3, 4), (2.5, 1), (True, 1)])
def test_bad_windows_are_rejected(window: object, slide: object) -> None:
    with pytest.raises(ParameterError):
        window_starts(10, window, slide)  # type: ignore[arg-type]


def test_unknown_aggregate_is_named() -> None:
    with pytest.raises(ParameterError, match="'median'"):
        window_aggregates(np.ones((5, 2)), 2, 1, "median")


def test_linear_map_rebuilds_in_sensor_order() -> None:
    lm = LinearMap(
        sensors=("a", "b", "c"),
        backup=("c",),
        targets=("a", "b"),
        intercept=np.array([1.0, -1.0]),
        coef=np.array([[2.0], [0.5]]),
        conditional_variance=np.array([0.1, 0.2]),
    )
    out = lm.apply(np.array([[1.0], [3.0]]))
    np.testing.assert_allclose(out, [[3.0, -0.5, 1.0], [7.0, 0.5, 3.0]])


def test_linear_map_rejects_overlap_and_bad_shapes() -> None:
    with pytest.raises(ParameterError):
        LinearMap(("a", "b"), ("a",), ("a", "b"), np.zeros(2), np.zeros((2, 1)), np.zeros(2))
    with pytest.raises(ParameterError):
        LinearMap(("a", "b"), ("a",), ("b",), np.zeros(1), np.zeros((2, 1)), np.zeros(1))
    lm = LinearMap(("a", "b"), ("a",), ("b",), np.zeros(1), np.ones((1, 1)), np.zeros(1))
    with pytest.raises(ParameterError):
        lm.apply(np.zeros((3, 2)))


def test_errors_and_violation_rates() -> None:
    truth = np.zeros((6, 2))
    rec = truth.copy()
    rec[:3, 1] = 3.0  # first window of sensor 1 is off by 3
    err = window_errors(truth, rec, 3, 3, "avg")
    np.testing.assert_allclose(err, [[0, 3], [0, 0]])
    np.testing.assert_allclose(violation_rates(err, 1.0), [0.0, 0.5])
    assert np.isnan(violation_rates(np.zeros((0, 2)), 1.0)).all()


def test_column_indices_names_unknown_sensors() -> None:
    assert column_indices(["a", "b", "c"], ["c", "a"]) == [2, 0]
    with pytest.raises(ParameterError, match="'zz'"):
        column_indices(["a"], ["zz"])
