"""Online per-sensor control: its miss-fraction guarantee under any errors and delays,
the rules that release a sensor, and its snapshot."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from engine.errors import ParameterError
from engine.planning.control import ControlConfig, SensorController, ShadowFeedback

TINY = 1e-6  # model variance far below every target: a sensor is rebuilt whenever allowed


def _controller(config: ControlConfig, n: int, backup: tuple[int, ...] = ()) -> SensorController:
    """Independent sensors whose model says each is rebuildable at any scale above the
    floor: only the controller's own rules back one up (the adversary's best case)."""
    return SensorController(config, np.diag(np.full(n, TINY)), np.ones(n), backup)


def _run(
    config: ControlConfig,
    errors: np.ndarray,
    counter: np.ndarray,
    delays: np.ndarray,
    order_seed: int = 0,
) -> dict[str, list]:
    """Windows ``t = 0..T-1``, each decided before it opens; window ``t``'s feedback is
    applied before the decision of window ``t + 1 + delays[t]`` (shuffled within a batch).
    The error of a sensor backed up in a window is 0 (its readings are in the backup).

    Returns, after every batch, the applied windows' true misses per sensor and the
    controller's scales.
    """
    n_windows, n = errors.shape
    ctl = _controller(config, n)
    rng = np.random.default_rng(order_seed)
    arrive = np.arange(n_windows) + 1 + delays
    e = np.zeros((n_windows, n))
    rebuilt = np.zeros((n_windows, n), dtype=bool)
    applied: list[int] = []
    trace: dict[str, list] = {"applied": [], "scale": [], "backup": []}
    for k in range(n_windows + int(delays.max(initial=0)) + 2):
        due = [int(t) for t in np.flatnonzero(arrive == k)]
        rng.shuffle(due)
        batch = [ShadowFeedback(t, e[t], rebuilt[t], counter[t]) for t in due]
        decision = ctl.observe(batch)
        applied += due
        trace["applied"].append(list(applied))
        trace["scale"].append(ctl.scale.copy())
        if k < n_windows:
            rebuilt[k] = ~np.isin(np.arange(n), decision.backup)
            e[k] = np.where(rebuilt[k], errors[k], 0.0)
            trace["backup"].append(decision.backup)
    trace["e"] = [e]
    return trace


@st.composite
def _blocks(draw: st.DrawFn, n_windows: int) -> np.ndarray:
    """(n_windows,) errors in runs: long stretches of hits or misses find the edges."""
    out: list[float] = []
    while len(out) < n_windows:
        run = draw(st.integers(1, 60))
        value = draw(st.sampled_from([0.0, 1.0, 1.0, -1.0]))  # -1: a random fraction
        if value < 0:
            out += draw(st.lists(st.floats(0, 1), min_size=run, max_size=run))
        else:
            out += [value] * run
    return np.array(out[:n_windows])


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[ControlConfig, np.ndarray, np.ndarray, np.ndarray, int]:
    n, n_windows = 2, draw(st.integers(1, 260))
    d = draw(st.integers(0, 4))
    config = ControlConfig(
        delta=draw(st.sampled_from([0.05, 0.1, 0.3])),
        gamma=draw(st.sampled_from([0.1, 0.3, 1.0])),
        s_start=draw(st.sampled_from([-1.0, 0.0, 1.0])),
        s_min=-1.0,
        s_max=1.0,
        evidence_windows=draw(st.integers(1, 4)),
        hold_windows=draw(st.integers(0, 3)),
    )
    errors = np.column_stack([draw(_blocks(n_windows)) for _ in range(n)])
    counter = np.column_stack([draw(_blocks(n_windows)) for _ in range(n)])
    delays = np.array(draw(st.lists(st.integers(0, d), min_size=n_windows, max_size=n_windows)))
    return config, errors, counter, delays, d


# Each example runs up to hundreds of windows: shrinking a failure took minutes, so a
# failing example is reported as found.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def _slack(config: ControlConfig, start: float, d: int) -> float:
    return (start - config.s_min + config.gamma * (d + 1)) / config.gamma


@settings(max_examples=200, deadline=None, phases=NO_SHRINK)
@given(_scenario(), st.integers(0, 3))
def test_the_miss_fraction_bound_holds_for_any_errors_and_delays(scenario, seed) -> None:
    """Over the windows applied at any moment: misses <= aim T + (s_0 - s_min + g (d+1)) / g;
    over any stretch applied between two moments the same with s_max; and the scale
    never sinks below s_min - g (d + 1)."""
    config, errors, counter, delays, d = scenario
    trace = _run(config, errors, counter, delays, seed)
    e = trace["e"][0]
    floor = config.s_min - config.gamma * (d + 1) - 1e-12
    totals = []
    for applied, scale in zip(trace["applied"], trace["scale"], strict=True):
        assert np.all(scale >= floor), f"scale {scale} sank below {floor}"
        misses = e[applied].sum(axis=0)
        totals.append(misses)
        bound = config.aim * len(applied) + _slack(config, config.s_start, d) + 1e-9
        assert np.all(misses <= bound), f"{misses} misses over {len(applied)} windows > {bound}"
    stretch = _slack(config, config.s_max, d) + 1e-9
    cum = np.array(totals)  # (K, n) misses applied by each moment
    counts = np.array([len(a) for a in trace["applied"]], dtype=float)
    extra = cum[None, :, :] - cum[:, None, :]  # [a, b]: misses applied between a and b
    allowed = config.aim * (counts[None, :] - counts[:, None]) + stretch
    later = np.triu(np.ones((counts.size, counts.size), dtype=bool), 1)
    assert np.all(extra[later] <= allowed[later][:, None])


def test_an_adversary_that_always_misses_is_held_to_the_bound_and_forced() -> None:
    """Every rebuilt window misses: the sensor is forced into the backup at the floor
    and its misses stop at the slack; none is counted while it is backed up."""
    config = ControlConfig(delta=0.1, gamma=0.5, s_min=-1.0, s_max=1.0)
    n_windows = 400
    trace = _run(config, np.ones((n_windows, 1)), np.ones((n_windows, 1)), np.zeros(n_windows, int))
    misses = trace["e"][0].sum()
    assert misses <= config.aim * n_windows + _slack(config, config.s_start, 0)
    assert misses == 3  # s: 0 -> -0.475 -> -0.95 -> -1.425, forced from then on
    assert all(b == (0,) for b in trace["backup"][3:])


def test_a_forced_sensor_without_measurements_stays_backed_up() -> None:
    """Never trusted without a measurement: no counterfactual, no release, no rise."""
    config = ControlConfig(delta=0.1, gamma=0.5, s_min=-1.0, evidence_windows=2)
    ctl = _controller(config, 1)
    ctl.scale[:] = -1.5
    for t in range(200):
        decision = ctl.observe([ShadowFeedback(t, np.zeros(1), np.zeros(1, bool), None)])
        assert decision.backup == (0,)
    assert ctl.scale[0] == -1.5


def test_a_forced_sensor_with_measured_hits_climbs_back_and_is_released() -> None:
    config = ControlConfig(delta=0.1, gamma=0.5, s_min=-1.0, evidence_windows=4, hold_windows=0)
    ctl = _controller(config, 1)
    ctl.scale[:] = -1.2
    released_at = None
    for t in range(100):
        decision = ctl.observe([ShadowFeedback(t, np.zeros(1), np.zeros(1, bool), np.zeros(1))])
        if decision.backup == ():
            released_at = t
            break
    # 0.2 of scale at 0.035 a window: 6 windows to leave the floor.
    assert released_at == 5


def test_a_forced_sensor_does_not_sink_on_counterfactual_misses() -> None:
    config = ControlConfig(delta=0.1, gamma=0.5, s_min=-1.0)
    ctl = _controller(config, 1)
    ctl.scale[:] = -1.2
    for t in range(50):
        ctl.observe([ShadowFeedback(t, np.zeros(1), np.zeros(1, bool), np.ones(1))])
    assert ctl.scale[0] == pytest.approx(-1.2)


def test_release_needs_a_full_record_of_measured_clean_windows() -> None:
    """A backed-up sensor the model would release at once is kept until
    ``evidence_windows`` measured counterfactual windows show no more than aim misses."""
    config = ControlConfig(delta=0.1, evidence_windows=5, hold_windows=0)
    ctl = _controller(config, 2, backup=(0, 1))
    clean = np.zeros(2)
    for t in range(4):
        decision = ctl.observe([ShadowFeedback(t, clean, np.zeros(2, bool), clean)])
        assert decision.backup == (0, 1), f"released after {t + 1} measured windows"
    for t in range(4, 20):  # windows without a measurement do not count
        assert ctl.observe([ShadowFeedback(t, clean, np.zeros(2, bool), None)]).backup == (0, 1)
    decision = ctl.observe([ShadowFeedback(20, clean, np.zeros(2, bool), clean)])
    assert decision.backup == () and decision.released == (0, 1)


def test_release_is_refused_while_the_recent_record_holds_misses() -> None:
    config = ControlConfig(delta=0.1, evidence_windows=5, hold_windows=0, s_max=0.0)
    ctl = _controller(config, 1, backup=(0,))
    record = [1.0, 0.0, 0.0, 0.0, 0.0]  # 1 miss in 5 > aim = 0.07 a window
    for t, c in enumerate(record):
        ctl.observe([ShadowFeedback(t, np.zeros(1), np.zeros(1, bool), np.full(1, c))])
    assert ctl.backup == (0,)
    ctl.observe([ShadowFeedback(5, np.zeros(1), np.zeros(1, bool), np.zeros(1))])
    assert ctl.backup == (), "the miss has left the last 5 windows: release"


def test_a_sensor_added_by_the_controller_is_held() -> None:
    """Once added it stays ``hold_windows`` windows, whatever its record says."""
    config = ControlConfig(delta=0.1, gamma=1.0, s_min=-1.0, evidence_windows=1, hold_windows=4)
    ctl = _controller(config, 1)
    miss = ShadowFeedback(0, np.ones(1), np.ones(1, bool), None)
    ctl.observe([miss])
    decision = ctl.observe([ShadowFeedback(1, np.ones(1), np.ones(1, bool), None)])
    assert decision.added == (0,)  # s = -1.86: forced
    ctl.scale[:] = 0.5  # as if it had climbed back at once
    kept = [ctl.observe([ShadowFeedback(t, np.zeros(1), np.zeros(1, bool), np.zeros(1))]).backup
            for t in range(2, 8)]  # fmt: skip
    assert kept[:3] == [(0,)] * 3
    assert kept[3] == ()


def test_hysteresis_keeps_a_sensor_whose_release_would_leave_little_slack() -> None:
    """Releasing sensor 0 raises sensor 1's variance to 0.9 of its target: within the
    target but not within release_margin = 0.8 of it, so 0 stays backed up."""
    cov = np.array([[1.0, 0.9], [0.9, 1.0]])
    config = ControlConfig(delta=0.1, evidence_windows=1, hold_windows=0, s_max=0.0)
    clean = np.zeros(2)
    near = SensorController(config, cov, np.array([2.0, 1.0 / 0.9]), (0,))
    near.observe([ShadowFeedback(0, clean, np.array([False, True]), clean)])
    assert near.backup == (0,)
    roomy = SensorController(config, cov, np.array([2.0, 1.0 / 0.7]), (0,))
    roomy.observe([ShadowFeedback(0, clean, np.array([False, True]), clean)])
    assert roomy.backup == ()


def test_an_unmeasured_rebuilt_window_counts_as_a_miss() -> None:
    config = ControlConfig(delta=0.1, gamma=0.5)
    ctl = _controller(config, 1)
    ctl.observe([ShadowFeedback(0, np.full(1, np.nan), np.ones(1, bool), None)])
    assert ctl.scale[0] == pytest.approx(0.5 * (0.07 - 1.0))
    assert ctl.misses[0] == 1.0


def test_a_replayed_or_late_window_is_applied_once() -> None:
    config = ControlConfig(delta=0.1, gamma=0.5)
    ctl = _controller(config, 1)
    hit = np.zeros(1)
    ctl.observe([ShadowFeedback(1, hit, np.ones(1, bool))])
    ctl.observe([ShadowFeedback(0, np.ones(1), np.ones(1, bool))])  # late, out of order
    assert ctl.windows == 2 and ctl.max_lag == 1
    again = ctl.observe([ShadowFeedback(0, np.ones(1), np.ones(1, bool)),
                         ShadowFeedback(1, hit, np.ones(1, bool))])  # fmt: skip
    assert again.applied == 0 and ctl.windows == 2 and ctl.misses[0] == 1.0


def test_a_rebuilt_sensor_that_misses_gets_a_covering_sensor_added() -> None:
    """Misses shrink a sensor's target; the re-selection adds what brings it back within."""
    rng = np.random.default_rng(3)
    load = rng.normal(size=(12, 3))
    cov = load @ load.T + 0.05 * np.eye(12)
    targets = np.full(12, 0.6)
    from engine.selection import select_backups

    start = select_backups(cov, targets).backup
    ctl = SensorController(ControlConfig(delta=0.1, gamma=1.0), cov, targets, start)
    rebuilt = ~np.isin(np.arange(12), start)
    ratio = np.where(rebuilt, ctl.selection.variance / targets, -1.0)
    victim = int(np.argmax(ratio))  # the rebuilt sensor nearest its target
    assert ratio[victim] > np.exp(0.07 - 1.0), "the instance must need a change"
    miss = np.zeros(12)
    miss[victim] = 1.0
    decision = ctl.observe([ShadowFeedback(0, miss, rebuilt)])
    assert decision.added and not decision.released
    limit = ctl.effective_targets()[victim]
    assert limit == pytest.approx(targets[victim] * np.exp(0.07 - 1.0))
    assert ctl.selection.variance[victim] <= limit * (1 + 1e-9) + 1e-12


