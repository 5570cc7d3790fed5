"""Crash-contract window errors (``Aggregate.exposure_errors`` / ``exposure_scores``)
against a brute force: every failure position, rebuild the lost rows, recompute."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.aggregates import aggregate_names, get_aggregate
from engine.stretches import exposure_offsets, kept_max, lost_rows, range_max
from engine.windows import window_starts

NAIVE = {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}


def brute_errors(
    truth: np.ndarray, rebuilt: np.ndarray, name: str, window: int, slide: int, exposure: int
) -> dict[tuple[int, int], np.ndarray]:
    """{(failure start s, window start a): (n,) truth - recovered aggregate}, by loops."""
    out = {}
    rows = truth.shape[0]
    for s in range(1 - exposure, rows):  # every stretch touching a row of the data
        lost = np.zeros(rows, dtype=bool)
        lost[max(s, 0) : max(min(s + exposure, rows), 0)] = True
        mixed = np.where(lost[:, None], rebuilt, truth)
        for a in window_starts(rows, window, slide):
            if lost[a : a + window].any():
                want = NAIVE[name](truth[a : a + window], axis=0)
                got = NAIVE[name](mixed[a : a + window], axis=0)
                out[(s, int(a))] = want - got
    return out


def vectorised(
    truth: np.ndarray, rebuilt: np.ndarray, name: str, window: int, slide: int, exposure: int
) -> dict[tuple[int, int], np.ndarray]:
    starts = window_starts(truth.shape[0], window, slide)
    err = get_aggregate(name).exposure_errors(truth, rebuilt, starts, window, exposure)
    offsets = exposure_offsets(window, exposure)
    assert err.shape == (starts.size, window + exposure - 1, truth.shape[1])
    return {
        (int(a + d), int(a)): err[j, k] for j, a in enumerate(starts) for k, d in enumerate(offsets)
    }


@pytest.mark.parametrize("name", aggregate_names())
@pytest.mark.parametrize(
    ("window", "slide", "exposure"), [(6, 6, 1), (6, 6, 2), (6, 2, 4), (5, 1, 5), (4, 4, 9)]
)
def test_exposure_errors_match_rebuilding_every_failure_position(
    name: str, window: int, slide: int, exposure: int
) -> None:
    rng = np.random.default_rng(11)
    truth = rng.normal(size=(31, 3))
    rebuilt = truth + rng.normal(scale=0.7, size=truth.shape)
    want = brute_errors(truth, rebuilt, name, window, slide, exposure)
    got = vectorised(truth, rebuilt, name, window, slide, exposure)
    assert set(got) == set(want)  # every (failure, window touched) pair, each once
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, atol=1e-12, err_msg=str(key))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(aggregate_names()),
    window=st.integers(1, 7),
    exposure=st.integers(1, 9),
    slide_cut=st.integers(0, 6),
    rows=st.integers(7, 20),
    seed=st.integers(0, 2**16),
    ties=st.booleans(),
)
def test_exposure_errors_hypothesis(
    name: str, window: int, exposure: int, slide_cut: int, rows: int, seed: int, ties: bool
) -> None:
    slide = max(1, window - slide_cut)
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=(rows, 2))
    rebuilt = truth + rng.normal(size=truth.shape)
    if ties:  # quantised readings: equal extremes, rebuilt equal to the truth
        truth, rebuilt = np.round(truth), np.round(rebuilt)
    want = brute_errors(truth, rebuilt, name, window, slide, exposure)
    got = vectorised(truth, rebuilt, name, window, slide, exposure)
    assert set(got) == set(want)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, atol=1e-12)


def test_lost_rows_are_the_stretch_clipped_to_the_window() -> None:
    lo, hi = lost_rows(np.array([10]), window=4, exposure=3)
    # offsets -2 .. 3: stretches starting at rows 8 .. 13
    assert lo.tolist() == [[10, 10, 10, 11, 12, 13]]
    assert hi.tolist() == [[11, 12, 13, 14, 14, 14]]


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 30), longest=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_range_max_matches_slicing(rows: int, longest: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 2))
    lo = rng.integers(0, rows + 1, size=25)
    hi = np.minimum(lo + rng.integers(0, longest + 1, size=25), rows)
    got = range_max(x, lo, hi, longest)
    for i in range(25):
        want = x[lo[i] : hi[i]].max(axis=0) if hi[i] > lo[i] else np.full(2, -np.inf)
        np.testing.assert_array_equal(got[i], want)


@settings(max_examples=60, deadline=None)
@given(window=st.integers(1, 12), exposure=st.integers(1, 14), seed=st.integers(0, 2**16))
def test_kept_max_matches_slicing(window: int, exposure: int, seed: int) -> None:
    v = np.random.default_rng(seed).normal(size=(3, window, 2))
    lo, hi = lost_rows(np.zeros(1, dtype=int), window, exposure)
    kept = kept_max(v, lo[0], hi[0])
    for k, (a, b) in enumerate(zip(lo[0], hi[0], strict=True)):
        rest = np.concatenate([v[:, :a], v[:, b:]], axis=1)
        want = rest.max(axis=1) if rest.shape[1] else np.full((3, 2), -np.inf)
        np.testing.assert_array_equal(kept[:, k], want)


@pytest.mark.parametrize("name", aggregate_names())
@pytest.mark.parametrize(("window", "exposure"), [(6, 1), (6, 2), (5, 5), (4, 7)])
def test_no_failure_misses_below_the_scale_its_score_names(
    name: str, window: int, exposure: int
) -> None:
    """Residual scaled by lambda: no miss while lambda * score < eps; for avg/sum, and for
    max/min wherever the brute force finds a miss, the first one is at eps / score."""
    rng = np.random.default_rng(17)
    truth = np.cumsum(rng.normal(size=(40, 3)), axis=0)
    resid = rng.standard_t(3, size=truth.shape)
    eps, agg = 1.0, get_aggregate(name)
    starts = window_starts(40, window, 1)
    score = agg.exposure_scores(truth, truth - resid, starts, window, exposure, eps)
    assert np.all(score >= 0)
    grid = np.linspace(0.0, 6.0, 1201)[1:]
    first = np.full(score.shape, np.inf)
    for lam in grid[::-1]:
        err = agg.exposure_errors(truth, truth - lam * resid, starts, window, exposure)
        first = np.where(np.abs(err) > eps, lam, first)
    critical = np.where(score > 0, eps / np.maximum(score, 1e-300), np.inf)
    # safety: the first miss on the grid is never below the scale the score names
    assert np.all(first >= critical - 0.006)
    # tightness: the score names the first miss (one grid step) wherever one occurs, but
    # where an undershoot ends before it is seen (a far reading pulled into the band)
    seen = np.isfinite(first)
    assert np.mean(np.abs(first[seen] - critical[seen]) <= 0.006) > 0.9


@pytest.mark.parametrize("name", aggregate_names())
def test_several_rebuilds_score_as_each_alone(name: str) -> None:
    """``exposure_scores_of`` reads the truth's windows once for every rebuild: each
    rebuild's scores are those it gets scored alone."""
    rng = np.random.default_rng(5)
    truth = np.cumsum(rng.normal(size=(50, 4)), axis=0)
    rebuilds = [truth - rng.standard_t(3, size=truth.shape) for _ in range(3)]
    agg, starts = get_aggregate(name), window_starts(50, 8, 1)
    together = agg.exposure_scores_of(truth, rebuilds, starts, 8, 3, 1.0)
    assert len(together) == 3
    for rebuilt, scores in zip(rebuilds, together, strict=True):
        np.testing.assert_array_equal(
            scores, agg.exposure_scores(truth, rebuilt, starts, 8, 3, 1.0)
        )
