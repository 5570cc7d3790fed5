"""Variance targets checked against the closed forms and by Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from engine.aggregates import aggregate_names
from engine.errors import ParameterError
from engine.planning import (
    variance_target,
    window_violation_probability,
    z_value,
)

DRAWS = 200_000


def test_z_value_known_quantiles():
    assert z_value(0.05) == pytest.approx(1.959963984540054, rel=1e-12)
    assert z_value(0.01) == pytest.approx(2.5758293035489, rel=1e-12)
    assert z_value(1e-12) == pytest.approx(-norm.ppf(0.5e-12), rel=1e-10)  # no rounding


def test_targets_follow_the_design_table():
    eps, delta, w = 0.5, 0.05, 30
    vstar = (eps / 1.959963984540054) ** 2
    assert variance_target(eps, delta, w, "avg") == pytest.approx(w * vstar, rel=1e-12)
    assert variance_target(eps, delta, w, "sum") == pytest.approx(vstar / w, rel=1e-12)
    zmax = norm.ppf((1 + (1 - delta) ** (1 / w)) / 2)
    for agg in ("max", "min"):
        assert variance_target(eps, delta, w, agg) == pytest.approx((eps / zmax) ** 2, rel=1e-9)
    # window 1: every aggregate is one reading
    targets = {agg: variance_target(eps, delta, 1, agg) for agg in aggregate_names()}
    assert max(targets.values()) == pytest.approx(min(targets.values()), rel=1e-9)


@pytest.mark.parametrize("agg", aggregate_names())
@pytest.mark.parametrize(("eps", "delta", "w"), [(0.5, 0.05, 30), (2.0, 0.2, 5), (1e-3, 1e-4, 60)])
def test_violation_probability_inverts_the_target(agg, eps, delta, w):
    v = variance_target(eps, delta, w, agg)
    assert window_violation_probability(v, eps, w, agg) == pytest.approx(delta, rel=1e-7)
    # tighter variance, fewer misses
    assert window_violation_probability(0.5 * v, eps, w, agg) < delta


def test_violation_probability_is_vectorised_and_zero_at_zero():
    p = window_violation_probability(np.array([0.0, 1.0, 4.0]), 1.0, 4, "avg")
    assert p.shape == (3,) and p[0] == 0.0 and p[1] < p[2]
    assert isinstance(window_violation_probability(1.0, 1.0, 4, "max"), float)
    assert window_violation_probability(0.0, 1.0, 4, "max") == 0.0


def simulate_errors(v: float, w: int, seed: int) -> np.ndarray:
    """DRAWS windows of w independent per-reading errors with variance v."""
    return np.random.default_rng(seed).normal(scale=math.sqrt(v), size=(DRAWS, w))


@pytest.mark.parametrize(("agg", "delta", "w"), [("avg", 0.05, 20), ("sum", 0.1, 8)])
def test_avg_and_sum_targets_by_monte_carlo(agg, delta, w):
    eps = 0.7
    v = variance_target(eps, delta, w, agg)
    err = simulate_errors(v, w, seed=w)
    window_err = err.mean(axis=1) if agg == "avg" else err.sum(axis=1)
    rate = float(np.mean(np.abs(window_err) > eps))
    se = math.sqrt(delta * (1 - delta) / DRAWS)
    assert abs(rate - delta) < 4 * se  # the target is exact for independent errors
    # twice the target variance clearly breaks the guarantee
    rate_loose = float(np.mean(np.abs(window_err * math.sqrt(2)) > eps))
    assert rate_loose > delta + 10 * se


@pytest.mark.parametrize("agg", ["max", "min"])
def test_max_min_targets_by_monte_carlo(agg):
    eps, delta, w = 0.4, 0.1, 12
    v = variance_target(eps, delta, w, agg)
    rng = np.random.default_rng(42)
    truth = rng.normal(size=(DRAWS, w))
    err = simulate_errors(v, w, seed=7)
    all_within = np.all(np.abs(err) <= eps, axis=1)
    se = math.sqrt(delta * (1 - delta) / DRAWS)
    assert abs(float(all_within.mean()) - (1 - delta)) < 4 * se
    # the aggregate error of max (min) is bounded by the largest reading error
    reduce = np.max if agg == "max" else np.min
    agg_err = np.abs(reduce(truth + err, axis=1) - reduce(truth, axis=1))
    assert np.all(agg_err[all_within] <= eps + 1e-12)
    assert float(np.mean(agg_err > eps)) <= delta


def test_functions_validate_their_arguments():
    with pytest.raises(ParameterError, match="delta"):
        z_value(1.5)
    with pytest.raises(ParameterError, match="aggregate"):
        variance_target(1.0, 0.05, 10, "mean")
    with pytest.raises(ParameterError, match="variance"):
        window_violation_probability(-1.0, 1.0, 10, "avg")
