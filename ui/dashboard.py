"""The live dashboard: the pipeline over time, its status level, backup and recovery history.

Reads the metrics history the engine keeps on the status board
(``engine.live.metrics``); a fragment redraws it every ``POLL_SECONDS``, so
series grow while the page is open and the panel stays visible during a
recovery (the recovery runs as a background job, ``fail_and_recover``).
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from engine.errors import EngineError
from engine.live import BatchPoint, PipelineEvent, PipelineStatus, Restore, summarise
from engine.planning.verdict import rejected
from ui import background, live, resources, timeline
from ui.format import NOT_THIS_RUN, format_quantity, plural, shadow_counted, span

POLL_SECONDS = 1.5  # the Live page redraws its status this often
FIGURES = "_dashboard_figures"  # session state: the history the figures were drawn from
RECOVERY_JOB = live.RECOVERY_JOB
BEHIND_BATCHES = 3.0  # backlog of more than this many batches' input: behind
SLOW_TRIGGERS = 2.0  # median batch duration over this many trigger intervals: behind


@dataclass(frozen=True)
class Level:
    """The status an operator acts on: ``OK``, ``at risk``, ``behind``, ``failing`` or
    ``idle``, and why (the guarantee first)."""

    name: str
    reason: str


def points_frame(points: Sequence[BatchPoint]) -> pd.DataFrame:
    """One row per batch, a ``time`` column, and one ``worst: <sensor>`` column per sensor
    that was among the worst few at any batch (its rate where it was, else empty)."""
    rows = []
    for p in points:
        row = p.to_dict()
        row["time"] = pd.Timestamp(p.at)
        for sensor, rate in p.shadow_worst:
            row[f"worst: {sensor}"] = rate
        del row["shadow_worst"]
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not len(frame):
        return frame
    # An empty row where a new run starts: lines break over the failure instead of
    # drawing a straight line through the time the query was down.
    starts = frame.index[frame["run"].ne(frame["run"].shift()) & (frame.index > 0)]
    gaps = pd.DataFrame({"time": frame.loc[starts, "time"] - pd.Timedelta(milliseconds=1)})
    frame = pd.concat([frame, gaps]).sort_values("time", kind="stable").reset_index(drop=True)
    numeric = ("rows_per_second", "duration_ms", "backlog", "shadow_pooled", "k_s")
    for name in (*numeric, "watermark_gap_s", "store_ms"):
        frame[name] = pd.to_numeric(frame[name], errors="coerce")
    return frame


def events_frame(events: Sequence[PipelineEvent]) -> pd.DataFrame:
    frame = pd.DataFrame([e.__dict__ for e in events])
    if len(frame):
        frame["time"] = pd.to_datetime(frame["at"])
    return frame


def guarantee_level(s: PipelineStatus, delta: float) -> Level | None:
    """What the guarantee of the plan in force needs from the operator, if anything:
    ``failing`` when some sensor's shadow misses reject "rate <= delta" (the backtest
    verdict's test, ``verdict.rejected``: one-sided binomial on disjoint windows,
    Bonferroni over the sensors rebuilt; every sensor tested, the most significant
    named), ``at risk`` when the worst rate is above delta but no test rejects yet, or
    when the plan has expired (a failing test is said first, the expiry with it); None
    when the shadow check has nothing against it."""
    expired = (
        f"the plan has expired: version {s.plan_version} has run {s.rows_under_plan:,} rows, "
        f"past its horizon of {s.replan_every_rows:,}, and scheduled re-planning is off: its "
        "backtest measured it for its horizon only (the shadow check goes on measuring; "
        "re-plan now or turn it on)"
        if s.plan_expired
        else ""
    )
    if s.mode in NOT_THIS_RUN:  # the shadow check measures the approx plan, not this run
        return None  # said with the throughput (``_holding``), which still applies
    mine = s.shadow_by_version.get(s.plan_version, {}) if s.plan_version is not None else {}
    rate, sensor = mine.get("worst_rate"), mine.get("worst_sensor")
    if rate is None or sensor is None or rate <= delta:
        return Level("at risk", expired) if expired else None
    misses, windows = float(mine.get("worst_misses", 0)), int(mine.get("worst_windows", 0))
    counted = (
        f"{sensor} missed eps in {shadow_counted(misses, windows, s.shadow_contract)} "
        f"({100 * rate:.1f} %) under plan version {s.plan_version}, against delta "
        f"{100 * delta:g} %"
    )
    per = mine.get("per_sensor") or {sensor: (misses, windows)}
    counts = {x: (float(k), int(n)) for x, (k, n) in per.items()}
    broken = rejected(counts, delta, float(mine.get("share", 1.0)))
    if broken:
        k, n = counts[broken[0]]
        counted = (
            f"{broken[0]} missed eps in {shadow_counted(k, n, s.shadow_contract)} "
            f"({100 * k / max(n, 1):.1f} %) under plan version {s.plan_version}, "
            f"against delta {100 * delta:g} %"
        )
        return Level(
            "failing",
            f"guarantee broken: {counted} (binomial test on disjoint windows, Bonferroni "
            "over the sensors rebuilt, at this look); the live monitor re-plans when its "
            "own test, which holds over every look, alerts"
            + (f"; and {expired}" if expired else ""),
        )
    return Level(
        "at risk",
        f"guarantee at risk: {counted}; above delta, but not significantly yet (binomial "
        "test on disjoint windows, Bonferroni over the sensors rebuilt)"
        + (f"; and {expired}" if expired else ""),
    )


def status_level(
    s: PipelineStatus, points: Sequence[BatchPoint], trigger_s: float, delta: float = 1.0
) -> Level:
    """What an operator must act on, the guarantee first (``guarantee_level``), then the
    throughput like Flink's back-pressure view, from the last few batches."""
    if s.state in ("failed", "error"):
        return Level("failing", s.last_error or f"the query is {s.state}")
    if s.state == "recovering":
        return Level("behind", "recovering: rebuilding the lost windows from the backup")
    if s.state != "running":
        return Level("idle", f"the pipeline is {s.state}")
    guarantee = guarantee_level(s, delta)
    if guarantee is not None:
        return guarantee
    recent = [p for p in points[-5:] if p.batch_id >= 0]
    backlog = max(0, s.feed.readings - s.input_rows)
    per_batch = sorted(p.input_rows for p in recent)
    typical = per_batch[len(per_batch) // 2] if per_batch else 0
    holding = _holding(s, delta)
    if typical and backlog > BEHIND_BATCHES * typical:
        return Level(
            "behind",
            f"{holding}; but {plural(backlog, 'reading')} waiting, more than "
            f"{BEHIND_BATCHES:g} batches' input",
        )
    durations = sorted(p.duration_ms for p in recent if p.duration_ms is not None)
    median = durations[len(durations) // 2] if durations else None
    if trigger_s > 0 and median is not None and median > SLOW_TRIGGERS * 1000 * trigger_s:
        return Level(
            "behind",
            f"{holding}; but batches take {median:,.0f} ms, more than {SLOW_TRIGGERS:g}x the "
            f"{trigger_s:g} s trigger",
        )
    took = "" if median is None else f", batches take {median:,.0f} ms"
    waiting = f"keeping up with the feed ({plural(backlog, 'reading')} waiting{took})"
    return Level("OK", f"{holding}; {waiting}")


def _holding(s: PipelineStatus, delta: float) -> str:
    """The guarantee's state when nothing is against it, with what it counts."""
    if s.mode == "full":
        return f"every sensor backed up (mode full): {NOT_THIS_RUN['full']}"
    if s.mode == "none":
        return f"no backup (mode none): {NOT_THIS_RUN['none']}"
    mine = s.shadow_by_version.get(s.plan_version, {}) if s.plan_version is not None else {}
    sensor = mine.get("worst_sensor")
    if sensor is None:
        return "guarantee not measured yet (no shadow window closed under this plan)"
    misses, windows = float(mine.get("worst_misses", 0)), int(mine.get("worst_windows", 0))
    return (
        f"no sensor above delta so far: worst sensor {sensor} missed eps in "
        f"{shadow_counted(misses, windows, s.shadow_contract)}, within delta {100 * delta:g} % "
        "(a measured rate, not a bound)"
    )


def history_summary(points: Sequence[BatchPoint], events: Sequence[PipelineEvent]) -> pd.DataFrame:
    """Flink-style history: count, min, avg and max of backups and recoveries."""
    backups = [p for p in points if p.backup_rows > 0]
    recoveries = [e for e in events if e.kind == "recovery"]
    rows = {
        "backup readings per batch": [p.backup_rows for p in backups],
        "backup bytes per batch": [p.backup_bytes for p in backups],
        "backup write + store commit (ms)": [p.store_ms for p in backups],
        "batch duration (ms)": [p.duration_ms for p in points],
        "recovery time (s)": [e.seconds for e in recoveries],
        "recovery readings read": [e.rows for e in recoveries],
    }
    out = []
    for name, values in rows.items():
        stats = summarise(values)
        unit = "B" if "bytes" in name else ""
        out.append(
            {"": name, "count": stats["count"]}
            | {k: format_quantity(stats[k], unit) for k in ("min", "avg", "max")}
        )
    return pd.DataFrame(out)


def recent_table(
    points: Sequence[BatchPoint], events: Sequence[PipelineEvent], limit: int = 12
) -> pd.DataFrame:
    """The newest backups (batches that wrote readings) and every failure/recovery, newest
    first; ``readings``: backed up by the batch, or read back by the recovery; ``took``: a
    backup's Parquet write and store commit, a recovery's whole time."""
    rows = [
        {"time": p.at[11:19], "what": f"backup, batch {p.batch_id} (run {p.run})",
         "readings": p.backup_rows, "size": format_quantity(p.backup_bytes, "B"),
         "took": format_quantity((p.store_ms or 0) / 1000, "s")}
        for p in points if p.backup_rows > 0
    ][-limit:]  # fmt: skip
    rows += [
        {"time": e.at[11:19], "what": f"{e.kind}: {e.text}",
         "readings": e.rows, "size": "",
         "took": format_quantity(e.seconds, "s") if e.seconds else ""}
        for e in events if e.kind in ("failure", "recovery", "resume")
    ]  # fmt: skip
    return pd.DataFrame(sorted(rows, key=lambda r: r["time"], reverse=True))


def timeline_figures(
    cache: MutableMapping[str, Any],
    points: Sequence[BatchPoint],
    events: Sequence[PipelineEvent],
    delta: float,
    trigger_s: float,
) -> tuple[Any, Any]:
    """The pipeline timeline and the disorder timeline (None without a disorder stage),
    rebuilt only when the history changed since ``cache`` last held them.

    The fragment polls every ``POLL_SECONDS`` while batches come every few seconds, and
    the five-panel figure takes 0.2-0.3 s to build: rebuilt on every poll it kept a core
    busy for each open console. Points and events are frozen, so equal histories draw
    equal figures (a patched point is a new object and redraws)."""
    key = (tuple(points), tuple(events), delta, trigger_s)
    held = cache.get(FIGURES)
    if held is not None and held[0] == key:
        return held[1]
    frame, marks = points_frame(points), events_frame(events)
    over_time = timeline.pipeline_timeline(frame, marks, delta, trigger_s)
    disorder = timeline.disorder_timeline(frame, marks) if frame["k_s"].notna().any() else None
    cache[FIGURES] = (key, (over_time, disorder))
    return over_time, disorder


LEVEL_STYLE = {
    "OK": st.success,
    "at risk": st.warning,
    "behind": st.warning,
    "failing": st.error,
    "idle": st.info,
}
RESTORE_KIND = {"recovery": "recovery after a failure", "resume": "resume of a stopped run"}


def restore_text(r: Restore) -> str:
    """The latest restore in one sentence (Flink's checkpoint history keeps the same)."""
    when = r.at[11:19] + " UTC" if len(r.at) >= 19 else r.at
    text = f"{RESTORE_KIND[r.kind]} of run {r.run} at {when}"
    if r.kind == "recovery" and r.lost_first_row is not None and r.lost_last_row is not None:
        lost = span(r.lost_first_row, r.lost_last_row, "row")
        took = "" if r.seconds is None else f" in {format_quantity(r.seconds, 's')}"
        text += (
            f": {lost} rebuilt from the backup ({plural(r.windows, 'window')} needed them, "
            f"{plural(r.rows_read, 'backup reading')} read){took}"
        )
    version = "" if r.plan_version is None else f" under plan version {r.plan_version}"
    return text + f"; the query went on from row {r.resumed_at_row:,}{version}."


def latest_restore(s: PipelineStatus) -> None:
    """How many restores there were, and the latest (nothing before the first)."""
    if s.last_restore is None:
        return
    st.caption(
        f"**Latest restore** ({plural(s.restores, 'restore')} so far): "
        + restore_text(s.last_restore)
        + " Batches, readings, backup and windows count the whole pipeline, across "
        "restarts and restores; the shadow miss rates, late and stale readings and the "
        "restore count start again when a new process resumes the run."
    )


def _recovery_job() -> None:
    job = background.runner().get(RECOVERY_JOB)
    view = job.snapshot() if job is not None else None
    if view is not None and view.state == "running":
        st.progress(view.fraction, text=f"{view.message} ({view.seconds:.0f} s)")
    elif view is not None and view.state != "done" and view.cancel_requested:
        st.info(
            "Recovery stopped: Stop was pressed while it ran. Start the pipeline again for "
            f"a new run. (It ended with: {view.error})"
        )
    elif view is not None and view.state == "failed":
        st.error(f"Recovery failed: {view.error}")


def _finish_feed(manager: Any) -> None:
    """Flush the end of the replay (``PipelineManager.finish_feed``: once a pipeline), so
    an out-of-order stage's held readings are not left waiting for input that never comes."""
    try:
        manager.finish_feed()
    except EngineError as err:  # the query died meanwhile: its state says so next poll
        st.warning(f"The end of the feed could not be flushed yet: {err}")


def live_dashboard(delta: float) -> None:
    """The pipeline's status metrics, status level, time series and backup/recovery
    history, polled (``_polled``)."""
    live.mark_drawn()
    _polled(delta)


@st.fragment(run_every=POLL_SECONDS)
def _polled(delta: float) -> None:
    """Everything of one status snapshot, so the metrics and the line below them never
    disagree by a poll; batches against the query's own trigger."""
    manager = resources.pipeline_manager()
    s = manager.status()
    landed = s.feed.done and not s.feed.stopped and s.input_rows >= s.feed.readings
    if s.state == "running" and landed:  # the replay is over and taken in: no long wait
        _finish_feed(manager)  # for the lock; the held readings close their windows
        s = manager.status()
    live.status_polled(s, delta)
    points, events = manager.board.history.points(), manager.board.history.events()
    trigger_s = s.trigger_seconds or 0.0  # 0: no trigger to compare batches with
    level = status_level(s, points, trigger_s, delta)
    if not (level.name == "failing" and s.last_error):
        # a failing query's error is already on the status panel above, as an error (or a
        # warning for a simulated failure): not said twice
        LEVEL_STYLE[level.name](f"**{level.name}** — {level.reason}")
    _recovery_job()
    latest_restore(s)
    if not points:
        st.caption("The dashboard fills in as micro-batches complete.")
        return
    over_time, disorder = timeline_figures(st.session_state, points, events, delta, trigger_s)
    st.subheader(f"Over time ({plural(len(points), 'micro-batch', 'micro-batches')})")
    st.plotly_chart(over_time, key="timeline")
    if disorder is not None:
        st.subheader("Out-of-order arrivals")
        st.plotly_chart(disorder, key="disorder_timeline")
    st.subheader("Backup and recovery history")
    st.dataframe(history_summary(points, events), hide_index=True)
    st.caption(
        "Newest backups (batches that wrote readings), failures and recoveries (readings "
        "read back):"
    )
    st.dataframe(recent_table(points, events), hide_index=True, height=280)


FAILURE_LABELS = {
    "crash": "crash (window state kept, the batch in flight lost)",
    "machine": "machine loss (window state lost)",
}


def fail_and_recover(already_failed: bool, kind: str = "machine") -> None:
    """Kill the query (unless it already failed) and recover, in a background job.

    The dashboard stays on screen and shows the job's progress; the page reruns
    when the recovery has run (``ui.live.status_polled``).
    """
    manager, log = resources.pipeline_manager(), resources.pipeline_log()
    runner = background.runner()
    if (job := runner.get(RECOVERY_JOB)) is not None and job.state != "running":
        runner.forget(RECOVERY_JOB)

    def work(progress: background.Progress) -> object:
        if not already_failed and kind == "crash":
            progress(0.05, "simulating a crash: the next micro-batch dies once backed up")
            manager.simulate_failure(kind="crash")
        elif not already_failed:
            progress(0.05, "simulating a failure: the first batch to start with a window open dies")
            manager.simulate_failure()
        progress(0.3, "recovering the lost rows from the backup")
        report = manager.recover()
        live.remember(report, log)
        return report

    runner.submit(RECOVERY_JOB, "recovery", work)
