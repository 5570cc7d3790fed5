"""The production console: a ``python -m engine run`` job, watched from its backup location.

Everything shown is read back from what the job keeps beside its backup
(``engine.job.status``, DuckDB, no Spark): the plan versions, each
micro-batch's metrics, every closed window's shadow check and the job's
alerts and re-plans. A lost range is rebuilt here as ``recover --backup``
rebuilds it, each time step with the plan version that wrote it.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from engine.export.recover import recover_dataset
from engine.job import KEEP, JobStatus, compact, read_job_status, uncompacted
from engine.live import AuditLog
from ui import access, charts, resources
from ui.format import format_percent
from ui.panels import QUIET

if TYPE_CHECKING:
    from engine.export.plan_book import JobPlan

BACKUP_KEY = "w_prod_backup"
FOLLOW_S = 10  # seconds between reads while following a running job


def backup_input() -> str:
    """The job's ``--backup`` as typed (stripped); empty until the operator gives one."""
    text = st.text_input(
        "Backup location (the job's --backup: a local or mounted path, or file:// URI)",
        key=BACKUP_KEY,
        placeholder="/mnt/plant/lacuna/backup",
    )
    return text.strip()


def load(backup: str) -> JobStatus:
    return read_job_status(backup)


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")


def headline(status: JobStatus) -> None:
    s = status.summary()
    rate = s["miss_rate"]
    c = st.columns(4)
    c[0].metric("Micro-batches", f"{s['batches']:,}", f"{s['readings']:,} readings", **QUIET)
    over = int(s.get("batches_over_exposure") or 0)  # type: ignore[call-overload]
    c[1].metric(
        "Plan in force (version)",
        f"{s['plan_version']} of {s['versions']}",  # "version 10 of 10" was cut off
        f"{s['backup_sensors']} of {s['sensors']} sensors backed up",
        **QUIET,
    )
    crash = s.get("shadow_contract") == "crash"
    if crash:  # a crash plan promises m-row losses: its monitor's figure, not whole windows
        rate, checked = s["crash_miss_rate"], int(s["crash_windows"])  # type: ignore[call-overload]
        counted = (
            f"of the {s['exposure_rows']}-row failures touching {checked:,} (window, rebuilt "
            "sensor) pairs (crash contract)"
        )
    else:
        checked = int(s["rebuilt_pairs"])  # type: ignore[call-overload]
        counted = f"{s['misses']:,} of {checked:,} (window, rebuilt sensor) pairs"
        worst = status.version_rates()  # worst first
        if len(worst):  # pooled over sensors: the worst one beside it
            w = worst.iloc[0]
            counted += (
                f"; worst sensor {w['sensor']} {format_percent(float(w['rate']))} "
                f"({int(w['misses']):,} of {int(w['windows']):,})"
            )
    c[2].metric(
        "Live miss rate (this version, pooled)",
        "none yet" if rate is None else format_percent(float(rate)),  # type: ignore[arg-type]
        f"{counted}; delta {format_percent(float(s['delta']))}",  # type: ignore[arg-type]
        **QUIET,
    )
    c[3].metric(
        "Sensor alerts",
        f"{s['alerts']}",
        f"valid until {s['valid_until'] or 'n/a'}",
        help="sensors an alert named, once per plan version (a restarted job that logs a "
        "sensor's alert again is not counted twice)",
        **QUIET,
    )
    above = int(s["sensors_above_delta"])  # type: ignore[call-overload]
    what = "m-row losses" if crash else "rebuilt windows"
    if above:
        st.error(
            f"{above} sensor(s) missed eps more often than delta under version "
            f"{s['plan_version']} by the live monitor's test (an alert stands once the test "
            "is crossed; over at least 10 windows, "
            f"counting {what}; checked after every batch, a version whose every sensor "
            "keeps delta alerts falsely with at most a 5 % chance over the whole run). "
            "The job re-plans on an alert unless it runs with --no-replan."
        )
    elif checked:
        st.success(
            f"No alert under version {s['plan_version']}: no sensor's live misses are above "
            f"delta by the monitor's test ({checked:,} (window, rebuilt sensor) pairs' {what} "
            f"checked against the true aggregates; last window ends {s['last_window_end']})."
        )
    else:
        st.info(
            f"No rebuilt window has closed under version {s['plan_version']} yet: nothing "
            "measures this version's guarantee on the stream so far."
        )
    if over:  # the backup holds more than the plan's set: say how much more
        st.info(
            f"{over:,} of {s['batches']:,} micro-batches held more rows than the plan's "
            f"exposure ({s['exposure_rows']} rows) and backed up every sensor, not only the "
            f"plan's {s['backup_sensors']} (the events below name them): the plan's backup "
            "fraction understates what was stored."
        )
    st.caption(control_line(s.get("online_control")))  # type: ignore[arg-type]
    for gap in status.gaps:
        st.warning(f"The job's record is incomplete: {gap}.")
    stale = judge_staleness(status, time.time())
    if stale is not None:
        (st.warning if stale[1] else st.caption)(stale[0])


