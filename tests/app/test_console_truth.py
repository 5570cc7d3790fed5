"""The console tells the truth: verdict states, eps in force, counters and inputs that keep."""

from __future__ import annotations

import re

import pytest

from tests.app.apphelpers import settle, texts

pytestmark = pytest.mark.app


def test_an_unconfirmed_guarantee_is_not_shown_green(app):  # type: ignore[no-untyped-def]
    # The small sample's default plan: 3 folds, no rebuilt window missed, but too few
    # windows to bound the worst sensor under delta: not enough evidence, not "holds".
    settle(app.switch_page("pages/tune.py").run())
    assert not app.exception
    verdicts = [b.value for kind in ("success", "warning", "error") for b in app.get(kind)]
    verdict = next(v for v in verdicts if "Verdict:" in v)
    assert not [s.value for s in app.success if "Verdict:" in s.value]
    assert "Verdict: not enough evidence" in verdict
    assert "What would settle it:" in verdict and "not backed up at its measured rate" in verdict
    # the worst sensor's rate says what it counts (the default plan is a crash-contract
    # plan: a window counts the fraction of its failure positions that missed; a max or
    # min plan's kept sensors are not rebuilt, so the windows are those not backed up)
    assert re.search(r"missed [0-9.]+ of its [0-9,]+ windows not backed up", verdict), verdict


def _per_unit_params():  # type: ignore[no-untyped-def]
    from engine.data import load_history
    from engine.planning import PlanParameters
    from engine.query import WindowQuery
    from tests.app.apphelpers import SMALL

    history = load_history(SMALL)
    per = tuple((s, 1.0 if s.endswith(("_TEMP", "_DEWP")) else 20.0) for s in history.sensors)
    return history, PlanParameters(WindowQuery(0.5, 0.05, 24, eps_by_sensor=per))


def test_the_measured_tradeoff_scales_every_units_eps() -> None:
    from ui.plans import MEASURED_EPS_FACTORS, PlanCache, PlanningData, measure_whatif
    from ui.whatif import measured_table

    history, params = _per_unit_params()
    points = measure_whatif(PlanningData(history, "units"), params, PlanCache(), lambda *_: None)
    assert [p.factor for p in points] == list(MEASURED_EPS_FACTORS)
    fractions = [p.backup_fraction for p in points]
    assert fractions[0] > fractions[-1], fractions  # a looser eps everywhere backs up less
    table = measured_table(points, params)
    assert list(table["eps factor"]) == ["x 0.5", "x 0.7", "x 1 (now)", "x 1.4", "x 2"]
    assert "0.5 (now)" not in table.to_string()


def test_the_disorder_page_scores_each_sensor_against_its_units_eps(  # type: ignore[no-untyped-def]
    app, monkeypatch
):
    import engine.disorder
    from ui import disorder

    seen = {}
    real = engine.disorder.run_disorder_experiment

    def spy(history, delays, eps_thr, **kw):  # type: ignore[no-untyped-def]
        seen["values"], seen["eps_thr"], seen["sensors"] = history.values, eps_thr, history.sensors
        seen["slide"] = kw.get("slide")
        return real(history, delays, eps_thr, **kw)

    monkeypatch.setattr(disorder, "run_disorder_experiment", spy)
    app.button(key="w_group_all").click().run()
    settle(app.switch_page("pages/tune.py").run())
    app.number_input(key="w_eps_unit_ug/m3").set_value(20.0).run()
    settle(app.switch_page("pages/disorder.py").run())
    assert not app.exception
    shown = texts(app)
    assert "quality target eps degC" in shown and "ug/m3 20" in shown
    assert "eps 0.5" not in shown and "eps 1," not in shown
    assert seen["eps_thr"] == 1.0  # in eps units: every sensor's tolerance is 1
    history = app.session_state["dataset"].history
    j = list(seen["sensors"]).index("Dongsi_PM2.5")
    k = history.sensors.index("Dongsi_PM2.5")
    rows = seen["values"].shape[0]
    assert seen["values"][:, j] == pytest.approx(history.values[:rows, k] / 20.0)
    # the Tune query's slide is replayed, and the accuracy says what it is over
    assert seen["slide"] == app.session_state["params"].slide
    assert "(window, sensor) results whose window holds all" in shown
    # the sample has gaps the loader filled: the replayed count says they are in it
    assert "values replayed (the loader filled in" in shown


