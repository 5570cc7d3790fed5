"""Online control in the live loop, in pure Python: the shadow check's feedback under
both contracts (against a direct reference), a broken sensor backed up by a new plan
version, a stationary stream's set kept, no release without measured windows, the
feedback delay, re-plans rebasing the controller, and the state across a restart."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from engine.aggregates import get_aggregate
from engine.data import SensorHistory, load_history
from engine.errors import PipelineError
from engine.live.control_loop import ControlledReplanning
from engine.live.versions import PlanVersion
from engine.planning import BacktestSettings, BackupPlan, PlanParameters, make_plan
from engine.planning.control_types import ShadowFeedback
from engine.planning.feedback import drop_one_rebuild, shadow_feedback, window_misses
from engine.planning.steering import with_backup
from engine.query import WindowQuery
from tests.unit.control_driver import Loop
from tests.unit.test_replan import DRIFT

WINDOW = 10
BREAK = 600  # the broken sensor's relation to the others ends here


@pytest.fixture(scope="module")
def drift() -> SensorHistory:
    return load_history(DRIFT)


def _plan(drift: SensorHistory, exposure: int | None = None) -> BackupPlan:
    query = WindowQuery(1.0, 0.05, WINDOW, exposure=exposure)
    params = PlanParameters(query, history=600)
    return make_plan(drift.rows(0, 1000), params, backtest=BacktestSettings(history=400))


@pytest.fixture(scope="module")
def plan(drift: SensorHistory) -> BackupPlan:
    return _plan(drift)


@pytest.fixture(scope="module")
def max_plan(drift: SensorHistory) -> BackupPlan:
    """A max plan for the crash contract (exposure 2)."""
    query = WindowQuery(1.0, 0.05, WINDOW, aggregate="max", exposure=2)
    params = PlanParameters(query, history=600)
    return make_plan(drift.rows(0, 1000), params, backtest=BacktestSettings(history=400))


def _kept_then_backed_up(plan: BackupPlan) -> tuple[BackupPlan, str, int]:
    """``plan`` with its first rebuilt sensor the only kept one, then backed up by a set
    change (as online control or a re-plan may): the plan, the sensor and its index."""
    from engine.planning.steering import backup_indices, with_backup

    target = next(s for s in plan.sensors if s not in plan.backup_sensors)
    j = plan.sensors.index(target)
    eligible = replace(plan, kept_sensors=(target,), keepable_sensors=(target,))
    return with_backup(eligible, (*backup_indices(plan), j)), target, j


def stationary(drift: SensorHistory, broken: str | None = None) -> SensorHistory:
    """1,200 rows of the regime the plan was fitted on (rows 400-1000 twice); ``broken``
    drifts away from its model from row ``BREAK`` on."""
    values = np.vstack([drift.values[400:1000], drift.values[400:1000]])
    if broken is not None:
        j = drift.sensors.index(broken)
        values[BREAK:, j] += 3.0 * np.sin(np.arange(values.shape[0] - BREAK) / 7.0)
    return replace(drift.rows(0, 1200), values=values)


def _rebuilt(plan: BackupPlan) -> list[str]:
    return [s for s in plan.sensors if s not in plan.backup_sensors]


def heard(monitor: ControlledReplanning) -> list[ShadowFeedback]:
    """The feedback ``monitor``'s controller receives from now on, window by window (a
    spy on its ``observe``, which still runs)."""
    seen: list[ShadowFeedback] = []
    original = monitor.controller.observe

    def spy(feedback: list[ShadowFeedback]) -> object:
        seen.extend(feedback)
        return original(feedback)

    monitor.controller.observe = spy  # type: ignore[method-assign]
    return seen


# ------------------------------------------------------------------ feedback
def _reference_misses(truth, recovered, count, window, slide, aggregate, eps, exposure):
    """Window by window, failure position by failure position."""
    agg = get_aggregate(aggregate)
    out = np.zeros((count, truth.shape[1]))
    for k in range(count):
        t = truth[k * slide : k * slide + window]
        if exposure is None:
            r = recovered[k * slide : k * slide + window]
            out[k] = np.abs(agg.over_windows(t, np.array([0]), window)[0]
                            - agg.over_windows(r, np.array([0]), window)[0]) > eps  # fmt: skip
            continue
        positions = range(1 - exposure, window)
        for d in positions:
            lost = t.copy()
            lo, hi = max(d, 0), min(d + exposure, window)
            lost[lo:hi] = recovered[k * slide + lo : k * slide + hi]
            err = agg.over_windows(t, np.array([0]), window) - agg.over_windows(
                lost, np.array([0]), window
            )
            out[k] += (np.abs(err[0]) > eps) / len(positions)
    return out


@pytest.mark.parametrize("aggregate", ["avg", "max"])
@pytest.mark.parametrize("exposure", [None, 1, 3, 12])
def test_window_misses_match_a_direct_reference(aggregate: str, exposure: int | None) -> None:
    rng = np.random.default_rng(7)
    truth = rng.normal(size=(40, 3))
    recovered = truth + rng.normal(scale=[0.2, 1.0, 3.0], size=(40, 3))
    eps = np.array([0.3, 0.5, 0.5])
    got = window_misses(truth, recovered, 7, 10, 5, aggregate, eps, exposure)
    want = _reference_misses(truth, recovered, 7, 10, 5, aggregate, eps, exposure)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert 0 < got.mean() < 1


def test_feedback_marks_rebuilt_windows_and_unmeasured_ones() -> None:
    truth = np.arange(40.0).reshape(20, 2)
    recovered = truth + np.array([0.0, 5.0])
    backed = np.zeros((20, 2), bool)
    backed[:, 0] = True
    backed[:13, 1] = True  # sensor 1 backed up until row 13: window 1 holds both
    feedback = shadow_feedback(
        np.array([4, 5]), truth, recovered, backed, window=10, slide=10, aggregate="avg",
        eps=np.ones(2), exposure=None, measured=np.array([True, False]),
    )  # fmt: skip
    assert [f.window for f in feedback] == [4, 5]
    assert feedback[0].rebuilt.tolist() == [False, False]
    assert feedback[1].rebuilt.tolist() == [False, True]
    assert np.isnan(feedback[1].miss).all()  # rows rebuilt after a failure: unmeasured
    assert feedback[0].counterfactual is None


def test_drop_one_rebuild_is_the_conditional_mean_given_the_rest(plan: BackupPlan) -> None:
    idx = [plan.sensors.index(s) for s in plan.backup_sensors]
    x = np.random.default_rng(3).normal(size=(5, len(plan.sensors))) + plan.model.mean_
    got = drop_one_rebuild(plan.model, idx)(x)
    j = idx[2]
    rest = [i for i in idx if i != j]
    lm = plan.model.linear_map(rest)
    want = lm.apply(x[:, rest])[:, lm.sensors.index(plan.sensors[j])]
    np.testing.assert_allclose(got[:, j], want, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ the loop
def test_a_broken_sensor_is_backed_up_by_a_control_version(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    broken = _rebuilt(plan)[0]
    loop = Loop(plan, stationary(drift, broken))
    loop.monitor(min_windows=10**6)  # no alert: the controller alone
    loop.run(BREAK, 7)
    assert all(broken not in s for s in loop.backup_sets())
    loop.run(1200, 7)
    first = next(v for v in loop.versions if broken in v.spec.backup_sensors)
    assert first.reason == "control" and BREAK < first.first_seq < BREAK + 30 * WINDOW
    assert "online control: backed up" in first.detail and broken in first.detail
    assert broken in loop.versions[-1].spec.backup_sensors


def test_an_alert_refits_the_model_and_the_controller_keeps_the_set(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    broken = _rebuilt(plan)[0]
    loop = Loop(plan, stationary(drift, broken))
    monitor = loop.monitor()
    loop.run(1200, 7)
    alerts = [v for v in loop.versions if v.reason == "alert"]
    assert alerts and "the controller's set kept" in alerts[0].detail
    assert monitor.model_plan is not plan  # rebased on the refit
    assert broken in loop.versions[-1].spec.backup_sensors


def test_a_stationary_stream_keeps_the_set(drift: SensorHistory, plan: BackupPlan) -> None:
    loop = Loop(plan, stationary(drift))
    monitor = loop.monitor()
    loop.run(1200, 7)
    first, sets = set(plan.backup_sensors), loop.backup_sets()
    assert max(len(s - first) for s in sets) <= 2  # never grows by more than 2
    assert all(len(s) <= len(first) for s in sets[1:])  # the savings are kept
    status = monitor.status()
    assert status.windows == 1200 // WINDOW and status.skipped == 0
    assert status.miss_bound == pytest.approx(monitor.controller.config.miss_bound(120, 1))


def test_no_release_without_measured_windows(drift: SensorHistory, plan: BackupPlan) -> None:
    everything = with_backup(plan, range(len(plan.sensors)))
    unmeasured = Loop(everything, stationary(drift))
    unmeasured.recovered_rows = set(range(1200))  # every window holds rebuilt rows
    unmeasured.monitor()
    unmeasured.run(1200, 7)
    assert len(unmeasured.versions) == 1  # nothing released: nothing was measured

    measured = Loop(everything, stationary(drift))
    monitor = measured.monitor()
    measured.run(1200, 7)
    released = measured.versions[1]
    assert released.reason == "control" and "released" in released.detail
    evidence = monitor.controller.config.evidence_windows
    assert released.first_seq >= evidence * WINDOW  # 24 measured windows first


def test_the_crash_contract_feeds_the_exposure_miss(drift: SensorHistory) -> None:
    plan = _plan(drift, exposure=2)
    loop = Loop(plan, stationary(drift, _rebuilt(plan)[0]))
    seen = heard(loop.monitor())
    loop.run(300, 7)
    misses = np.array([f.miss for f in seen])
    rebuilt = np.array([f.rebuilt for f in seen])
    fractions = misses[rebuilt]
    # fractions of the w + m - 1 = 11 failure positions, not indicators
    assert np.all(np.isclose(fractions * 11, np.round(fractions * 11)))


def test_readings_a_full_batch_stored_reach_the_controller_as_backed_up(
    drift: SensorHistory,
) -> None:
    """Batches that back up every sensor (a crash plan's batch over its exposure, or one
    after a recovery) are recovered as read: the controller hears no sensor rebuilt in
    the windows they hold, and no miss. The same rows in batches of the plan's own set
    are heard rebuilt, and the broken sensor misses."""
    plan = _plan(drift, exposure=5)
    outcome = {}
    for full in (False, True):
        loop = Loop(plan, stationary(drift, _rebuilt(plan)[0]), full=full)
        seen = heard(loop.monitor(min_windows=10**6))  # no alert re-plan: the controller alone
        loop.run(BREAK + 200, 2)
        rebuilt = np.array([f.rebuilt for f in seen])
        outcome[full] = (
            rebuilt.any(axis=1).mean(),
            np.nanmax(np.where(rebuilt, [f.miss for f in seen], 0)),
        )
    assert outcome[False][0] == 1.0 and outcome[False][1] > 0
    assert outcome[True] == (0.0, 0.0)


def test_the_delay_counts_windows_outstanding_at_a_decision(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    tumbling = Loop(plan, stationary(drift))
    tumbling.monitor()
    tumbling.run(300, 7)  # a batch ends inside a window: that window is outstanding
    assert tumbling.ctl.delay == 1
    aligned = Loop(plan, stationary(drift))
    aligned.monitor()
    aligned.run(300, 10)  # every batch ends on a window's end
    assert aligned.ctl.delay == 0


def test_a_scheduled_replan_rebases_the_controller_and_keeps_its_set(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    loop = Loop(plan, stationary(drift))
    monitor = loop.monitor(every_rows=300)
    loop.run(900, 7)
    scheduled = [v for v in loop.versions if v.reason == "scheduled"]
    assert scheduled, [v.reason for v in loop.versions]
    assert monitor.model_plan is not plan  # the controller holds the refit's model
    for v in scheduled:  # the set right before it is kept (repaired to the new targets)
        before = loop.versions[v.id - 1].spec.backup_sensors
        assert set(before) <= set(v.spec.backup_sensors)
        assert "the controller's set kept" in v.detail


def _scheduled(loop: Loop) -> list[int]:
    """The first rows of the loop's scheduled versions."""
    return [v.first_seq for v in loop.versions if v.reason == "scheduled"]