@settings(max_examples=60, deadline=None, phases=NO_SHRINK)
@given(_scenario(), st.integers(1, 40))
def test_restore_of_a_snapshot_goes_on_exactly_as_the_original(scenario, cut) -> None:
    config, errors, counter, _, _ = scenario
    rng = np.random.default_rng(1)
    load = rng.normal(size=(2, 1))
    cov = load @ load.T + np.diag([0.3, 0.2])
    original = SensorController(config, cov, np.array([0.25, 0.3]), (0,))
    restored = None
    for t in range(errors.shape[0]):
        ctl = original if restored is None else restored
        f = ShadowFeedback(t, errors[t], ~np.isin(np.arange(2), ctl.backup), counter[t])
        a = original.observe([f])
        if restored is not None:
            b = restored.observe([f])
            assert a == b
            assert np.array_equal(original.scale, restored.scale)
        if t == cut:
            state = json.loads(json.dumps(original.snapshot()))
            restored = SensorController.restore(state, cov)
            assert restored.snapshot() == original.snapshot()


def test_restore_refuses_another_model_and_a_broken_snapshot() -> None:
    config = ControlConfig(delta=0.1)
    ctl = _controller(config, 3)
    state = ctl.snapshot()
    with pytest.raises(ParameterError, match="another model covariance"):
        SensorController.restore(state, np.diag(np.full(3, 2 * TINY)))
    with pytest.raises(ParameterError, match="not a controller snapshot"):
        SensorController.restore({k: v for k, v in state.items() if k != "scale"},
                                 np.diag(np.full(3, TINY)))  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delta": 0.0}, "delta must be in"),
        ({"delta": 0.1, "margin": 1.5}, "margin must be in"),
        ({"delta": 0.1, "gamma": 0.0}, "gamma must be"),
        ({"delta": 0.1, "s_start": 3.0}, "s_start must be in"),
        ({"delta": 0.1, "evidence_windows": 0}, "evidence_windows must be"),
        ({"delta": 0.1, "hold_windows": -1}, "hold_windows must be"),
        ({"delta": 0.1, "release_margin": 0.0}, "release_margin must be"),
    ],
)
def test_config_names_the_bad_value(kwargs, match) -> None:
    with pytest.raises(ParameterError, match=match):
        ControlConfig(**kwargs)