def test_the_disorder_page_says_when_no_window_could_be_scored() -> None:
    """Windows of event time that never hold all their readings (gaps, other clocks): the
    figures would all be NaN; the page says why instead."""
    from types import SimpleNamespace

    from ui import disorder

    params = SimpleNamespace(window=24)
    shown = disorder.scored_note(SimpleNamespace(parameters={"evaluated_results": 120}), params)
    assert (
        shown == "accuracy over the 120 (window, sensor) results whose window holds all 24 readings"
    )
    assert (
        disorder.scored_note(SimpleNamespace(parameters={"evaluated_results": 0}), params) is None
    )


def test_a_restored_session_names_each_units_eps(app):  # type: ignore[no-untyped-def]
    from streamlit.testing.v1 import AppTest

    from tests.app.apphelpers import ROOT

    app.button(key="w_group_all").click().run()
    settle(app.switch_page("pages/tune.py").run())
    app.number_input(key="w_eps_unit_ug/m3").set_value(20.0).run()
    fresh = AppTest.from_file(str(ROOT / "pages" / "graph.py"), default_timeout=60).run()
    # a refresh, on a page that says what it restored
    note = next(c.value for c in fresh.caption if c.value.startswith("Restored the last"))
    assert "eps degC" in note and "ug/m3 20" in note, note


