"""Live pipeline glue: start/stop, the polling status panel, failure and recovery report.

The pipeline runs in the process-wide manager (``ui.resources``), so it outlives
page switches, refreshes and sessions. This module never calls ``st.*`` from a
background thread: the status panel is a fragment that polls ``manager.status()``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from engine.data import SensorHistory
from engine.delays import parse_delays
from engine.errors import PipelineError
from engine.plan import BackupPlan
from engine.stream.disorder_stage import DisorderStage
from engine.stream.live import replanning_monitor
from engine.stream.recovery import RecoveryReport
from engine.stream.spec import PipelineOptions, PipelinePaths, PipelineStatus, StreamSpec
from ui import resources
from ui.panels import QUIET, pct

RATES = (5, 10, 20, 50, 100)  # history rows replayed per second
POLL_SECONDS = 1.5
ACTIVE = ("running", "failed", "recovering")
PENDING = "_live_pending"  # the last report still waits for windows


def session_id() -> str:
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "local"


def plan_signature(plan: BackupPlan) -> str:
    return f"{plan.data_fingerprint[:19]}|{','.join(plan.backup_sensors)}|{plan.parameters}"


DISORDER_MEAN_READINGS = 2.0  # mean injected arrival delay, in sampling intervals


def start(
    history: SensorHistory,
    plan: BackupPlan,
    mode: str,
    rows_per_second: int,
    disorder: bool = False,
) -> None:
    """Start feeder + streaming query on ``history`` with ``plan`` (blocks while Spark starts).

    With ``disorder``, readings arrive with exponential delays and the query runs the
    K-slack stage: provisional results, corrections as late readings land, final ones.
    """
    manager, log = resources.pipeline_manager(), resources.pipeline_log()
    paths = PipelinePaths(resources.work_dir() / "pipeline")
    speed = float(rows_per_second) * plan.sampling_interval_s
    delays, stage_factory = None, None
    if disorder:
        delays, stage_factory = _disorder(history, plan)
    manager.start(
        history,
        StreamSpec.from_plan(plan),
        mode,
        paths,
        speed=speed,
        rows_per_file=max(1, rows_per_second),
        reset=True,
        delays=delays,
        stage_factory=stage_factory,
        options=PipelineOptions(trigger_seconds=1.0),
        monitor=replanning_monitor(manager, history, plan),
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


def _disorder(
    history: SensorHistory, plan: BackupPlan
) -> tuple[np.ndarray, Callable[[], DisorderStage]]:
    mean = DISORDER_MEAN_READINGS * plan.sampling_interval_s
    shape = (len(history.times), len(plan.sensors))
    delays = parse_delays(f"exp:{mean:g}").sample(shape[0] * shape[1], np.random.default_rng(0))
    p = plan.parameters

    def stage() -> DisorderStage:
        return DisorderStage.for_history(
            history.times, p.window, p.effective_slide, p.aggregate, eps_thr=p.eps,
            delta=p.delta, backup_sensors=plan.backup_sensors,
        )  # fmt: skip

    return np.asarray(delays, dtype=float).reshape(shape), stage


def stop() -> None:
    resources.pipeline_manager().stop()


def remember(report: RecoveryReport, log: resources.PipelineLog | None = None) -> None:
    """Keep the report per mode (``log`` given when called off the script thread)."""
    log = log or resources.pipeline_log()
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
    c = st.columns(3) + st.columns(3)  # two rows: six metrics do not fit at 1024 px
    run = f", run {s.run}" if s.run is not None else ""
    c[0].metric("State", s.state, f"mode {s.mode or '-'}{run}", **QUIET)
    c[1].metric(
        "Micro-batches",
        s.batches,
        f"{s.batch_duration_ms:.0f} ms last",
        **QUIET,
    )
    c[2].metric(
        "Readings in",
        f"{s.input_rows:,}",
        f"{s.processed_rows_per_second:,.0f}/s",
        **QUIET,
    )
    c[3].metric(
        "Backup rows stored",
        f"{s.backup_rows:,}",
        f"{s.backup_bytes / 1e3:,.1f} kB",
        **QUIET,
    )
    c[4].metric("Windows emitted", f"{s.windows_emitted:,}")
    c[5].metric(
        "Shadow miss rate",
        pct(s.shadow_worst_rate),
        f"worst; delta {delta:g}",
        **QUIET,
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
        st.warning(f"Live monitor: {s.last_alert}")
    log = resources.pipeline_manager().plan_log() if s.plan_changes else None
    if log is not None and len(log):
        st.caption(f"{len(log)} live re-plan(s): each widened the backup set (newest first)")
        st.dataframe(log.sort_values("at", ascending=False), hide_index=True)


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
