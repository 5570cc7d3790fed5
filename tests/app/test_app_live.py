"""The Live page against a stand-in manager (no JVM): controls, errors, the recovery report.

The real pipeline runs in the e2e test; here the page's wiring is checked: what it
shows for each state, that a refused control call is one st.error, and that a
recovery report renders its charts from the stored results.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from engine.data import load_history
from engine.errors import PipelineError
from engine.live.records import StoreSize
from engine.live.recovery_report import RecoveryReport
from engine.live.status import PipelineStatus, StatusBoard
from engine.query import WindowQuery
from engine.windows import window_aggregates
from tests.app.apphelpers import SMALL, metric, settle, texts
from ui import dashboard, live, recovery, resources
from ui.jobs import get_runner

pytestmark = pytest.mark.app
TEMP = [
    "Aotizhongxin_TEMP",
    "Changping_TEMP",
    "Dingling_TEMP",
    "Dongsi_TEMP",
    "Guanyuan_TEMP",
    "Gucheng_TEMP",
]


def make_report(mode: str = "approx") -> tuple[RecoveryReport, pd.DataFrame]:
    """A report for windows 5 and 6 of the small sample, and the stored results behind it."""
    history = load_history(SMALL).select(TEMP)
    truth = window_aggregates(history.values, 24, 24, "avg")
    recovered = truth[[5, 6]] + np.array([[0.0, 0.3, -0.2, 0.1, 0.6, -0.4]] * 2)
    errors = np.abs(recovered - truth[[5, 6]])
    rows = [
        {"window_id": j, "sensor": s, "value": v, "kind": kind}
        for kind, ids, block in (("live", range(5), truth[:5]), ("recovered", (5, 6), recovered))
        for j, vals in zip(ids, block, strict=True)
        for s, v in zip(TEMP, vals, strict=True)
    ]
    report = RecoveryReport(
        mode=mode,
        spark_version="test",
        windows_lost=2,
        windows_recovered=2,
        windows_pending=0,
        max_abs_error=float(errors.max()),
        mean_abs_error=float(errors.mean()),
        violation_rate=float((errors[:, 1:] > 0.5).mean()),
        violation_rate_worst_sensor=0.5,
        violation_rates={s: float((errors[:, i] > 0.5).mean()) for i, s in enumerate(TEMP)},
        eps=0.5,
        delta=0.05,
        window=24,
        slide=24,
        aggregate="avg",
        recovery_seconds=1.25,
        backup_rows=48,
        backup_bytes=4096,
        backup_file_bytes=8192,
        input_rows=900,
        lost_rows=(120, 160),
        window_ids=(5, 6),
        errors=tuple(map(tuple, errors)),
        sensors=tuple(TEMP),
        backup_sensors=(TEMP[0],),
        note="2 of 2 lost window(s) recovered",
    )
    return report, pd.DataFrame(rows)


class FakeManager:
    """Stands in for ``PipelineManager``: a fixed status, a refusing failure call."""

    def __init__(
        self, state: str, report: RecoveryReport | None = None, results: pd.DataFrame | None = None
    ) -> None:
        self._status = PipelineStatus(
            state=state, mode="approx", run=0, batches=4, input_rows=600, windows_emitted=5,
            backup_rows=400, backup_bytes=6_400,
        )  # fmt: skip
        self._report, self._results = report, results
        self.calls: list[str] = []
        self.board = StatusBoard()

    def status(self) -> PipelineStatus:
        return self._status

    def simulate_failure(
        self, grace_seconds: float = 15.0, kind: str = "machine"
    ) -> PipelineStatus:
        self.calls.append(f"simulate_failure {kind}")
        raise PipelineError("no pipeline is running (state: failed)")

    def backup_size(self) -> StoreSize:
        return StoreSize(backup_rows=400, backup_bytes=3_400, file_bytes=0)  # compacted

    def report(self) -> RecoveryReport:
        if self._report is None:
            raise PipelineError("no recovery has run yet")
        return self._report

    def results(self) -> pd.DataFrame:
        return self._results if self._results is not None else pd.DataFrame()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def install(manager: FakeManager) -> FakeManager:
        monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
        return manager

    return install


def test_the_plan_page_prices_the_bytes_the_pipeline_wrote_and_holds(app, fake):  # type: ignore[no-untyped-def]
    fake(FakeManager("idle"))
    app.switch_page("pages/plan.py").run()
    assert not app.exception and not app.error
    assert app.number_input(key="w_bytes").value == 16.0  # 6,400 B written for 400 rows
    assert app.number_input(key="w_bytes_at_rest").value == 8.5  # 3,400 B held


class NothingRunManager(FakeManager):
    """No pipeline has measured anything yet."""

    def __init__(self) -> None:
        super().__init__("idle")
        self._status = PipelineStatus(state="idle", mode="approx")

    def backup_size(self) -> StoreSize:
        return StoreSize(backup_rows=0, backup_bytes=0, file_bytes=0)


def test_the_priced_inputs_follow_a_new_plan_and_a_new_measurement(app, fake):  # type: ignore[no-untyped-def]
    """Seeded once, they kept the first plan's re-plan period and the bytes of before any
    run: the same plan priced two ways. An edit stands while its default does."""
    fake(NothingRunManager())
    settle(app.switch_page("pages/plan.py").run())
    assert app.number_input(key="w_bytes_at_rest").value == 16.0
    app.number_input(key="w_fleet_sites").set_value(3).run()
    settle(app.switch_page("pages/tune.py").run())
    app.number_input(key="w_horizon").set_value(48).run()
    settle(app)
    fake(FakeManager("idle"))  # a run has measured 8.5 B a reading at rest
    settle(app.switch_page("pages/plan.py").run())
    assert not app.exception
    assert app.number_input(key="w_cost_replan_h").value == 48.0  # 48 hourly rows
    assert app.number_input(key="w_bytes_at_rest").value == 8.5
    assert app.number_input(key="w_fleet_sites").value == 3  # the operator's, kept


class MovingManager(FakeManager):
    """A running pipeline whose every status read has taken in 100 more readings."""

    def __init__(self) -> None:
        super().__init__("running")
        self.reads = 0

    def status(self) -> PipelineStatus:
        self.reads += 1
        feed = replace(self._status.feed, readings=5_000, total_readings=10_000)
        return replace(self._status, input_rows=100 * self.reads, feed=feed)


def test_the_status_metrics_and_the_line_below_them_are_one_snapshot(app, fake):  # type: ignore[no-untyped-def]
    """The metrics and the status line are drawn from one status read: two polled
    fragments, each reading its own, could say 300 readings in and 4,600 waiting of 5,000."""
    fake(MovingManager())
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    taken = int(metric(app, "Readings in").replace(",", ""))
    line = next(t for t in texts(app).splitlines() if " waiting" in t)
    waiting = int(re.search(r"([\d,]+) readings? waiting", line).group(1).replace(",", ""))
    assert taken + waiting == 5_000, line


def test_idle_pipeline_offers_start_only(app, fake):  # type: ignore[no-untyped-def]
    fake(FakeManager("idle"))
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    assert not app.button(key="start_pipeline").disabled
    assert app.button(key="simulate_failure").disabled
    assert app.button(key="stop_pipeline").disabled
    assert metric(app, "State") == "idle"


def test_running_pipeline_cannot_be_started_twice_and_refusals_are_one_line(app, fake):  # type: ignore[no-untyped-def]
    manager = fake(FakeManager("running"))
    app.switch_page("pages/live.py").run()
    assert app.button(key="start_pipeline").disabled
    try:
        settle(app.button(key="simulate_failure").click().run())
        # on the background recovery job; a crash by default for the crash-contract plan
        assert manager.calls == ["simulate_failure crash"]
        assert not app.exception
        expected = "Recovery failed: no pipeline is running (state: failed)"
        assert [e.value for e in app.error] == [expected]
        assert metric(app, "State") == "running"  # the metrics stay on screen
    finally:
        get_runner().forget(dashboard.RECOVERY_JOB)


def test_recovery_report_renders_its_charts(app, fake):  # type: ignore[no-untyped-def]
    report, results = make_report()
    fake(FakeManager("running", report, results))
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    assert "Recovery report (mode approx)" in texts(app)
    assert metric(app, "Windows recovered") == "2"
    assert metric(app, "Recovery time") == "1.25 s"
    # recovered vs true, errors vs eps, rates vs delta, the three modes
    assert len(app.get("plotly_chart")) == 4
    table = app.dataframe[0].value
    assert list(table["mode"]) == ["approx", "full", "none"]
    assert list(table["figures"]) == ["measured", "projected (not run)", "projected (not run)"]


def test_with_an_eps_per_unit_the_report_gives_the_largest_error_in_eps(app, fake):  # type: ignore[no-untyped-def]
    """Errors of different units are not compared raw: the largest error over its own
    eps is shown, with the sensor it belongs to."""
    report, results = make_report()  # errors 0, 0.3, 0.2, 0.1, 0.6, 0.4 per window
    eps = (1.0, 1.0, 0.1, 1.0, 1.0, 1.0)  # the third sensor's unit is ten times finer
    fake(FakeManager("running", replace(report, eps_by_sensor=eps), results))
    app.switch_page("pages/live.py").run()
    assert not app.exception
    assert metric(app, "Max error / eps") == "2"  # 0.2 / 0.1, above the raw 0.6 / 1
    shown = next(m for m in app.metric if m.label == "Max error / eps")
    assert shown.delta == f"{TEMP[2]} (eps 0.1)"


def test_a_failure_that_lost_no_window_says_why_nothing_was_rebuilt(app, fake):  # type: ignore[no-untyped-def]
    """A failure pressed after the replay had ended loses nothing; the page said only
    'between two committed batches', which is not what happened then."""
    from dataclasses import replace

    report, results = make_report()
    nothing = replace(report, windows_lost=0, windows_recovered=0, violation_rates={})
    fake(FakeManager("running", nothing, results))
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    notes = [i.value for i in app.info if i.value.startswith("No window was lost")]
    assert len(notes) == 1 and "after the replay had ended" in notes[0], notes
    assert len(app.get("plotly_chart")) == 1  # the modes only: no recovered windows to draw


def test_windows_that_cannot_be_rebuilt_are_said_to_stay_without_a_result(app, fake):  # type: ignore[no-untyped-def]
    """A lost window recovery had to skip was shown only as 'not (yet) recovered'."""
    from dataclasses import replace

    report, results = make_report()
    fake(FakeManager("running", replace(report, windows_lost=4, windows_unrecoverable=2), results))
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    said = [w.value for w in app.warning if "cannot be rebuilt" in w.value]
    assert len(said) == 1 and said[0].startswith("2 lost windows cannot be rebuilt"), said


@pytest.mark.parametrize(
    ("state", "says"),
    [("running", "this report updates when it does"), ("stopped", "stay unfinished")],
)
def test_pending_windows_are_promised_only_while_the_pipeline_runs(app, fake, state, says):  # type: ignore[no-untyped-def]
    """Stopped with recovered windows still pending, the page promised an update that
    could no longer come."""
    from dataclasses import replace

    report, results = make_report()
    pending = replace(report, windows_recovered=0, windows_pending=2, violation_rates={})
    fake(FakeManager(state, pending, results))
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    notes = [i.value for i in app.info if "reach past the failure" in i.value]
    assert len(notes) == 1 and says in notes[0], notes
    assert app.session_state[live.PENDING] is (state == "running")


def test_a_pipeline_on_other_data_is_said_on_every_page(app, fake, monkeypatch):  # type: ignore[no-untyped-def]
    """Session B, with its own data loaded, saw its own plan beside session A's running
    pipeline, and nothing said the status and the failure button were A's."""
    fake(FakeManager("running"))
    log = resources.PipelineLog()
    log.data_key = "another session's data"
    log.started = {"source": "plant_a.csv", "sensors": "40", "at": "12:00:00 UTC"}
    monkeypatch.setattr(resources, "pipeline_log", lambda: log)
    for page in ("live", "plan"):
        app.switch_page(f"pages/{page}.py").run()
        assert not app.exception
        said = [w.value for w in app.warning if "running on other data" in w.value]
        assert len(said) == 1 and "plant_a.csv, 40 sensors" in said[0], page
    log.data_key = None  # no pipeline of another dataset: nothing said
    app.run()
    assert not [w for w in app.warning if "running on other data" in w.value]


