"""The covariance repair runs on first need, once, and gives what an eager repair gives;
large BLAS calls on more threads give the same model."""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
from threadpoolctl import threadpool_info, threadpool_limits

import engine
import engine.model.blas as blas
import engine.model.repair as repair
from engine.data import load_history
from engine.errors import DataError, ParameterError
from engine.export import plan_to_config
from engine.model import GaussianModel, MomentStats
from engine.model.repair import RIDGE_FLOOR, RIDGE_TRIGGER
from engine.planning import PlanParameters, make_plan
from engine.query import WindowQuery


def near_singular(seed: int, t: int = 400) -> np.ndarray:
    """Six correlated sensors and a seventh that duplicates the third: near-singular."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(t, 3)) @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(t, 6)) + 5
    return np.column_stack([x, x[:, 2]])


def reference_repair(x: np.ndarray) -> tuple[np.ndarray, float]:
    """The repaired covariance and ridge from numpy's covariance and its smallest
    eigenvalue: lifted to RIDGE_FLOOR x mean variance when below RIDGE_TRIGGER x it."""
    cov = np.cov(x, rowvar=False)
    mean_var = float(np.trace(cov)) / cov.shape[0]
    smallest = float(np.linalg.eigvalsh(cov)[0])
    ridge = RIDGE_FLOOR * mean_var - smallest if smallest < RIDGE_TRIGGER * mean_var else 0.0
    return cov + ridge * np.eye(cov.shape[0]), ridge


def reference_conditional_variance(cov: np.ndarray, observed: list[int]) -> np.ndarray:
    """``Sigma_YY - Sigma_YO Sigma_OO^{-1} Sigma_OY`` by a plain solve, 0 where observed."""
    rest = [i for i in range(cov.shape[0]) if i not in observed]
    out = np.zeros(cov.shape[0])
    block = cov[np.ix_(observed, observed)]
    cross = cov[np.ix_(observed, rest)]
    out[rest] = np.diag(cov)[rest] - np.einsum("ij,ij->j", cross, np.linalg.solve(block, cross))
    return out


@pytest.fixture
def repairs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the repairs run (the model module calls it through ``engine.model.repair``)."""
    calls: list[int] = []
    real = repair.repair_covariance

    def counted(*args: object) -> tuple[np.ndarray, float, str]:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(repair, "repair_covariance", counted)
    return calls


@pytest.mark.parametrize("seed", range(3))
def test_a_conditional_read_first_sees_the_ridge(seed, repairs):
    """The first thing read is a conditional variance given the duplicated pair: it must
    come from the repaired covariance (unrepaired, that block is singular)."""
    x = near_singular(seed)
    model = GaussianModel().fit(x)
    assert not repairs
    var = model.conditional_variance([2, 6])
    assert len(repairs) == 1
    cov, ridge = reference_repair(x)
    np.testing.assert_allclose(var, reference_conditional_variance(cov, [2, 6]), rtol=1e-7,
                               atol=1e-12 * float(np.trace(cov)))  # fmt: skip
    assert model.ridge_ == pytest.approx(ridge, rel=1e-6)
    assert "near-singular" in model.repair_note_
    np.testing.assert_allclose(model.cov_, cov, rtol=1e-12, atol=1e-15)
    assert len(repairs) == 1  # once


def test_a_linear_map_read_first_sees_the_ridge(repairs):
    x = near_singular(11)
    model = GaussianModel().fit(x)
    coef = model.linear_map([0, 2, 6]).coef
    cov, _ = reference_repair(x)
    reference = scipy.linalg.solve(cov[np.ix_([0, 2, 6], [0, 2, 6])],
                                   cov[np.ix_([0, 2, 6], [1, 3, 4, 5])]).T  # fmt: skip
    np.testing.assert_allclose(coef, reference, rtol=1e-6, atol=1e-9)
    assert len(repairs) == 1


def test_backing_up_every_sensor_needs_no_repair_until_the_note_is_read(repairs):
    x = near_singular(3)
    model = GaussianModel().fit(x)
    everything = list(range(7))
    np.testing.assert_array_equal(model.conditional_variance(everything), np.zeros(7))
    lm = model.linear_map(everything)
    assert lm.targets == () and lm.coef.shape == (0, 7)
    assert not model.constant_.any()
    assert not repairs
    assert "near-singular" in model.repair_note_
    assert len(repairs) == 1


