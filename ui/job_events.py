"""The Production page's table of a job's events: one sentence per alert, re-plan,
expiry or input anomaly, in the event's own words (``engine.job.events``)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.job import JobStatus

EVENT_LABELS = {
    "alert": "Alert",
    "replan_started": "Re-plan started",
    "replan": "Re-plan",
    "replan_abandoned": "Re-plan given up",
    "plan_expired": "Plan expired",
    "replan_failed": "Re-plan failed",
    "monitor_resumed": "Monitor resumed",
    "input_anomaly": "Input anomaly",
    "overfull_windows": "Overfull windows",
    "late_readings": "Late readings",
    "future_readings": "Readings from the future",
    "over_exposure": "Batch over the exposure",
    "control_started": "Online control started",
    "control_waiting": "Online control waiting",
    "control": "Online control changed the set",
    "control_failed": "Online control failed",
    "nanosecond_timestamps": "Nanosecond times truncated",
    "unread_landing_files": "Landing files never read",
    "plan_versions_withdrawn": "Plan versions withdrawn",
}


def show_events(status: JobStatus, limit: int = 50) -> None:
    """The newest ``limit`` events as a table, and how many more there are."""
    if not status.events:
        st.caption("No alert, re-plan or expiry so far.")
        return
    rows = [
        {
            "batch": e.get("batch_id", e.get("first_batch", e.get("before_batch"))),
            "event": EVENT_LABELS.get(str(e.get("event")), str(e.get("event"))),
            "version": e.get("plan_version"),
            "what": _what(e),
        }
        for e in status.events[:limit]
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if len(status.events) > limit:
        st.caption(
            f"The newest {limit} of {len(status.events):,} events; `python -m engine status "
            f"--backup {status.backup} --events {len(status.events)}` lists them all."
        )


def _what(event: dict) -> str:
    """One sentence per event: its own reason, or what an input anomaly counted."""
    kind = event.get("event")
    if kind == "replan":
        return str(event.get("detail", ""))
    if kind == "replan_started":
        how = (
            "computing in the background; batches go on under it meanwhile"
            if event.get("background", True)  # a job before the flag planned beside it
            else "computed within this batch (the job waits for it: --available-now)"
        )
        return f"{event.get('reason', '')} re-plan of version {event.get('plan_version')} {how}"
    if kind == "monitor_resumed":
        pairs = event.get("rebuilt_pairs", event.get("windows", 0))  # a job before the name
        return (
            f"{pairs:,} (window, rebuilt sensor) pairs and {event.get('misses', 0):,} misses "
            "of this version carried over from before the restart"
        )
    if kind == "late_readings":
        return (
            f"{event.get('late_readings', 0):,} readings of {event.get('windows', 0):,} "
            f"windows that had closed (watermark {event.get('watermark')}): backed up, "
            "left out of the aggregates and the shadow check; raise --watermark if files "
            "land out of order"
        )
    if kind == "future_readings":
        return (
            f"{event.get('future_readings', 0):,} readings stamped more than a day ahead of "
            f"the clock (latest {event.get('latest')}; {', '.join(event.get('sensors', [])[:5])}):"
            " backed up, left out of the windows and the watermark; check the sender's clock"
        )
    if kind == "overfull_windows":
        return (
            f"{event.get('pairs', 0):,} windows had {event.get('excess_readings', 0):,} "
            f"readings more than their time steps ({', '.join(event.get('sensors', [])[:5])}):"
            " duplicates, or faster sampling than the plan; counted in their aggregates"
        )
    if kind == "input_anomaly":
        parts = []
        if event.get("unplanned_readings"):
            names = ", ".join(event.get("unplanned_sensors", [])[:5])
            count = event.get("unplanned_sensor_count")
            parts.append(
                f"{event['unplanned_readings']:,} readings of {count} sensor(s) outside the "
                f"plan ({names}) backed up in full"
            )
        if event.get("unusable_readings"):
            parts.append(
                f"{event['unusable_readings']:,} readings without a sensor or time dropped"
            )
        if event.get("missing_values"):
            parts.append(f"{event['missing_values']:,} null or NaN values left out of windows")
        return "; ".join(parts)
    if kind == "control_started":
        n = event.get("backup_sensors")
        return (
            "the controller steers the set from every closed window's shadow check; "
            f"it starts from the plan's {n} backed-up sensor{'' if n == 1 else 's'}"
        )
    if kind == "replan_failed":
        return (
            f"the {event.get('reason', '')} re-plan failed: {event.get('error', '')}; the plan "
            "in force is kept"
        )
    if kind == "plan_versions_withdrawn":
        versions = ", ".join(str(v) for v in event.get("versions", []))
        return f"version(s) {versions} withdrawn: {event.get('why', '')}"
    # the event's own sentence, whichever key it keeps it under
    said = next((str(event[k]) for k in ("reason", "detail", "what", "why") if event.get(k)), "")
    if event.get("error"):  # what went wrong, beside what it means
        return f"{said} ({event['error']})" if said else str(event["error"])
    return said
