"""The live monitor re-plans on a regime change and leaves a stationary stream alone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engine.data import SensorHistory, load_history
from engine.errors import ParameterError
from engine.planning import (
    BacktestSettings,
    BackupPlan,
    PlanParameters,
    ReplanningMonitor,
    make_plan,
    pin_backups,
)
from engine.planning.replan import fresh_plan
from engine.query import WindowQuery
from engine.windows import window_errors

DRIFT = Path(__file__).resolve().parents[2] / "sample_data" / "synthetic_drift.csv"
WINDOW, EPS = 10, 1.0  # the shipped drift sample changes regime at row 1200


@pytest.fixture(scope="module")
def drift() -> SensorHistory:
    return load_history(DRIFT)


@pytest.fixture(scope="module")
def plan(drift: SensorHistory) -> BackupPlan:
    params = PlanParameters(WindowQuery(EPS, 0.05, WINDOW), history=600)
    return make_plan(drift.rows(0, 1100), params, backtest=BacktestSettings(history=600))


def shadow_errors(plan: BackupPlan, segment: SensorHistory) -> np.ndarray:
    """What the pipeline's shadow check computes for the closed windows of a segment."""
    backup = segment.select(list(plan.backup_sensors)).values
    return window_errors(segment.values, plan.linear_map.apply(backup), WINDOW, WINDOW, "avg")


def stream(
    history: SensorHistory,
    start: int,
    stop: int,
    plan: BackupPlan,
    every_rows: int | None = None,
    scheduled: bool = True,
):
    """Feed the monitor batch by batch like the pipeline: each applied plan becomes
    the next version at the following batch (re-plans run inline: ``run``)."""
    applied: list[tuple[BackupPlan, str, str]] = []
    position = {"row": start}
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: history.rows(max(0, position["row"] - 400), position["row"]),
        apply=lambda new, kind, reason: applied.append((new, kind, reason)),
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        every_rows=every_rows,
        rows_seen=lambda: position["row"] - start,
        run=lambda job: job(),
    )
    monitor.scheduled = scheduled and every_rows is not None
    first_alert = None
    for row in range(start, stop, 5 * WINDOW):  # five windows a micro-batch
        position["row"] = row + 5 * WINDOW
        segment = history.rows(row, row + 5 * WINDOW)
        in_force = applied[-1][0] if applied else plan
        alert = monitor.observe(
            shadow_errors(in_force, segment), in_force.linear_map.targets, version=len(applied)
        )
        if alert is not None and first_alert is None:
            first_alert = row
    return monitor, applied, first_alert


def test_no_alert_while_the_stream_is_stationary(drift: SensorHistory, plan: BackupPlan) -> None:
    monitor, applied, first = stream(drift, 600, 1200, plan)
    assert first is None and applied == [] and monitor.changes == []