def test_a_rescaled_model_is_the_scaled_repair(repairs):
    """A rescaled model repairs through its source: the covariance scaled by f f^T, the
    ridge and note as the source's, one repair for both."""
    x = near_singular(4)
    f = np.linspace(0.5, 3.0, 7)
    model = GaussianModel().fit(x)
    scaled = model.rescaled(f)
    assert not repairs
    eager = GaussianModel().fit(x)
    np.testing.assert_array_equal(scaled.cov_, eager.cov_ * np.outer(f, f))
    assert scaled.ridge_ == eager.ridge_ and scaled.repair_note_ == eager.repair_note_
    assert len(repairs) == 2  # ``model`` (through ``scaled``) and ``eager``
    assert model.ridge_ == eager.ridge_ and len(repairs) == 2


def test_two_threads_reading_at_once_repair_once(monkeypatch, repairs):
    """The repair works in place: run twice, it would add the ridge twice."""
    real = repair.repair_covariance

    def slow(*args: object) -> tuple[np.ndarray, float, str]:
        time.sleep(0.2)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(repair, "repair_covariance", slow)
    x = near_singular(5)
    model = GaussianModel().fit(x)
    seen: list[np.ndarray] = []
    readers = [threading.Thread(target=lambda: seen.append(model.cov_.copy())) for _ in range(2)]
    for r in readers:
        r.start()
    for r in readers:
        r.join()
    cov, _ = reference_repair(x)
    for got in seen:
        np.testing.assert_allclose(got, cov, rtol=1e-12, atol=1e-15)


def test_a_pickled_model_keeps_its_repair():
    x = near_singular(6)
    model = GaussianModel().fit(x)
    back = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(back.cov_, model.cov_)
    assert back.ridge_ == model.ridge_ and back.repair_note_ == model.repair_note_
    np.testing.assert_array_equal(back.conditional_variance([0]), model.conditional_variance([0]))