def test_recovery_frame_reads_stored_values_and_truth(monkeypatch):  # type: ignore[no-untyped-def]
    report, results = make_report()
    monkeypatch.setattr(
        resources, "pipeline_manager", lambda: FakeManager("running", report, results)
    )
    history = load_history(SMALL).select(TEMP)
    frame = recovery.recovery_frame(history, report, "Changping_TEMP", margin=2)
    assert list(frame["window_id"]) == [3, 4, 5, 6, 7, 8]
    truth = window_aggregates(history.values, 24, 24, "avg")[:, 1]
    np.testing.assert_allclose(frame["truth"], truth[3:9])
    np.testing.assert_allclose(frame["recovered"].iloc[2:4], truth[5:7] + 0.3)
    assert frame["live"].iloc[:2].notna().all() and frame["live"].iloc[2:].isna().all()
    lo, hi = recovery.lost_span(history, report)
    assert lo == history.times[120] and hi == history.times[6 * 24 + 23]
    assert recovery.rebuilt_errors(report).shape == (2 * 5,)
    # a crashed batch that backed up every sensor comes back whole: its windows are
    # stored live, and they are this recovery's, drawn as recovered
    whole = results.assign(kind="live")
    monkeypatch.setattr(
        resources, "pipeline_manager", lambda: FakeManager("running", report, whole)
    )
    again = recovery.recovery_frame(history, report, "Changping_TEMP", margin=2)
    np.testing.assert_allclose(again["recovered"].iloc[2:4], truth[5:7] + 0.3)
    assert again["live"].iloc[2:4].isna().all() and again["live"].iloc[:2].notna().all()