def test_fleet_inputs_keep_their_values_when_the_page_is_revisited(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/plan.py").run())
    app.number_input(key="w_fleet_sites").set_value(5000).run()
    app.number_input(key="w_retention").set_value(90).run()
    assert not app.exception
    app.switch_page("pages/tune.py").run()
    settle(app.switch_page("pages/plan.py").run())
    assert app.number_input(key="w_fleet_sites").value == 5000
    assert app.number_input(key="w_retention").value == 90


def test_a_store_preset_sets_its_prices_and_they_keep(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/plan.py").run())
    app.selectbox(key="w_cost_store").set_value("HDFS on EBS gp3, 3 replicas").run()
    assert not app.exception
    assert app.number_input(key="w_cost_replication").value == 3
    assert app.number_input(key="w_price").value == 0.08
    app.number_input(key="w_price").set_value(0.05).run()
    app.switch_page("pages/tune.py").run()
    settle(app.switch_page("pages/plan.py").run())
    assert app.selectbox(key="w_cost_store").value == "HDFS on EBS gp3, 3 replicas"
    assert app.number_input(key="w_price").value == 0.05
    assert "prices edited on this page" in texts(app)


def test_the_cost_model_counts_what_an_operator_pays_for(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/plan.py").run())
    app.number_input(key="w_fleet_sites").set_value(20_000).run()
    assert not app.exception and not app.error
    shown = texts(app)
    assert "Break-even:" in shown and "sensors per site" in shown
    assert "Requests cost the same either way" in shown
    assert "crash contract: a crash's lost micro-batch" in shown  # the plan's contract
    assert "bench/results/recovery.json" in shown
    # 20,000 sites' lost day is far beyond the ranges the recovery line was measured on
    assert "x the largest range measured" in shown
    assert "aws.amazon.com/s3/pricing" in shown and "bench/results/production.json" in shown
    assert "may not add up to its total to the cent" in shown  # each rounded on its own
    labels = [m.label for m in app.metric]
    # the default plan is a crash plan: the headline and the break-even are its contract's
    assert {"Full backup, per month", "Range contract, per month",
            "Crash contract, per month", "Break-even (crash)"} <= set(labels)  # fmt: skip
    headline = next(b.value for kind in ("success", "warning") for b in app.get(kind)
                    if "sensors every" in b.value)  # fmt: skip
    assert headline.startswith("Crash contract, "), headline


class StoppableManager:
    """A running pipeline that stops when told (``FakeManager`` with ``stop``)."""

    def __init__(self) -> None:
        from engine.live.status import PipelineStatus, StatusBoard

        self._status = PipelineStatus(state="running", mode="approx", run=0, batches=3)
        self.board = StatusBoard()

    def status(self):  # type: ignore[no-untyped-def]
        return self._status

    def stop(self):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        self._status = replace(self._status, state="stopped")
        return self._status

    def report(self):  # type: ignore[no-untyped-def]
        from engine.errors import PipelineError

        raise PipelineError("no recovery has run yet")


def test_start_is_enabled_right_after_stop(app, monkeypatch):  # type: ignore[no-untyped-def]
    from ui import resources

    manager = StoppableManager()
    monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
    app.switch_page("pages/live.py").run()
    assert app.button(key="start_pipeline").disabled
    app.button(key="stop_pipeline").click().run()
    assert not app.exception
    assert manager.status().state == "stopped"
    assert not app.button(key="start_pipeline").disabled  # no reload needed
    assert app.button(key="stop_pipeline").disabled


def _status(**changes):  # type: ignore[no-untyped-def]
    from engine.live.status import FeedProgress, PipelineStatus

    feed = FeedProgress(readings=600, total_readings=10_000)
    return PipelineStatus(state="running", input_rows=600, feed=feed, plan_version=0, **changes)


def _tally(misses: int, windows: int) -> dict:  # type: ignore[type-arg]
    return {0: {"worst_rate": misses / windows, "worst_sensor": "T5_bathroom_degC",
                "worst_misses": misses, "worst_windows": windows, "rebuilt_sensors": 8,
                "windows": windows}}  # fmt: skip


def test_the_status_line_tests_every_sensor_not_only_the_highest_rate() -> None:
    """A missed 1 of 5 windows (20 %, p = 0.23); B 80 of 1,000 (8 %, p ~ 4e-5, under 5 % / 2):
    the guarantee is broken by B, though A has the higher rate."""
    from ui.dashboard import status_level

    tally = {0: {"worst_rate": 0.2, "worst_sensor": "A", "worst_misses": 1, "worst_windows": 5,
                 "rebuilt_sensors": 2, "windows": 1000,
                 "per_sensor": {"A": (1, 5), "B": (80, 1000)}}}  # fmt: skip
    level = status_level(_status(shadow_by_version=tally), [], 1.0, delta=0.05)
    assert level.name == "failing", level
    assert level.reason.startswith("guarantee broken: B missed eps in 80 of 1,000")


def test_the_status_line_puts_the_guarantee_first() -> None:
    from ui.dashboard import status_level

    # 2 of 10 windows (20 %) against delta 10 %: keeping up, but the guarantee is at risk
    risk = status_level(_status(shadow_by_version=_tally(2, 10)), [], 1.0, delta=0.1)
    assert risk.name == "at risk"
    assert risk.reason.startswith("guarantee at risk: T5_bathroom_degC missed eps in 2 of 10")
    broken = status_level(_status(shadow_by_version=_tally(15, 40)), [], 1.0, delta=0.1)
    assert broken.name == "failing" and broken.reason.startswith("guarantee broken")
    expired = _status(plan_expired=True, rows_under_plan=400, replan_every_rows=288)
    level = status_level(expired, [], 1.0, delta=0.1)
    assert level.name == "at risk" and level.reason.startswith("the plan has expired")
    # an expired plan whose own windows reject delta is failing, the expiry said with it
    both = _status(plan_expired=True, rows_under_plan=400, replan_every_rows=288,
                   shadow_by_version=_tally(15, 40))  # fmt: skip
    level = status_level(both, [], 1.0, delta=0.1)
    assert level.name == "failing" and level.reason.startswith("guarantee broken")
    assert "the plan has expired" in level.reason
    fine = status_level(_status(shadow_by_version=_tally(1, 40)), [], 1.0, delta=0.1)
    assert fine.name == "OK" and fine.reason.startswith("no sensor above delta so far")
    assert "keeping up with the feed" in fine.reason


def test_the_status_line_judges_the_run_in_its_mode_not_the_approx_plan() -> None:
    """The shadow check always measures the approx plan; a run in mode none or full does
    not use it: none loses the open windows to a failure, full recovers them exactly."""
    from ui.dashboard import status_level

    quiet = status_level(_status(mode="none", shadow_by_version=_tally(15, 40)), [], 1.0, 0.1)
    assert quiet.name == "OK" and quiet.reason.startswith("no backup (mode none): a failure")
    # a run without backup that falls behind still says so
    from dataclasses import replace

    from engine.live.status import FeedProgress
    from tests.app.test_console import points

    behind = replace(_status(mode="none"), feed=FeedProgress(10_000, 20_000))
    assert status_level(behind, points(5), 1.0, 0.1).name == "behind"
    full = status_level(_status(mode="full", shadow_by_version=_tally(15, 40)), [], 1.0, 0.1)
    assert full.name == "OK", full
    assert full.reason.startswith("every sensor backed up (mode full): a recovery")
    assert status_level(_status(mode="approx", shadow_by_version=_tally(15, 40)), [], 1.0,
                        0.1).name == "failing"  # fmt: skip


def test_the_live_page_counts_across_restores_and_shows_the_latest(app, monkeypatch):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from engine.live.status import FeedProgress, Restore
    from ui import resources

    manager = StoppableManager()
    restore = Restore(
        kind="recovery", at="2026-11-27T06:00:05+00:00", run=1, resumed_at_row=132,
        lost_first_row=120, lost_last_row=131, windows=2, rows_read=48, seconds=1.25,
        plan_version=0,
    )  # fmt: skip
    feed = FeedProgress(readings=800, total_readings=2_000, done=True, stopped=True)
    manager._status = replace(
        manager._status, state="stopped", restores=2, last_restore=restore, feed=feed
    )
    monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
    app.switch_page("pages/live.py").run()
    assert not app.exception
    shown = texts(app)
    assert "Latest restore" in shown and "2 restores so far" in shown
    assert "rows 120..131 (12) rebuilt from the backup" in shown
    # what a Resume in a new process keeps (the store's totals) and what starts again
    assert "the shadow miss rates, late and stale readings and the restore count" in shown
    bars = [p.proto.text for p in app.get("progress")]
    assert any(text.endswith("(stopped)") for text in bars), bars
    assert not any(text.endswith("(done)") for text in bars)


def test_graph_names_are_written_apart_or_left_to_the_hover() -> None:
    import numpy as np

    from ui.graph import _label_box, _overlaps, label_positions, visible_labels

    # a cluster of two on a ring, side by side: each name goes outwards
    pos = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]])
    labels = np.array([0, 0, 1])
    where = label_positions(pos, labels)
    assert where == ["middle left", "middle right", "bottom center"]
    names = ["airport_wind_ms", "airport_press_mmHg", "lights_Wh"]
    shown = visible_labels(names, pos, where, [0, 1, 2], px_per_unit=30.0)
    assert shown == {0, 1, 2}
    # names that would cover each other: the later one is left to the hover
    crowded = np.array([[0.0, 0.0], [0.2, 0.05]])
    two = label_positions(crowded, np.array([0, 1]))
    kept = visible_labels(names[:2], crowded, two, [0, 1], px_per_unit=30.0)
    assert kept == {0}
    boxes = [_label_box(*(crowded[i] * 30.0), names[i], two[i]) for i in range(2)]
    assert _overlaps(*boxes)


