"""The production job's online controller without a JVM: its model fitted again on the
version's fit period, its feedback against the job's crash check, rows scored under the
version that backed them up, unmeasured windows, the set it installs as a plan version,
re-plans that keep its set, and a restart that resumes it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.data.history import history_from_frame
from engine.export import BackupConfig, plan_to_config
from engine.export.seal import seal_config
from engine.job.control import JobControl
from engine.job.crash_check import TIME, VERSION, WHOLE, crash_misses
from engine.job.plans import JobPlan, PlanBook, Replanner, at_once, fit_again
from engine.planning import PlanParameters, make_plan
from engine.planning.control import ControlConfig
from engine.query import WindowQuery
from tests.unit.test_job_plans import MemoryFiles

HOUR_US = 3_600_000_000
W = 8  # rows a window (tumbling)
SENSORS = ("a", "b", "c", "d")
PARAMS = PlanParameters(WindowQuery(0.5, 0.05, W, aggregate="avg", horizon=48, exposure=2))


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """Four sensors reading one AR(1) factor plus their own noise, hourly, 600 rows."""
    rng = np.random.default_rng(0)
    f = np.zeros(600)
    for t in range(1, 600):
        f[t] = 0.95 * f[t - 1] + rng.normal(0, 1)
    x = f[:, None] + rng.normal(0, 0.3, (600, 4))
    times = pd.date_range("2026-01-01", periods=600, freq="h")
    return pd.DataFrame({"time": times, **{s: x[:, i] for i, s in enumerate(SENSORS)}})


@pytest.fixture(scope="module")
def config(frame: pd.DataFrame) -> BackupConfig:
    """The crash plan (exposure 2) of the first 400 rows: it backs up c alone."""
    plan = make_plan(history_from_frame(frame[:400]), PARAMS)
    assert plan.backup_sensors == ("c",)
    return BackupConfig.from_dict(plan_to_config(plan))


def _reader(frame: pd.DataFrame) -> Any:
    def read(start_us: int, end_us: int) -> pd.DataFrame:
        us = frame["time"].astype("int64") // 1000
        return frame[(us >= start_us) & (us < end_us)].reset_index(drop=True)

    return read


def _control(config: BackupConfig, frame: pd.DataFrame, **kw: Any) -> tuple[JobControl, list]:
    book, logged = PlanBook(MemoryFiles(), "b"), []  # type: ignore[arg-type]
    book.start(config)
    control = JobControl(book, _reader(frame), logged.append, 3600.0, W * HOUR_US, W * HOUR_US,
                         run=at_once, **kw)  # fmt: skip
    return control, logged


def _rows(frame: pd.DataFrame, version: float = 1.0) -> pd.DataFrame:
    """``frame`` as the crash check's rows: ``TIME`` + sensors + ``WHOLE`` + ``VERSION``."""
    rows = frame.rename(columns={"time": TIME}).reset_index(drop=True)
    rows[TIME] = rows[TIME].astype("int64") // 1000
    rows[WHOLE], rows[VERSION] = 0.0, version
    return rows


