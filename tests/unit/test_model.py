"""GaussianModel and MomentStats against plain NumPy on the full data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import DataError, NotFittedError, ParameterError
from engine.model import GaussianModel, MomentStats
from engine.model.repair import RIDGE_FLOOR, RIDGE_TRIGGER


def correlated(rng: np.random.Generator, t: int = 500, n: int = 6) -> np.ndarray:
    load = rng.normal(size=(n, 3))
    return rng.normal(size=(t, 3)) @ load.T + 0.3 * rng.normal(size=(t, n)) + 10.0


def test_moments_match_numpy():
    x = correlated(np.random.default_rng(0))
    stats = MomentStats.from_array(x)
    assert stats.count == 500
    np.testing.assert_allclose(stats.mean, np.mean(x, axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats.covariance(), np.cov(x, rowvar=False), rtol=1e-10)
    np.testing.assert_allclose(stats.covariance(ddof=0), np.cov(x, rowvar=False, ddof=0))


@pytest.mark.parametrize("seed", range(5))
def test_merge_of_random_splits_equals_full_data(seed):
    rng = np.random.default_rng(seed)
    x = correlated(rng, t=400)
    cuts = np.sort(rng.choice(np.arange(1, 400), size=int(rng.integers(1, 8)), replace=False))
    parts = [MomentStats.from_array(p) for p in np.split(x, cuts)]
    order = rng.permutation(len(parts))
    merged = parts[order[0]]
    for k in order[1:]:
        merged = merged.merge(parts[k])
    full = MomentStats.from_array(x)
    assert merged.count == full.count
    np.testing.assert_allclose(merged.mean, full.mean, rtol=1e-12)
    np.testing.assert_allclose(merged.m2, full.m2, rtol=1e-9, atol=1e-9)


def test_merge_with_empty_and_single_rows():
    x = correlated(np.random.default_rng(1), t=50)
    empty = MomentStats.from_array(x[:0])
    merged = empty
    for row in x:  # one reading at a time, as a stream would
        merged = merged.merge(MomentStats.from_array(row[None, :]))
    np.testing.assert_allclose(merged.covariance(), np.cov(x, rowvar=False), rtol=1e-9)
    assert MomentStats.from_array(x).merge(empty).count == 50


def test_from_sums_equals_from_array():
    x = correlated(np.random.default_rng(2))
    a = MomentStats.from_array(x)
    b = MomentStats.from_sums(x.shape[0], x.sum(axis=0), x.T @ x)
    np.testing.assert_allclose(b.mean, a.mean, rtol=1e-12)
    np.testing.assert_allclose(b.covariance(), a.covariance(), rtol=1e-7, atol=1e-9)


def test_merge_rejects_different_sensor_counts():
    a = MomentStats.from_array(np.ones((3, 2)))
    b = MomentStats.from_array(np.ones((3, 4)))
    with pytest.raises(ParameterError, match="2 and 4"):
        a.merge(b)


def inverse_conditional(cov, obs):
    """The textbook formula with an explicit inverse (reference)."""
    n = cov.shape[0]
    y = [i for i in range(n) if i not in obs]
    inv = np.linalg.inv(cov[np.ix_(obs, obs)])
    coef = cov[np.ix_(y, obs)] @ inv
    var = np.diag(cov)[y] - np.einsum("ij,ji->i", coef, cov[np.ix_(obs, y)])
    return y, coef, var


def test_fit_and_conditionals_match_numpy_formulas():
    rng = np.random.default_rng(3)
    x = correlated(rng)
    model = GaussianModel().fit(x, sensors=[f"a{i}" for i in range(6)])
    np.testing.assert_allclose(model.mean_, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(model.cov_, np.cov(x, rowvar=False), rtol=1e-10)
    assert model.ridge_ == 0.0 and model.repair_note_ == ""
    obs = [4, 1]
    y, coef, var = inverse_conditional(model.cov_, obs)
    full = model.conditional_variance(obs)
    np.testing.assert_allclose(full[y], var, rtol=1e-9)
    assert full[4] == 0.0 and full[1] == 0.0
    lm = model.linear_map(obs)
    assert lm.backup == ("a4", "a1") and lm.targets == tuple(f"a{i}" for i in y)
    np.testing.assert_allclose(lm.coef, coef, rtol=1e-9)
    np.testing.assert_allclose(lm.intercept, model.mean_[y] - coef @ model.mean_[obs], rtol=1e-9)
    np.testing.assert_allclose(lm.conditional_variance, var, rtol=1e-9)
    rebuilt = lm.apply(x[:, obs])
    np.testing.assert_allclose(rebuilt[:, obs], x[:, obs])
    residual = x[:, y] - rebuilt[:, y]  # in-sample: residual variance = conditional variance
    np.testing.assert_allclose(residual.var(axis=0, ddof=1), var, rtol=1e-8)


def test_empty_observed_set_gives_marginals():
    model = GaussianModel().fit(correlated(np.random.default_rng(4)))
    np.testing.assert_allclose(model.conditional_variance([]), np.diag(model.cov_))
    lm = model.linear_map([])
    np.testing.assert_allclose(lm.intercept, model.mean_)
    assert lm.coef.shape == (6, 0)


def test_fit_stats_equals_fit():
    x = correlated(np.random.default_rng(5))
    a = GaussianModel().fit(x)
    stats = MomentStats.from_array(x[:100]).merge(MomentStats.from_array(x[100:]))
    b = GaussianModel().fit_stats(stats)
    np.testing.assert_allclose(b.cov_, a.cov_, rtol=1e-10)
    assert b.sensors_ == a.sensors_ == tuple(f"s{i}" for i in range(6))


def test_duplicate_column_gets_ridge_and_note():
    rng = np.random.default_rng(6)
    x = correlated(rng)
    x = np.column_stack([x, x[:, 2]])
    model = GaussianModel().fit(x)
    assert model.ridge_ > 0.0
    mean_var = np.trace(np.cov(x, rowvar=False)) / 7
    assert model.ridge_ < 1e-8 * mean_var
    assert "ridge" in model.repair_note_ and model.repair_note_.endswith(".")
    assert np.linalg.eigvalsh(model.cov_)[0] > 0
    var = model.conditional_variance([2])
    assert var[6] < 1e-7 * mean_var  # the duplicate is (almost) known exactly
    lm = model.linear_map([2])
    np.testing.assert_allclose(lm.apply(x[:, [2]])[:, 6], x[:, 6], atol=1e-6)


def test_near_singular_collinear_columns_are_repaired():
    rng = np.random.default_rng(7)
    x = correlated(rng, t=300)
    x = np.column_stack([x, x[:, 0] + x[:, 1] + 1e-9 * rng.normal(size=300)])
    model = GaussianModel().fit(x)
    assert model.ridge_ > 0 and "near-singular" in model.repair_note_
    np.linalg.cholesky(model.cov_)  # positive definite after repair
    assert np.all(model.conditional_variance([0, 1]) >= 0)


def test_constant_sensor_is_reconstructed_by_its_mean():
    rng = np.random.default_rng(8)
    x = correlated(rng)
    x = np.column_stack([x[:, :3], np.full(500, 0.1), x[:, 3:]])
    model = GaussianModel().fit(x, sensors=list("abcdefg"))
    assert "constant sensor(s) d" in model.repair_note_.lower()
    assert model.ridge_ == 0.0
    assert np.all(model.cov_[3] == 0.0) and np.all(model.cov_[:, 3] == 0.0)
    var = model.conditional_variance([0, 3])
    assert var[3] == 0.0
    lm = model.linear_map([0])
    pos = lm.targets.index("d")
    assert lm.conditional_variance[pos] == 0.0
    np.testing.assert_allclose(lm.apply(x[:, [0]])[:, 3], 0.1)
    lm2 = model.linear_map([3, 0])  # a constant backed-up sensor carries no information
    np.testing.assert_array_equal(lm2.coef[:, 0], 0.0)
    np.testing.assert_allclose(lm2.coef[:, 1], lm.coef[[i for i in range(6) if i != pos], 0])


def test_constant_sensor_through_from_sums_is_still_constant():
    x = np.column_stack([correlated(np.random.default_rng(9), n=3), np.full(500, 1234.5678)])
    stats = MomentStats.from_sums(500, x.sum(axis=0), x.T @ x)
    model = GaussianModel().fit_stats(stats)
    assert model.cov_[3, 3] == 0.0 and "constant" in model.repair_note_.lower()


def test_user_ridge_is_added():
    x = correlated(np.random.default_rng(10))
    model = GaussianModel(ridge=0.5).fit(x)
    assert model.ridge_ == 0.5
    np.testing.assert_allclose(model.cov_, np.cov(x, rowvar=False) + 0.5 * np.eye(6))
    assert "0.5" in model.repair_note_


def test_unfitted_model_raises():
    model = GaussianModel()
    with pytest.raises(NotFittedError):
        model.conditional_variance([0])
    with pytest.raises(NotFittedError):
        model.linear_map([0])


@pytest.mark.parametrize(
    ("x", "error"),
    [
        (np.ones(5), ParameterError),
        (np.ones((1, 3)), ParameterError),
        (np.ones((2, 2, 2)), ParameterError),
        (np.array([[1.0, np.nan], [2.0, 3.0], [1.0, 1.0]]), DataError),
    ],
)
def test_bad_input_is_rejected(x, error):
    with pytest.raises(error):
        GaussianModel().fit(x)


def test_bad_arguments_are_rejected():
    x = correlated(np.random.default_rng(11))
    with pytest.raises(ParameterError, match="-1"):
        GaussianModel(ridge=-1.0)
    with pytest.raises(ParameterError, match="distinct"):
        GaussianModel().fit(x, sensors=list("aabcde"))
    model = GaussianModel().fit(x)
    with pytest.raises(ParameterError, match="6"):
        model.conditional_variance([6])
    with pytest.raises(ParameterError, match="distinct"):
        model.linear_map([1, 1])
    with pytest.raises(ParameterError):
        MomentStats.from_sums(3, np.ones(2), np.ones((3, 3)))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 9),
    data=st.data(),
)
def test_more_observed_sensors_never_increase_conditional_variance(seed, n, data):
    x = correlated(np.random.default_rng(seed), t=60, n=n)
    model = GaussianModel().fit(x)
    big = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    small = big[: data.draw(st.integers(0, len(big)))]
    v_small = model.conditional_variance(small)
    v_big = model.conditional_variance(big)
    assert np.all(v_big <= v_small + 1e-9 * np.trace(model.cov_))
    assert np.all(v_small <= np.diag(model.cov_) + 1e-12)


def _eigen_repair_reference(cov: np.ndarray, ridge: float | None) -> tuple[float, bool]:
    """The ridge decision read off the smallest eigenvalue directly: (ridge, repaired)."""
    mean_var = float(np.trace(cov)) / cov.shape[0]
    added = 0.0 if ridge is None else ridge
    smallest = float(np.linalg.eigvalsh(cov)[0]) + added
    if smallest < RIDGE_TRIGGER * mean_var:
        return added + RIDGE_FLOOR * mean_var - smallest, True
    return added, False


@pytest.mark.parametrize("ridge", [None, 0.0, 1e-11])
@pytest.mark.parametrize("factor", [0.0, 0.01, 0.5, 2.0, 100.0, 1e6])
def test_the_ridge_decision_follows_the_smallest_eigenvalue(factor, ridge):
    """The repair checks the smallest eigenvalue by a shifted Cholesky factorisation and
    sizes the ridge by the eigenvalue only when it fails: the same ridge as reading the
    eigenvalue always, for eigenvalues from 0 to a million times the trigger."""
    rng = np.random.default_rng(int(factor * 10) + (0 if ridge is None else 1))
    n = 30
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    eig = rng.uniform(0.5, 2.0, size=n)
    eig[0] = factor * RIDGE_TRIGGER * float(eig.mean())
    cov = (q * eig) @ q.T
    cov = (cov + cov.T) / 2
    model = GaussianModel(ridge).fit_stats(MomentStats(1000, np.zeros(n), cov * 999))
    expected, repaired = _eigen_repair_reference(cov, ridge)
    assert model.ridge_ == pytest.approx(expected, rel=1e-6, abs=1e-15)
    assert ("near-singular" in model.repair_note_) == repaired


@pytest.mark.parametrize("defer", [False, True], ids=["moments", "deferred"])
def test_a_large_common_offset_is_not_mistaken_for_constant_sensors(defer: bool) -> None:
    """Readings around 1e8 that vary by units (a cumulative meter, a level in Pa) vary:
    the model is the offset-free one's, and only a column that is exactly constant at
    that level is constant (the floor is the centred moments' rounding, not raw sums')."""
    x = correlated(np.random.default_rng(4))
    flat = np.full((x.shape[0], 1), 123456789.0)
    base = GaussianModel().fit(np.hstack([x, flat]))
    shifted = GaussianModel().fit(np.hstack([x + 1e8, flat]), defer=defer)
    assert shifted.constant_.tolist() == [False] * 6 + [True]
    np.testing.assert_allclose(shifted.cov_, base.cov_, rtol=1e-6, atol=1e-9)
    merged = MomentStats.from_array(x[:250] + 1e8).merge(MomentStats.from_array(x[250:] + 1e8))
    assert not GaussianModel().fit_stats(merged).constant_.any()


def test_raw_sums_keep_the_wider_rounding_floor_through_a_merge() -> None:
    x = np.column_stack([correlated(np.random.default_rng(9), n=3), np.full(500, 1234.5678)])
    raw = MomentStats.from_sums(250, x[:250].sum(axis=0), x[:250].T @ x[:250])
    merged = MomentStats.from_array(x[250:]).merge(raw)
    assert merged.rounding == raw.rounding > MomentStats.from_array(x).rounding
    assert GaussianModel().fit_stats(merged).constant_.tolist() == [False, False, False, True]


def test_a_map_read_back_from_its_json_is_the_same_map_and_a_changed_one_is_not() -> None:
    from engine.live.versions import map_from_json, map_to_json

    lm = GaussianModel().fit(correlated(np.random.default_rng(3))).linear_map([0, 2])
    assert lm.same_as(map_from_json(map_to_json(lm))) and lm.same_as(lm)
    moved = map_from_json(map_to_json(lm))
    moved.coef[1, 0] = np.nextafter(moved.coef[1, 0], np.inf)
    assert not lm.same_as(moved) and not lm.same_as(object())
    other = GaussianModel().fit(correlated(np.random.default_rng(3))).linear_map([0, 3])
    assert not lm.same_as(other)