def test_a_full_backup_recovery_draws_no_empty_charts_and_no_none(app, monkeypatch):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from tests.app.test_app_live import TEMP, FakeManager, make_report
    from ui import resources

    report, results = make_report(mode="full")
    report = replace(report, backup_sensors=tuple(TEMP))  # every sensor backed up
    manager = FakeManager("running", report, results)
    monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
    app.switch_page("pages/live.py").run()
    assert not app.exception
    assert "nothing was rebuilt, so there is no rebuild error to chart" in texts(app)
    # recovered vs true and the modes' bars; no error histogram, no per-sensor bars
    assert len(app.get("plotly_chart")) == 2
    table = app.dataframe[0].value
    assert "None" not in table.astype(str).to_string()
    assert set(table.loc[table["mode"] == "none", "max abs error"]) == {"not run"}
    spec = app.get("plotly_chart")[-1].proto.spec
    assert "))" not in spec and "recovered, projected (not run)" in spec


def test_the_disorder_k_chart_draws_ours_on_top() -> None:
    from engine.disorder import DisorderReport, MethodReport
    from ui.disorder import k_chart

    def method(k: float) -> MethodReport:
        return MethodReport(
            avg_latency_s=1.0, avg_k_s=k, max_k_s=k, provisional_accuracy=1.0,
            final_accuracy=1.0, final_exact=1.0, corrections=0, batch_runs=0, reopened_final=0,
            late_tuples=0, late_ratio=0.0, mean_coverage=1.0,
            k_over_time=[(0.0, k), (3600.0, k)], cumulative_accuracy=[], alpha_over_time=[],
        )  # fmt: skip

    same = {m: method(1800.0) for m in ("ours", "mp_kslack", "fixed_watermark", "no_buffer")}
    fig = k_chart(DisorderReport(parameters={}, stream={}, lambda_thr=0.5, methods=same))
    mp, ours = fig.data
    assert ours.name == "ours (adaptive K)"  # drawn last: over MP-K-slack where they agree
    assert ours.line.width > mp.line.width and mp.line.dash == "dash"


