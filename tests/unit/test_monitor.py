"""Live violation monitor: fires on a regime change, stays quiet when stationary."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from engine.errors import ParameterError
from engine.planning import ViolationMonitor, rate_lower_bound, rate_upper_bound

SENSORS = ("a", "b", "c", "d")


def _feed(monitor: ViolationMonitor, errors: np.ndarray, batch: int = 5):
    alerts = []
    for start in range(0, errors.shape[0], batch):
        alert = monitor.observe(errors[start : start + batch], reconstructed=("a", "b", "c"))
        if alert:
            alerts.append((start, alert))
    return alerts


def test_quiet_on_stationary_data_at_the_promised_rate() -> None:
    rng = np.random.default_rng(7)
    # errors ~ |N(0, s)| with s chosen so that P(|e| > eps) = 0.03 < delta = 0.05
    eps, sd = 1.0, 1.0 / 2.17
    errors = np.abs(rng.normal(0.0, sd, size=(400, 4)))
    alerts = _feed(ViolationMonitor(SENSORS, eps=eps, delta=0.05), errors)
    assert alerts == []


def test_fires_after_an_injected_regime_change_and_names_the_sensor() -> None:
    rng = np.random.default_rng(7)
    errors = np.abs(rng.normal(0.0, 0.3, size=(400, 4)))
    errors[200:, 1] = np.abs(rng.normal(0.0, 1.5, size=200))  # sensor b goes stale at 200
    alerts = _feed(ViolationMonitor(SENSORS, eps=1.0, delta=0.05), errors)
    assert alerts, "the monitor missed the regime change"
    first, alert = alerts[0]
    assert first >= 200
    assert first < 260  # caught within a few dozen windows
    assert alert.sensors == ("b",)
    assert alert.lower_bounds["b"] > 0.05
    assert "b" in alert.reason


def test_backed_up_sensors_do_not_count() -> None:
    errors = np.full((50, 4), 10.0)
    monitor = ViolationMonitor(SENSORS, eps=1.0, delta=0.05)
    assert monitor.observe(errors, reconstructed=()) is None
    assert monitor.rates()["a"] == (0, 0)
    alert = monitor.observe(errors, reconstructed=("d",))
    assert alert is not None and alert.sensors == ("d",)
    assert monitor.rates()["d"] == (50, 50)


def test_a_resumed_tally_counts_as_if_the_windows_had_been_observed() -> None:
    """A restarted job's monitor starts from the earlier run's counts: the same alert,
    at the same window, as one monitor that saw every window."""
    errors = np.where(np.arange(24)[:, None] % 2 == 0, 3.0, 0.1) * np.ones((24, 4))
    whole = ViolationMonitor(SENSORS, eps=1.0, delta=0.05)
    whole.observe(errors[:8], ("a", "b"), version=2)
    want = whole.observe(errors[8:], ("a", "b"), version=2)
    resumed = ViolationMonitor(SENSORS, eps=1.0, delta=0.05)
    resumed.resume(2, {"a": (4, 8), "b": (4, 8)})
    assert resumed.observe(errors[8:9], ("a", "b"), version=1) is None  # another version
    got = resumed.observe(errors[8:], ("a", "b"), version=2)
    assert want is not None and got is not None
    assert got.sensors == want.sensors and got.rates == want.rates
    assert resumed.rates(2) == whole.rates(2)
    fresh = ViolationMonitor(SENSORS, eps=1.0, delta=0.05)
    fresh.observe(errors[8:12], ("a", "b"), version=2)
    assert fresh.rates(2)["a"] == (2, 4)  # 4 windows alone: too few to judge
    with pytest.raises(ParameterError, match="sensor"):
        resumed.resume(2, {"z": (1, 2)})
    with pytest.raises(ParameterError, match="violations <= windows"):
        resumed.resume(2, {"a": (3, 2)})


def test_tallies_are_kept_per_plan_version_and_overall() -> None:
    """A re-plan starts a new version's tally; the old one and the overall one stay.

    Reference: NumPy counts over each version's own rows and over all rows.
    """
    rng = np.random.default_rng(3)
    errors = np.abs(rng.normal(0.0, 0.4, size=(300, 4)))
    errors[:100, 2] += 2.0  # sensor c misses under version 0 only
    versions = np.repeat([0, 1, 2], 100)
    monitor = ViolationMonitor(SENSORS, eps=1.0, delta=0.05)
    alerts = {}
    for start in range(0, 300, 10):
        v = int(versions[start])
        alert = monitor.observe(errors[start : start + 10], ("a", "c"), version=v)
        alerts.setdefault(v, []).append(alert)
    counted = np.array([True, False, True, False])
    for v in (0, 1, 2):
        rows = errors[versions == v]
        want = {
            s: (int((rows[:, i] > 1.0).sum()) if counted[i] else 0, len(rows) * int(counted[i]))
            for i, s in enumerate(SENSORS)
        }
        assert monitor.rates(v) == want
    overall = monitor.rates()
    assert overall["c"] == (int((errors[:, 2] > 1.0).sum()), 300)
    per_version = [monitor.rates(v)["c"] for v in (0, 1, 2)]
    assert overall["c"] == (sum(v for v, _ in per_version), sum(w for _, w in per_version))
    assert monitor.versions() == [0, 1, 2]
    # Version 0's misses alert; they do not make the later versions alert.
    assert any(a is not None and "c" in a.sensors for a in alerts[0])
    assert all(a is None or "c" not in a.sensors for a in alerts[1] + alerts[2])


@pytest.mark.parametrize(("k", "n"), [(1, 10), (5, 40), (30, 100)])
def test_bounds_agree_with_scipy_exact_interval(k: int, n: int) -> None:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.90, method="exact")
    assert rate_lower_bound(k, n, 0.95) == pytest.approx(ci.low, rel=1e-6)
    assert rate_upper_bound(k, n, 0.95) == pytest.approx(ci.high, rel=1e-6)
    assert rate_lower_bound(0, n, 0.95) == 0.0
    assert rate_upper_bound(n, n) == 1.0


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ParameterError, match="delta"):
        ViolationMonitor(SENSORS, eps=1.0, delta=1.5)
    with pytest.raises(ParameterError, match="shape"):
        ViolationMonitor(SENSORS, eps=1.0, delta=0.05).observe(np.zeros((3, 2)), ("a",))