class OnePlan:
    """What the mode table reads of a plan: its sensors, its backup set (1 of 6) and what
    its signature is made of."""

    sensors, backup_sensors = tuple(TEMP), (TEMP[0],)
    data_fingerprint, parameters = "sha256:abc", "params"


def pipeline_log(monkeypatch: pytest.MonkeyPatch) -> resources.PipelineLog:
    """A fresh pipeline log the pages read (no run started, no report kept)."""
    log = resources.PipelineLog()
    monkeypatch.setattr(resources, "pipeline_log", lambda: log)
    return log


def test_mode_table_uses_measured_reports_of_the_same_plan_only(monkeypatch):  # type: ignore[no-untyped-def]
    report, _ = make_report()
    log = pipeline_log(monkeypatch)
    signature = live.plan_signature(OnePlan())
    full = replace(report, mode="full", backup_rows=288, max_abs_error=0.0, violation_rate=0.0)
    log.reports["full"] = {"signature": signature, "report": full.to_dict()}
    log.reports["none"] = {"signature": "another plan", "report": report.to_dict()}
    table = recovery.mode_table(OnePlan(), report).set_index("mode")
    assert table.loc["full", "figures"] == "measured"
    assert table.loc["full", "backup readings"] == 288
    assert table.loc["none", "figures"] == "projected (not run)"
    assert table.loc["none", "windows recovered"] == 0
    # a full run that recovered another kind of failure measured another loss
    crash = replace(full, failure="crash", windows_lost=1)
    log.reports["full"] = {"signature": signature, "report": crash.to_dict()}
    table = recovery.mode_table(OnePlan(), report).set_index("mode")
    assert table.loc["full", "figures"] == "projected (not run)"
    assert table.loc["full", "windows lost"] == report.windows_lost


