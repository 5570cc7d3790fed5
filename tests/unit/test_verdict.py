"""The backtest verdict: every branch, its binomial test and the Bonferroni correction."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta, binomtest

from engine.errors import ParameterError
from engine.planning.backtest_result import summarise_backtest
from engine.planning.monitor import rate_upper_bound
from engine.planning.verdict import VERDICT_TEST, window_p_value

SENSORS = ("a", "b", "c", "d", "e")


def _result(viol: list[int], rebuilt: list[int], total: int = 400, folds: int = 10):
    counts = (np.array(viol), np.array(rebuilt), total)
    return summarise_backtest(folds, 336, 96, counts, [0.2] * folds, SENSORS[: len(viol)], 0.05)


def test_window_p_value_is_scipy_binomtest_at_whole_counts() -> None:
    for k, n in [(0, 10), (3, 40), (12, 100), (30, 400)]:
        ref = binomtest(k, n, 0.05, alternative="greater").pvalue
        assert window_p_value(k, n, 0.05) == pytest.approx(ref, rel=1e-12)
    assert window_p_value(0, 0, 0.05) == 1.0


def test_the_bound_is_every_sensors_clopper_pearson_bound_bonferroni_the_largest() -> None:
    """b has the highest rate (10 of 200), but d, 1 of 50, the larger bound: "holds" must
    cover d too, so the bound reported is d's (the largest of the five, each at
    1 - 0.05 / 5)."""
    r = _result([2, 10, 0, 1, 3], [400, 200, 400, 50, 400])
    assert r.worst_sensor == "b" and r.violation_rate_worst_sensor == pytest.approx(0.05)
    refs = [beta.ppf(1 - 0.05 / 5, k + 1, n - k) for k, n in [(2, 400), (10, 200), (0, 400),
                                                              (1, 50), (3, 400)]]  # fmt: skip
    assert r.bound_sensor == "d" and max(refs) == refs[3]
    assert r.violation_rate_worst_sensor_ucb95 == pytest.approx(refs[3])
    # The same bound from scipy's exact (two-sided) interval at 1 - 2 * 0.05 / 5.
    exact = binomtest(1, 50).proportion_ci(confidence_level=1 - 2 * 0.05 / 5, method="exact")
    assert r.violation_rate_worst_sensor_ucb95 == pytest.approx(exact.high, rel=1e-9)
    assert r.violation_rate_worst_sensor_ucb95 == rate_upper_bound(1, 50, 0.99)
    assert r.violation_rate_worst_sensor_all_windows == pytest.approx(10 / 400)
    assert r.violation_rate_mean == pytest.approx(16 / 1450)
    assert r.to_dict()["verdict_test"] == VERDICT_TEST


def test_the_all_windows_rate_is_the_worst_sensors_own() -> None:
    """Not the most misses of any sensor: ``a`` is worst (1 of its 1 rebuilt window), ``b``
    missed more windows (3 of 12) but at a lower rate."""
    r = _result([1, 3, 0], [1, 12, 12], total=12)
    assert r.worst_sensor == "a" and r.violation_rate_worst_sensor == 1.0
    assert r.violation_rate_worst_sensor_all_windows == pytest.approx(1 / 12)


def test_verdict_not_measured_and_nothing_rebuilt() -> None:
    assert _result([0, 0], [0, 0], total=0, folds=0).verdict(0.05).startswith("not measured")
    trivial = _result([0, 0], [0, 0])
    assert trivial.verdict(0.05).startswith("holds trivially")


def test_verdict_pooled_above_delta_does_not_hold() -> None:
    verdict = _result([30, 30], [400, 400]).assess(0.05)
    assert verdict.state == "fails" and verdict.text.startswith("DOES NOT HOLD: pooled 7.5 %")
    assert "of 800 (window, rebuilt sensor) pairs" in verdict.text


def test_verdict_one_sensor_rejected_after_bonferroni() -> None:
    # pooled 34 / 2000 = 1.7 % is fine; sensor a's 30 / 400 has p ~ 0.0145 < 0.05 but
    # > 0.05 / 5: consistent once corrected for five sensors. At 34 / 400 it is rejected.
    consistent = _result([30, 1, 1, 1, 1], [400] * 5)
    assert window_p_value(30, 400, 0.05) < 0.05
    # consistent is not confirmed: at 7.5 % its bound is above delta
    assert consistent.assess(0.05).state == "unsettled", consistent.verdict(0.05)
    rejected = _result([38, 1, 1, 1, 1], [400] * 5)
    assert window_p_value(38, 400, 0.05) < 0.01
    assert rejected.verdict(0.05).startswith("DOES NOT HOLD: 1 sensor")


def test_verdict_holds_confirmed_or_not_yet() -> None:
    confirmed = _result([2, 3], [2000, 2000], total=2000)
    assert confirmed.verdict(0.05).startswith("holds: pooled")
    assert "more folds" not in confirmed.verdict(0.05)
    assert confirmed.assess(0.05).state == "holds"
    unconfirmed = _result([1, 0], [30, 30], total=30)
    assert unconfirmed.assess(0.05).state == "unsettled"
    assert unconfirmed.verdict(0.05).startswith("not enough evidence")


def test_a_green_verdict_needs_the_bound_under_delta() -> None:
    # The Tune page's case: pooled 1.2 % and no sensor rejected, but the worst sensor
    # missed 2 of 8 rebuilt windows: its bound is far above delta, so not "holds".
    r = _result([2, 3, 1], [8, 400, 400], total=400)
    verdict = r.assess(0.1)
    assert verdict.state == "unsettled", verdict
    assert verdict.label == "not enough evidence"
    assert "the 95 % bound of a, which missed 2 of 8 rebuilt windows (25.0 %), is" in verdict.text
    assert "What would settle it" in verdict.settle


def test_what_would_settle_it_is_the_first_sample_size_whose_bound_reaches_delta() -> None:
    r = _result([1, 0], [40, 40], total=40)  # worst a: 1 of 40 (2.5 %) against delta 5 %
    verdict = r.assess(0.05)
    assert verdict.state == "unsettled"
    n = verdict.windows_needed
    level = 1 - 0.05 / 2  # two sensors rebuilt: Bonferroni
    # the misses at the measured rate, a real count (a rounded one is not monotone in n)
    assert rate_upper_bound(0.025 * n, n, level) <= 0.05
    assert rate_upper_bound(0.025 * (n - 1), n - 1, level) > 0.05
    assert f"{n:,} rebuilt windows of a" in verdict.settle
    folds = -(-n // 4)  # 40 rebuilt windows over 10 folds: 4 per fold
    assert f"about {folds:,} folds" in verdict.settle


def test_a_rate_at_or_above_delta_cannot_be_settled_by_more_of_the_same() -> None:
    r = _result([1, 0], [10, 400], total=400)  # a: 1 of 10 = 10 % > 5 %, not rejected
    verdict = r.assess(0.05)
    assert verdict.state == "unsettled" and verdict.windows_needed == 0
    assert "more windows would show a miss" in verdict.settle


def test_labels_say_what_each_figure_counts() -> None:
    r = _result([2, 10, 0], [8, 400, 400], total=400)
    assert r.worst_counts == (2, 8)
    assert r.worst_label() == "a missed 2 of 8 rebuilt windows (25.0 %)"
    assert r.pooled_label() == "1.5 % of 808 (window, rebuilt sensor) pairs"


def test_holds_needs_every_sensors_bound_not_only_the_highest_rates() -> None:
    """a missed 2 of 2,000 windows (bound 0.4 %), b none of 12 (bound 26.5 %): b's few
    windows cannot confirm the guarantee for b, so the verdict must not say "holds"."""
    r = _result([2, 0], [2000, 12], total=2000)
    assert r.worst_sensor == "a" and r.bound_sensor == "b"
    verdict = r.assess(0.05)
    assert verdict.state == "unsettled", verdict
    assert "the 95 % bound of b, which missed 0 of 12 rebuilt windows" in verdict.text
    assert "rebuilt windows of b" in verdict.settle


def test_overlapping_windows_are_counted_disjoint_in_the_tests() -> None:
    """Windows sliding by a quarter of their length: a quarter of them are disjoint, and
    the tests count those (the misses scaled alike), so the bound is the one of 500
    windows with 2.5 misses, not of 2,000 with 10."""
    counts = (np.array([10, 0]), np.array([2000, 2000]), 2000)
    every = summarise_backtest(10, 336, 96, counts, [0.2] * 10, ("a", "b"), 0.05)
    quarter = summarise_backtest(10, 336, 96, counts, [0.2] * 10, ("a", "b"), 0.05, 0.25)
    level = 1 - 0.05 / 2
    assert every.violation_rate_worst_sensor_ucb95 == pytest.approx(beta.ppf(level, 11, 1990))
    assert quarter.violation_rate_worst_sensor_ucb95 == pytest.approx(beta.ppf(level, 3.5, 497.5))
    assert quarter.violation_rate_worst_sensor == every.violation_rate_worst_sensor  # rates: all
    assert quarter.to_dict()["windows_counted_share"] == 0.25


def test_the_share_counted_is_one_window_in_each_overlapping_run() -> None:
    from engine.planning.verdict import disjoint_share

    assert disjoint_share(24, 24) == 1.0 and disjoint_share(24, 48) == 1.0
    assert disjoint_share(24, 6) == 0.25 and disjoint_share(24, 5) == 0.2  # ceil(24 / 5) = 5
    assert disjoint_share(24, 1) == pytest.approx(1 / 24)


def test_the_shared_rejection_is_scipy_binomtest_on_disjoint_windows_bonferroni() -> None:
    """``rejected`` (the verdicts' and the live status line's one test) against scipy's
    exact binomial test, by brute force over random tallies, tumbling and sliding."""
    from engine.planning.verdict import disjoint, rejected

    rng = np.random.default_rng(7)
    for _ in range(300):
        m = int(rng.integers(1, 6))
        share = float(rng.choice([1.0, 0.5, 0.25]))
        per = {}
        for i in range(m):
            n = int(rng.integers(0, 400))
            per[f"s{i}"] = (int(rng.binomial(n, rng.uniform(0.0, 0.2))) if n else 0, n)
        delta = float(rng.choice([0.01, 0.05, 0.1]))
        with_windows = [s for s, (_, n) in per.items() if n > 0]
        want = []
        for s in with_windows:
            k, n = disjoint(*per[s], share)
            k = min(k, n)  # a scaled count can pass the whole windows it is counted in
            if share == 1.0:  # whole counts: scipy's test itself
                p = binomtest(int(k), n, delta, alternative="greater").pvalue if k else 1.0
            else:  # real counts: the binomial tail continued, I_delta(k, n - k + 1)
                p = float(beta.cdf(delta, k, n - k + 1)) if k > 0 and n > 0 else 1.0
            if p < 0.05 / len(with_windows):
                want.append((p, s))
        got = rejected(per, delta, share)
        assert got == [s for _, s in sorted(want)], (per, delta, share)


@pytest.mark.parametrize("every", [1, 3, 49])
def test_windows_to_settle_is_the_first_count_whose_bound_is_below_delta(every: int) -> None:
    """``first_settled`` against a brute-force scan of every window count: the bound at a
    fixed rate rises between two multiples of the tested stride (the tested count stays
    while the misses grow), so bisecting every count could answer a later one."""
    from engine.planning.verdict import (
        MAX_SETTLE_WINDOWS,
        disjoint,
        first_settled,
        window_upper_bound,
    )

    share = 1.0 / every
    for rate in (0.003, 0.01, 0.02):

        def settled(n: int, rate: float = rate) -> bool:
            return window_upper_bound(*disjoint(rate * n, n, share), 0.99) <= 0.05

        brute = next(n for n in range(1, 200_000) if settled(n))
        assert first_settled(settled, 1, every) == brute
        # from a later start: the first multiple of the stride at or after it
        assert first_settled(settled, brute + 1, every) == -(-(brute + 1) // every) * every
    # never past the cap, even when the cap is not a multiple of the stride
    assert first_settled(lambda n: False, 1, 3) == MAX_SETTLE_WINDOWS
    assert first_settled(lambda n: n >= MAX_SETTLE_WINDOWS - 1, 1, 3) == MAX_SETTLE_WINDOWS - 1
    assert first_settled(lambda n: True, 2 * MAX_SETTLE_WINDOWS, 3) == MAX_SETTLE_WINDOWS


def test_disjoint_counts_every_gth_window_exactly() -> None:
    from engine.planning.verdict import disjoint, disjoint_share

    for g in (1, 2, 3, 7, 49, 97):
        share = disjoint_share(g * 5, 5)
        assert [disjoint(0, d * g, share)[1] for d in range(1, 50)] == list(range(1, 50))
    with pytest.raises(ParameterError, match="share must be 1 / a whole number"):
        disjoint(1, 10, 0.4)


def test_a_small_delta_and_the_rate_beside_it_are_said_exactly_enough_to_compare() -> None:
    """At delta 0.0011 a pooled 0.12 % read 'pooled 0.1 % ... above delta 0.1 %', and
    delta 0.0005 read as 0.1 %, twice itself."""
    from engine.planning.verdict import delta_digits

    assert [delta_digits(d) for d in (0.05, 0.1, 0.0024, 0.0005, 0.0011, 0.00001)] == [
        1, 1, 2, 2, 2, 3,
    ]  # fmt: skip
    text = _result([12, 12], [10_000, 10_000]).assess(0.0011).text
    assert text.startswith("DOES NOT HOLD: pooled 0.12 %") and "above delta 0.11 %" in text
    assert "above delta 5.0 %" in _result([30, 30], [400, 400]).assess(0.05).text