def test_regime_change_raises_an_alert_and_widens_the_plan(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    monitor, applied, first = stream(drift, 1100, 2000, plan)
    assert first is not None and 1200 <= first < 1500
    new, kind, reason = applied[0]
    assert kind == "alert"
    assert set(plan.backup_sensors) <= set(new.backup_sensors)
    assert len(new.backup_sensors) > len(plan.backup_sensors)
    assert "live violation rate" in reason and "added" in reason
    assert not new.measured  # re-planned live: the monitor, not a backtest, measures it
    change = monitor.changes[0]
    assert change.added and change.to_dict()["at"] == "2026-01-01T00:00:00+00:00"


def test_a_failed_replan_is_logged_and_does_not_raise(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    applied: list[object] = []
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.select(list(drift.sensors[:3])),  # not the plan's sensors
        apply=lambda new, kind, reason: applied.append(new),
        run=lambda job: job(),
    )
    errors = np.full((20, len(plan.sensors)), 10.0)
    alert = monitor.observe(errors, plan.linear_map.targets)
    assert alert is not None and applied == []
    assert "re-plan failed" in monitor.changes[0].reason
    assert monitor.plan is plan


def test_a_failed_replan_now_leaves_the_plan_in_force_as_old_as_it_is(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    """The horizon counter is the plan in force's age: a 'Re-plan now' that fails made no
    plan, so it neither restarts the count nor clears an expired plan's warning."""
    rows = [0]
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.select(list(drift.sensors[:3])),  # not the plan's sensors
        apply=lambda new, kind, reason: None,
        run=lambda job: job(),
        every_rows=200,
        rows_seen=lambda: rows[0],
    )
    monitor.scheduled = False
    rows[0] = 300
    assert monitor.schedule().expired and monitor.schedule().rows_under_plan == 300
    assert monitor.request()
    assert "re-plan failed" in monitor.changes[-1].reason
    state = monitor.schedule()
    assert state.expired and state.rows_under_plan == 300


def test_an_installed_replan_restarts_the_plans_age(drift: SensorHistory, plan: BackupPlan) -> None:
    """The horizon counts from the rows the plan in force was made on: a 'Re-plan now'
    that is installed clears an expired plan's warning and counts from its start."""
    rows = [300]
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.rows(0, 300),
        apply=lambda new, kind, reason: None,
        run=lambda job: job(),
        every_rows=200,
        rows_seen=lambda: rows[0],
    )
    monitor.scheduled = False
    assert monitor.schedule().expired
    assert monitor.request() and monitor.plan is not plan
    assert not monitor.schedule().expired and monitor.schedule().rows_under_plan == 0
    rows[0] = 350
    assert monitor.schedule().rows_under_plan == 50


def test_scheduled_replans_are_fresh_plans_every_horizon(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    """Stationary stretch, horizon 200 rows: a fresh plan at each horizon, fitted on the
    recent rows (the reference: ``fresh_plan`` on the same rows), no alert."""
    monitor, applied, first = stream(drift, 600, 1200, plan, every_rows=200)
    assert first is None
    assert [kind for _, kind, _ in applied] == ["scheduled"] * len(applied)
    assert len(applied) == 3  # after 200, 400 and 600 stream rows
    new, _, reason = applied[0]
    assert "horizon of 200 rows reached" in reason and not new.measured
    reference = fresh_plan(plan, drift.rows(400, 800))
    assert new.backup_sensors == reference.backup_sensors
    np.testing.assert_allclose(new.linear_map.coef, reference.linear_map.coef)
    assert all(c.kind == "scheduled" for c in monitor.changes)


def test_switched_off_schedule_lets_the_plan_expire(drift: SensorHistory, plan: BackupPlan) -> None:
    monitor, applied, _ = stream(drift, 600, 1000, plan, every_rows=200, scheduled=False)
    assert applied == []
    state = monitor.schedule()
    assert state.expired and not state.enabled and state.rows_under_plan == 400
    monitor.scheduled = True
    assert not monitor.schedule().expired


def test_alerts_cannot_tighten_targets_below_the_floor(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    """Each alert halves the alerting sensors' targets, down to ``min_scale``: repeated
    alerts cannot drive the plan to back up every sensor that is not a duplicate."""
    applied: list[BackupPlan] = []
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.rows(800, 1100),
        apply=lambda new, kind, reason: applied.append(new),
        run=lambda job: job(),
    )
    target = plan.linear_map.targets[0]
    errors = np.zeros((20, len(plan.sensors)))
    errors[:, plan.sensors.index(target)] = 10.0
    for version in range(5):
        assert monitor.observe(errors, plan.linear_map.targets, version=version) is not None
    assert len(applied) == 5
    assert monitor.scale[plan.sensors.index(target)] == monitor.min_scale == 0.25


def test_an_operator_can_re_plan_now(drift: SensorHistory, plan: BackupPlan) -> None:
    applied: list[tuple[BackupPlan, str, str]] = []
    jobs: list = []
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.rows(700, 1100),
        apply=lambda new, kind, reason: applied.append((new, kind, reason)),
        run=jobs.append,  # the worker has not run yet
    )
    assert monitor.request() and not monitor.request()  # one re-plan at a time
    jobs.pop()()
    ((new, kind, reason),) = applied
    assert kind == "manual" and "requested by the operator" in reason
    assert new.backup_sensors == fresh_plan(plan, drift.rows(700, 1100)).backup_sensors