def test_mode_table_counts_the_recoverys_own_backup_set_not_the_version_in_force(monkeypatch):  # type: ignore[no-untyped-def]
    """The run started on a plan backing up 1 sensor; a re-plan since backs up 3. The
    approx row is the recovery's (1 sensor), full's projection is the 41 lost time steps'
    readings of all 6 sensors, and a full run of the starting plan stays measured."""
    report, _ = make_report()

    class InForce(OnePlan):
        backup_sensors = tuple(TEMP[:3])

    log = pipeline_log(monkeypatch)
    log.started = {"signature": live.plan_signature(OnePlan())}
    table = recovery.mode_table(InForce(), report).set_index("mode")
    assert table.loc["approx", "sensors stored"] == 1
    assert table.loc["full", "backup readings"] == 41 * 6  # rows 120-160
    assert table.loc["none", "backup readings"] == 0
    full = replace(report, mode="full", backup_rows=288, max_abs_error=0.0, violation_rate=0.0)
    log.reports["full"] = {"signature": log.started["signature"], "report": full.to_dict()}
    table = recovery.mode_table(InForce(), report).set_index("mode")
    assert table.loc["full", "figures"] == "measured"


def test_mode_table_after_a_full_run_keeps_approxs_own_set(monkeypatch):  # type: ignore[no-untyped-def]
    """Approx ran backing up 1 of 6, then full ran on the same plan: the measured approx
    row counts approx's own set, not the full run's 6; after a none run the projected
    approx row counts the plan's set, not 0. A measured none row says n/a, not 'not run'."""
    report, _ = make_report()  # approx, 1 sensor backed up
    log = pipeline_log(monkeypatch)
    signature = live.plan_signature(OnePlan())
    log.reports["approx"] = {"signature": signature, "report": report.to_dict()}
    full = replace(report, mode="full", backup_sensors=tuple(TEMP), backup_rows=288)
    table = recovery.mode_table(OnePlan(), full).set_index("mode")
    assert table.loc["approx", "figures"] == "measured"
    assert table.loc["approx", "sensors stored"] == 1 and table.loc["full", "sensors stored"] == 6
    assert table.loc["approx", "lost rows"] == "rows 120..160 (41)"
    none = replace(report, mode="none", backup_sensors=(), backup_rows=0, max_abs_error=None,
                   violation_rate=None, windows_recovered=0)  # fmt: skip
    log.reports.clear()
    table = recovery.mode_table(OnePlan(), none).set_index("mode")
    assert table.loc["approx", "figures"] == "projected (not run)"
    assert table.loc["approx", "sensors stored"] == 1
    shown = recovery.display_modes(table.reset_index()).set_index("mode")
    assert shown.loc["none", "max abs error"] == "n/a"
    assert shown.loc["none", "violation rate (pooled)"] == "n/a"
    assert shown.loc["approx", "max abs error"] == "not run"