def test_the_whatif_marker_keeps_its_words_in_the_legend() -> None:
    from ui.charts import whatif_chart

    fig = whatif_chart([0.5, 1.0, 2.0], [0.8, 0.6, 0.4], 1.0, 0.6, "eps factor (all unit groups)")
    marker = next(t for t in fig.data if t.name.startswith("current plan"))
    assert "text" not in marker.mode  # drawn beside the marker it ran off the chart
    assert marker.name == "current plan: eps factor (all unit groups) = 1, 60.0 %"


def test_storage_is_priced_at_the_bytes_at_rest_and_bandwidth_at_the_bytes_written(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/plan.py").run())

    def full_backup() -> tuple[str, str]:
        table = next(d.value for d in app.dataframe if "storage held (GB)" in d.value.columns)
        row = table[table["strategy"] == "full backup"].iloc[0]
        return row["storage held (GB)"], row["write bandwidth (MB/s)"]

    assert app.number_input(key="w_bytes_at_rest").value == 16.0  # no pipeline has run
    stored, written = full_backup()
    # the GB shown are the GB the price is per: shown x price = the storage line (a fleet
    # big enough to bill dollars, not "< $0.01")
    interval = app.number_input(key="w_fleet_interval").value
    app.number_input(key="w_fleet_sites").set_value(20_000).run()
    app.number_input(key="w_fleet_interval").set_value(1.0).run()
    table = next(d.value for d in app.dataframe if "storage held (GB)" in d.value.columns)
    row = table[table["strategy"] == "full backup"].iloc[0]
    price = app.number_input(key="w_price").value
    dollars = float(row["$ storage"].lstrip("$").replace(",", ""))
    held = float(row["storage held (GB)"].replace(",", ""))
    assert dollars > 1 and held * price == pytest.approx(dollars, rel=0.01)
    # at this fleet both amounts show digits (one site's are "< 0.001", never an exponent)
    big_stored, big_written = full_backup()
    app.number_input(key="w_bytes_at_rest").set_value(8.0).run()
    assert not app.exception
    assert full_backup()[0] != big_stored and full_backup()[1] == big_written
    app.number_input(key="w_bytes").set_value(32.0).run()
    assert full_backup()[1] != big_written
    app.number_input(key="w_bytes_at_rest").set_value(16.0).run()
    app.number_input(key="w_bytes").set_value(16.0).run()
    app.number_input(key="w_fleet_sites").set_value(1).run()
    app.number_input(key="w_fleet_interval").set_value(interval).run()
    assert full_backup() == (stored, written)


def test_the_job_chart_plots_each_batch_under_its_plans_contract() -> None:
    import pandas as pd

    from ui.charts import job_batches_chart

    # every whole window misses, but only a quarter of the m-row losses touching them do
    crash = pd.DataFrame({"batch_id": [0, 1, 2], "plan_version": [1, 1, 1],
                          "rebuilt_pairs": [4, 4, 0], "misses": [4, 4, 0],
                          "contract": "crash", "crash_windows": [4, 4, 0],
                          "crash_misses": [1.0, 0.5, 0.0]})  # fmt: skip
    fig = job_batches_chart(crash, 0.05)
    (trace,) = fig.data
    assert list(trace.x) == [0, 1] and list(trace.y) == [25.0, 12.5]
    assert "m-row losses" in fig.layout.yaxis.title.text
    whole = crash.drop(columns=["contract", "crash_windows", "crash_misses"])  # older metrics
    fig = job_batches_chart(whole, 0.05)
    assert list(fig.data[0].y) == [100.0, 100.0]
    assert fig.layout.yaxis.title.text == "% of rebuilt windows with error > eps"
    # after a re-plan, batch 1 (version 2) closed version 1's windows, which missed, and one
    # of its own, which did not: version 2's line holds its own windows only
    replan = pd.DataFrame({"batch_id": [0, 1, 2], "plan_version": [1, 2, 2],
                           "rebuilt_pairs": [4, 4, 4], "misses": [4, 3, 0],
                           "version_pairs": [4, 1, 4], "version_misses": [4, 0, 0]})  # fmt: skip
    first, second = job_batches_chart(replan, 0.05).data
    assert (first.name, list(first.y)) == ("version 1", [100.0])
    assert (second.name, list(second.y)) == ("version 2", [0.0, 0.0])


def test_every_job_event_says_what_happened_in_its_own_words() -> None:
    from ui.job_events import _what

    control = {"event": "control", "plan_version": 2, "added": ["a"], "released": [],
               "detail": "online control: backed up a (its recent windows missed eps)"}  # fmt: skip
    over = {"event": "over_exposure", "what": "a micro-batch of 400 rows exceeds ..."}
    started = {"event": "control_started", "backup_sensors": 1}
    waiting = {"event": "control_waiting", "reason": "the fit period ... next re-plan"}
    assert _what(control) == control["detail"]
    assert _what(over) == over["what"]
    assert "starts from the plan's 1 backed-up sensor" in _what(started)
    assert _what(waiting) == waiting["reason"]
    # every kept event has a label, and none is shown without its sentence
    from engine.job.events import NOTABLE
    from ui.job_events import EVENT_LABELS

    assert set(NOTABLE) <= set(EVENT_LABELS)
    nanos = {"event": "nanosecond_timestamps", "files": 2, "why": "read truncated"}
    assert _what(nanos) == "read truncated"
    withdrawn = {"event": "plan_versions_withdrawn", "versions": [3, 4], "why": "rerun"}
    assert _what(withdrawn) == "version(s) 3, 4 withdrawn: rerun"
    failed = {"event": "replan_failed", "reason": "alert", "error": "too few rows"}
    assert _what(failed) == "the alert re-plan failed: too few rows; the plan in force is kept"
    lost = {"event": "control_failed", "reason": "the plan in force is kept", "error": "E: x"}
    assert _what(lost) == "the plan in force is kept (E: x)"
    inside = {"event": "replan_started", "reason": "scheduled", "plan_version": 1}
    assert "in the background" in _what(inside)  # a job's events before the flag
    assert "within this batch" in _what({**inside, "background": False})
    # the job names the monitor's carried-over count rebuilt_pairs; older jobs, windows
    resumed = {"event": "monitor_resumed", "rebuilt_pairs": 30, "misses": 4}
    said = "30 (window, rebuilt sensor) pairs and 4 misses of this version carried over"
    assert _what(resumed).startswith(said)
    assert _what({"event": "monitor_resumed", "windows": 30, "misses": 4}).startswith(said)


def test_a_version_replaced_at_the_batch_it_began_says_it_governed_none() -> None:
    from types import SimpleNamespace

    from engine.export.plan_book import JobPlan
    from ui.production import version_rows

    def plan(version: int, first: int, reason: str) -> JobPlan:
        config = SimpleNamespace(validity={}, backup_sensors=("a",) * version)
        return JobPlan(version, first, reason, f"{reason} detail", config)  # type: ignore[arg-type]

    rows = version_rows([plan(1, 0, "initial"), plan(2, 13, "control"), plan(3, 13, "alert")])
    assert [r["version"] for r in rows] == [3, 2, 1]
    assert (
        rows[1]["detail"] == "governed no batch: version 3 replaced it at batch 13. control detail"
    )
    assert rows[0]["detail"] == "alert detail" and rows[2]["detail"] == "initial detail"


def test_a_crash_plans_tradeoff_and_cost_rows_show_its_own_contracts_figures(monkeypatch) -> None:
    """The measured trade-off of a crash plan shows its crash figures, as its headline does,
    not the same backtest scored on whole windows; and the cost table puts a plan's measured
    quality on its own contract's row only (the other row prices another plan)."""
    from engine.data import load_history
    from engine.planning import PlanParameters
    from engine.query import WindowQuery
    from tests.app.apphelpers import SMALL
    from ui import plans, savings
    from ui.plans import PlanCache, PlanningData, measure_plan, measure_whatif
    from ui.whatif import measured_contract

    monkeypatch.setenv("LACUNA_MAX_FOLDS", "2")
    history = load_history(SMALL)
    data = PlanningData(history.select([s for s in history.sensors if "TEMP" in s]), "temp")
    cache = PlanCache()
    crash = PlanParameters(WindowQuery(0.5, 0.05, 24, exposure=6))
    points = measure_whatif(data, crash, cache, lambda *_: None)
    plan = measure_plan(data, crash, cache, lambda *_: None)
    bt = plan.backtest
    assert bt is not None and bt.crash is not None
    (now,) = [p for p in points if p.factor == 1.0]
    figures = (now.miss_worst, now.miss_worst_ucb95, now.miss_mean)
    assert figures == (
        bt.crash.violation_rate_worst_sensor,
        bt.crash.violation_rate_worst_sensor_ucb95,
        bt.crash.violation_rate_mean,
    )
    assert figures != (bt.violation_rate_worst_sensor, bt.violation_rate_worst_sensor_ucb95,
                       bt.violation_rate_mean)  # fmt: skip
    assert "Crash contract: a failure loses 6 consecutive rows" in measured_contract(6)
    preview = plans.range_plan(data, plan, cache)  # no range plan measured yet
    assert not preview.measured and preview.parameters.exposure is None
    assert "a failure loses 6 rows" in savings._outcome("crash", plan, preview)
    assert "model preview, not backtested" in savings._outcome("range", plan, preview)
    whole = measure_plan(data, crash.with_query(exposure=None), cache, lambda *_: None)
    assert plans.range_plan(data, plan, cache) is whole  # measured now: its own figures
    assert savings._outcome("range", plan, whole) == (
        f"whole windows rebuilt by the range plan: {savings.quality(whole)}"
    )
    assert savings._outcome("range", whole, whole) == savings.quality(whole)
    assert "measured: worst sensor" in savings.quality(whole)
    # a range plan made no crash plan: its crash row says nothing measured one
    assert savings._outcome("crash", whole, whole).startswith("not planned for a crash")


def test_the_status_line_tests_sliding_windows_on_their_disjoint_share() -> None:
    """12 misses in 100 windows sliding a quarter of a window (share 1/4): 3 in 25 disjoint
    ones (p ~ 0.13), not 12 independent trials in 100 (p ~ 0.004). Overlapping windows
    share readings: the line said "guarantee broken" where the backtest verdict, which
    counts disjoint windows, would not."""
    from ui.dashboard import status_level

    def tally(share: float) -> dict:  # type: ignore[type-arg]
        return {0: {"worst_rate": 0.12, "worst_sensor": "A", "worst_misses": 12,
                    "worst_windows": 100, "rebuilt_sensors": 1, "windows": 100,
                    "per_sensor": {"A": (12, 100)}, "share": share}}  # fmt: skip

    tumbling = status_level(_status(shadow_by_version=tally(1.0)), [], 1.0, delta=0.05)
    assert tumbling.name == "failing", tumbling
    sliding = status_level(_status(shadow_by_version=tally(0.25)), [], 1.0, delta=0.05)
    assert sliding.name == "at risk", sliding
    assert "on disjoint windows" in sliding.reason


def test_the_error_histogram_says_when_errors_are_in_each_sensors_eps() -> None:
    """With eps per sensor the errors are divided by it: the axis and the line say so."""
    import numpy as np

    from ui.charts import error_histogram

    plain = error_histogram(np.array([0.1, 0.6]), 0.5)
    assert plain.layout.xaxis.title.text == "|recovered - true|"
    assert plain.layout.shapes[0].x0 == 0.5
    scaled = error_histogram(np.array([0.03, 1.2]), 1.0, per_sensor=True)
    assert scaled.layout.xaxis.title.text == "|recovered - true| / sensor's eps"
    assert scaled.layout.annotations[0].text == "each sensor's eps"


def test_kept_sensors_are_drawn_and_said_as_keeping_their_readings() -> None:
    """A max crash plan's kept sensors have their whole variance as target: the graph gave
    them a ratio and a 'model error bound' within eps by construction. They are drawn
    apart, and their hover says what a crash and a rebuilt range give them; the Export
    summary does not say 'the rest rebuilt' when none is."""
    from engine.data import load_history
    from engine.export import json_safe, plan_to_config
    from engine.planning import PlanParameters, make_plan
    from engine.query import WindowQuery
    from tests.app.apphelpers import SMALL
    from ui.exporting import summary_text
    from ui.graph import _hover, correlation, graph_figure, strong_edges

    history = load_history(SMALL).select([s for s in load_history(SMALL).sensors if "TEMP" in s])
    plan = make_plan(history, PlanParameters(WindowQuery(5.0, 0.05, 24, aggregate="max",
                                                         exposure=6)))  # fmt: skip
    assert plan.kept_sensors, plan.backup_sensors
    hover = dict(zip(plan.sensors, _hover(plan), strict=True))
    for s in plan.kept_sensors:
        assert "keeps its readings under a crash" in hover[s]
        assert "model error bound" not in hover[s]
    corr = correlation(plan.model.cov_)
    names = [t.name for t in graph_figure(plan, corr, strong_edges(corr, 0.5), "r").data]
    assert "keeps its readings (crash)" in names
    config = json_safe(plan_to_config(plan))
    text = summary_text(config, "lacuna_backup.json")
    rebuilt = len(plan.sensors) - len(plan.backup_sensors) - len(plan.kept_sensors)
    assert ("rebuilt from them" in text) == (rebuilt > 0), text
    # the Plan table says the same: no error bound, where a bound below eps was shown
    from ui.plans import backup_table
    from ui.savings import display_table

    shown = display_table(backup_table(plan), None).set_index("sensor")["model error bound"]
    for s in plan.kept_sensors:
        assert shown[s] == "none (keeps readings)"
    for s in set(plan.sensors) - set(plan.kept_sensors) - set(plan.backup_sensors):
        assert shown[s] != "none (keeps readings)"
