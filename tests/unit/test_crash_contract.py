"""The crash contract's calibration and measurement: the mirrored residual for max/min,
the flat-sensor rule, the verdict that counts windows, and the backtest's tally against a
brute force (each fails under a one-line mutation, ``bench/mutants.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import engine.planning.calibration as C
import engine.planning.scores as S
from engine.aggregates import get_aggregate
from engine.model import GaussianModel
from engine.planning.backtest import run_backtest
from engine.planning.crash_result import CrashResult, summarise_crash
from engine.planning.folds import BacktestSettings, fold_origins
from engine.planning.horizon import conformal_quantile
from engine.planning.verdict import window_p_value
from engine.windows import window_starts


def _smooth(rows: int, seed: int) -> np.ndarray:
    t = np.arange(rows)
    rng = np.random.default_rng(seed)
    base = 10 * np.sin(2 * np.pi * t / 48) + np.cumsum(rng.normal(0, 0.2, rows))
    return np.column_stack([base, base + rng.normal(0, 0.3, rows), rng.normal(0, 3, rows)])


def test_range_scores_are_the_window_errors() -> None:
    x = _smooth(300, 1)
    model = GaussianModel().fit(x[:200], ("a", "b", "c"))
    spec = C.PlanningSpec(1.0, 0.05, 12, 12, "avg")
    got = S.calibration_scores(x[200:], model, (0,), spec)
    np.testing.assert_array_equal(got, np.abs(S.window_residuals(x[200:], model, (0,), spec)))


@pytest.mark.parametrize(("name", "count"), [("avg", 1), ("sum", 1), ("max", 2), ("min", 2)])
def test_crash_scores_every_window_and_failure_position(name: str, count: int) -> None:
    x = _smooth(300, 2)
    model = GaussianModel().fit(x[:200], ("a", "b", "c"))
    spec = C.PlanningSpec(1.0, 0.05, 12, 12, name, exposure=3)
    got = S.calibration_scores(x[200:], model, (0,), spec)
    windows = 100 - 12 + 1
    assert got.shape == (count * windows * (12 + 3 - 1), 3)  # max/min: the mirror too
    rec = S.rebuilt(x[200:], model, (0,))
    own = get_aggregate(name).exposure_scores(x[200:], rec, window_starts(100, 12, 1), 12, 3, 1.0)
    np.testing.assert_array_equal(got[: own.size // 3], own.reshape(-1, 3))


def test_max_scores_the_mirrored_residual_of_a_rebuild_that_ran_low() -> None:
    """Calibration saw sensor b rebuilt 3 units low on a slow series (neighbouring readings
    within eps): never above the window's max, and no lost reading leaves a gap over eps,
    so the rebuild as seen never misses. Its mirror (3 units high) overshoots by about
    3 - headroom: the crash quantile must see it."""
    rng = np.random.default_rng(3)
    base = 3 * np.sin(2 * np.pi * np.arange(400) / 200)
    x = np.column_stack([base, base + rng.normal(0, 0.05, 400), rng.normal(0, 1, 400)])
    model = GaussianModel().fit(x[:300], ("a", "b", "c"))
    later = x[300:].copy()
    later[:, 1] = later[:, 0] + 3.0  # b drifted up: the model rebuilds it 3 low
    spec = C.PlanningSpec(1.0, 0.05, 12, 12, "max", exposure=1)
    rec = S.rebuilt(later, model, (0,))
    assert np.all(rec[:, 1] < later[:, 1] - 2.5)
    as_seen = get_aggregate("max").exposure_scores(
        later, rec, window_starts(100, 12, 1), 12, 1, 1.0
    )
    assert as_seen[..., 1].max() <= 1.0  # never a miss as the rebuild ran
    q = conformal_quantile(S.calibration_scores(later, model, (0,), spec), 0.965)
    assert q[1] > 1.5  # the mirrored rebuild overshoots: b needs a smaller variance


def test_a_sensor_with_no_measured_error_keeps_a_finite_target(monkeypatch) -> None:
    """A sensor whose calibration scores are all 0 is held to the variance it was measured
    at (its leave-one-out conditional variance), not given (eps / 0)^2 = inf."""
    x = _smooth(600, 4)
    spec = C.PlanningSpec(1.0, 0.05, 12, 12, "max", horizon=96, exposure=2)
    real = C._forward_quantiles

    def flat_c(*args, **kw):
        q, n = real(*args, **kw)
        q = q.copy()
        if kw.get("score") is None:  # the rebuild's scores, not the kept readings' rule
            q[2] = 0.0
        return q, n

    monkeypatch.setattr(C, "_forward_quantiles", flat_c)
    fold = C.plan_on(x, ("a", "b", "c"), spec)
    assert np.all(np.isfinite(fold.targets))
    assert fold.calibration.flat == ("c",)
    sd2 = S.dropped_variance(fold.model, fold.selection.backup)[2]
    assert fold.targets[2] == pytest.approx(sd2, rel=1e-9) or fold.targets[2] < sd2
    assert "held to the variance measured" in fold.calibration.reason


def test_window_p_value_is_the_binomial_tail_for_whole_counts() -> None:
    from scipy.stats import binom

    for k, n in [(1, 10), (5, 40), (12, 100)]:
        assert window_p_value(k, n, 0.05) == pytest.approx(binom.sf(k - 1, n, 0.05), rel=1e-9)
    assert window_p_value(0, 10, 0.05) == 1.0
    assert window_p_value(2.5, 40, 0.05) < window_p_value(2.0, 40, 0.05)


def _crash(misses: list[int], windows: list[int], positions: int = 25) -> CrashResult:
    triples = np.array(windows) * positions
    return summarise_crash(positions - 2, 3, np.array(misses), triples, ("a", "b"))


def test_crash_verdict_counts_windows_not_triples() -> None:
    """Sensor a misses 8 % of its (failure, window) pairs, b none: pooled 4 % <= delta.
    Over its 100 windows (8 windows' worth of misses) a is consistent with 5 % (p = 0.13);
    counted as 2,500 independent triples it would be rejected."""
    result = _crash([200, 0], [100, 100])
    assert result.violation_rate_mean == pytest.approx(0.04)
    assert result.rejected_sensors(0.05) == []
    # consistent with delta, not yet confirmed: not enough evidence, and what would settle it
    assert result.violation_rate_worst_sensor_ucb95 > 0.05
    assert result.assess(0.05).state == "unsettled"
    assert result.verdict(0.05).startswith("not enough evidence")
    assert "What would settle it" in result.verdict(0.05)
    # 20 % of a's pairs over 100 windows: rejected even counting windows
    strong = _crash([500, 0], [100, 300])
    assert strong.rejected_sensors(0.05) == ["a"]
    assert strong.verdict(0.05).startswith("DOES NOT HOLD")


def test_crash_verdict_pooled_over_delta_and_nothing_rebuilt() -> None:
    assert _crash([300, 300], [100, 100]).verdict(0.05).startswith("DOES NOT HOLD")
    assert _crash([0, 0], [0, 0]).verdict(0.05).startswith("holds trivially")


def test_backtest_tallies_the_crash_contract_as_a_brute_force_does() -> None:
    """Every fold's plan (``plan_on``, deterministic), every failure position touching each
    window of the fold's slice, the rebuilt sensors' misses counted by loops."""
    rng = np.random.default_rng(5)
    base = 10 * np.sin(2 * np.pi * np.arange(700) / 48) + np.cumsum(rng.normal(0, 0.2, 700))
    x = np.column_stack([base, base + rng.normal(0, 1, 700), base / 2 + rng.normal(0, 1.5, 700)])
    sensors = ("a", "b", "c")
    # the seed's targets at a lax delta: a is rebuilt in some folds and misses a few times
    spec = C.PlanningSpec(1.5, 0.6, 8, 8, "max", horizon=96, exposure=3, calibration="none")
    settings = BacktestSettings(history=300, step=96)
    result = run_backtest(x, sensors, spec, settings)
    misses, triples = np.zeros(3), np.zeros(3)
    for t in fold_origins(700, 8, settings, 96):
        fold = C.plan_on(x[t - 300 : t], sensors, spec)
        test = x[t : t + 96]
        rec = S.rebuilt(test, fold.model, fold.selection.backup)
        for j in range(3):
            if j in fold.selection.backup:
                continue
            for a in range(0, 96 - 8 + 1, 8):
                for s in range(a - 2, a + 8):
                    mixed = test[a : a + 8, j].copy()
                    lo, hi = max(s, a) - a, min(s + 3, a + 8) - a
                    mixed[lo:hi] = rec[a + lo : a + hi, j]
                    misses[j] += abs(mixed.max() - test[a : a + 8, j].max()) > 1.5
                    triples[j] += 1
    crash = result.crash
    assert crash is not None and crash.positions == 8 + 3 - 1
    assert [crash.per_sensor[s] for s in sensors] == [
        (int(m), int(n)) for m, n in zip(misses, triples, strict=True)
    ]
    assert 0 < triples[0] < 4 * 12 * 10 and misses[0] > 0  # a rebuilt in some folds, missing


def test_a_crash_verdict_holds_only_when_every_sensors_bound_is_within_delta() -> None:
    """a missed a fraction 1/25 of one window's positions in 4,000 windows (bound 0.1 %);
    b none in 12 windows (bound 26.5 %): not "holds", and b's bound is the one reported.
    Counted on every fourth window (sliding by a quarter), the bound is wider still."""
    result = _crash([1, 0], [4000, 12])
    assert result.worst_sensor == "a" and result.bound_sensor == "b"
    assert result.assess(0.05).state == "unsettled"
    assert "the 95 % bound of b, which missed 0 of its 12 windows not backed up" in (
        result.verdict(0.05)
    )
    triples = np.array([4000, 12]) * 25
    quarter = summarise_crash(23, 3, np.array([1, 0]), triples, ("a", "b"), share=0.25)
    assert quarter.violation_rate_worst_sensor_ucb95 > result.violation_rate_worst_sensor_ucb95