def test_a_refresh_keeps_the_data_sensors_parameters_and_plan(page):  # type: ignore[no-untyped-def]
    """A new browser session (a refresh) restores the last state from LACUNA_HOME and
    plans exactly what the old session planned; without the saved state it would not."""
    tune = page("tune").run()
    tune.number_input(key="w_eps").set_value(0.4).run()
    tune.number_input(key="w_window").set_value(12).run()
    before = page("plan").run()  # a second session already starts from the saved state
    refreshed = page("plan").run()
    assert "Restored the last session" in texts(refreshed) and "eps 0.4" in texts(refreshed)
    assert refreshed.session_state["params"] == before.session_state["params"]
    assert refreshed.session_state["params"].window == 12
    assert metric(refreshed, "Backed up") == metric(before, "Backed up")
    assert refreshed.session_state["sensors"] == tune.session_state["sensors"]
    # The saved data set must be the same data: a changed file is not restored silently.
    state_file = resources.work_dir() / "session" / "state.json"
    text = state_file.read_text().replace(tune.session_state["dataset"].fingerprint, "sha256:0")
    state_file.write_text(text)
    changed = page("plan").run()
    assert "fingerprint changed" in texts(changed) and "eps 0.4" not in texts(changed)


def test_while_a_pipeline_runs_every_page_and_export_use_its_plan(app, fake, monkeypatch):  # type: ignore[no-untyped-def]
    """The plan of record: the live pipeline's newest plan, not the session's tuned one."""
    import json
    from types import SimpleNamespace

    from engine.live.spec import StreamSpec
    from engine.planning import PlanParameters, make_plan

    app.switch_page("pages/plan.py").run()
    key = app.session_state["_planning_data"].key
    history = app.session_state["_planning_data"].history
    session_backup = app.session_state["params"]
    live_plan = make_plan(
        history.rows(0, 360),
        PlanParameters(WindowQuery(0.3, 0.05, 24)),
        run_backtest_now=False,
    )
    manager = fake(FakeManager("running"))
    manager._status = replace(manager._status, plan_version=2)
    log = resources.PipelineLog()
    manager.spec_in_force = lambda: StreamSpec.from_plan(live_plan)  # type: ignore[attr-defined]
    plans = {id(live_plan.linear_map): live_plan}
    log.monitor = SimpleNamespace(plan_for=lambda lm: plans.get(id(lm)))
    log.data_key = key
    monkeypatch.setattr(resources, "pipeline_log", lambda: log)
    app.switch_page("pages/export.py").run()
    assert not app.exception
    assert "Plan of record: the live pipeline's plan (version 2" in texts(app)
    exported = json.loads(next(c.value for c in app.code if c.value.lstrip().startswith("{")))
    assert exported["backup_sensors"] == list(live_plan.backup_sensors)
    assert exported["parameters"]["eps"] == 0.3 != session_backup.eps
    app.switch_page("pages/plan.py").run()
    assert metric(app, "Backed up").startswith(f"{len(live_plan.backup_sensors)} of")
    manager._status = replace(manager._status, state="stopped")
    app.switch_page("pages/export.py").run()  # stopped: the session's own plan again
    assert "Plan of record" not in texts(app)


