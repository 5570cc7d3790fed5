"""K-slack buffer, PD controller, coverage target, batch corrections and the experiment.

References: closed-form sampling formulas, brute-force combinatorics and Monte
Carlo for the coverage target; a brute-force recomputation from all tuples
(``window_truth``) and ``engine.model.linear.window_aggregates`` for results.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.data import history_from_frame
from engine.disorder import (
    METHODS,
    CoverageTarget,
    DisorderConfig,
    DisorderProcessor,
    DisorderStage,
    KSlackBuffer,
    LateItem,
    PDController,
    ResultLedger,
    Zone,
    prefix_miss_length,
    required_coverage,
    required_coverage_tail,
    settled_values,
)
from engine.disorder.experiment import (
    describe_stream,
    run_disorder_experiment,
    window_truth,
)
from engine.errors import ParameterError, PipelineError
from engine.query import WindowQuery
from engine.windows import window_aggregates

Tuple4 = tuple[float, str, float, float]  # event time, sensor, value, arrival


def run(
    config: DisorderConfig, tuples: list[Tuple4]
) -> tuple[DisorderProcessor, list, list, list, list]:
    """Feed tuples (already in arrival order); return zones, released, late and rows."""
    proc = DisorderProcessor(config)
    zones = [proc.push(ts, s, v, a, tag=i) for i, (ts, s, v, a) in enumerate(tuples)]
    proc.flush()
    released, late, rows = proc.drain()
    return proc, zones, released, late, rows


def arrival_order(tuples: list[Tuple4]) -> list[Tuple4]:
    return sorted(tuples, key=lambda t: (t[3], t[0], t[1]))


# -- config -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"window": 0}, "window must be an integer >= 1, got 0"),
        ({"slide": 5}, "slide must not exceed window (4), got 5"),
        ({"aggregate": "median"}, "got 'median'"),
        ({"policy": "magic"}, "got 'magic'"),
        ({"delta": 1.0}, "got 1.0"),
        ({"eps_thr": 0.0}, "got 0.0"),
        ({"alpha0": 2.0}, "alpha0 must not exceed alpha_max"),
        ({"interval_s": -1.0}, "got -1.0"),
        ({"gamma_s": float("nan")}, "got nan"),
        ({"control_tuples": 0}, "got 0"),
    ],
)
def test_config_rejects_bad_values(changes: dict, fragment: str) -> None:
    with pytest.raises(ParameterError) as info:
        DisorderConfig.from_dict({"window": 4, **changes})
    assert fragment in str(info.value)


def test_config_round_trips_and_rejects_unknown_keys() -> None:
    c = DisorderConfig(
        WindowQuery(1.0, 0.05, 6, slide=2, aggregate="max"), interval_s=60.0, origin_s=10.0
    )
    assert DisorderConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ParameterError, match="unknown disorder config key"):
        DisorderConfig.from_dict({**c.to_dict(), "colour": 1})
    assert c.width_s == 360.0 and c.step_s == 120.0 and c.gamma == 360.0


# -- PD controller ----------------------------------------------------------


def test_pd_error_sign_moves_alpha_the_right_way() -> None:
    up = PDController(kp=0.2, kd=0.0, alpha=0.5, alpha_max=1.0)
    assert up.update(target=0.9, coverage=0.7) == pytest.approx(0.5 + 0.2 * 0.2)
    down = PDController(kp=0.2, kd=0.0, alpha=0.5, alpha_max=1.0)
    assert down.update(target=0.7, coverage=0.9) == pytest.approx(0.5 - 0.2 * 0.2)


def test_pd_steps_are_the_seeds_law_while_alpha_is_inside_its_bounds() -> None:
    """Unclamped, every step is ``kp * err + kd * (err - err_prev)`` (``err_0 = 0``)."""
    pd_ = PDController(kp=0.2, kd=4.0, alpha=0.5, alpha_max=10.0)
    coverage = [0.8, 0.85, 0.95, 0.7, 0.9, 0.99, 0.6]
    alpha, prev = 0.5, 0.0
    for c in coverage:
        err = 0.9 - c
        alpha += 0.2 * err + 4.0 * (err - prev)
        prev = err
        assert pd_.update(0.9, c) == pytest.approx(alpha)
        assert 0.0 < alpha < 10.0  # the sequence never touches a bound


def test_pd_clamps_alpha() -> None:
    pd_ = PDController(kp=1.0, kd=0.0, alpha=0.5, alpha_max=0.8)
    assert pd_.update(1.0, 0.0) == 0.8
    assert pd_.update(0.0, 1.0) == 0.0


def test_pd_clamp_does_not_ratchet_alpha_away_from_the_bound() -> None:
    """A derivative kick clipped at 0 must not shift every later output upwards.

    The velocity form with a clamped output loses the clipped part of the
    downward kick but keeps the whole upward one: on this sequence it settles
    at 0.4 for err = +0.05 where the unclamped law says 0.05 + 4 * 0.05 = 0.25.
    """
    pd_ = PDController(kp=0.0, kd=4.0, alpha=0.05, alpha_max=1.0)
    velocity, prev = 0.05, 0.0
    for err in [-0.05, 0.05, -0.05, 0.05]:
        velocity = min(1.0, max(0.0, velocity + 4.0 * (err - prev)))
        prev = err
        ours = pd_.update(0.9, 0.9 - err)
        assert ours == pytest.approx(max(0.0, 0.05 + 4.0 * err))
    assert (ours, velocity) == (pytest.approx(0.25), pytest.approx(0.4))


def test_pd_integral_is_clamped_so_it_does_not_wind_up() -> None:
    """Long saturation (coverage far above target) must not bank a debt below 0."""
    pd_ = PDController(kp=0.2, kd=0.0, alpha=0.1, alpha_max=1.0)
    for _ in range(50):
        pd_.update(0.5, 1.0)  # err -0.5: alpha pinned at 0
    assert pd_.alpha == 0.0
    assert pd_.update(0.9, 0.5) == pytest.approx(0.2 * 0.4)  # responds at once


def test_settled_values_put_readings_in_time_order_by_position() -> None:
    readings = {"a": [[0, 1.0], [1, 2.0], [3, 4.0], [2, 3.0]], "b": [], "c": [[1, 5.0], [1, 6.0]]}
    # Late or reordered readings go to their positions; a position seen twice keeps
    # its first reading; a sensor with no readings is left out.
    assert settled_values(readings) == {"a": [1.0, 2.0, 3.0, 4.0], "c": [5.0]}


def test_sliding_windows_learn_from_readings_in_time_order() -> None:
    """A reading late for one window but in time for its still-open neighbour.

    It reaches the neighbour after newer readings; the target must still see
    that window in time order (the newest-readings model depends on it).
    """
    buf = KSlackBuffer(DisorderConfig(WindowQuery(100.0, 0.05, 4, slide=1), policy="none"))
    seen: list[list[float]] = []
    real_observe = buf.target.observe
    buf.target.observe = lambda values: (seen.append(values["s"]), real_observe(values))  # type: ignore[method-assign]
    order = [0, 1, 2, 3, 4, 6, 7, 5, 8, 9, 10, 11]  # 5 arrives after 7
    for i, t in enumerate(order):
        buf.push(float(t), "s", float(t), arrival=float(i))
    buf.flush()
    assert seen and all(w == sorted(w) for w in seen)
    assert [4.0, 5.0, 6.0, 7.0] in seen


def test_target_survives_a_window_whose_sensor_arrived_only_late() -> None:
    """srs + max: a sensor with no in-time reading in a window must not crash the target."""
    buf = KSlackBuffer(
        DisorderConfig(
            WindowQuery(1.0, 0.05, 4, aggregate="max"), policy="none", target_model="srs"
        )
    )
    for t in range(8):
        buf.push(float(t), "a", 1.0, arrival=float(t))
    buf.push(2.0, "b", 1.0, arrival=8.0)  # b's only reading, late for a closed window
    buf.flush()
    assert buf.target.lambda_thr() is not None


def test_target_keeps_learning_when_no_window_is_complete_at_its_close() -> None:
    """Without a buffer every window here loses its last reading at the close.

    The target must still learn from the windows once the late reading has
    arrived; learning only from windows complete at their close would leave
    it with nothing (and, with a small ``K``, stop updating).
    """
    buf = KSlackBuffer(DisorderConfig(WindowQuery(0.5, 0.05, 4), policy="none"))
    readings = [(float(t), 10.0 if t % 4 == 3 else float(t % 4)) for t in range(24)]
    arrivals = [t + 1.5 if t % 4 == 3 else t for t, _ in readings]  # after the next window opens
    for (ts, value), at in sorted(zip(readings, arrivals, strict=True), key=lambda r: r[1]):
        buf.push(ts, "s", value, arrival=at)
    buf.flush()
    history = list(buf.target.stats["s"])
    assert len(history) >= 5
    # Losing the newest reading (10 against 0, 1, 2) misses eps: all 4 are needed.
    assert set(history) == {3.0} and buf.target.lambda_thr() == 1.0


# -- coverage target (sampling theory) --------------------------------------


@pytest.mark.parametrize(
    ("s2", "eps", "delta", "n_total"), [(400.0, 5.0, 0.05, 24), (9.0, 1.0, 0.1, 50)]
)
def test_avg_target_matches_the_closed_form(
    s2: float, eps: float, delta: float, n_total: int
) -> None:
    z = NormalDist().inv_cdf(1 - delta / 2)
    n_min = math.ceil(s2 / (eps**2 / z**2 + s2 / n_total) - 1e-9)
    lam = required_coverage("avg", np.array([s2, s2]), n_total, eps, delta)
    assert lam == pytest.approx(max(n_min, 1) / n_total)


def test_sum_target_is_the_avg_target_with_eps_over_n() -> None:
    stats = np.array([4.0, 25.0, 9.0])
    assert required_coverage("sum", stats, 10, 30.0, 0.05) == required_coverage(
        "avg", stats, 10, 3.0, 0.05
    )


def test_zero_variance_needs_one_reading() -> None:
    assert required_coverage("avg", np.array([0.0]), 8, 0.1, 0.05) == 1 / 8


def test_avg_target_holds_by_monte_carlo() -> None:
    rng = np.random.default_rng(5)
    population = rng.normal(0, 3, size=40)
    s2 = population.var(ddof=1)
    eps, delta = 1.0, 0.1
    n = round(required_coverage("avg", np.array([s2]), 40, eps, delta) * 40)

    def errors(size: int) -> np.ndarray:
        samples = rng.permuted(np.tile(population, (20_000, 1)), axis=1)[:, :size]
        return np.abs(samples.mean(axis=1) - population.mean())

    assert np.mean(errors(n) > eps) <= delta + 0.02  # normal approximation, small slack
    assert np.mean(errors(n - 2) > eps) > np.mean(errors(n) > eps)


@pytest.mark.parametrize(("m", "n_total", "delta"), [(1, 24, 0.05), (3, 24, 0.05), (5, 12, 0.2)])
def test_extreme_target_is_the_hypergeometric_bound(m: int, n_total: int, delta: float) -> None:
    def p_miss(n: int) -> float:
        return math.comb(n_total - m, n) / math.comb(n_total, n)

    n_min = next(n for n in range(1, n_total + 1) if p_miss(n) <= delta)
    for agg in ("max", "min"):
        assert required_coverage(agg, np.array([m]), n_total, 1.0, delta) == pytest.approx(
            n_min / n_total
        )
    if m == 1:
        assert n_min == math.ceil(n_total * (1 - delta))


def test_extreme_target_averages_the_miss_probability_over_windows() -> None:
    n_total, delta = 20, 0.1
    ms = [1, 4]

    def mean_miss(n: int) -> float:
        return float(np.mean([math.comb(n_total - m, n) / math.comb(n_total, n) for m in ms]))

    n_min = next(n for n in range(1, n_total + 1) if mean_miss(n) <= delta)
    assert required_coverage("max", np.array(ms), n_total, 1.0, delta) == pytest.approx(
        n_min / n_total
    )


def test_coverage_target_takes_the_hardest_sensor() -> None:
    target = CoverageTarget("avg", 10, 1.0, 0.05, history=5, model="srs")
    assert target.lambda_thr() is None
    calm, wild = [0.0, 0.1] * 5, [0.0, 6.0] * 5
    target.observe({"calm": calm, "wild": wild})
    wild_only = required_coverage("avg", np.array([np.var(wild, ddof=1)]), 10, 1.0, 0.05)
    assert target.lambda_thr() == wild_only
    restored = CoverageTarget.restore(json.loads(json.dumps(target.snapshot())))
    assert restored.lambda_thr() == wild_only


def test_max_target_counts_readings_near_the_top() -> None:
    target = CoverageTarget("max", 4, 1.0, 0.05, history=5, model="srs")
    target.observe({"s": [10.0, 9.5, 3.0, 2.0]})  # 2 of 4 within eps of the max -> M = 2
    assert target.stats["s"][-1] == 2.0


def brute_prefix_miss(x: list[float], agg: str, eps: float) -> int:
    full = len(x)
    worst = 0
    for n in range(1, full + 1):
        head = x[:n]
        value = {
            "avg": np.mean(head),
            "sum": full * np.mean(head),
            "max": max(head),
            "min": min(head),
        }[agg]
        exact = {"avg": np.mean(x), "sum": float(np.sum(x)), "max": max(x), "min": min(x)}[agg]
        if abs(value - exact) > eps:
            worst = n
    return worst


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(-20, 20).map(float), min_size=1, max_size=12),
    st.sampled_from(["avg", "sum", "max", "min"]),
    st.floats(0.1, 10),
)
def test_prefix_miss_length_matches_brute_force(x: list[float], agg: str, eps: float) -> None:
    assert prefix_miss_length(x, agg, eps) == brute_prefix_miss(x, agg, eps)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=30), st.floats(0.01, 0.5))
def test_tail_target_is_the_smallest_prefix_missing_at_most_delta(
    lengths: list[int], delta: float
) -> None:
    window = 10
    share = [np.mean([t >= n for t in lengths]) for n in range(1, window + 1)]
    n_min = next(n for n in range(1, window + 1) if share[n - 1] <= delta)
    assert required_coverage_tail(np.array(lengths), window, delta) == n_min / window


def ar1_windows(rng: np.random.Generator, count: int, window: int, rho: float) -> np.ndarray:
    """(count, window) stationary AR(1) windows with unit marginal variance."""
    x = np.empty((count, window))
    x[:, 0] = rng.normal(size=count)
    for i in range(1, window):
        x[:, i] = rho * x[:, i - 1] + np.sqrt(1 - rho**2) * rng.normal(size=count)
    return x


def test_tail_target_holds_on_autocorrelated_data_where_srs_does_not() -> None:
    rng = np.random.default_rng(12)
    window, eps, delta = 24, 0.5, 0.1
    tail = CoverageTarget("avg", window, eps, delta, history=400, model="tail")
    srs = CoverageTarget("avg", window, eps, delta, history=400, model="srs")
    for w in ar1_windows(rng, 400, window, rho=0.9):
        tail.observe({"s": list(w)})
        srs.observe({"s": list(w)})
    fresh = ar1_windows(rng, 5000, window, rho=0.9)

    def miss_rate(lam: float | None) -> float:
        assert lam is not None
        n = round(lam * window)
        return float(np.mean(np.abs(fresh[:, :n].mean(axis=1) - fresh.mean(axis=1)) > eps))

    assert miss_rate(tail.lambda_thr()) <= delta + 0.02  # held-out windows: the target holds
    assert miss_rate(srs.lambda_thr()) > 2 * delta  # random-sample theory is too optimistic here
    partial = CoverageTarget("avg", window, eps, delta, history=5, model="tail")
    partial.observe({"s": [1.0] * (window - 1)})  # incomplete at close: not used
    assert partial.lambda_thr() is None


# -- buffer behaviour --------------------------------------------------------


def test_in_order_stream_without_buffer_releases_everything_in_order() -> None:
    config = DisorderConfig(WindowQuery(1.0, 0.05, 2), policy="none")
    tuples = [(float(t), s, float(t), float(t)) for t in range(6) for s in ("a", "b")]
    _, _, released, late, rows = run(config, tuples)
    assert not late and len(released) == 12
    assert [r[0] for r in released] == sorted(r[0] for r in released)
    provisional = [r for r in rows if r[5] == "provisional"]
    assert [(r[0], r[3], r[4]) for r in provisional] == [
        (j, s, 2 * j + 0.5) for j in range(3) for s in ("a", "b")
    ]


def test_zones_follow_the_three_regions() -> None:
    config = DisorderConfig(WindowQuery(1.0, 0.05, 2), policy="fixed", fixed_k_s=1.0)
    buf = KSlackBuffer(config)
    assert buf.push(0.0, "a", 1.0, 0.0) == Zone.BUFFER
    assert buf.push(3.0, "a", 1.0, 3.0) == Zone.BUFFER  # t_max - K = 2 closes window 0
    assert [w.index for w in buf.drain().closed] == [0]
    assert buf.push(2.0, "a", 1.0, 3.1) == Zone.CURRENT  # behind t_max - K, window 1 open
    assert buf.push(1.0, "a", 1.0, 3.2) == Zone.LATE  # window 0 already closed
    assert buf.push(2.5, "a", 1.0, 3.3) == Zone.BUFFER  # 2.5 > t_max - K = 2
    out = buf.drain()
    assert [x[0] for x in out.late] == [1.0]


def test_mp_kslack_is_only_surprised_by_record_lateness() -> None:
    rng = np.random.default_rng(7)
    times = np.arange(300, dtype=float)
    arrivals = times + rng.exponential(3.0, size=times.size)
    tuples = arrival_order([(t, "s", t, a) for t, a in zip(times, arrivals, strict=True)])
    _, _, _, late, _ = run(DisorderConfig(WindowQuery(1.0, 0.05, 5), policy="mp_kslack"), tuples)
    t_max, k, records = -math.inf, 0.0, 0
    for ts, _, _, _ in tuples:
        lateness = max(0.0, t_max - ts)
        records += lateness > k
        k, t_max = max(k, lateness), max(t_max, ts)
    assert 0 < len(late) <= records


def test_fixed_and_no_buffer_keep_k_constant() -> None:
    tuples = arrival_order([(float(t), "s", 1.0, t + (t % 3)) for t in range(30)])
    fixed, *_ = run(
        DisorderConfig(WindowQuery(1.0, 0.05, 3), policy="fixed", fixed_k_s=2.5), tuples
    )
    none, *_ = run(DisorderConfig(WindowQuery(1.0, 0.05, 3), policy="none"), tuples)
    assert {k for _, k in fixed.buffer.k_series} == {2.5}
    assert {k for _, k in none.buffer.k_series} == {0.0}


def test_adaptive_alpha_falls_when_coverage_beats_the_target() -> None:
    # constant delay: the stream is in order, coverage is 1 > lambda_thr, so alpha must shrink
    tuples = [(float(t), s, float(t % 5), t + 4.0) for t in range(400) for s in ("a", "b")]
    config = DisorderConfig(WindowQuery(2.0, 0.05, 10), alpha0=1.0, control_tuples=20)
    proc, *_ = run(config, tuples)
    alphas = [a for *_, a in proc.buffer.coverage_series]
    assert alphas and alphas[-1] < 1.0
    assert all(b <= a + 1e-12 for a, b in pairwise(alphas))


def test_adaptive_k_is_alpha_times_the_largest_lateness() -> None:
    """``K = alpha * k``, not ``k``: with ``alpha = 0.5`` a tuple 6 s behind ``t_max``
    sets ``k = 6`` and ``K = 3``, so one 3.5 s behind goes to the window being computed,
    not the buffer. MP-K-slack (``K = k``) buffers it. Fails if ``current_k`` drops alpha."""
    ours = KSlackBuffer(DisorderConfig(WindowQuery(1.0, 0.05, 100), alpha0=0.5))
    mp = KSlackBuffer(DisorderConfig(WindowQuery(1.0, 0.05, 100), policy="mp_kslack"))
    for buf in (ours, mp):
        for ts, arrival in ((0.0, 0.0), (10.0, 10.0), (4.0, 10.1)):
            buf.push(ts, "a", 1.0, arrival)
        assert buf.k == 6.0
    assert ours.current_k() == 3.0 and mp.current_k() == 6.0
    assert ours.push(6.5, "a", 1.0, 10.2) == Zone.CURRENT  # 6.5 <= t_max - K = 7
    assert mp.push(6.5, "a", 1.0, 10.2) == Zone.BUFFER  # 6.5 > t_max - k = 4


def test_a_controller_that_drives_alpha_below_one_keeps_k_below_the_largest_lateness() -> None:
    """On a seeded disordered stream (delays ~ Exp(4 s)) the target coverage is 0.9, so
    the controller settles ``alpha`` inside ``(0, 1)`` and ``K = alpha * k`` stays strictly
    below ``k``, the largest lateness seen (MP-K-slack's ``K``). Fails if ``K = k``."""
    rng = np.random.default_rng(3)
    times = np.arange(600, dtype=float)
    arrivals = times + rng.exponential(4.0, size=times.size)
    tuples = arrival_order(
        [(t, "s", float(t % 7), a) for t, a in zip(times, arrivals, strict=True)]
    )
    proc, *_ = run(DisorderConfig(WindowQuery(0.5, 0.05, 10), control_tuples=20), tuples)
    buf = proc.buffer
    assert buf.target.lambda_thr() == pytest.approx(0.9)
    assert buf.k > 0 and 0 < buf.pd.alpha < 1
    assert buf.current_k() == pytest.approx(buf.pd.alpha * buf.k)
    assert buf.current_k() < buf.k
    assert buf.k_sum / buf.n_pushed < buf.k


# -- batch module --------------------------------------------------------------


def test_late_tuples_wait_for_gamma_then_correct_in_one_batch() -> None:
    ledger = ResultLedger(DisorderConfig(WindowQuery(1.0, 0.05, 2), gamma_s=2.5))
    for j in range(3):
        ledger.add_closed(j, {"s": [1.0, 1.0]}, now=2.0 * j + 2)
    ledger.add_late(LateItem(1.0, 0, 0, 0, "s", 11.0, 10.1, -1), 10.1)
    ledger.add_late(LateItem(3.0, 1, 1, 1, "s", 13.0, 10.2, -1), 10.2)  # span 2 <= gamma: pending
    assert ledger.n_batches == 0 and len(ledger.pending) == 2
    ledger.add_late(LateItem(4.0, 2, 2, 2, "s", 14.0, 10.3, -1), 10.3)  # span 3 > gamma: one batch
    assert ledger.n_batches == 1 and not ledger.pending and ledger.n_corrections == 3
    corrections = [r for r in ledger.rows if r.kind == "correction"]
    assert [(r.window, r.value, r.version, r.final, r.emitted_at_s) for r in corrections] == [
        (0, 13 / 3, 1, False, 10.3),
        (1, 15 / 3, 1, False, 10.3),
        (2, 16 / 3, 1, False, 10.3),
    ]


def test_finalisation_applies_pending_late_tuples_first() -> None:
    ledger = ResultLedger(DisorderConfig(WindowQuery(1.0, 0.05, 2), gamma_s=100.0))
    ledger.add_closed(0, {"s": [1.0, 3.0]}, now=2.0)
    ledger.add_late(LateItem(1.0, 0, 0, 0, "s", 5.0, 3.0, -1), 3.0)
    ledger.finalize(t_max=10.0, k=4.0, now=10.0)
    assert [(r.kind, r.value, r.version, r.final) for r in ledger.rows] == [
        ("provisional", 2.0, 0, False),
        ("correction", 3.0, 1, False),
        ("final", 3.0, 2, True),
    ]


def test_a_tuple_later_than_any_seen_reopens_a_final_window() -> None:
    proc = DisorderProcessor(DisorderConfig(WindowQuery(1.0, 0.05, 2), policy="none"))
    for t in range(10):
        proc.push(float(t), "s", 1.0, float(t))  # in order: k = 0, windows final at once
    proc.push(1.0, "s", 4.0, 10.5)
    proc.flush()
    rows = [r for r in proc.drain()[2] if r[0] == 0]
    assert [(r[5], r[6], r[7]) for r in rows] == [
        ("provisional", 0, False),
        ("final", 1, True),
        ("correction", 2, True),
    ]
    assert rows[-1][4] == pytest.approx(2.0) and proc.ledger.n_reopened == 1


def test_sum_is_scaled_while_incomplete_and_exact_when_final() -> None:
    config = DisorderConfig(WindowQuery(1.0, 0.05, 4, aggregate="sum"), policy="none")
    # reading at t=3 of window 0 arrives after window 1 started: provisional = 4 * mean of 3
    tuples = [
        (0.0, "s", 1.0, 0.0),
        (1.0, "s", 2.0, 1.0),
        (2.0, "s", 3.0, 2.0),
        (4.0, "s", 5.0, 4.0),
        (3.0, "s", 10.0, 4.5),
    ]
    _, _, _, late, rows = run(config, tuples)
    assert [x[0] for x in late] == [3.0]
    window0 = [r for r in rows if r[0] == 0]
    assert window0[0][5] == "provisional" and window0[0][4] == pytest.approx(4 * 2.0)
    assert window0[-1][7] and window0[-1][4] == pytest.approx(16.0)


def test_window_truth_matches_row_windows() -> None:
    rng = np.random.default_rng(8)
    values = rng.normal(size=(23, 3))
    times = np.repeat(np.arange(23, dtype=float) * 60.0, 3)
    sensors = np.tile(np.array(["a", "b", "c"], dtype=object), 23)
    for agg in ("avg", "sum", "max", "min"):
        config = DisorderConfig(WindowQuery(1.0, 0.05, 5, slide=2, aggregate=agg), interval_s=60.0)
        truth = window_truth(times, sensors, values.ravel(), config)
        complete = truth[truth["count"] == 5].pivot(
            index="window", columns="sensor", values="value"
        )
        np.testing.assert_allclose(complete.to_numpy(), window_aggregates(values, 5, 2, agg))


def test_describe_stream_counts_out_of_order_tuples() -> None:
    stats = describe_stream(
        np.array([0.0, 2.0, 1.0, 3.0, 1.5]), np.array([0.5, 2.0, 2.5, 3.0, 4.0])
    )
    assert stats["late_ratio"] == pytest.approx(2 / 5)
    assert stats["max_lateness_s"] == 1.5 and stats["max_delay_s"] == 2.5


# -- properties (Hypothesis) ---------------------------------------------------


@st.composite
def streams(draw: st.DrawFn) -> tuple[DisorderConfig, list[Tuple4]]:
    window = draw(st.integers(1, 4))
    config = DisorderConfig(
        WindowQuery(
            0.5,
            0.05,
            window,
            slide=draw(st.integers(1, window)),
            aggregate=draw(st.sampled_from(["avg", "sum", "max", "min"])),
        ),
        policy=draw(st.sampled_from(["adaptive", "mp_kslack", "fixed", "none"])),
        fixed_k_s=draw(st.floats(0, 5)),
        gamma_s=draw(st.floats(0, 6)),
        alpha0=draw(st.floats(0, 1)),
        control_tuples=draw(st.integers(1, 6)),
    )
    n_times = draw(st.integers(1, 25))
    sensors = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    tuples = []
    for t in range(n_times):
        for s in sensors:
            if draw(st.booleans()) or t == 0:
                delay = draw(
                    st.one_of(st.just(0.0), st.floats(0, 12), st.integers(0, 8).map(float))
                )
                tuples.append((float(t), s, float(draw(st.integers(-5, 5))), t + delay))
    return config, arrival_order(tuples)


@settings(max_examples=100, deadline=None)
@given(streams())
def test_released_never_go_back_in_time_and_nothing_is_dropped(
    case: tuple[DisorderConfig, list[Tuple4]],
) -> None:
    config, tuples = case
    _, zones, released, late, _ = run(config, tuples)
    times = [r[0] for r in released]
    assert times == sorted(times)
    released_tags = [r[6] for r in released]
    late_tags = [x[7] for x in late]
    assert len(set(released_tags)) == len(released_tags)  # released exactly once
    assert sorted(released_tags + late_tags) == list(range(len(tuples)))  # nothing lost
    assert sorted(late_tags) == [i for i, z in enumerate(zones) if z == Zone.LATE]


@settings(max_examples=100, deadline=None)
@given(streams())
def test_results_are_eventually_exact(case: tuple[DisorderConfig, list[Tuple4]]) -> None:
    config, tuples = case
    *_, rows = run(config, tuples)
    truth = window_truth(
        np.array([t[0] for t in tuples]),
        np.array([t[1] for t in tuples], dtype=object),
        np.array([t[2] for t in tuples]),
        config,
    )
    exact = {(int(j), s): (int(c), v) for j, s, c, v in truth.itertuples(index=False)}
    latest: dict = {}
    versions: dict = {}
    for j, _, _, s, value, _, version, final, _ in rows:
        assert version == versions.get((j, s), -1) + 1
        versions[(j, s)] = version
        latest[(j, s)] = (value, final)
    assert set(latest) == set(exact)
    for key, (value, final) in latest.items():
        assert final
        assert value == pytest.approx(exact[key][1], rel=1e-9, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(streams())
def test_provisional_results_aggregate_exactly_the_in_time_tuples(
    case: tuple[DisorderConfig, list[Tuple4]],
) -> None:
    config, tuples = case
    _, _, _, late, rows = run(config, tuples)
    late_for: dict = {}
    for x in late:  # windows each late tuple missed
        for j in range(x[2], x[3] + 1):
            late_for.setdefault((j, x[4]), set()).add(x[7])
    tagged = [(t[0], t[1], t[2], i) for i, t in enumerate(tuples)]
    for j, _, _, s, value, kind, *_ in rows:
        if kind != "provisional":
            continue
        start, end = (
            config.origin_s + j * config.step_s,
            config.origin_s + j * config.step_s + config.width_s,
        )
        members = [
            t
            for t in tagged
            if t[1] == s and start <= t[0] < end and t[3] not in late_for.get((j, s), set())
        ]
        vals = [t[2] for t in members]
        expected = {"avg": np.mean, "max": np.max, "min": np.min}.get(config.aggregate)
        want = (
            expected(vals)
            if expected
            else sum(vals) * (1 if len(vals) >= config.window else config.window / len(vals))
        )
        assert value == pytest.approx(want, rel=1e-9, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(streams(), st.floats(0, 1))
def test_restore_of_snapshot_continues_identically(
    case: tuple[DisorderConfig, list[Tuple4]], cut: float
) -> None:
    config, tuples = case
    split = int(cut * len(tuples))
    whole = DisorderProcessor(config)
    first = DisorderProcessor(config)
    for i, (ts, s, v, a) in enumerate(tuples[:split]):
        whole.push(ts, s, v, a, i)
        first.push(ts, s, v, a, i)
    state = json.loads(json.dumps(first.snapshot()))
    resumed = DisorderProcessor.restore(state)
    assert json.loads(json.dumps(resumed.snapshot())) == state
    for i, (ts, s, v, a) in enumerate(tuples[split:], start=split):
        whole.push(ts, s, v, a, i)
        resumed.push(ts, s, v, a, i)
    whole.flush()
    resumed.flush()
    assert resumed.drain() == whole.drain()
    assert json.dumps(resumed.snapshot()) == json.dumps(whole.snapshot())


def test_snapshot_can_keep_only_backed_up_sensors() -> None:
    config = DisorderConfig(WindowQuery(1.0, 0.05, 4), policy="fixed", fixed_k_s=10.0)
    proc = DisorderProcessor(config)
    for t in range(3):
        for s in ("kept", "dropped"):
            proc.push(float(t), s, 1.0, float(t))
    state = proc.snapshot(keep_sensors={"kept"})
    assert {item[3] for item in state["buffer"]["heap"]} == {"kept"}
    resumed = DisorderProcessor.restore(state)
    resumed.flush()
    released, _, rows = resumed.drain()
    assert {r[3] for r in released} == {"kept"} and {r[3] for r in rows} == {"kept"}


def test_snapshot_from_the_velocity_form_controller_still_restores() -> None:
    """Live state written before the position-form controller has ``prev_err``, no integral."""
    config = DisorderConfig(WindowQuery(1.0, 0.05, 4))
    proc = DisorderProcessor(config)
    for t in range(12):
        proc.push(float(t), "s", float(t), float(t))
    state = json.loads(json.dumps(proc.snapshot()))
    state["buffer"]["pd"] = {"alpha": 0.7, "prev_err": -0.05}
    for key in ("open_pos", "settling"):
        state["buffer"].pop(key)
    resumed = DisorderProcessor.restore(state)
    assert resumed.buffer.pd.alpha == 0.7
    # The seed's law from there: err 0 after -0.05 moves alpha by kd * 0.05 = +0.2.
    assert resumed.buffer.pd.update(0.9, 0.9) == pytest.approx(0.9)
    for t in range(12, 20):
        resumed.push(float(t), "s", float(t), float(t))
    resumed.flush()


# -- experiment ------------------------------------------------------------------


def small_history(rows: int = 240, n: int = 3):
    rng = np.random.default_rng(9)
    times = pd.date_range("2024-01-01", periods=rows, freq="h")
    walk = np.cumsum(rng.normal(size=(rows, n)), axis=0) + 50
    frame = pd.DataFrame(walk, columns=[f"s{i}" for i in range(n)])
    frame.insert(0, "time", times)
    return history_from_frame(frame)


def test_experiment_report_contract_and_invariants() -> None:
    history = small_history()
    report = run_disorder_experiment(
        history,
        "exp:7200",
        eps_thr=1.0,
        delta=0.1,
        window=12,
        rng=np.random.default_rng(0),
        fixed_k_s=3600.0,
    )
    d = report.to_dict()
    assert set(METHODS) <= set(d)
    for key in ("late_ratio", "max_delay_s", "lambda_thr", "parameters"):
        assert key in d
    assert 0 < d["late_ratio"] < 1 and d["max_delay_s"] > 0
    assert 0 < d["lambda_thr"] <= 1
    for name in METHODS:
        m = d[name]
        for key in (
            "avg_latency_s",
            "avg_k_s",
            "provisional_accuracy",
            "final_accuracy",
            "corrections",
            "k_over_time",
            "cumulative_accuracy",
        ):
            assert key in m
        assert m["final_accuracy"] == 1.0 and m["final_exact"] == 1.0
        assert m["cumulative_accuracy"][-1][1] == 1.0
    assert d["no_buffer"]["avg_k_s"] == 0.0
    assert d["fixed_watermark"]["avg_k_s"] == 3600.0
    assert d["mp_kslack"]["late_tuples"] <= d["no_buffer"]["late_tuples"]
    assert d["no_buffer"]["corrections"] > 0
    json.dumps(d)


def test_experiment_in_order_stream_needs_no_correction() -> None:
    report = run_disorder_experiment(
        small_history(96),
        "const:600",
        eps_thr=1.0,
        delta=0.1,
        window=12,
        rng=np.random.default_rng(0),
    ).to_dict()
    assert report["late_ratio"] == 0.0
    for name in METHODS:
        assert report[name]["late_tuples"] == 0 and report[name]["corrections"] == 0
        assert report[name]["provisional_accuracy"] == 1.0


def test_ours_keeps_a_smaller_k_than_mp_kslack_at_the_required_accuracy() -> None:
    """The seed's claim (DESIGN.md section 6) on a small seeded stream: 40 days hourly,
    exponential delays of mean 2 h, eps 0.3, delta 0.1. Without a buffer the provisional
    accuracy is below ``1 - delta`` (the target is not met for free); ours meets it with a
    mean ``K`` and latency well under MP-K-slack's. Fails if ``K = k`` (ours would be
    MP-K-slack) or if ours met a smaller ``K`` by giving up the accuracy."""
    report = run_disorder_experiment(
        small_history(960),
        "exp:7200",
        eps_thr=0.3,
        delta=0.1,
        window=12,
        rng=np.random.default_rng(0),
    ).to_dict()
    ours, mp, none = report["ours"], report["mp_kslack"], report["no_buffer"]
    assert report["parameters"]["evaluated_results"] == 240
    assert none["provisional_accuracy"] < 0.9
    assert ours["provisional_accuracy"] >= 0.9
    assert ours["avg_k_s"] < 0.75 * mp["avg_k_s"]
    assert ours["avg_latency_s"] < 0.75 * mp["avg_latency_s"]


# -- the pipeline stage (pure pandas, no JVM) --------------------------------------


def stage_frame(tuples: list[Tuple4], base: str = "2024-01-01") -> pd.DataFrame:
    origin = pd.Timestamp(base, tz="UTC")
    return pd.DataFrame(
        {
            "seq": np.arange(len(tuples), dtype=np.int64),
            # rounded to whole microseconds: Timedelta(seconds=8.000001) is 8000000999 ns,
            # which a cast to microseconds truncates into a tie with 8.0 (Hypothesis found it)
            "event_time": [origin + pd.Timedelta(microseconds=round(t[0] * 1e6)) for t in tuples],
            "arrival_time": [origin + pd.Timedelta(microseconds=round(t[3] * 1e6)) for t in tuples],
            "sensor": [t[1] for t in tuples],
            "value": [t[2] for t in tuples],
        }
    ).astype({"event_time": "datetime64[us, UTC]", "arrival_time": "datetime64[us, UTC]"})


@settings(max_examples=30, deadline=None)
@given(streams(), st.lists(st.floats(0, 1), max_size=4))
def test_stage_micro_batches_equal_one_pure_pass(
    case: tuple[DisorderConfig, list[Tuple4]], cuts: list[float]
) -> None:
    config, tuples = case
    # Spark timestamps are microseconds: quantise, then restore the arrival order
    tuples = arrival_order([(t[0], t[1], t[2], round(t[3] * 1e6) / 1e6) for t in tuples])
    origin = pd.Timestamp("2024-01-01", tz="UTC").value / 1e9
    config = DisorderConfig.from_dict({**config.to_dict(), "origin_s": origin})
    frame = stage_frame(tuples)
    stage = DisorderStage(config)
    bounds = sorted({0, len(tuples), *(int(c * len(tuples)) for c in cuts)})
    shuffled = np.random.default_rng(0)
    outs = []
    for batch_id, (lo, hi) in enumerate(pairwise(bounds)):
        part = frame.iloc[lo:hi].sample(
            frac=1.0, random_state=shuffled.integers(1000)
        )  # Spark gives no row order
        outs.append(stage.process(part, batch_id))
    outs.append(stage.flush())
    released = pd.concat([o[0] for o in outs], ignore_index=True)
    late = pd.concat([o[1] for o in outs], ignore_index=True)
    shifted = [(t[0] + origin, t[1], t[2], t[3] + origin) for t in tuples]
    _, _, ref_released, ref_late, ref_rows = run(config, shifted)
    assert released["seq"].tolist() == [r[6] for r in ref_released]
    assert late["seq"].tolist() == [x[7] for x in ref_late]
    assert released["event_time"].tolist() == frame["event_time"].iloc[released["seq"]].tolist()
    assert str(released["event_time"].dtype) == "datetime64[us, UTC]"
    results = stage.pop_results()
    assert len(results) == len(ref_rows)
    assert results["value"].tolist() == [r[4] for r in ref_rows]
    assert results["kind"].tolist() == [r[5] for r in ref_rows]


def test_stage_replayed_batch_returns_the_same_output_once(tmp_path: Path) -> None:
    tuples = arrival_order(
        [(float(t), s, float(t), t + (t * 7 % 5)) for t in range(40) for s in ("a", "b")]
    )
    frame = stage_frame(tuples)
    origin = pd.Timestamp("2024-01-01", tz="UTC").value / 1e9
    config = DisorderConfig(
        WindowQuery(1.0, 0.05, 4), origin_s=origin, policy="fixed", fixed_k_s=2.0
    )
    state_file = tmp_path / "chk" / "disorder.json"
    stage = DisorderStage(config, state_path=state_file)
    first = stage.process(frame.iloc[:30], batch_id=0)
    second = stage.process(frame.iloc[30:50], batch_id=1)
    # a restarted query resumes from the file and Spark replays batch 1
    resumed = DisorderStage.load(state_file)
    again = resumed.process(frame.iloc[30:50], batch_id=1)
    pd.testing.assert_frame_equal(again[0], second[0])
    pd.testing.assert_frame_equal(again[1], second[1])
    assert resumed.process(frame.iloc[:30], batch_id=0)[0].empty  # older batch: nothing twice
    rest = resumed.process(frame.iloc[50:], batch_id=2)
    final = resumed.flush()
    released = pd.concat([first[0], second[0], rest[0], final[0]], ignore_index=True)
    late = pd.concat([first[1], second[1], rest[1], final[1]], ignore_index=True)
    assert sorted(released["seq"].tolist() + late["seq"].tolist()) == list(range(len(tuples)))


def test_a_stage_resumed_after_a_failure_reports_no_window_begun_before_it() -> None:
    """A restarted stage sees the readings from the restart on only: its results for
    windows open then would be computed from part of them and, in time, marked final."""
    origin = pd.Timestamp("2024-01-01", tz="UTC").value / 1e9
    config = DisorderConfig(WindowQuery(1.0, 0.05, 4), origin_s=origin, policy="none")
    tuples = [(float(t), s, float(t), float(t)) for t in range(6, 20) for s in ("a", "b")]
    fresh = DisorderStage(config)
    fresh.process(stage_frame(tuples), batch_id=0)
    fresh.flush()
    assert fresh.pop_results()["window_id"].min() == 1  # window 1 (4-7) from readings 6 and 7
    resumed = DisorderStage(config).resume_at(origin + 6.0)
    resumed = DisorderStage(config).restore(resumed.snapshot())  # kept in the state
    resumed.process(stage_frame(tuples), batch_id=0)
    resumed.flush()
    results = resumed.pop_results()
    assert results["window_id"].min() == 2 and results["final"].any()  # window 2 starts at 8
    whole = results[results["final"]].groupby("sensor")["value"].first()
    assert whole.to_dict() == {"a": 9.5, "b": 9.5}  # (8 + 9 + 10 + 11) / 4, all there


def test_stage_for_history_lines_windows_up_with_the_history() -> None:
    times = pd.date_range("2024-01-01", periods=10, freq="h").to_numpy()
    stage = DisorderStage.for_history(
        times, WindowQuery(1.0, 0.05, 4), policy="none", backup_sensors=["a"]
    )
    assert stage.config.origin_s == pd.Timestamp("2024-01-01").value / 1e9
    assert stage.config.interval_s == 3600.0 and stage.config.policy == "none"
    assert stage.backup_sensors == {"a"}
    with pytest.raises(PipelineError, match="lacks column"):
        stage.process(pd.DataFrame({"event_time": [], "sensor": [], "value": []}))


def test_experiment_records_late_tuples_and_versioned_results_in_the_store(tmp_path: Path) -> None:
    from engine.live.offline import record_replay
    from engine.live.store import BackupStore

    path = tmp_path / "store.duckdb"
    report = run_disorder_experiment(
        small_history(), "exp:7200", eps_thr=1.0, delta=0.1, window=12,
        rng=np.random.default_rng(0), record=lambda late, rows: record_replay(path, late, rows),
    ).to_dict()  # fmt: skip
    with BackupStore(path) as store:
        late = store.read_table("late")
        results = store.read_results()
    assert len(late) == report["ours"]["late_tuples"] > 0
    assert set(results["kind"]) == {"provisional", "correction", "final"}
    assert (results["kind"] == "correction").sum() == report["ours"]["corrections"]
    latest = results.sort_values("version").groupby(["window_id", "sensor"]).tail(1)
    assert latest["final"].all()


def test_a_long_replay_reports_its_progress_and_can_be_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each method's replay calls the progress every STEP_TUPLES tuples, the share rising
    through the four methods; a progress that raises (a Cancel) stops the replay there."""
    import engine.disorder.experiment as experiment
    from engine.errors import Cancelled

    monkeypatch.setattr(experiment, "STEP_TUPLES", 100)
    history = small_history()  # 240 rows x 3 sensors: 720 tuples, 8 steps a method
    seen: list[tuple[float, str]] = []
    run_disorder_experiment(
        history, "exp:7200", eps_thr=1.0, delta=0.1, window=12,
        rng=np.random.default_rng(0), progress=lambda f, m: seen.append((f, m)),
    )  # fmt: skip
    assert len(seen) == 4 * 8 and [f for f, _ in seen] == sorted(f for f, _ in seen)
    assert seen[0] == (0.0, "replaying with ours") and seen[-1][1] == "replaying with no_buffer"

    def cancel(fraction: float, message: str) -> None:
        if fraction > 0.3:
            raise Cancelled("cancelled")

    with pytest.raises(Cancelled):
        run_disorder_experiment(history, "exp:7200", eps_thr=1.0, delta=0.1, window=12,
                                rng=np.random.default_rng(0), progress=cancel)  # fmt: skip
