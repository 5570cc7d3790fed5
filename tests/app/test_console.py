"""The operator's console: number formatting, background jobs, the live dashboard."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from engine.disorder import DisorderReport, MethodReport
from engine.errors import Cancelled, ParameterError
from engine.live.metrics import BatchPoint
from engine.live.status import FeedProgress, PipelineStatus, StatusBoard
from engine.planning import make_plan
from tests.app.apphelpers import metric, settle, texts
from tests.app.test_app_live import FakeManager
from ui import (
    background,
    charts,
    dashboard,
    disorder,
    exporting,
    graph,
    panels,
    plans,
    resources,
    shell,
)
from ui.format import format_money, format_percent, format_quantity, plural, span
from ui.jobs import JobRunner

pytestmark = pytest.mark.app


@pytest.mark.parametrize(
    ("x", "unit", "text"),
    [
        (0, "B", "0 B"),
        (999, "B", "999 B"),
        (1234, "B", "1.23 kB"),
        (2.65e-6 * 1e9, "B", "2.65 kB"),
        (16_300_000, "", "16.3 M"),
        (5e12, "B", "5 TB"),
        (0.0123, "", "0.0123"),
        (8.03e-11, "", "< 0.001"),
        (-2500, "B", "-2.5 kB"),
        (999.96, "", "1000"),
        (None, "B", "n/a"),
    ],
)
def test_format_quantity_never_uses_scientific_notation(x, unit, text):  # type: ignore[no-untyped-def]
    assert format_quantity(x, unit) == text
    assert "e-" not in text and "e+" not in text


def test_percent_money_plural_and_span() -> None:
    assert format_percent(8.03e-11) == "< 0.1 %" and format_percent(8.03e-11, 2) == "< 0.01 %"
    assert format_percent(0.4167) == "41.7 %"
    assert format_percent(0.0) == "0.0 %" and format_percent(1.0) == "100.0 %"
    # a rate that is not 0 or 1 never reads as one: one miss in 3,600 windows, one hit
    assert format_percent(1 / 3600) == "< 0.1 %" and format_percent(0.0004, 0) == "< 1 %"
    assert format_percent(1 - 1 / 3600) == "> 99.9 %" and format_percent(0.996, 0) == "> 99 %"
    assert format_percent(0.0005) == "0.1 %" and format_percent(0.9994) == "99.9 %"
    assert format_money(2.65e-6) == "< $0.01" and format_money(1234.5) == "$1,234.50"
    assert plural(1, "window") == "1 window" and plural(2, "window") == "2 windows"
    assert plural(3, "micro-batch", "micro-batches") == "3 micro-batches"
    assert span(2700, 2699) == "no readings"
    assert span(7, 7) == "reading 7" and span(7, 9) == "readings 7..9 (3)"


def test_a_job_reports_progress_and_cancels_at_its_next_progress_call() -> None:
    runner = JobRunner()
    gate, steps = threading.Event(), []

    def work(progress):  # type: ignore[no-untyped-def]
        for i in range(1000):
            progress(i / 1000, f"step {i}")
            steps.append(i)
            gate.wait(0.01)
        return "finished"

    job = runner.submit("k", "test", work)
    assert runner.submit("k", "test", work) is job  # one job per key
    time.sleep(0.1)
    assert job.snapshot().state == "running" and 0 < job.snapshot().fraction < 1
    job.cancel()
    assert job.join(5)
    view = job.snapshot()
    assert view.state == "cancelled" and "cancelled" in (view.error or "")
    assert len(steps) < 1000 and job.result is None


def test_job_outcomes_done_and_failed() -> None:
    runner = JobRunner()
    ok = runner.submit("a", "ok", lambda progress: 42)
    bad = runner.submit("b", "bad", lambda progress: (_ for _ in ()).throw(ParameterError("eps")))
    assert runner.wait_all(5)
    assert ok.state == "done" and ok.result == 42 and ok.snapshot().fraction == 1.0
    assert bad.state == "failed" and bad.snapshot().error == "eps"
    runner.forget("a")
    assert runner.get("a") is None
    assert issubclass(Cancelled, Exception)


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def point(i: int, rows: int, duration: float) -> BatchPoint:
    return BatchPoint(
        at=(T0 + timedelta(seconds=i)).isoformat(), run=0, batch_id=i, input_rows=rows,
        rows_per_second=float(rows), duration_ms=duration, backup_rows=20,
        backup_bytes=640, store_ms=12.0, backlog=0, shadow_pooled=0.01 * i,
        shadow_worst=(("s1", 0.02 * i),), windows=1,
    )  # fmt: skip


def points(n: int, rows: int = 100, duration: float = 300.0) -> list[BatchPoint]:
    return [point(i, rows, duration) for i in range(n)]


def running(landed: int, processed: int) -> PipelineStatus:
    feed = FeedProgress(readings=landed, total_readings=10_000)
    return PipelineStatus(state="running", input_rows=processed, feed=feed)


def test_status_levels_like_a_back_pressure_view() -> None:
    pts = points(5)
    assert dashboard.status_level(running(600, 500), pts, 1.0).name == "OK"
    behind = dashboard.status_level(running(1000, 500), pts, 1.0)
    assert behind.name == "behind" and "500 readings waiting" in behind.reason
    slow = dashboard.status_level(running(500, 500), points(5, duration=2500.0), 1.0)
    assert slow.name == "behind" and "2,500 ms" in slow.reason
    failed = PipelineStatus(state="failed", last_error="simulated failure of run 0")
    assert dashboard.status_level(failed, pts, 1.0) == dashboard.Level(
        "failing", "simulated failure of run 0"
    )
    assert dashboard.status_level(PipelineStatus(), [], 1.0).name == "idle"


def test_history_summary_has_min_avg_max_of_backups_and_recoveries() -> None:
    board = StatusBoard(lambda: T0)
    board.mark("recovery", "approx: 14 lost rows rebuilt", seconds=0.8, rows=140)
    board.mark("recovery", "approx: 3 lost rows rebuilt", seconds=1.6, rows=30)
    table = dashboard.history_summary(points(4), board.history.events()).set_index("")
    assert table.loc["backup readings per batch", "count"] == 4
    assert table.loc["backup bytes per batch", "avg"] == "640 B"
    assert table.loc["recovery time (s)", "min"] == "0.8"
    assert table.loc["recovery time (s)", "max"] == "1.6"
    assert table.loc["recovery readings read", "avg"] == "85"


def test_dashboard_draws_the_series_and_history(app, monkeypatch):  # type: ignore[no-untyped-def]
    manager = FakeManager("running")
    for p in points(6):
        manager.board.history.append(p)
    manager.board.mark("replan", "Changping_TEMP over delta: widened to 3 sensors")
    monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    body = texts(app)
    assert "Over time (6 micro-batches)" in body
    assert "Backup and recovery history" in body
    assert len(app.get("plotly_chart")) == 1  # no disorder panel without K
    summary = app.dataframe[0].value
    assert summary.set_index("").loc["backup readings per batch", "count"] == 6
    assert "run None" not in body


@pytest.mark.parametrize(("trigger", "level"), [(0.6, "behind"), (1.0, "OK"), (0.0, "OK")])
def test_the_live_page_compares_batches_with_the_querys_own_trigger(app, monkeypatch, trigger,
                                                                    level):  # type: ignore[no-untyped-def]  # fmt: skip
    """Batches of 1.5 s are behind a 0.6 s trigger (a crash-contract replay's) and not a
    1 s one; batches run back to back (0) have no trigger to fall behind."""
    manager = FakeManager("running")
    manager._status = PipelineStatus(state="running", mode="approx", run=0, batches=6,
                                     trigger_seconds=trigger)  # fmt: skip
    for p in points(6, duration=1500.0):
        manager.board.history.append(p)
    monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
    app.switch_page("pages/live.py").run()
    assert not app.exception and not app.error
    said = [t for t in texts(app).splitlines() if t.startswith(f"**{level}** — ")]
    assert said, texts(app)
    if level == "behind":
        assert "batches take 1,500 ms, more than 2x the 0.6 s trigger" in said[0]


def test_every_page_draws_the_same_titled_navigation(app):  # type: ignore[no-untyped-def]
    for name in ("tune", "live"):
        app.switch_page(f"pages/{name}.py").run()
        links = app.get("page_link")
        assert [link.proto.label for link in links] == [p.title for p in shell.PAGES]


def test_plan_page_numbers_agree_with_the_plan_and_fleet_inputs(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/plan.py").run())
    app.number_input(key="w_fleet_sites").set_value(500).run()
    assert not app.exception and not app.error
    backed = metric(app, "Backed up")
    costs = next(d.value for d in app.dataframe if "strategy" in d.value.columns)
    table = costs.set_index("strategy")
    # each contract's row prices its own plan: this crash plan's, and the same query's range
    # plan made directly (not a cached crash preview: 2 of 6 where the range plan backs up 3)
    data, params = app.session_state["_planning_data"], app.session_state["params"]
    assert params.exposure is not None
    assert table.loc["crash contract", "readings persisted"].startswith(backed_fraction(backed))
    whole = make_plan(data.history, params.with_query(exposure=None), run_backtest_now=False)
    assert (
        table.loc["range contract", "readings persisted"] == f"{100 * whole.backup_fraction:.1f} %"
    )
    assert table.loc["full backup", "readings persisted"] == "100.0 %"
    assert "3,000 sensors every" in texts(app)  # 6 sensors x 500 sites
    for line in ("$ storage", "$ write bandwidth", "$ requests", "$ compute", "executors"):
        assert line in table.columns


def backed_fraction(backed: str) -> str:
    k, n = (int(x) for x in backed.split(" of "))
    return f"{100 * k / n:.1f} %"


def test_tune_marker_equals_the_headline(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/tune.py").run())
    backed = metric(app, "Backed up")
    eps_chart = app.get("plotly_chart")[0]
    spec = json.loads(eps_chart.proto.spec)
    marker = next(t for t in spec["data"] if t.get("name", "").startswith("current plan"))
    assert f"{marker['y'][1]:.1f} %" == backed_fraction(backed)
    curve = next(t for t in spec["data"] if t.get("name") == "model projection")
    i = min(range(len(curve["x"])), key=lambda k: abs(curve["x"][k] - marker["x"][1]))
    assert curve["y"][i] == pytest.approx(marker["y"][1])  # the curve passes through it (greedy)


def test_clusters_separate_unrelated_groups_and_layout_keeps_them_apart() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(size=(400, 3))
    x = np.column_stack([base[:, g] + 0.1 * rng.normal(size=400) for g in (0, 0, 0, 1, 1, 2, 2, 2)])
    corr = graph.correlation(np.cov(x, rowvar=False))
    labels = graph.clusters(corr)
    groups = [labels[:3], labels[3:5], labels[5:]]
    assert all(len(set(g.tolist())) == 1 for g in groups)
    assert len({int(g[0]) for g in groups}) == 3
    pos = graph.cluster_layout(corr, labels)
    within = max(np.linalg.norm(pos[i] - pos[j]) for i in range(3) for j in range(3))
    between = min(np.linalg.norm(pos[i] - pos[j]) for i in range(3) for j in range(3, 8))
    assert within < between


def test_disorder_page_keeps_its_preset_and_says_when_a_simpler_buffer_is_as_good(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/disorder.py").run())
    pareto = next(p for p in disorder.PRESETS if p.startswith("Pareto"))
    settle(app.selectbox(key="w_delays").set_value(pareto).run())
    assert not app.exception and not app.error
    report_text = app.info[0].value
    table = app.dataframe[0].value.set_index("method")
    none_ok = table.loc["no buffer", "provisional accuracy"] >= 0.95
    faster = (
        table.loc["no buffer", "avg latency (h)"]
        <= table.loc["ours (adaptive K)", "avg latency (h)"]
    )
    assert ("no buffer meets the target" in report_text) == (none_ok and faster)
    assert "heavier delays" not in report_text
    app.switch_page("pages/graph.py").run()
    settle(app.switch_page("pages/disorder.py").run())
    assert app.selectbox(key="w_delays").value == pareto


def test_verdict_names_every_simpler_buffer_that_is_as_good() -> None:
    def method(acc: float, latency: float) -> MethodReport:
        return MethodReport(
            avg_latency_s=latency, avg_k_s=0.0, max_k_s=0.0, provisional_accuracy=acc,
            final_accuracy=1.0, final_exact=1.0, corrections=3, batch_runs=1, reopened_final=0,
            late_tuples=0, late_ratio=0.0, mean_coverage=1.0, k_over_time=[],
            cumulative_accuracy=[], alpha_over_time=[],
        )  # fmt: skip

    methods = {
        "ours": method(0.97, 3600.0), "mp_kslack": method(0.99, 7200.0),
        "fixed_watermark": method(0.90, 1800.0), "no_buffer": method(0.99, 10.0),
    }  # fmt: skip
    report = DisorderReport(parameters={}, stream={}, lambda_thr=0.5, methods=methods)
    lines = disorder.verdict(report, 0.05)
    assert "50 % of MP-K-slack's" in lines[0] and "3 corrections" in lines[0]
    assert any("no buffer meets the target" in line for line in lines)
    assert not any("fixed watermark meets" in line for line in lines)
    assert lines[-1] == "Below the target: fixed watermark 90.0 %."
    # a target beyond one decimal is said with the accuracies' digits, never rounded up
    # to 100 % beside an accuracy that meets it
    methods["ours"] = method(0.9996, 3600.0)
    report = DisorderReport(parameters={}, stream={}, lambda_thr=0.5, methods=methods)
    tight = disorder.verdict(report, 0.0005)
    assert tight[0].startswith("Ours: provisional accuracy 99.96 % (target 99.95 %)")
    assert tight[-1] == "Below the target: no buffer 99.00 %, fixed watermark 90.00 %."
    # windows closed by the replay's end are said, and a latency none of the others gives
    # is "n/a", never "nan s" or "nan %"
    methods["ours"] = replace(method(0.99, float("nan")), flush_closed_windows=4)
    report = DisorderReport(parameters={}, stream={}, lambda_thr=0.5, methods=methods)
    ended = disorder.verdict(report, 0.05)
    assert "at n/a average latency;" in ended[0] and "nan" not in " ".join(ended)
    assert ended[1].startswith("4 windows still open when the replay ended")
    assert disorder.summary(report)["closed at the end"].tolist() == [4, 0, 0, 0]


def test_the_shown_recover_command_works_outside_the_repository(app, tmp_path):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/export.py").run())
    config = next(c.value for c in app.code if c.language == "json")
    command = next(c.value for c in app.code if c.language == "bash")
    (tmp_path / "lacuna_backup.json").write_text(config)
    plan_data = app.session_state["_planning_data"]
    backup = json.loads(config)["backup_sensors"]
    frame = plan_data.history.select(backup).to_frame()
    frame.to_csv(tmp_path / exporting.BACKUP_CSV, index=False)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 720
    assert (tmp_path / "all_sensors.csv").exists()


def test_a_tumbling_window_stays_tumbling_when_the_window_changes(app):  # type: ignore[no-untyped-def]
    app.switch_page("pages/tune.py").run()
    assert app.session_state["params"].slide is None
    app.number_input(key="w_window").set_value(48).run()
    assert app.number_input(key="w_slide").value == 48
    assert app.session_state["params"].window == 48 and app.session_state["params"].slide is None
    app.number_input(key="w_slide").set_value(12).run()  # now sliding: it stays sliding
    app.number_input(key="w_window").set_value(36).run()
    assert app.session_state["params"].slide == 12


def test_paper_method_on_many_sensors_warns_first_and_never_drives_the_curves(app, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(panels, "PAPER_WARN_N", 4)  # the small sample has 6 sensors chosen
    app.switch_page("pages/tune.py").run()
    app.selectbox(key="w_method").set_value("paper").run()
    assert any("paper" in w.value and "minutes" in w.value for w in app.warning)
    assert not app.get("plotly_chart")  # nothing ran yet
    settle(app.button(key="confirm_paper").click().run())
    assert not app.exception and not app.error
    assert "paper" in texts(app) and app.get("plotly_chart")
    data, params = app.session_state["_planning_data"], app.session_state["params"]
    plan = plans.preview_plan(data, params, resources.plan_cache())
    curves = plans.whatif_curves(data, plan, resources.plan_cache())
    assert plan.parameters.method == "paper" and curves.method == "greedy"
    assert curves.now == plan.backup_fraction


def test_log_axis_ticks_are_one_two_five() -> None:
    assert charts.log_ticks(0.125, 8.0) == [0.2, 0.5, 1.0, 2.0, 5.0]
    assert charts.log_ticks(0.001, 0.3) == [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2]


def test_the_runner_forgets_old_finished_jobs() -> None:
    runner = JobRunner(keep=3)
    for i in range(6):
        runner.submit(i, "quick", lambda progress: None)
        assert runner.wait_all(5)
    kept = [i for i in range(6) if runner.get(i) is not None]
    assert kept == [3, 4, 5]


def test_a_backtest_whose_plan_fell_out_of_the_cache_runs_again(app):  # type: ignore[no-untyped-def]
    """A done backtest whose plan the shared LRU evicted is measured again: the page
    never shows a preview for good with a finished job behind it."""
    measured = "Plan measured by a rolling-origin backtest"
    at = settle(app.switch_page("pages/tune.py").run())
    assert measured in texts(at)
    cache = resources.plan_cache()
    for i in range(cache.capacity):  # what newer plans of other sessions do to the LRU
        cache.put(("other session", i), object())
    at = settle(at.run())
    assert measured in texts(at)


def test_a_lost_full_rerun_is_asked_for_again_until_a_full_run_comes(monkeypatch):  # type: ignore[no-untyped-def]
    """A fragment's rerun request can be lost: it is repeated every RERUN_RETRY_S until
    the page's full run says it has drawn the new state, and not after."""
    asked: list[float] = []
    monkeypatch.setattr(background.st, "session_state", {})
    monkeypatch.setattr(background.st, "rerun", lambda scope: asked.append(scope))
    t, wait = 100.0, background.RERUN_RETRY_S
    background.drawn("w")
    background.rerun_app("w", t)
    background.rerun_app("w", t + wait / 2)  # the first may still come
    background.rerun_app("w", t + wait)  # it did not: ask again
    assert asked == ["app", "app"]
    background.drawn("w")  # a full run came
    background.rerun_app("w", t + wait + 0.1)  # a new change reruns at once
    assert len(asked) == 3
