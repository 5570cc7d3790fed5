"""Live pipeline glue: start/stop, the polling status panel, failure and recovery report.

The pipeline runs in the process-wide manager (``ui.resources``), so it outlives
page switches, refreshes and sessions. This module never calls ``st.*`` from a
background thread: the status panel is a fragment that polls ``manager.status()``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from engine.data import SensorHistory
from engine.errors import PipelineError
from engine.plan import BackupPlan
from engine.reconstruct import window_aggregates
from engine.stream.recovery import RecoveryReport
from engine.stream.spec import PipelineOptions, PipelinePaths, PipelineStatus, StreamSpec
from ui import charts, resources
from ui.panels import pct

RATES = (5, 10, 20, 50, 100)  # history rows replayed per second
POLL_SECONDS = 1.5
ACTIVE = ("running", "failed", "recovering")
PENDING = "_live_pending"  # the last report still waits for windows


def session_id() -> str:
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "local"


def plan_signature(plan: BackupPlan) -> str:
    return f"{plan.data_fingerprint[:19]}|{','.join(plan.backup_sensors)}|{plan.parameters}"


def start(history: SensorHistory, plan: BackupPlan, mode: str, rows_per_second: int) -> None:
    """Start feeder + streaming query on ``history`` with ``plan`` (blocks while Spark starts)."""
    manager, log = resources.pipeline_manager(), resources.pipeline_log()
    paths = PipelinePaths(resources.work_dir() / "pipeline")
    speed = float(rows_per_second) * plan.sampling_interval_s
    manager.start(
        history,
        StreamSpec.from_plan(plan),
        mode,
        paths,
        speed=speed,
        rows_per_file=max(1, rows_per_second),
        reset=True,
        options=PipelineOptions(trigger_seconds=1.0),
    )
    with log.lock:
        log.owner = session_id()
        log.started = {
            "mode": mode,
            "at": datetime.now(UTC).strftime("%H:%M:%S UTC"),
            "signature": plan_signature(plan),
            "rows": str(len(history.times)),
            "sensors": str(len(plan.sensors)),
        }
        log.history, log.plan = history, plan


def stop() -> None:
    resources.pipeline_manager().stop()


def fail_and_recover() -> RecoveryReport:
    """Kill the query, discard what was not backed up, rebuild the lost windows."""
    manager = resources.pipeline_manager()
    with st.status("Simulating a failure...", expanded=True) as box:
        failed = manager.simulate_failure()
        st.write(failed.last_error or "query killed")
        box.update(label="Recovering the lost windows from the backup (Spark batch job)...")
        report = manager.recover()
        box.update(
            label=f"Recovered in {report.recovery_seconds:.2f} s", state="complete", expanded=False
        )
    remember(report)
    return report


def recover_only() -> RecoveryReport:
    report = resources.pipeline_manager().recover()
    remember(report)
    return report


def remember(report: RecoveryReport) -> None:
    log = resources.pipeline_log()
    with log.lock:
        log.reports[report.mode] = {
            "signature": log.started.get("signature"),
            "report": report.to_dict(),
        }


def last_report() -> RecoveryReport | None:
    """The last recovery, re-scored with the windows stored so far (None if none ran)."""
    try:
        return resources.pipeline_manager().report()
    except PipelineError:
        return None


def status_metrics(s: PipelineStatus, delta: float) -> None:
    c = st.columns(6)
    c[0].metric(
        "State", s.state, f"mode {s.mode or '-'}, run {s.run}", delta_color="off", delta_arrow="off"
    )
    c[1].metric(
        "Micro-batches",
        s.batches,
        f"{s.batch_duration_ms:.0f} ms last",
        delta_color="off",
        delta_arrow="off",
    )
    c[2].metric(
        "Readings in",
        f"{s.input_rows:,}",
        f"{s.processed_rows_per_second:,.0f}/s",
        delta_color="off",
        delta_arrow="off",
    )
    c[3].metric(
        "Backup rows stored",
        f"{s.backup_rows:,}",
        f"{s.backup_bytes / 1e3:,.1f} kB",
        delta_color="off",
        delta_arrow="off",
    )
    c[4].metric("Windows emitted", f"{s.windows_emitted:,}")
    c[5].metric(
        "Shadow miss rate",
        pct(s.shadow_worst_rate),
        f"worst; delta {delta:g}",
        delta_color="off",
        delta_arrow="off",
        help="Each closed window is also rebuilt from the backed-up sensors only and "
        "compared with the live result: the live measure of the guarantee.",
    )
    feed = s.feed
    if feed.total_readings:
        done = feed.readings / feed.total_readings
        st.progress(
            min(1.0, done),
            text=f"feed: {feed.readings:,} of {feed.total_readings:,} "
            f"readings replayed" + (" (done)" if feed.done else ""),
        )
    if s.last_error:
        (st.warning if s.state == "failed" else st.info)(s.last_error)
    if s.last_alert:
        st.warning(s.last_alert)


@st.fragment(run_every=POLL_SECONDS)
def status_panel(delta: float) -> None:
    """Polls the shared manager; a change of state reruns the whole page (buttons)."""
    s = resources.pipeline_manager().status()
    status_metrics(s, delta)
    # While recovered windows are pending, each new window may finish one: rerun the page.
    watch = (s.state, s.windows_emitted if st.session_state.get(PENDING) else None)
    seen = st.session_state.get("_live_watch")
    st.session_state["_live_watch"] = watch
    if seen is not None and seen != watch:
        st.rerun(scope="app")


def ownership_note() -> None:
    log = resources.pipeline_log()
    if log.owner and log.started and log.owner != session_id():
        st.info(
            f"This pipeline was started from another browser session at "
            f"{log.started.get('at')} (mode {log.started.get('mode')}): every session "
            "sees and controls the same pipeline."
        )


def _store_results(manager: object) -> pd.DataFrame | None:
    """Window results from the pipeline's store.

    Workaround: ``PipelineManager`` has no public accessor for the stored results,
    so this reads them through its store (read-only query, store-side locking).
    """
    reader = getattr(manager, "results", None)
    if callable(reader):
        return reader()
    store = getattr(manager, "_store", None)
    return None if store is None else store.read_results()


def recovery_frame(
    history: SensorHistory, report: RecoveryReport, sensor: str, margin: int = 8
) -> pd.DataFrame:
    """Truth, live and recovered aggregates of ``sensor`` around the lost windows."""
    if not report.window_ids:
        return pd.DataFrame(columns=["window_start", "truth", "live", "recovered"])
    lo, hi = min(report.window_ids) - margin, max(report.window_ids) + margin
    j = history.sensors.index(sensor)
    truth = window_aggregates(
        history.values[:, [j]], report.window, report.slide, report.aggregate
    )[:, 0]
    ids = np.arange(max(0, lo), min(len(truth) - 1, hi) + 1)
    frame = pd.DataFrame(
        {"window_id": ids, "window_start": history.times[ids * report.slide], "truth": truth[ids]}
    )
    results = _store_results(resources.pipeline_manager())
    for kind in ("live", "recovered"):
        values = pd.Series(dtype=float)
        if results is not None and len(results):
            rows = results[(results["sensor"] == sensor) & (results["kind"] == kind)]
            values = rows.groupby("window_id")["value"].last()
        frame[kind] = frame["window_id"].map(values)
    return frame


def lost_span(history: SensorHistory, report: RecoveryReport) -> tuple[object, object] | None:
    """From the first lost window's start to the end of the last window the failure hit."""
    first, last = report.lost_rows
    if last < first:
        return None
    ids = report.window_ids or (first // report.slide,)
    end = max(last, max(ids) * report.slide + report.window - 1)
    # Timestamps, not numpy datetime64: plotly shapes do not read the latter as dates.
    last_row = min(end, len(history.times) - 1)
    return pd.Timestamp(history.times[first]), pd.Timestamp(history.times[last_row])


def rebuilt_errors(report: RecoveryReport) -> np.ndarray:
    """Errors of the rebuilt (not backed-up) sensors over the recovered windows: (k,)."""
    if not report.errors:
        return np.zeros(0)
    errors = np.asarray(report.errors, dtype=float)
    cols = [i for i, s in enumerate(report.sensors) if s not in report.backup_sensors]
    return errors[:, cols].ravel()


def mode_table(plan: BackupPlan, current: RecoveryReport) -> pd.DataFrame:
    """approx vs full vs none: measured where that mode was run on this plan, else projected."""
    log = resources.pipeline_log()
    sig = plan_signature(plan)
    n, m = len(plan.sensors), len(plan.backup_sensors)
    stored = {"approx": m, "full": n, "none": 0}
    rows = []
    for mode in ("approx", "full", "none"):
        entry = log.reports.get(mode)
        rep = (
            current.to_dict()
            if mode == current.mode
            else (entry["report"] if entry and entry["signature"] == sig else None)
        )
        if rep is not None:
            rows.append(
                {
                    "mode": mode,
                    "figures": "measured",
                    "sensors stored": stored[mode],
                    "backup rows": rep["backup_rows"],
                    "windows lost": rep["windows_lost"],
                    "windows recovered": rep["windows_recovered"],
                    "max abs error": rep["max_abs_error"],
                    "violation rate": rep["violation_rate"],
                    "recovery s": rep["recovery_seconds"],
                }
            )
            continue
        scale = stored[mode] / max(m, 1)
        lost = current.windows_lost
        rows.append(
            {
                "mode": mode,
                "figures": "projected (not run)",
                "sensors stored": stored[mode],
                "backup rows": round(current.backup_rows * scale)
                if current.mode == "approx"
                else None,
                "windows lost": lost,
                "windows recovered": 0 if mode == "none" else lost,
                "max abs error": 0.0 if mode == "full" else None,
                "violation rate": 0.0 if mode == "full" else None,
                "recovery s": None,
            }
        )
    return pd.DataFrame(rows)


def pipeline_inputs(
    report: RecoveryReport, history: SensorHistory, plan: BackupPlan
) -> tuple[SensorHistory, BackupPlan] | None:
    """The data and plan the pipeline ran on (this session's may have changed since)."""
    log = resources.pipeline_log()
    if log.history is not None and log.plan is not None:
        return log.history, log.plan
    if set(report.sensors) <= set(history.sensors):
        return history, plan
    return None


def recovery_section(
    session_history: SensorHistory, session_plan: BackupPlan, report: RecoveryReport
) -> None:
    """The last recovery: figures, recovered vs true, errors vs eps, rates vs delta, modes."""
    inputs = pipeline_inputs(report, session_history, session_plan)
    if inputs is None:
        st.info("The last recovery ran on data this server no longer holds: start a new run.")
        return
    history, plan = inputs
    st.subheader(f"Recovery report (mode {report.mode})")
    c = st.columns(6)
    c[0].metric("Windows lost", report.windows_lost)
    c[1].metric(
        "Windows recovered",
        report.windows_recovered,
        f"{report.windows_pending} pending",
        delta_color="off",
        delta_arrow="off",
    )
    err = "n/a" if report.max_abs_error is None else f"{report.max_abs_error:.3g}"
    c[2].metric("Max abs error", err, f"eps {report.eps:g}", delta_color="off", delta_arrow="off")
    c[3].metric(
        "Violation rate",
        pct(report.violation_rate),
        f"delta {report.delta:g}",
        delta_color="off",
        delta_arrow="off",
    )
    c[4].metric("Recovery time", f"{report.recovery_seconds:.2f} s")
    c[5].metric(
        "Backup rows read",
        f"{report.backup_rows:,}",
        f"{report.backup_bytes / 1e3:,.1f} kB stored",
        delta_color="off",
        delta_arrow="off",
    )
    st.session_state[PENDING] = report.windows_pending > 0
    st.caption(
        f"{report.note}. Spark {report.spark_version}; lost readings "
        f"{report.lost_rows[0]}..{report.lost_rows[1]}."
    )
    if report.windows_recovered:
        rebuilt = [s for s in report.sensors if s not in report.backup_sensors]
        options = rebuilt + [s for s in report.sensors if s not in rebuilt]
        sensor = st.selectbox("Sensor", options, key="w_recovery_sensor")
        frame = recovery_frame(history, report, sensor)
        st.plotly_chart(
            charts.recovery_chart(frame, sensor, lost_span(history, report), report.eps)
        )
        left, right = st.columns(2)
        left.plotly_chart(charts.error_histogram(rebuilt_errors(report), report.eps))
        rates = {s: r for s, r in report.violation_rates.items() if s in rebuilt}
        right.plotly_chart(
            charts.violation_bars(
                rates,
                report.delta,
                f"Violation rate per rebuilt sensor ({report.windows_recovered} recovered windows)",
            )
        )
    elif report.windows_pending:
        st.info(
            f"{report.windows_pending} lost window(s) reach past the failure: the restarted "
            "query finishes them from the rebuilt rows, and this report updates when it does."
        )
    elif report.windows_lost == 0:
        st.info("No window was lost: the failure came between two committed batches.")
    st.subheader("approx vs full vs none")
    table = mode_table(plan, report)
    st.dataframe(table, hide_index=True)
    st.plotly_chart(charts.mode_bars(table))
    st.caption(
        "Measured rows come from runs of this plan in that mode; run the pipeline in "
        "another mode and fail it to measure the others."
    )
