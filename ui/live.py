"""Live pipeline glue: start/stop, the polling status panel, failure and recovery report.

The pipeline runs in the process-wide manager (``ui.resources``), so it outlives
page switches, refreshes and sessions. This module never calls ``st.*`` from a
background thread: the status panel is a fragment that polls ``manager.status()``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from engine.data import SensorHistory
from engine.disorder import parse_delays
from engine.errors import EngineError, PipelineError
from engine.live import (
    AuditLog,
    Disorder,
    PipelineOptions,
    PipelinePaths,
    PipelineStatus,
    RecoveryReport,
    ReplaySplit,
    StreamSpec,
    changes,
    feed_within_exposure,
    find_leftovers,
    replanning_monitor,
    split_for_replay,
    start_live,
)
from engine.planning import BackupPlan, PlanParameters
from ui import access, background, plans, resources
from ui.format import NOT_THIS_RUN, pct, shadow_counted
from ui.panels import LIVE_STATES, QUIET
from ui.plans import PlanningData

RATES = (1, 2, 5, 10, 20, 50, 100)  # history rows replayed per second
# The replay speed a page starts with: on two cores a crash-contract batch (a few rows)
# takes about 0.6 s, so at 10 rows/s and an exposure of 6 rows the pipeline fell behind.
DEFAULT_RATE = 5
TRIGGER_HEADROOM = 2.0  # batches may run this many times as fast as the feed needs
ACTIVE = ("running", "failed", "recovering", "error")  # Start off, Stop on
PENDING = "_live_pending"  # the last report still waits for windows
ASKING = "_live_leftovers"  # Start was pressed while an earlier run's files are there
LEFTOVER_CHOICES = {
    "Resume it (continue its checkpoint and backup)": "resume",
    "Archive it (move it to archive/<time>/), then start afresh": "archive",
    "Delete it, then start afresh": "delete",
}


def session_id() -> str:
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "local"


def plan_signature(plan: BackupPlan) -> str:
    return f"{plan.data_fingerprint[:19]}|{','.join(plan.backup_sensors)}|{plan.parameters}"


DISORDER_MEAN_READINGS = 2.0  # mean injected arrival delay, in sampling intervals


def replay_split(data: PlanningData) -> ReplaySplit:
    """Plan on the first half of the data, replay the second half (time-consistent)."""
    return split_for_replay(len(data.history.times))


def live_plan(data: PlanningData, params: PlanParameters) -> tuple[SensorHistory, BackupPlan]:
    """The replayed rows and the measured plan fitted on the rows before them (cached)."""
    split = replay_split(data)
    prefix = PlanningData(split.fit(data.history), f"{data.key}|fit{split.fit_rows}")
    plan = plans.measure_plan(prefix, params, resources.plan_cache())
    return split.replay(data.history), plan


def start(
    data: PlanningData,
    params: PlanParameters,
    mode: str,
    rows_per_second: int,
    disorder: bool = False,
    scheduled: bool = True,
    leftovers: str = "refuse",
) -> None:
    """Plan on the data's prefix, then stream the rows after it (blocks while Spark starts).

    With ``disorder``, readings arrive with exponential delays and the query runs the
    K-slack stage: provisional results, corrections as late readings land, final ones.
    An earlier run's files are handled as ``leftovers`` says (never deleted unasked).
    The plan is re-planned every horizon (its ``horizon_rows``) rows (unless ``scheduled``
    is off: then it expires) and on alerts of the live monitor.
    """
    history, plan = live_plan(data, params)
    manager, log = resources.pipeline_manager(), resources.pipeline_log()
    monitor = replanning_monitor(
        manager,
        data.history,
        plan,
        first_row=replay_split(data).fit_rows,
        every_rows=plan.horizon_rows,
    )
    monitor.scheduled = scheduled
    mean = DISORDER_MEAN_READINGS * plan.sampling_interval_s
    late = Disorder(parse_delays(f"exp:{mean:g}"), np.random.default_rng(0))
    spec = StreamSpec.from_plan(plan)
    rows, options = feed_within_exposure(spec, max(1, rows_per_second), PipelineOptions())
    batch = rows * options.max_files_per_trigger  # the most rows one micro-batch takes
    start_live(
        manager,
        history,
        spec,
        mode,
        pipeline_paths(),
        disorder=late if disorder else None,
        monitor=monitor,
        speed=float(rows_per_second) * plan.sampling_interval_s,
        rows_per_file=rows,
        options=replace(options, trigger_seconds=trigger_seconds(batch, rows_per_second)),
        leftovers=leftovers,
    )
    with log.lock:
        log.owner = session_id()
        log.started = {
            "mode": mode,
            "at": datetime.now(UTC).strftime("%H:%M:%S UTC"),
            "signature": plan_signature(plan),
            "rows": str(len(history.times)),
            "split": replay_split(data).describe(data.history, plan.history_rows),
            "sensors": str(len(plan.sensors)),
            "source": str(history.report.source),
        }
        log.history, log.plan, log.monitor = history, plan, monitor
        log.data_key = data.key


def trigger_seconds(batch_rows: int, rows_per_second: int) -> float:
    """The replay's trigger: each second, or ``TRIGGER_HEADROOM`` times as often as
    batches of at most ``batch_rows`` rows must run to keep up with the replay speed
    (a crash-contract plan's batches are cut to its exposure:
    ``engine.live.exposure.feed_within_exposure``), never more than 5 times a second.

    Why the headroom: with batches capped, a trigger of exactly ``batch_rows / speed``
    processes at most the feed's own rate, so the backlog of Spark's start-up (seconds
    of feed) stayed for the whole run and the page said "behind" while every batch
    kept pace."""
    return max(0.2, min(1.0, batch_rows / (TRIGGER_HEADROOM * max(1, rows_per_second))))


def plan_running(plan: BackupPlan) -> BackupPlan:
    """The plan the live pipeline runs with while one is active (started on other data or
    with other settings, maybe from another session: its delta and contract are the ones
    its status is judged by); else ``plan``, this session's, which the next start uses."""
    log, manager = resources.pipeline_log(), resources.pipeline_manager()
    if log.plan is None or manager.status().state not in LIVE_STATES:
        return plan
    in_force = None
    if log.monitor is not None:  # the plan of the version the stream runs with now
        in_force = log.monitor.plan_for(manager.spec_in_force().linear_map)
    return in_force or log.plan