def test_large_calls_take_every_core_and_small_ones_one(monkeypatch):
    cores = blas._usable_cores()
    if cores < 2:
        pytest.skip("one usable core: every call runs on it")

    def threads() -> set[int]:
        return {int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"}

    monkeypatch.setattr(engine, "BLAS_THREADS_CHOSEN", False)
    with threadpool_limits(1, user_api="blas"):  # as ``engine`` sets it before numpy loads
        with blas.blas_threads(blas.LARGE_FLOPS):
            assert threads() == {cores}
        assert threads() == {1}
        with blas.blas_threads(blas.LARGE_FLOPS / 2):
            assert threads() == {1}
        monkeypatch.setattr(engine, "BLAS_THREADS_CHOSEN", True)  # the operator's choice
        with blas.blas_threads(blas.LARGE_FLOPS * 100):
            assert threads() == {1}


@pytest.mark.parametrize("seed", range(2))
def test_threaded_large_calls_give_the_same_model(monkeypatch, seed):
    """The Gram product threaded (threshold 0) against it on one thread: the same
    covariance, ridge, note and conditionals to rounding."""
    x = near_singular(seed + 20, t=600)
    monkeypatch.setattr(engine, "BLAS_THREADS_CHOSEN", False)
    monkeypatch.setattr(blas, "LARGE_FLOPS", float("inf"))
    one = GaussianModel().fit(x)
    one_var = one.conditional_variance([1, 2, 6])
    monkeypatch.setattr(blas, "LARGE_FLOPS", 0.0)
    many = GaussianModel().fit(x)
    np.testing.assert_allclose(many.conditional_variance([1, 2, 6]), one_var, rtol=1e-7,
                               atol=1e-12 * float(np.trace(one.cov_)))  # fmt: skip
    np.testing.assert_allclose(many.cov_, one.cov_, rtol=1e-12, atol=1e-15)
    assert many.ridge_ == pytest.approx(one.ridge_, rel=1e-6)
    assert many.repair_note_.split(" (")[0] == one.repair_note_.split(" (")[0]
    np.testing.assert_allclose(many.linear_map([1, 2]).coef, one.linear_map([1, 2]).coef,
                               rtol=1e-9, atol=1e-12)  # fmt: skip


SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"


@pytest.fixture
def grams(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the Gram products run (``MomentStats.from_array``)."""
    calls: list[int] = []
    real = MomentStats.from_array.__func__  # type: ignore[attr-defined]

    def counted(cls: type[MomentStats], x: np.ndarray) -> MomentStats:
        calls.append(1)
        return real(cls, x)  # type: ignore[no-any-return]

    monkeypatch.setattr(MomentStats, "from_array", classmethod(counted))
    return calls


@pytest.mark.parametrize("per_sensor_eps", [False, True])
def test_an_unmeasured_plan_computes_no_covariance_until_one_is_read(
    repairs, grams, per_sensor_eps
):
    """Too little history for a backtest fold: every sensor is backed up and neither the
    plan nor its config reads the covariance (at 10,000 sensors its Gram product and the
    repair's factorisation were the whole cost). The app's graph reads it later: then it
    is computed once, equal to an eager fit's. The sample's temperatures hold duplicated
    stations, so that repair adds a ridge; the config says nothing of it, as no sensor
    is rebuilt from the covariance."""
    h = load_history(SMALL)
    history = h.select([s for s in h.sensors if s.endswith("_TEMP")]).rows(0, 60)
    eps = tuple((s, 0.5 + i) for i, s in enumerate(history.sensors)) if per_sensor_eps else ()
    plan = make_plan(history, PlanParameters(WindowQuery(1.0, 0.05, 12, eps_by_sensor=eps)))
    assert not plan.measured and plan.backup_sensors == history.sensors
    assert plan_to_config(plan)["guarantee"]["model"]["repair"] == plan.model_note == ""
    assert not grams and not repairs
    cov = plan.model.cov_
    assert len(grams) == 1 and len(repairs) == 1
    assert "near-singular" in plan.model.repair_note_
    assert plan.model.cov_ is cov and len(grams) == 1  # once
    # in the sensors' units either way (a per-sensor eps plan rescales its model); the
    # ridges differ by the rescaling, at 1e-9 of the mean variance
    eager = GaussianModel().fit(history.values[-plan.history_rows :], history.sensors)
    np.testing.assert_allclose(cov, eager.cov_, rtol=1e-7)


def test_a_deferred_fit_is_the_eager_fit() -> None:
    """Mean, constant sensors, repaired covariance, ridge and note as an eager fit's,
    for near-singular readings with a constant sensor."""
    x = np.column_stack([near_singular(5), np.full(400, 7.25)])
    names = tuple(f"s{i}" for i in range(8))
    eager = GaussianModel().fit(x, names)
    deferred = GaussianModel().fit(x, names, defer=True)
    np.testing.assert_array_equal(deferred.mean_, eager.mean_)
    np.testing.assert_array_equal(deferred.constant_, eager.constant_)
    assert deferred.constant_.tolist() == [False] * 7 + [True]
    np.testing.assert_allclose(deferred.cov_, eager.cov_, rtol=1e-12, atol=1e-15)
    assert deferred.ridge_ == pytest.approx(eager.ridge_, rel=1e-9)
    assert deferred.repair_note_.split(" (")[0] == eager.repair_note_.split(" (")[0]
    assert deferred.n_samples_ == eager.n_samples_ == 400 and deferred.sensors_ == names
    np.testing.assert_allclose(deferred.linear_map([0, 2]).coef, eager.linear_map([0, 2]).coef,
                               rtol=1e-9, atol=1e-8)  # fmt: skip


def test_a_deferred_fit_refuses_what_an_eager_fit_refuses() -> None:
    with pytest.raises(DataError, match="not finite"):
        GaussianModel().fit(np.array([[1e300, 1.0], [-1e300, 2.0], [1e300, 3.0]]), defer=True)
    with pytest.raises(DataError, match="readings must be finite"):
        GaussianModel().fit(np.array([[np.nan, 1.0], [1.0, 2.0]]), defer=True)
    with pytest.raises(ParameterError, match="at least 2 readings"):
        GaussianModel().fit(np.ones((1, 3)), defer=True)
    with pytest.raises(ParameterError, match="distinct sensor names"):
        GaussianModel().fit(np.ones((4, 2)), ("a", "a"), defer=True)


def test_a_plan_rebuilding_only_constant_sensors_notes_them_without_the_covariance(repairs, grams):
    """Only constant sensors rebuilt (by their mean): the note names them, no covariance
    is read."""
    h = load_history(SMALL)
    history = h.select([s for s in h.sensors if s.endswith("_TEMP")]).rows(0, 60)
    flat = replace(history, values=np.column_stack([history.values, np.full(60, 3.5)]),
                   sensors=(*history.sensors, "flat"))  # fmt: skip
    plan = make_plan(flat, PlanParameters(WindowQuery(1.0, 0.05, 12)))
    assert plan.backup_sensors == history.sensors
    assert plan.model_note == "Constant sensor(s) flat are reconstructed by their mean."
    assert plan.linear_map.targets == ("flat",)
    np.testing.assert_array_equal(plan.linear_map.coef, 0.0)
    assert plan.linear_map.intercept == pytest.approx([3.5])
    assert not grams and not repairs