def test_feedback_of_the_wrong_shape_or_range_is_refused() -> None:
    ctl = _controller(ControlConfig(delta=0.1), 2)
    with pytest.raises(ParameterError, match=r"miss must have shape \(2,\)"):
        ctl.observe([ShadowFeedback(0, np.zeros(3), np.ones(2, bool))])
    with pytest.raises(ParameterError, match="miss must be in"):
        ctl.observe([ShadowFeedback(0, np.full(2, 1.5), np.ones(2, bool))])
    with pytest.raises(ParameterError, match="rebuilt must be a boolean"):
        ctl.observe([ShadowFeedback(0, np.zeros(2), np.ones(2))])


def test_the_stated_bound_is_the_formula() -> None:
    config = ControlConfig(delta=0.1, margin=0.5, gamma=0.25, s_start=0.0, s_min=-2.0)
    assert config.miss_bound(100, delay=3) == pytest.approx(0.05 + (2.0 + 1.0) / 0.25 / 100)


def test_releases_are_limited_per_decision() -> None:
    """Five sensors ready to go leave two, two and one at a time."""
    config = ControlConfig(delta=0.1, evidence_windows=1, hold_windows=0, max_releases=2)
    ctl = _controller(config, 5, backup=(0, 1, 2, 3, 4))
    clean = np.zeros(5)
    sizes = [len(ctl.observe([ShadowFeedback(t, clean, np.zeros(5, bool), clean)]).released)
             for t in range(4)]  # fmt: skip
    assert sizes == [2, 2, 1, 0] and ctl.backup == ()


def test_set_changes_are_counted_per_day() -> None:
    """Hourly windows: one change (a forced add) in 48 windows is half a change a day."""
    config = ControlConfig(delta=0.1, gamma=1.0, s_min=-1.0)
    ctl = _controller(config, 1)
    for t in range(48):
        ctl.observe([ShadowFeedback(t, np.ones(1), ~np.isin([0], ctl.backup), None)])
    assert ctl.changes == 1 and ctl.backup == (0,)
    assert ctl.changes_per_day(3600.0) == pytest.approx(0.5)
    with pytest.raises(ParameterError, match="window_seconds"):
        ctl.changes_per_day(0.0)