def test_live_page_shows_versions_both_tallies_and_an_expired_plan(app, fake):  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    from engine.live.spec import StreamSpec
    from engine.live.versions import PlanVersion
    from tests.helpers import fit_map

    history = load_history(SMALL).select(TEMP)

    def spec(backup: tuple[str, ...]) -> StreamSpec:
        lm = fit_map(history.values, tuple(TEMP), backup)
        return StreamSpec(
            tuple(TEMP), backup, lm, WindowQuery(0.5, 0.05, 24, slide=24, aggregate="avg")
        )

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    versions = [
        PlanVersion(0, "initial", "start", spec((TEMP[0],)), t0, 0, 47),
        PlanVersion(
            1, "alert", "live rate of Changping_TEMP above delta", spec(tuple(TEMP[:2])), t0, 48
        ),
    ]
    manager = fake(FakeManager("running"))
    manager.versions = lambda: versions  # type: ignore[attr-defined]
    manager._status = replace(
        manager._status,
        plan_version=1,
        shadow_windows=9,
        shadow_worst_rate=0.5,
        shadow_worst=("Changping_TEMP", 3.0, 6),
        input_rows_per_second=40.0,  # arriving; one batch was processed at 67 a second
        processed_rows_per_second=67.0,
        shadow_by_version={
            0: {"windows": 4, "worst_rate": 0.75, "worst_sensor": "Changping_TEMP"},
            1: {"windows": 5, "worst_rate": 0.0, "worst_sensor": None},
        },
        replan_every_rows=24,
        rows_under_plan=30,
        scheduled_replanning=False,
        plan_expired=True,
    )
    app.switch_page("pages/live.py").run()
    assert not app.exception
    assert metric(app, "Plan version") == "1"
    assert metric(app, "Miss rate, this version") == "0.0 %"
    assert metric(app, "Miss rate, overall") == "50.0 %"
    # counted over its sensor's own measured windows, not every window closed (9)
    overall = next(m for m in app.metric if m.label == "Miss rate, overall")
    assert overall.delta == "worst, all versions: Changping_TEMP: 3 of 6 shadow windows"
    readings_in = next(m for m in app.metric if m.label == "Readings in")
    assert readings_in.delta == "40/s arriving"
    before = replace(manager._status, input_rows_per_second=None)  # no batch measured yet
    manager._status, kept = before, manager._status
    app.run()
    assert next(m for m in app.metric if m.label == "Readings in").delta == "no rate yet"
    manager._status = kept
    shadow = next(m for m in app.metric if m.label == "Shadow miss rate, worst sensor")
    assert shadow.proto.help.startswith("Each closed window is also rebuilt whole")
    manager._status = replace(manager._status, shadow_contract="crash")
    app.run()
    shadow = next(m for m in app.metric if m.label == "Shadow miss rate, worst sensor")
    assert "every m-row loss that could touch it" in shadow.proto.help
    # the headline figure is the plan in force's, on its own windows (version 0's 75 %
    # misses, and the all-version 50 %, are not its)
    assert metric(app, "Shadow miss rate, worst sensor") == "0.0 %"
    assert "The plan has expired" in texts(app) and "past its horizon of 24" in texts(app)
    table = app.dataframe[-1].value
    assert table["id"].tolist() == [1, 0] and table["added"].tolist()[0] == ["Changping_TEMP"]
    assert table["miss rate (worst)"].tolist() == ["0.0 %", "75.0 %"]
    # the switch shows the pipeline's own state (off) and asks for the opposite
    switch = app.button(key="replan_switch")
    assert switch.label == "Resume scheduled re-planning"
    switched: list[bool] = []
    manager.set_replanning = switched.append  # type: ignore[attr-defined]
    switch.click().run()
    assert switched == [True]