@pytest.fixture(scope="module")
def steady_schedule(drift: SensorHistory, plan: BackupPlan) -> list[int]:
    """Where the scheduled versions of an undisturbed stationary run land (every 300 rows)."""
    steady = Loop(plan, stationary(drift))
    steady.monitor(every_rows=300)
    steady.run(1200, 7)
    return _scheduled(steady)


def test_a_replan_the_pipeline_cannot_take_yet_is_installed_at_the_next_batch(
    drift: SensorHistory, plan: BackupPlan, steady_schedule: list[int]
) -> None:
    """A scheduled re-plan handed over while the pipeline restarts after a failure
    (``apply`` raises) is installed one batch later, and the schedule goes on: dropping
    it left the monitor waiting for a version that never came, with no re-plan again."""
    loop = Loop(plan, stationary(drift))
    refused: list[int] = []

    def restarting(new: BackupPlan, kind: str, reason: str) -> None:
        if kind == "scheduled" and not refused:
            refused.append(loop.rows)
            raise PipelineError("no pipeline is running (state: recovering)")
        loop.pending.append((new, kind, reason))

    loop.apply = restarting  # type: ignore[method-assign]
    said: list[str] = []
    loop.monitor(every_rows=300, on_failure=said.append)
    loop.run(1200, 7)
    expected, got = steady_schedule, _scheduled(loop)
    assert refused and said and "trying again" in said[0]
    assert len(expected) >= 2 and len(got) == len(expected)
    assert got[0] == expected[0] + 7  # the batch after the refusal installed it