def contract_note(plan: BackupPlan) -> None:
    """Which contract covers which failure of this run, and what makes it hold."""
    m = plan.parameters.exposure
    home = pipeline_paths().root
    if m is None:
        st.caption(
            "Range contract: this plan's figures are for whole windows rebuilt, which covers "
            "either failure below. Set an exposure on Tune to plan for the loss of one "
            "micro-batch instead (more sensors can be left out)."
        )
        return
    if resources.home_fallback() is not None:  # the sidebar says why and what to do
        st.caption(
            f"Range contract for a restart: this plan is for the crash contract (exposure "
            f"{m} row{'' if m == 1 else 's'}), but LACUNA_HOME is not writable, so the "
            f"window state and the backup live in the temporary folder {str(home)!r}, which "
            "a restarted server does not find (it makes a new one). A crash of the pipeline "
            "while the server runs (Simulate failure: crash) keeps them, and the crash "
            "contract's figure holds for it; a crash that ends the server loses them as the "
            "loss of the machine does: every open window is rebuilt, and only the range "
            "contract's figure holds. Make LACUNA_HOME writable (see the sidebar) for the "
            "crash contract's in both."
        )
        return
    st.caption(
        f"Crash contract, exposure {m} row{'' if m == 1 else 's'}: the replay commits at most "
        f"{m} rows a micro-batch, a batch holding more (a backlog) backs up every sensor, "
        "and after a recovery every sensor is backed up until the windows open at the failure "
        f"close. The window state and the backup live under {str(home)!r} on this machine: a "
        "crash of the pipeline keeps them (the crash contract's figure holds); the loss of "
        "the machine takes the state, every open window is rebuilt, and the range "
        "contract's figure is the one that holds. With arrival delays, the readings the "
        "out-of-order stage holds back at a commit are lost with a crash too: the recovery "
        "report counts their rows and says which contract covers the loss."
    )


def pipeline_paths() -> PipelinePaths:
    return PipelinePaths(resources.work_dir() / "pipeline")


