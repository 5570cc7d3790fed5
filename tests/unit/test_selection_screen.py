"""The indispensable-sensor screen of large selections (``engine.selection.core``):
a variance given a few sources bounds the variance given all the others, checked
against NumPy's inverse; and the greedy chooses the same sensors with and without it."""

from __future__ import annotations

import numpy as np
import pytest

import engine.selection.core as core
import engine.selection.greedy as greedy
from engine.selection import select_backups


def covariance(n: int, factors: int, seed: int, duplicates: int = 0) -> np.ndarray:
    """Low-rank plus noise, a few sensors with almost no noise (near-duplicates of a
    factor mix: ill-conditioned blocks) and two constant sensors."""
    rng = np.random.default_rng(seed)
    load = rng.normal(size=(n, factors))
    noise = rng.uniform(0.05, 1.0, size=n) ** 2
    noise[:duplicates] = 1e-10
    c = load @ load.T + np.diag(noise)
    c[:, -2:] = c[-2:, :] = 0.0  # constant sensors: no variance, no covariance
    return c


def exact_alone(c: np.ndarray, live: list[int]) -> np.ndarray:
    return 1.0 / np.diag(np.linalg.inv(c[np.ix_(live, live)]))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sources", [3, 8, 40])
def test_the_screened_variance_never_falls_below_the_variance_given_all_the_others(
    seed: int, sources: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core, "SCREEN_SOURCES", sources)
    c = covariance(120, 6, seed, duplicates=10)
    live = [int(i) for i in np.flatnonzero(np.diag(c) > 0)]
    bound, exact = core.screened_alone_variance(c, live), exact_alone(c, live)
    given = np.isfinite(bound)
    assert given.mean() > 0.5  # the screen bounds most sensors: it is not all "unsure"
    assert np.all(bound[given] >= exact[given] * (1 - 1e-9) - 1e-12)
    if sources >= 8:  # enough sources for six factors: the bound is close where noise is
        assert np.median(bound[given] / exact[given]) < 1.5


@pytest.mark.parametrize("few", [1, 3, 200])
def test_the_variance_of_a_few_sensors_given_all_the_others_is_numpys(few: int) -> None:
    c = covariance(300, 12, 7)
    live = [int(i) for i in np.flatnonzero(np.diag(c) > 0)]
    which = np.sort(np.random.default_rng(few).choice(len(live), size=few, replace=False))
    got = core.alone_variance_of(c, live, which)
    assert got is not None
    np.testing.assert_allclose(got, exact_alone(c, live)[which], rtol=1e-8)
    singular = c.copy()
    singular[:, 0] = singular[0, :] = singular[:, 1]  # sensor 0 repeats sensor 1
    singular[0, 0] = singular[1, 1]
    assert core.alone_variance_of(singular, live, which) is None


@pytest.mark.parametrize("seed", range(6))
def test_the_greedy_chooses_the_same_sensors_with_the_screen(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Targets between the sensors' noise levels: some sensors nothing can cover (they are
    indispensable), the others covered by few sources (screened out) or by many."""
    c = covariance(160, 10, seed, duplicates=4)
    noise = np.array([exact_alone(c, [i for i in range(158)])[i] for i in range(158)])
    targets = np.append(np.full(158, np.quantile(noise, 0.6)), [0.0, 0.0])
    monkeypatch.setattr(core, "SCREEN_SOURCES", 12)
    monkeypatch.setattr(greedy, "SCREEN_MIN_SENSORS", 10**9)
    plain = select_backups(c, targets, "greedy")
    whole = greedy._Greedy(c, targets, None)._indispensable()
    monkeypatch.setattr(greedy, "SCREEN_MIN_SENSORS", 0)
    screened = select_backups(c, targets, "greedy")
    assert greedy._Greedy(c, targets, None)._indispensable() == whole
    bound = core.screened_alone_variance(c, list(range(158)))
    assert 0 < np.sum(bound <= targets[:158]) < 158  # screened out, and left to the solve
    assert 0 < len(whole[0]) < 158  # some forced, some not: both paths are exercised
    assert screened.backup == plain.backup
    np.testing.assert_allclose(screened.conditional_variance, plain.conditional_variance)