def test_the_replanning_switch_acts_only_when_clicked(app, fake):  # type: ignore[no-untyped-def]
    """A running pipeline's schedule changes on a click of its button and on nothing
    else: page runs (a fragment's, a stale status's, a page left and come back to) send
    no switch, and a click asks for the state its label names."""
    manager = fake(FakeManager("running"))
    manager._status = replace(manager._status, replan_every_rows=24, scheduled_replanning=True)
    switched: list[bool] = []
    manager.set_replanning = switched.append  # type: ignore[attr-defined]
    app.switch_page("pages/live.py").run()
    assert app.button(key="replan_switch").label == "Pause scheduled re-planning"
    assert not [t for t in app.toggle if t.key == "w_replan"]  # no toggle while running
    for _ in range(3):
        app.run()
    app.switch_page("pages/plan.py").run()
    app.switch_page("pages/live.py").run()
    assert switched == []
    app.button(key="replan_switch").click().run()
    assert switched == [False]
    # Drawn from a status that has not seen the click yet, the button still says pause:
    # a second click asks for off again, never for the opposite of the first.
    app.button(key="replan_switch").click().run()
    assert switched == [False, False]
    manager._status = replace(manager._status, scheduled_replanning=False)
    app.run()
    assert app.button(key="replan_switch").label == "Resume scheduled re-planning"
    app.button(key="replan_switch").click().run()
    assert switched == [False, False, True]
    # Stopped, the toggle is back: it chooses the next start's schedule and calls nothing.
    manager._status = replace(manager._status, state="stopped")
    app.run()
    app.toggle(key="w_replan").set_value(False).run()
    assert switched == [False, False, True]
    # the choice survives a run while running, when the toggle is not drawn
    manager._status = replace(manager._status, state="running")
    for _ in range(3):
        app.run()
    manager._status = replace(manager._status, state="stopped")
    app.run()
    assert app.toggle(key="w_replan").value is False and switched == [False, False, True]


class StoppableManager(FakeManager):
    """The manager's lock as ``PipelineManager`` holds it: ``stop`` waits for a running
    ``simulate_failure`` (here until ``release``) and never interrupts it."""

    def __init__(self) -> None:
        super().__init__("running")
        self.lock = threading.RLock()
        self.entered, self.release = threading.Event(), threading.Event()

    def simulate_failure(
        self, grace_seconds: float = 15.0, kind: str = "machine"
    ) -> PipelineStatus:
        with self.lock:
            self.calls.append(f"simulate_failure {kind}")
            self.entered.set()
            self.release.wait(30)
            self._status = replace(self._status, state="failed")
            return self._status

    def recover(self) -> RecoveryReport:
        with self.lock:
            self.calls.append("recover")
            raise PipelineError("not reached: the recovery was cancelled")

    def stop(self) -> PipelineStatus:
        with self.lock:
            self.calls.append("stop")
            self._status = replace(self._status, state="stopped")
            return self._status


def test_a_stop_during_a_recovery_reads_as_the_stop_not_a_failed_recovery(app, fake):  # type: ignore[no-untyped-def]
    """Stop pressed while the failure is simulated waits for it (the manager's lock), and
    the recovery it cancelled never starts: the page says it was stopped."""
    manager = fake(StoppableManager())
    app.switch_page("pages/live.py").run()
    try:
        app.button(key="simulate_failure").click().run()
        assert manager.entered.wait(10)
        threading.Timer(0.5, manager.release.set).start()
        app.button(key="stop_pipeline").click().run()
        job = get_runner().get(dashboard.RECOVERY_JOB)
        assert job is not None and job.join(10)
        app.run()
        assert not app.exception and not app.error
        assert any("Recovery stopped: Stop was pressed" in i.value for i in app.info)
        assert manager.calls == ["simulate_failure crash", "stop"]  # no recovery ran
    finally:
        get_runner().forget(dashboard.RECOVERY_JOB)