def start_button(
    column: Any, data: PlanningData, params: PlanParameters, mode: str, rate: int,
    disorder: bool, running: bool, scheduled: bool,
) -> None:  # fmt: skip
    """Start; when an earlier (stopped or crashed) run's files are there, ask first."""
    if column.button("Start", type="primary", disabled=running, key="start_pipeline"):
        if find_leftovers(pipeline_paths()).any:
            st.session_state[ASKING] = True
        else:
            _start_now(data, params, mode, rate, disorder, scheduled, "refuse")
    if st.session_state.get(ASKING) and not running:
        _ask_leftovers(data, params, mode, rate, disorder, scheduled)
    elif not running and find_leftovers(pipeline_paths()).any:
        st.caption(
            f"An earlier run's backup is in {pipeline_paths().root}: Start offers to resume, "
            "archive or delete it."
        )


def _start_now(
    data: PlanningData, params: PlanParameters, mode: str, rate: int, disorder: bool,
    scheduled: bool, action: str,
) -> None:  # fmt: skip
    if action in ("archive", "delete"):  # recorded before anything is moved or deleted
        audit_log().record(action, access.current_user(), f"earlier run in {pipeline_paths().root}")
    with st.status(
        "Starting Spark and the streaming query (the first start takes about half a minute)..."
    ) as box:
        try:
            start(data, params, mode, rate, disorder, leftovers=action, scheduled=scheduled)
        except EngineError:  # e.g. a refused resume: the page's one error line says why
            box.update(label="Not started", state="error", expanded=False)
            raise
        box.update(label="Pipeline running", state="complete")
    st.session_state.pop(ASKING, None)
    st.rerun()


def _ask_leftovers(
    data: PlanningData, params: PlanParameters, mode: str, rate: int, disorder: bool,
    scheduled: bool,
) -> None:  # fmt: skip
    found = find_leftovers(pipeline_paths())
    if not found.any:
        st.session_state.pop(ASKING, None)
        return
    st.warning(
        f"{pipeline_paths().root} holds an earlier run (store: "
        f"{'yes' if found.store else 'no'}, Parquet backup: {'yes' if found.backup else 'no'}, "
        f"checkpoint: {'yes' if found.checkpoint else 'no'}, "
        f"{found.landed_files} landed file(s)). If it crashed, this is its backup: "
        "nothing is deleted unless you say so."
    )
    choices = [c for c, a in LEFTOVER_CHOICES.items() if a != "resume" or found.resumable]
    if disorder:  # a delayed feed is not a prefix of the history: it cannot be continued
        choices = [c for c in choices if LEFTOVER_CHOICES[c] != "resume"]
    action = LEFTOVER_CHOICES[st.radio("What to do with it", choices, key="w_leftovers")]
    confirmed = action != "delete" or st.checkbox(
        "Yes, delete that backup for good", key="w_confirm_delete"
    )
    go, cancel = st.columns([1, 1])
    if go.button("Continue", type="primary", disabled=not confirmed, key="leftovers_go"):
        _start_now(data, params, mode, rate, disorder, scheduled, action)
    if cancel.button("Cancel", key="leftovers_cancel"):
        st.session_state.pop(ASKING, None)
        st.rerun()


def audit_log() -> AuditLog:
    """Stop, Archive and Delete with who and when, under ``LACUNA_HOME`` (``engine.live.audit``)."""
    return AuditLog(resources.work_dir())


RECOVERY_JOB = "live-recovery"  # the background job of Simulate failure / Recover


def stop() -> None:
    """Stop the pipeline: recorded first (who, when), and marked on the run's time axis.
    A Simulate failure / Recover job running in the background is cancelled first: the
    manager's lock makes Stop wait for the step in progress, and a recovery not yet
    begun then never starts on the stopped pipeline (it would fail there)."""
    if (job := background.runner().get(RECOVERY_JOB)) is not None and job.state == "running":
        job.cancel()
    manager = resources.pipeline_manager()
    who = access.current_user()
    run = manager.status().run
    audit_log().record("stop", who, f"run {run}")
    manager.board.mark("stop", f"stopped by {who}")
    manager.stop()