STALE_S = 900.0  # a job whose newest batch is older than this (or 3 triggers) is said idle


def judge_staleness(status: JobStatus, now: float) -> tuple[str, bool] | None:
    """When the newest micro-batch was written, and whether that is too long ago for a
    running job: more than ``STALE_S`` and three triggers (rows a trigger at the plan's
    interval, ``run.json``). A window's end is event time: it says nothing of this."""
    if status.written_at is None:
        return None
    age = max(0.0, now - status.written_at)
    rows = status.run.get("rows_per_trigger")
    interval = status.in_force.config.sampling_interval_s
    trigger = float(rows) * interval if isinstance(rows, int | float) and rows > 0 else 0.0
    when = datetime.fromtimestamp(status.written_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    text = f"The newest micro-batch was written {format_age(age)} ago ({when} UTC)"
    if age > max(STALE_S, 3 * trigger):
        return (
            f"{text}: a job that should be running has stopped or receives nothing (a catch-up "
            "run with --available-now ends by itself).",
            True,
        )
    return f"{text}.", False


def format_age(seconds: float) -> str:
    """``95`` -> ``1 min 35 s``; ``200000`` -> ``2 d 7 h``: the two largest units."""
    parts, left = [], round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
    return " ".join(parts[:2])


def control_line(control: dict | None) -> str:
    """What the job's online controller says after its last batch (``engine.job.control``)."""
    if control is None:
        return (
            "Online control: no micro-batch recorded it (the job ran with --no-control or "
            "--no-replan, or before online control, or its metrics are missing)."
        )
    if not control.get("active"):
        return ("Online control: waiting for its model (it fits the plan's period again, "
                "or starts with the next re-plan).")  # fmt: skip
    bound = control.get("miss_bound")
    said = "no window applied yet" if bound is None else (
        f"each sensor's miss fraction over the {control['windows']:,} windows applied is at "
        f"most {format_percent(float(bound))} (feedback delay {control['delay_windows']} "
        "windows; a long-run bound that tightens as windows accrue)"
    )  # fmt: skip
    return (
        f"Online control: {said}; {control['backup_sensors']} sensors in its set, "
        f"{control['forced']} forced, {control['changes']} set changes, "
        f"{control['skipped']} windows skipped."
    )


def versions_table(status: JobStatus) -> None:
    st.dataframe(pd.DataFrame(version_rows(status.versions)), hide_index=True, width="stretch")


def version_rows(versions: Sequence[JobPlan]) -> list[dict]:
    """The plan versions, newest first; one that a later version replaced at the same
    micro-batch (online control and a re-plan both installed there) governed no batch,
    and says so."""
    rows = []
    for k, p in enumerate(versions):
        later = versions[k + 1] if k + 1 < len(versions) else None
        unused = later is not None and later.first_batch <= p.first_batch
        rows.append({
            "version": p.version,
            "from batch": p.first_batch,
            "why": p.reason,
            "valid until": (p.config.validity or {}).get("valid_until"),
            "backed up": len(p.config.backup_sensors),
            "pinned": ", ".join(p.pinned),
            "detail": (f"governed no batch: version {later.version} replaced it at batch "
                       f"{later.first_batch}. " if unused and later else "") + p.detail,
        })  # fmt: skip
    return rows[::-1]


def live_rates(status: JobStatus) -> None:
    rates = status.version_rates()
    if rates.empty:
        return
    v = status.in_force.version
    bars = {str(r.sensor): float(r.rate) for r in rates.itertuples()}
    title = f"Live miss rate per rebuilt sensor, version {v}"
    if status.in_force.config.query.exposure is not None:
        st.caption(
            "Whole windows rebuilt (the range contract), as a long `recover` would: this "
            "crash plan promises m-row losses, which the headline above measures."
        )
    st.plotly_chart(charts.violation_bars(bars, status.delta, title), width="stretch")
    table = rates.assign(
        rate=rates["rate"].map(format_percent),
        upper95=rates["upper95"].map(format_percent),
    )[["sensor", "windows", "misses", "rate", "upper95", "above_delta"]]
    st.dataframe(table, hide_index=True, width="stretch")


def batches_chart(status: JobStatus) -> None:
    if status.batches.empty:
        return
    st.plotly_chart(charts.job_batches_chart(status.batches, status.delta), width="stretch")


def recover_range(status: JobStatus) -> None:
    """Rebuild every sensor for a time range from the backup, and offer it as CSV."""
    last = status.summary()["last_window_end"]
    hint = str(last)[:10] if last else "2024-01-01"
    c1, c2 = st.columns(2)
    start = c1.text_input(
        "From (UTC, inclusive)", key="w_prod_from", placeholder=f"empty: the first; e.g. {hint}"
    )
    end = c2.text_input(
        "To (UTC, exclusive)", key="w_prod_to", placeholder=f"empty: the last; e.g. {hint} 12:00"
    )
    config = json.dumps(status.in_force.config.to_dict())
    if st.button("Rebuild this range", key="prod_recover", type="primary"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "plan.json"
            path.write_text(config)
            out = Path(tmp) / "all_sensors.csv"
            result = recover_dataset(path, status.backup, out, start or None, end or None)
            asked = (status.backup, start, end)
            st.session_state["prod_recovered"] = (out.read_bytes(), result.to_dict(), asked)
            for warning in result.warnings:
                st.warning(warning)
    done = st.session_state.get("prod_recovered")
    # another backup's range, or the range before the fields were edited, is not offered
    if done and done[2] == (status.backup, start, end):
        data, report, _ = done
        versions = ", ".join(str(v) for v in report["plan_versions"]) or "none"
        torn = report["incomplete_rows"]
        span = f"from {start or 'the first reading'} to {end or 'the last'}"
        st.success(
            f"Rebuilt {report['rows'] - torn:,} time steps ({span}) of all "
            f"{report['sensors']} sensors "
            f"from {report['backup_readings']:,} backed-up readings (plan versions {versions})"
            + (
                f"; {torn:,} more lacked a backup reading: written with the readings the "
                "backup holds, the sensors rebuilt there left empty."
                if torn
                else "."
            )
        )
        st.download_button(
            "Download the rebuilt range (CSV)", data, file_name="all_sensors.csv", mime="text/csv"
        )
    st.caption("The same from a shell:")
    st.code(
        "python -m engine recover --config plan.json --backup "
        f"{status.backup} --from {start or 'T1'} --to {end or 'T2'} --out all_sensors.csv",
        language="bash",
    )


def housekeeping(status: JobStatus) -> None:
    """Fold the job's old micro-batch directories into one (``engine compact``)."""
    left = uncompacted(status.backup)
    st.caption(
        f"{left:,} micro-batch directories not compacted yet: every reader (this page, "
        f"recover) lists each one. Compaction folds all but the newest {KEEP} into one "
        "directory per kind; readers switch to it at one file, so nothing is read twice or "
        "missed, and the running job is not disturbed."
    )
    if st.button("Compact old micro-batches", key="prod_compact", disabled=left <= KEEP):
        # it deletes the folded directories: recorded with who and when, as Stop is
        AuditLog(resources.work_dir()).record(
            "compact", access.current_user(), f"backup {status.backup}, keep {KEEP}"
        )
        report = compact(status.backup, keep=KEEP)
        st.success(
            f"Folded micro-batches {report.first}-{report.last} ({report.batch_dirs:,} "
            f"directories, {report.files_before:,} backup files) into {report.partitions:,} "
            f"files of {report.rows:,} rows; {report.removed_dirs:,} directories removed "
            "(each batch's backup, results and metrics)."
        )
    st.code(f"python -m engine compact --backup {status.backup} --keep {KEEP}", language="bash")