def test_the_live_status_is_judged_by_the_running_pipelines_delta(app, fake, monkeypatch):  # type: ignore[no-untyped-def]
    """A pipeline started on other data (another session) with delta 5 %: its worst
    sensor's 15 % is above it, whatever delta this session's plan was tuned to (20 %)."""
    from engine.planning import PlanParameters, make_plan

    app.switch_page("pages/tune.py").run()
    params = app.session_state["params"]
    app.session_state["params"] = replace(params, query=replace(params.query, delta=0.2))
    history = load_history(SMALL).select(TEMP)
    theirs = make_plan(
        history.rows(0, 360), PlanParameters(WindowQuery(0.5, 0.05, 24)), run_backtest_now=False
    )
    manager = fake(FakeManager("running"))
    tally = {"worst_rate": 0.15, "worst_sensor": TEMP[1], "worst_misses": 3, "worst_windows": 20,
             "windows": 20}  # fmt: skip
    manager._status = replace(manager._status, plan_version=0, shadow_by_version={0: tally})
    manager.versions = lambda: []  # type: ignore[attr-defined]
    log = resources.PipelineLog()
    log.plan, log.data_key = theirs, "another data set"
    monkeypatch.setattr(resources, "pipeline_log", lambda: log)
    app.switch_page("pages/live.py").run()
    assert not app.exception
    shown = texts(app)
    assert "running on other data than this session's" in shown
    assert "guarantee at risk" in shown and "against delta 5 %" in shown, shown


def test_the_live_page_flushes_the_end_of_a_finished_replay(app, fake):  # type: ignore[no-untyped-def]
    """Nobody drains the Live page's replay: once its feed is done (not stopped) the page
    asks the manager to flush it, so the out-of-order stage's held readings close their
    windows; a stopped feed is not flushed."""
    from engine.live.status import FeedProgress

    manager = fake(FakeManager("running"))
    manager.finish_feed = lambda: manager.calls.append("finish_feed") or True  # type: ignore[attr-defined]
    done = FeedProgress(2_000, 2_000, done=True)
    manager._status = replace(manager._status, feed=done, input_rows=1_500)
    app.switch_page("pages/live.py").run()  # 500 readings still to take in: not yet
    assert not app.exception and manager.calls == []
    manager._status = replace(manager._status, input_rows=2_000)
    app.run()
    assert not app.exception and manager.calls == ["finish_feed"]
    manager.calls.clear()
    stopped = FeedProgress(800, 2_000, done=True, stopped=True)
    manager._status = replace(manager._status, feed=stopped)
    app.run()
    assert not app.exception and manager.calls == []


def test_a_crash_plans_machine_loss_is_read_against_its_range_backtest_not_delta() -> None:
    """A crash plan promises delta for an m-row loss; a machine loss rebuilds whole
    windows, which the plan's range backtest measured (on the sample: far above delta).
    The report says so; under a crash, or for a range plan, it says nothing more."""
    from engine.planning import PlanParameters, make_plan

    history = load_history(SMALL).select(TEMP)
    crash_plan = make_plan(history, PlanParameters(WindowQuery(0.5, 0.05, 24, exposure=6)))
    assert crash_plan.backtest is not None and crash_plan.backtest.crash is not None
    report, _ = make_report()
    assert report.contract == "range"
    note = recovery.promise_note(report, crash_plan)
    assert note.startswith("This plan promises delta 5 % for a crash that loses at most 6 rows")
    assert crash_plan.backtest.pooled_label() in note and "range verdict:" in note
    assert recovery.promise_note(replace(report, contract="crash"), crash_plan) == ""
    range_plan = make_plan(history, PlanParameters(WindowQuery(0.5, 0.05, 24)),
                           run_backtest_now=False)  # fmt: skip
    assert recovery.promise_note(report, range_plan) == ""