def test_a_replan_that_fails_to_rebase_leaves_the_schedule_running(
    drift: SensorHistory, plan: BackupPlan, steady_schedule: list[int]
) -> None:
    """A re-plan the controller cannot rebase on is abandoned and said, and the next one
    comes on schedule: the monitor must not go on waiting for the version it would have
    made."""
    loop = Loop(plan, stationary(drift))
    said: list[str] = []
    monitor = loop.monitor(every_rows=300, on_failure=said.append)
    rebase, failed = monitor.controller.rebase, []

    def once(*args: object) -> None:
        if not failed:
            failed.append(loop.rows)
            raise np.linalg.LinAlgError("not positive definite")
        rebase(*args)

    monitor.controller.rebase = once  # type: ignore[method-assign]
    loop.run(1200, 7)
    expected, got = steady_schedule, _scheduled(loop)
    assert failed and said and "online control failed" in said[0]
    assert len(expected) >= 2 and got == expected[1:]  # the first abandoned, none after


def test_a_replan_abandoned_at_its_rebase_leaves_the_plans_age_counting(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    """The horizon count is the plan in force's age: re-plans the controller cannot rebase
    on install nothing, so the first plan stays in force and its rows keep counting."""
    loop = Loop(plan, stationary(drift))
    monitor = loop.monitor(every_rows=300, on_failure=lambda _: None)

    def never(*args: object) -> None:
        raise np.linalg.LinAlgError("not positive definite")

    monitor.controller.rebase = never  # type: ignore[method-assign]
    loop.run(1200, 7)
    assert _scheduled(loop) == []  # no re-plan was installed
    assert monitor.schedule().rows_under_plan == loop.rows


def test_a_restarted_process_resumes_the_controller_from_the_stored_version(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    history = stationary(drift, _rebuilt(plan)[0])
    loop = Loop(plan, history)
    before = loop.monitor()
    loop.run(1000, 7)
    stored = loop.versions[-1]
    assert "control" in stored.calibration
    # what a new process reads back from the store
    record = stored.record()
    back = PlanVersion.from_record(record, stored.spec)
    assert json.loads(record.calibration)["control"]["counters"]["windows"] > 0

    again = Loop(plan, history)
    after = again.monitor()
    again.versions, again.rows = [back], 1000
    again.state = loop.state
    snapshot = back.calibration["control"]
    again.run(1100, 7)
    assert after.controller.windows == snapshot["counters"]["windows"] + 10
    assert after.skipped == 1000 // WINDOW - snapshot["counters"]["watermark"]
    assert before.controller.windows >= snapshot["counters"]["windows"]


def test_a_kept_sensor_feeds_the_miss_of_its_kept_readings(
    drift: SensorHistory, max_plan: BackupPlan
) -> None:
    """Under a max crash plan, a sensor whose rebuild has gone wrong but whose readings are
    smooth: kept, the controller hears the (rare) misses of its kept readings; not kept,
    the frequent misses of its rebuild."""
    plan = max_plan
    target = next(s for s in plan.sensors if s not in plan.backup_sensors)
    rates = {}
    for kept in ((), (target,)):
        loop = Loop(
            replace(plan, kept_sensors=kept, keepable_sensors=kept), stationary(drift, target)
        )
        seen = heard(loop.monitor(min_windows=10**6))  # no alert re-plan: the controller alone
        loop.run(900, 2)  # micro-batches within the exposure
        j = plan.sensors.index(target)
        late = [f.miss[j] for f in seen if f.rebuilt[j] and f.window * WINDOW >= BREAK]
        rates[kept] = float(np.nanmean(late))
    assert rates[(target,)] < 0.5 * rates[()]


def test_a_kept_sensor_released_by_the_controller_keeps_its_readings(
    drift: SensorHistory, max_plan: BackupPlan
) -> None:
    """A max crash plan's kept sensor, backed up for a while (as when online control or a
    re-plan needs it), then released by the controller: the version that releases it
    keeps its readings under a crash, as calibration measured them, so the drift of its
    rebuild (from row BREAK on) costs a rare miss; a plan that forgot it was kept (as
    before: only the kept sensors not backed up were recorded) rebuilds it and misses."""
    held, target, j = _kept_then_backed_up(max_plan)
    assert target in held.backup_sensors and held.keepable == (target,)
    rates, last = {}, {}
    for name, version in (("keepable", held), ("forgot", replace(held, keepable_sensors=()))):
        loop = Loop(version, stationary(drift, target))
        seen = heard(loop.monitor(min_windows=10**6))  # no alert re-plan: the controller alone
        loop.run(900, 2)
        late = [f.miss[j] for f in seen if f.rebuilt[j] and f.window * WINDOW >= BREAK]
        rates[name], last[name] = float(np.nanmean(late)), loop.versions[-1].spec
    assert target not in last["keepable"].backup_sensors  # released
    assert last["keepable"].kept_sensors == (target,) and last["forgot"].kept_sensors == ()
    assert rates["keepable"] < 0.5 * rates["forgot"], rates


def test_a_backed_up_kept_sensor_is_released_on_its_kept_readings(
    drift: SensorHistory, max_plan: BackupPlan
) -> None:
    """Backed up, with a rebuild that is wrong from the start but smooth readings: the
    counterfactual that would release it is scored as a crash would treat it once
    released, by its kept readings, so the controller releases it; judged by its
    rebuild it would stay backed up."""
    held, target, j = _kept_then_backed_up(max_plan)
    history = stationary(drift)
    values = history.values.copy()
    values[:, j] += 3.0 * np.sin(np.arange(values.shape[0]) / 7.0)
    history = replace(history, values=values)
    last = {}
    for name, version in (("keepable", held), ("forgot", replace(held, keepable_sensors=()))):
        loop = Loop(version, history)
        loop.monitor(min_windows=10**6)  # no alert re-plan: the controller alone
        loop.run(900, 2)
        last[name] = loop.versions[-1].spec
    assert target not in last["keepable"].backup_sensors
    assert last["keepable"].kept_sensors == (target,)
    assert target in last["forgot"].backup_sensors