def test_the_plan_behind_a_stream_spec_is_found_by_its_map(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    from engine.live.spec import StreamSpec
    from engine.live.versions import map_from_json, map_to_json

    monitor, applied, _ = stream(drift, 600, 1000, plan, every_rows=200)
    assert monitor.plans == [plan, *(new for new, _, _ in applied)]
    for p in monitor.plans:
        assert monitor.plan_for(StreamSpec.from_plan(p).linear_map) is p
        # a spec rebuilt from the stored versions (a recovery) holds an equal map: the
        # newest plan with that map (plans that back up the same way are alike)
        equal = [q for q in monitor.plans if q.linear_map.same_as(p.linear_map)]
        assert monitor.plan_for(map_from_json(map_to_json(p.linear_map))) is equal[-1]
    assert monitor.plan_for(object()) is None


def test_an_unexpected_re_plan_crash_is_reported_and_re_planning_goes_on(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    """A worker that dies on a bug must not stop re-planning silently."""
    failures: list[str] = []
    calls = {"n": 0}

    def recent() -> SensorHistory:
        calls["n"] += 1
        if calls["n"] == 1:
            raise TypeError("a bug in the re-plan")
        return drift.rows(700, 1100)

    applied: list[str] = []
    monitor = ReplanningMonitor(
        plan,
        recent=recent,
        apply=lambda new, kind, reason: applied.append(kind),
        run=lambda job: job(),
        on_failure=failures.append,
    )
    assert monitor.request()  # the first re-plan crashes ...
    assert failures == [
        "manual re-plan failed, the plan in force is kept: TypeError: a bug in the re-plan"
    ]
    assert monitor.changes[-1].applied is False and monitor.plan is plan
    assert monitor.request() and applied == ["manual"]  # ... and the next one runs


def test_an_installed_re_plan_starts_a_fresh_tally_and_alert_state(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    """After an alert re-plan is installed (version 1), the monitor judges the new plan
    on its own windows: version 1's tally starts at zero while the overall one goes on,
    so the old plan's misses neither alert nor start a second re-plan. Fails if the
    version is not passed on or the alert reads the overall tally (no reset)."""
    applied: list[str] = []
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.rows(800, 1100),
        apply=lambda new, kind, reason: applied.append(kind),
        run=lambda job: job(),
    )
    target = plan.linear_map.targets[0]
    bad = np.zeros((20, len(plan.sensors)))
    bad[:, plan.sensors.index(target)] = 10.0
    assert monitor.observe(bad, plan.linear_map.targets, version=0) is not None
    assert applied == ["alert"]
    # Still under version 0 while the new plan waits for its batch: it alerts, no re-plan.
    assert monitor.observe(bad, plan.linear_map.targets, version=0) is not None
    assert applied == ["alert"]
    new_targets = monitor.plan.linear_map.targets
    good = np.zeros((20, len(plan.sensors)))
    for _ in range(5):
        assert monitor.observe(good, new_targets, version=1) is None
    assert applied == ["alert"]
    tally = monitor.monitor
    assert tally.version == 1 and tally.versions() == [0, 1]
    assert all(tally.rates(1)[s] == (0, 100) for s in new_targets)
    assert tally.rates(0)[target] == (40, 40)
    assert tally.rates()[target] == (40, 40 + (100 if target in new_targets else 0))


def test_a_scheduled_re_plan_forgets_the_alerts_tightening(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    """An alert halves the alerting sensor's target scale; the next scheduled re-plan is
    fresh, so it resets every scale to 1 and a later alert starts again from 0.5. Fails
    if the scale survived the fresh plan: alerts would ratchet the targets down for good."""
    applied: list[str] = []
    rows = {"seen": 0}
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.rows(800, 1100),
        apply=lambda new, kind, reason: applied.append(kind),
        every_rows=100,
        rows_seen=lambda: rows["seen"],
        run=lambda job: job(),
    )
    target = plan.linear_map.targets[0]
    i = plan.sensors.index(target)
    bad = np.zeros((20, len(plan.sensors)))
    bad[:, i] = 10.0
    monitor.observe(bad, plan.linear_map.targets, version=0)
    assert applied == ["alert"] and monitor.scale[i] == 0.5
    rows["seen"] = 200  # the horizon has passed under version 1, which meets eps
    good = np.zeros((20, len(plan.sensors)))
    assert monitor.observe(good, monitor.plan.linear_map.targets, version=1) is None
    assert applied == ["alert", "scheduled"]
    np.testing.assert_array_equal(monitor.scale, np.ones(len(plan.sensors)))
    assert monitor.observe(bad, [target], version=2) is not None
    assert applied == ["alert", "scheduled", "alert"] and monitor.scale[i] == 0.5


def test_pinned_sensors_are_backed_up_with_the_models_own_map(plan: BackupPlan) -> None:
    rebuilt = [s for s in plan.sensors if s not in plan.backup_sensors]
    pinned = pin_backups(plan, rebuilt[:1], "it alerted twice")
    assert set(pinned.backup_sensors) == {*plan.backup_sensors, rebuilt[0]}
    idx = sorted(plan.sensors.index(s) for s in pinned.backup_sensors)
    want = plan.model.linear_map(idx)
    assert pinned.linear_map.backup == want.backup and pinned.linear_map.targets == want.targets
    np.testing.assert_allclose(pinned.linear_map.coef, want.coef)
    np.testing.assert_allclose(pinned.conditional_variance, plan.model.conditional_variance(idx))
    # one more observed sensor never raises another's conditional variance
    assert np.all(pinned.conditional_variance <= plan.conditional_variance + 1e-12)
    assert pinned.model_violation_probability[plan.sensors.index(rebuilt[0])] == 0.0
    assert "it alerted twice" in pinned.warnings[-1]
    assert pin_backups(plan, plan.backup_sensors, "already") is plan
    with pytest.raises(ParameterError, match="outside the plan"):
        pin_backups(plan, ("nope",), "unknown")


def _stationary(rows: int, sensors: int, seed: int) -> SensorHistory:
    """Correlated sensors that never change regime (``bench.bench_live_savings``'s stream,
    the one the live pipeline's savings are measured on)."""
    from bench.bench_live_savings import stationary_frame
    from engine.data import history_from_frame

    return history_from_frame(stationary_frame(rows, sensors, seed), source="stationary")


def test_scheduled_replans_of_a_stationary_stream_keep_the_first_plans_savings() -> None:
    """Re-plans learn from as much history as the first plan did (its rows plus the
    stream's, up to the cost cap): on a stationary stream every version backs up about
    the first version's set. Learning from a few hundred recent rows, a re-plan could
    measure few sensors and backed up most of them."""
    from engine.planning.replan import learning_rows

    history = _stationary(8000, 20, seed=3)
    params = PlanParameters(WindowQuery(3.0, 0.05, 30))
    plan = make_plan(history.rows(0, 4000), params)
    assert 0 < len(plan.backup_sensors) <= 10
    applied: list[BackupPlan] = []
    position = {"row": 4000}
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: history.rows(
            position["row"] - learning_rows(plan, position["row"]), position["row"]
        ),
        apply=lambda new, kind, reason: applied.append(new),
        every_rows=plan.horizon_rows,
        rows_seen=lambda: position["row"] - 4000,
        run=lambda job: job(),
    )
    for row in range(4000, 8000 - 120 + 1, 120):  # four windows a micro-batch
        position["row"] = row + 120
        in_force = applied[-1] if applied else plan
        segment = history.rows(row, row + 120)
        backup = segment.select(list(in_force.backup_sensors)).values
        errors = window_errors(segment.values, in_force.linear_map.apply(backup), 30, 30, "avg")
        monitor.observe(errors, in_force.linear_map.targets, version=len(applied))
    assert len(applied) >= 2
    sizes = [len(new.backup_sensors) for new in applied]
    assert all(abs(size - len(plan.backup_sensors)) <= 2 for size in sizes), sizes