def _drive(control: JobControl, stream: pd.DataFrame, first_batch: int = 0) -> None:
    """A job's batches of 2 rows (the exposure): each row stamped with the version in
    force at its batch; the windows the watermark (the newest row) closed steered."""
    rows = _rows(stream)
    closed: set[int] = set()
    for k in range(len(rows) // 2):
        batch = first_batch + k
        rows.loc[2 * k : 2 * k + 1, VERSION] = float(control.book.in_force(batch).version)
        seen = rows.iloc[: 2 * k + 2]
        newest = int(seen[TIME].max())
        starts = [s for s in seen[TIME] if s % (W * HOUR_US) == 0 and s + W * HOUR_US <= newest]
        fresh = np.array(sorted(set(starts) - closed), dtype=np.int64)
        closed |= set(fresh.tolist())
        control.steer(batch, seen, fresh, newest)


def test_the_model_is_fitted_again_on_the_versions_fit_period(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, logged = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    events = [e["event"] for e in logged]
    assert events[:2] == ["control_fit_started", "control_started"]
    assert control.model_plan is not None and control.controller is not None
    assert control.model_plan.data_fingerprint == config.data["data_fingerprint"]  # the same rows
    assert [control.model_plan.sensors[i] for i in control.controller.backup] == ["c"]


def test_the_feedback_of_one_version_is_the_jobs_crash_check(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, _ = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    rows = _rows(frame[400:480])
    starts = rows[TIME].to_numpy()[::W][:-1]
    got = control.feedback(rows, starts)
    want = crash_misses(rows, starts, W * HOUR_US, config, config.linear_map())
    rebuilt = np.array([s != "c" for s in SENSORS])
    for f, w in zip(got, want, strict=True):
        assert f.rebuilt.tolist() == rebuilt.tolist()
        np.testing.assert_allclose(f.miss[rebuilt], w[rebuilt], atol=1e-12)
        assert np.isfinite(f.counterfactual[~rebuilt]).all()  # c: had it been dropped


def test_a_range_plans_feedback_is_each_whole_window_rebuilt(frame) -> None:  # type: ignore[no-untyped-def]
    params = PlanParameters(WindowQuery(0.5, 0.05, W, aggregate="avg", horizon=48))
    plan = make_plan(history_from_frame(frame[:400]), params)
    config = BackupConfig.from_dict(plan_to_config(plan))
    control, _ = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    rows = _rows(frame[400:480].copy())
    rows["a"] += np.repeat([0.0, 3.0], 40)  # the last five windows miss on a
    starts = rows[TIME].to_numpy()[::W]
    got = control.feedback(rows, starts)
    truth = rows[list(SENSORS)].to_numpy()
    rebuilt = config.linear_map().rebuild_columns(truth, SENSORS)
    error = np.abs((rebuilt - truth).reshape(10, W, 4).mean(axis=1))  # avg: the mean's
    targets = ~np.isin(SENSORS, config.backup_sensors)
    for f, e in zip(got, error, strict=True):
        np.testing.assert_array_equal(f.miss[targets], (e > 0.5)[targets].astype(float))
    assert [f.miss[0] for f in got] == [0.0] * 5 + [1.0] * 5


def test_a_sensor_whose_windows_miss_is_backed_up_from_the_next_batch(config, frame) -> None:  # type: ignore[no-untyped-def]
    """d reads 3 above what the map rebuilds from c: two lost rows of 8 move its
    average 0.75, over eps 0.5; the controller adds d, as a plan version of kind control."""
    control, logged = _control(config, frame)
    stream = frame[400:560].copy()
    stream["d"] += 3.0
    _drive(control, stream)
    made = [p for p in control.book.versions if p.reason == "control"]
    assert made and "d" in made[0].config.backup_sensors
    said = [e for e in logged if e["event"] == "control"]
    assert said[0]["added"] == ["d"] and said[0]["first_batch"] == made[0].first_batch
    assert said[0]["plan_version"] == made[0].version == 2
    assert "backed up d (its recent windows missed eps)" in made[0].detail
    # the version rebuilds the rest from the set it backs up
    assert set(made[0].config.linear_map().backup) == set(made[0].config.backup_sensors)
    status = control.status()
    # a window closes with the batch holding the next window's first two rows: that
    # window was governed before the feedback
    assert status["windows"] == 19 and status["delay_windows"] == 1
    # the bound at d = 1: aim + (s_0 - s_min + 2 gamma) / (gamma T)
    assert status["miss_bound"] == pytest.approx(0.05 * 0.7 + (0 + 2 + 0.4) / (0.2 * 19))


def test_a_stream_like_its_history_keeps_about_the_plans_set(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, _ = _control(config, frame)
    _drive(control, frame[400:600])
    sets = [set(p.config.backup_sensors) for p in control.book.versions]
    assert all(len(s) <= 3 for s in sets)  # never everything, as a re-plan on 336 rows was


def test_rows_are_scored_under_the_version_that_backed_them_up(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, _ = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    steered = make_plan(history_from_frame(frame[:400]), PARAMS)
    from engine.planning.steering import with_backup

    v2 = BackupConfig.from_dict(plan_to_config(with_backup(steered, (2, 3))))  # c and d
    control.book.add(JobPlan(2, 5, "control", "test", v2))
    rows = _rows(frame[400:424])
    rows.loc[12:, VERSION] = 2.0  # from the middle of window 1 on, d backed up too
    got = control.feedback(rows, rows[TIME].to_numpy()[[0, 8, 16]])
    d = SENSORS.index("d")
    assert [bool(f.rebuilt[d]) for f in got] == [True, True, False]
    assert np.isnan(got[2].miss[d]) or got[2].miss[d] == 0.0  # backed up: not a miss
    assert np.isfinite(got[2].counterfactual[d])  # its evidence for a release


def test_a_sensor_every_version_backs_up_is_not_rebuilt_in_a_window_unmeasured(
    config, frame
) -> None:  # type: ignore[no-untyped-def]
    control, _ = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    rows = _rows(frame[400:424])
    rows.loc[10, VERSION] = -1.0  # window 1: a time step two versions brought
    short = rows.drop(index=20)  # window 2: a time step missing
    got = control.feedback(short, rows[TIME].to_numpy()[[8, 16]])
    c = SENSORS.index("c")  # backed up by every version
    assert [bool(f.rebuilt[c]) for f in got] == [False, False]
    assert all(f.rebuilt[SENSORS.index("a")] and np.isnan(f.miss).all() for f in got)
    # d backed up by version 2 in every row the short window has: not rebuilt in it
    from engine.planning.steering import with_backup

    plan = make_plan(history_from_frame(frame[:400]), PARAMS)
    v2 = BackupConfig.from_dict(plan_to_config(with_backup(plan, (2, 3))))  # c and d
    control.book.add(JobPlan(2, 5, "control", "test", v2))
    short.loc[16:, VERSION] = 2.0
    (window,) = control.feedback(short, rows[TIME].to_numpy()[[16]])
    assert not window.rebuilt[SENSORS.index("d")] and window.rebuilt[SENSORS.index("a")]


def test_the_delay_counts_every_window_a_batch_brings_before_its_feedback(frame) -> None:  # type: ignore[no-untyped-def]
    """A catch-up batch of 20 windows: the decision before it governed all 20, so the
    bound must be stated at d >= 20 (measured after the feedback it read 1)."""
    params = PlanParameters(WindowQuery(0.5, 0.05, W, aggregate="avg", horizon=48))
    config = BackupConfig.from_dict(plan_to_config(make_plan(history_from_frame(frame[:400]),
                                                             params)))  # fmt: skip
    control, _ = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    rows = _rows(frame[400 : 400 + 21 * W].reset_index(drop=True))
    control.steer(1, rows, rows[TIME].to_numpy()[::W][:-1], int(rows[TIME].max()))
    assert control.status()["windows"] == 20 and control.status()["delay_windows"] >= 20


def test_windows_closed_while_the_controller_was_away_are_skipped_not_pending(
    config, frame
) -> None:  # type: ignore[no-untyped-def]
    control, _ = _control(config, frame)
    _drive(control, frame[400:480])
    before = control.status()
    again, _ = _control(config, frame)
    again.resume(control.snapshot())
    assert again.delay == before["delay_windows"]  # kept with the state
    rows = _rows(frame[560:562])  # 80 rows later: windows closed meanwhile, unseen
    newest = int(rows[TIME].max())
    again.steer(100, rows, np.array([], dtype=np.int64), newest, watermark_us=newest)
    after = again.status()
    assert after["delay_windows"] == before["delay_windows"]
    # the windows from rows 472 to 553 closed while it was away: never applied
    assert after["skipped"] == before["skipped"] + 11


def test_a_saved_state_it_cannot_resume_is_said_and_a_fresh_one_starts(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, logged = _control(config, frame)
    control.resume({"controller": {"version": 99}, "delay_windows": 3, "skipped": 1})
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    assert control.controller is not None and control.status()["delay_windows"] == 0
    failed = [e for e in logged if e["event"] == "control_failed"]
    assert failed and "fresh controller" in failed[0]["reason"]


def test_windows_with_unknown_numbers_or_versions_are_not_measured(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, _ = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    rows = _rows(frame[400:424])
    rows.loc[3, "d"] = np.nan  # window 0: d unknown, the rest measured
    rows.loc[10, VERSION] = -1.0  # window 1: a time step two versions brought
    rows.loc[17, "c"] = np.nan  # window 2: the backup unknown, so every rebuilt sensor
    got = control.feedback(rows, rows[TIME].to_numpy()[[0, 8, 16]])
    a, b, d = (SENSORS.index(s) for s in "abd")
    assert np.isnan(got[0].miss[d]) and np.isfinite(got[0].miss[[a, b]]).all()
    assert np.isnan(got[1].miss).all()
    assert np.isnan(got[2].miss[[a, b, d]]).all()
    assert np.isnan(got[2].counterfactual[SENSORS.index("c")])  # c's own reading unknown
    short = rows.drop(index=20)  # window 2 lacks a time step
    assert np.isnan(control.feedback(short, rows[TIME].to_numpy()[[16]])[0].miss).all()


def test_a_fit_period_the_landing_no_longer_holds_waits_for_the_next_re_plan(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, logged = _control(config, frame[450:])  # the fit period is gone
    control.steer(0, _rows(frame[450:452]), np.array([], dtype=np.int64), 0)
    waiting = [e for e in logged if e["event"] == "control_waiting"]
    assert len(waiting) == 1 and "starts with the next re-plan" in waiting[0]["reason"]
    assert control.controller is None and control.status() == {"active": False}
    control.steer(1, _rows(frame[450:454]), np.array([], dtype=np.int64), 0)
    assert len([e for e in logged if e["event"] == "control_waiting"]) == 1  # said once


def test_a_re_plan_under_control_keeps_the_controllers_set(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, logged = _control(config, frame)
    stream = frame[400:560].copy()
    stream["d"] += 3.0
    _drive(control, stream)
    chosen = set(control.book.versions[-1].config.backup_sensors)
    replanner = Replanner(control.book, _reader(frame), logged.append, 3600.0, run=at_once,
                          plan=fit_again, adopt=control.adopt)  # fmt: skip
    until = int(pd.Timestamp(config.validity["valid_until"]).value // 1000)  # type: ignore[index]
    new = replanner.after_batch(80, until + HOUR_US)
    assert new is not None and new.reason == "scheduled"
    assert new.version == control.book.versions[-2].version + 1  # numbered after control's
    assert set(new.config.backup_sensors) == chosen  # the refit keeps the controller's set
    assert new.pinned == ()


def test_a_re_plan_adopted_while_the_first_fit_computes_is_not_undone_by_it(config, frame) -> None:  # type: ignore[no-untyped-def]
    from concurrent.futures import Future

    pending: list[tuple[Future[Any], Any]] = []

    def later(work: Any) -> Future[Any]:  # runs when the test says
        future: Future[Any] = Future()
        pending.append((future, work))
        return future

    control, logged = _control(config, frame)
    control.run = later
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    assert control.controller is None and len(pending) == 1
    fresh = make_plan(history_from_frame(frame[100:500]), PARAMS)
    control.adopt(fresh)  # a re-plan finished first
    future, work = pending[0]
    future.set_result(work())  # then the fit of version 1's period
    control.steer(1, _rows(frame[400:404]), np.array([], dtype=np.int64), 0)
    assert control.model_plan is fresh
    assert not [e for e in logged if e["event"] == "control_started"]


def test_a_restarted_job_resumes_the_controller_from_its_snapshot(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, _ = _control(config, frame)
    _drive(control, frame[400:480])
    saved = control.snapshot()
    assert saved is not None and control.controller is not None
    windows = control.controller.windows
    again, _ = _control(config, frame)
    again.resume(saved)
    assert again.snapshot() == saved  # kept until the model is fitted again
    again.steer(40, _rows(frame[480:482]), np.array([], dtype=np.int64), 0)
    assert again.controller is not None and again.controller.windows == windows
    np.testing.assert_array_equal(again.controller.scale, control.controller.scale)


def test_a_failing_decision_is_said_and_the_version_in_force_kept(config, frame) -> None:  # type: ignore[no-untyped-def]
    control, logged = _control(config, frame, constants=ControlConfig(delta=0.05))
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    broken = _rows(frame[400:424]).drop(columns=VERSION)
    assert control.steer(3, broken, broken[TIME].to_numpy()[[0]], 0) is None
    failed = [e for e in logged if e["event"] == "control_failed"]
    assert failed and "plan in force is kept" in failed[0]["reason"]
    assert len(control.book.versions) == 1


@pytest.mark.parametrize(
    ("exposure", "kw", "on", "said"),
    [
        (2, {}, True, "every closed window's shadow check (crash contract) steers the set"),
        (2, {"control": False}, False, "turned off (--no-control)"),
        (2, {"replan": False}, False, "re-planning is off (--no-replan)"),
        (None, {}, True, "(range contract) steers the set"),
    ],
)
def test_the_job_says_at_start_whether_online_control_runs(  # type: ignore[no-untyped-def]
    config, frame, tmp_path, exposure, kw, on, said
) -> None:
    from dataclasses import replace

    from engine.job.run import JobSettings, job_control
    from engine.job.transforms import WindowSpec

    data = config.to_dict()
    data["parameters"]["exposure"] = exposure
    data["guarantee"]["contract"] = "crash" if exposure else "range"
    data["guarantee"]["exposure_rows"] = exposure
    plan = BackupConfig.from_dict(seal_config(data))
    settings = replace(JobSettings("s", "b", "c"), **kw)
    spec = WindowSpec.from_query(plan.query, 3600.0, 0.0)
    logged: list = []
    book = PlanBook(MemoryFiles(), "b")  # type: ignore[arg-type]
    got = job_control(plan, settings, book, _reader(frame), logged.append, spec, at_once)
    assert (got is not None) == on
    assert logged[0]["event"] == "control_mode" and logged[0]["online_control"] == on
    assert said in logged[0]["reason"]


def test_a_backed_up_kept_sensors_counterfactual_leaves_its_lost_readings_out(frame) -> None:  # type: ignore[no-untyped-def]
    """A max crash plan's backed-up sensor whose kept readings calibration measured within
    eps: released, a crash would leave its lost readings out of the window, so the
    counterfactual is that (brute force over the w + m - 1 failure positions), whatever
    its rebuild would be."""
    params = PlanParameters(WindowQuery(0.5, 0.05, W, aggregate="max", horizon=48, exposure=2))
    plan = make_plan(history_from_frame(frame[:400]), params)
    config = BackupConfig.from_dict(plan_to_config(plan))
    assert config.backup_sensors
    backed = config.backup_sensors[0]
    j = SENSORS.index(backed)
    control, _ = _control(config, frame)
    control.steer(0, _rows(frame[400:402]), np.array([], dtype=np.int64), 0)
    assert control.model_plan is not None
    control.model_plan = replace(control.model_plan, keepable_sensors=(backed,))
    rows = _rows(frame[400:480])
    starts = rows[TIME].to_numpy()[::W][:-1]
    got = control.feedback(rows, starts)
    truth = rows[backed].to_numpy()
    for k, f in enumerate(got):
        v = truth[k * W : (k + 1) * W]
        misses = []
        for p in range(-1, W):  # every 2-row loss touching the window
            left = [v[i] for i in range(W) if not p <= i < p + 2]
            misses.append(abs(max(left) - v.max()) > 0.5)
        assert not f.rebuilt[j]
        assert f.counterfactual[j] == pytest.approx(np.mean(misses))