def audit_history() -> None:
    """The run history's destructive actions: who stopped, archived or deleted, when."""
    entries = audit_log().entries()
    with st.expander(f"Stops, archives and deletions ({len(entries)})", expanded=False):
        if not entries:
            st.caption("None yet. Each Stop, Archive and Delete is recorded with who and when.")
            return
        st.table(pd.DataFrame([e.to_dict() for e in entries]))


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
        "no rate yet"
        if s.input_rows_per_second is None
        else f"{s.input_rows_per_second:,.0f}/s arriving",
        **QUIET,
    )
    c[3].metric(
        "Backup readings stored",
        f"{s.backup_rows:,}",
        f"{s.backup_bytes / 1e3:,.1f} kB written",
        **QUIET,
        help="As each micro-batch wrote them; compaction then keeps fewer bytes at rest "
        "(the Plan page's cost model reads the size at rest).",
    )
    c[4].metric(
        "Windows emitted",
        f"{s.windows_emitted:,}",
        help="Windows with a result, live or recovered, each counted once",
    )
    # the plan in force, judged on its own windows (as the status line and the monitor)
    mine = _in_force(s)
    c[5].metric(
        "Shadow miss rate, worst sensor",
        pct(mine.get("worst_rate")),
        f"version {s.plan_version} in force: {_worst_counted(mine, s.shadow_contract)}; "
        f"delta {100 * delta:g} %",
        **QUIET,
        help=SHADOW_HELP[s.shadow_contract]
        + " The live measure of the guarantee, for the plan in force on the windows read "
        "under it alone (every version's figures are in the version table); a window "
        "holding rows a recovery rebuilt is not measured."
        + (
            f" This run is mode {s.mode}: {NOT_THIS_RUN[s.mode]}." if s.mode in NOT_THIS_RUN else ""
        ),
    )
    feed = s.feed
    if feed.total_readings:
        done = feed.readings / feed.total_readings
        st.progress(
            min(1.0, done),
            text=f"feed: {feed.readings:,} of {feed.total_readings:,} readings replayed"
            + (" (stopped)" if feed.stopped else " (done)" if feed.done else ""),
        )
    if s.last_error:
        show = {"failed": st.warning, "error": st.error}.get(s.state, st.info)
        show(s.last_error)
    if s.last_alert:
        st.warning(f"Live monitor: {s.last_alert}")
    if s.full_backup_batches:
        st.info(
            f"{s.full_backup_batches:,} micro-batch(es) backed up every sensor to keep the "
            f"crash contract; the latest: {s.last_full_backup}."
        )
    plan_versions(s)


def plan_versions(s: PipelineStatus) -> None:
    """The plan in force against its horizon, its miss rate and the overall one, and
    every version of the plan with what changed and why."""
    if s.plan_version is None:
        return
    mine = _in_force(s)
    horizon = f"{s.rows_under_plan} of {s.replan_every_rows} rows" if s.replan_every_rows else ""
    c = st.columns(4)
    c[0].metric("Plan version", s.plan_version, horizon or None, **QUIET)
    c[1].metric("Miss rate, this version", pct(mine.get("worst_rate")),
                _worst_counted(mine, s.shadow_contract), **QUIET)  # fmt: skip
    c[2].metric("Miss rate, overall", pct(s.shadow_worst_rate), _overall_counted(s),
                **QUIET)  # fmt: skip
    c[3].metric("Scheduled re-planning", "on" if s.scheduled_replanning else "off")
    if s.plan_expired:
        st.error(
            f"The plan has expired: version {s.plan_version} has run {s.rows_under_plan} rows, "
            f"past its horizon of {s.replan_every_rows}, and scheduled re-planning is off."
        )
    rows = changes(resources.pipeline_manager().versions())
    if len(rows) > 1:
        st.caption(f"{len(rows)} plan versions (newest first): what each changed and why")
        table = pd.DataFrame(rows[::-1])
        table["miss rate (worst)"] = [
            pct(s.shadow_by_version.get(r["id"], {}).get("worst_rate")) for r in rows[::-1]
        ]
        for name in table.columns[table.isna().any()]:  # None reads as "None": say nothing
            table[name] = ["" if _missing(v) else str(v) for v in table[name]]
        st.dataframe(table, hide_index=True)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def mark_drawn() -> None:
    """Record the state this full run of the page is drawn with (``status_polled``
    reruns the page when it changes)."""
    st.session_state[_DRAWN] = _watch(resources.pipeline_manager().status())
    background.drawn(_DRAWN)


_DRAWN = "_live_watch"  # the state the last full run of the page was drawn with


def _watch(s: PipelineStatus) -> tuple[object, ...]:
    # A new plan version reruns the page: its plan-of-record banner and the plan shown
    # are drawn by the full run, and stayed on the old version while the polled metric
    # showed the new one. A new restore reruns it: the recovery report is drawn by the
    # full run, and a crash and its recovery take about half a second, so a poll every
    # 1.5 s can see "running" before and after and nothing between. While recovered
    # windows are pending, each new window may finish one: rerun the page.
    pending = s.windows_emitted if st.session_state.get(PENDING) else None
    return (s.state, s.plan_version, s.restores, pending)


def status_polled(s: PipelineStatus, delta: float) -> None:
    """The status metrics of one polled snapshot ``s`` (the dashboard's fragment draws
    them with the rest, ``ui.dashboard.live_dashboard``); a change of what ``_watch``
    reads (state, plan version, restores) reruns the whole page (buttons, banner, report)."""
    status_metrics(s, delta)
    if _watch(s) != st.session_state.get(_DRAWN):
        background.rerun_app(_DRAWN)


def ownership_note() -> None:
    log = resources.pipeline_log()
    if log.owner and log.started and log.owner != session_id():
        st.info(
            f"This pipeline was started from another browser session at "
            f"{log.started.get('at')} (mode {log.started.get('mode')}): every session "
            "sees and controls the same pipeline."
        )


def split_note(data: PlanningData) -> None:
    """Which rows plan the stream and which are replayed (the running pipeline's, if any)."""
    log = resources.pipeline_log()
    running = resources.pipeline_manager().status().state in ACTIVE
    text = log.started.get("split") if running and log.started else None
    st.caption(
        "Time-consistent replay: "
        + (text or replay_split(data).describe(data.history))
        + ". The plan never sees the rows it is measured on."
    )


def replanning_switch(on: bool) -> None:
    """A running pipeline's scheduled re-planning, switched by a button that asks for the
    opposite of what the operator sees (``on``, the pipeline's own switch).

    A button, not a toggle: a click is an event the page handles once, and it names the
    state it asks for. A toggle's value is widget state the browser sends back with every
    run, a fragment's included; one run that drew the switch stale could send it back
    and switch re-planning off (or on) with nobody clicking.
    """
    st.button(
        "Pause scheduled re-planning" if on else "Resume scheduled re-planning",
        key="replan_switch",
        on_click=set_replanning,
        args=(not on,),
        help="Paused, the plan in force is kept and expires at its horizon; alerts of "
        "the live monitor still re-plan.",
    )


def set_replanning(enabled: bool) -> None:
    """The switch's callback: scheduled re-planning of the running pipeline on or off
    (nothing when the pipeline stopped, or runs without a schedule, since the page ran)."""
    manager = resources.pipeline_manager()
    status = manager.status()
    if status.state in ACTIVE and status.replan_every_rows:
        manager.set_replanning(enabled)


def replan_now() -> None:
    """An operator's re-plan: a fresh plan on the stream's recent rows (reason manual)."""
    if resources.pipeline_manager().replan_now():
        st.toast("Re-planning on the recent rows: the new plan takes effect at a micro-batch.")
    else:
        st.toast("A re-plan is already being computed.")


def _in_force(s: PipelineStatus) -> dict[str, Any]:
    """The shadow tally of the plan version in force, on its own windows ({}: none yet)."""
    return s.shadow_by_version.get(s.plan_version, {}) if s.plan_version is not None else {}


# What the shadow check measures of each closed window, by contract.
SHADOW_HELP = {
    "range": "Each closed window is also rebuilt whole from the backed-up sensors only and "
    "compared with the live result: a miss is a rebuilt aggregate off by more than eps.",
    "crash": "Each closed window is also scored against every m-row loss that could touch "
    "it (m the plan's exposure): the lost rows of the rebuilt sensors rebuilt from the "
    "backed-up ones (a max/min plan's kept sensors' left out), the rest as read; a window "
    "counts the share of those losses that "
    "put a rebuilt aggregate more than eps off.",
}


def _overall_counted(s: PipelineStatus) -> str:
    """What the overall worst rate counts: its sensor's misses over its own measured
    windows, every version's (not every closed window: a backed-up sensor's, or one
    holding recovered rows, is not measured)."""
    if s.shadow_worst is None:
        return "no window yet"
    sensor, misses, windows = s.shadow_worst
    return f"worst, all versions: {sensor}: {shadow_counted(misses, windows, s.shadow_contract)}"


def _worst_counted(tally: dict[str, Any], contract: str) -> str:
    """What a version's worst shadow rate counts: its sensor, misses and windows."""
    if not tally.get("worst_sensor"):
        return "no window yet"
    counted = shadow_counted(tally.get("worst_misses", 0), tally.get("worst_windows", 0), contract)
    return f"{tally['worst_sensor']}: {counted}"
