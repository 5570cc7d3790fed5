"""The recovery report of the shared pipeline: figures, charts, approx vs full vs none.

Pure helpers (frames, spans, the mode table) plus the page section that shows them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from engine.data import SensorHistory
from engine.live import INDEXED_KINDS, PipelineManager, RecoveryReport, promise_note
from engine.planning import BackupPlan
from engine.windows import window_aggregates
from ui import charts, resources
from ui.format import pct, plural, span
from ui.live import PENDING, plan_signature
from ui.panels import QUIET

MODES = ("approx", "full", "none")


def _store_results(manager: PipelineManager) -> pd.DataFrame | None:
    """Window results from the pipeline's store (None before any start)."""
    return manager.results()


def recovery_frame(
    history: SensorHistory, report: RecoveryReport, sensor: str, margin: int = 8
) -> pd.DataFrame:
    """Truth, live and recovered aggregates of ``sensor`` around the lost windows. A lost
    window's result is "recovered" whatever its stored kind: a batch that backed up every
    sensor comes back whole, and its windows are stored ``live``."""
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
    lost = frame["window_id"].isin(report.window_ids)
    frame["live"], frame["recovered"] = np.nan, np.nan
    if results is not None and len(results):
        mine = results[(results["sensor"] == sensor) & results["kind"].isin(INDEXED_KINDS)]
        by_kind = {k: rows.groupby("window_id")["value"].last() for k, rows in mine.groupby("kind")}
        live = by_kind.get("live", pd.Series(dtype=float))
        recovered = by_kind.get("recovered", pd.Series(dtype=float))
        either = recovered.combine_first(live)  # a lost window's own result, either kind
        frame["live"] = frame["window_id"].map(live).where(~lost)
        frame["recovered"] = frame["window_id"].map(either).where(lost)
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
    """Errors of the rebuilt (not backed-up) sensors over the recovered windows: (k,).

    With per-sensor eps each error is divided by its sensor's eps (eps units), so one
    threshold of 1 holds for every sensor.
    """
    if not report.errors:
        return np.zeros(0)
    errors = np.asarray(report.errors, dtype=float)
    if report.eps_by_sensor:
        errors = errors / np.asarray(report.eps_by_sensor, dtype=float)
    return errors[report.rebuilt_pairs()]  # window by window, as ``ravel`` reads


def _measured_row(mode: str, stored: int, rep: dict[str, Any]) -> dict[str, Any]:
    first, last = rep["lost_rows"]
    return {
        "mode": mode,
        "figures": "measured",
        "lost rows": span(first, last, "row"),  # its own failure's, maybe another run's
        "sensors stored": stored,
        "backup readings": rep["backup_rows"],
        "windows lost": rep["windows_lost"],
        "windows recovered": rep["windows_recovered"],
        "max abs error": rep["max_abs_error"],
        "violation rate (pooled)": rep["violation_rate"],
        "recovery s": rep["recovery_seconds"],
    }


def _projected_row(mode: str, stored: int, current: RecoveryReport) -> dict[str, Any]:
    """What a mode would give on the same failure: full is exact, none recovers nothing.
    Its backup readings: every lost time step's reading of each sensor it stores (not the
    approx recovery's rows scaled: those include every reading a full batch stored)."""
    first, last = current.lost_rows
    steps = max(last - first + 1, 0)
    rows = steps * stored if current.mode == "approx" else None
    lost = current.windows_lost
    return {
        "mode": mode,
        "figures": "projected (not run)",
        "lost rows": span(first, last, "row"),
        "sensors stored": stored,
        "backup readings": rows,
        "windows lost": lost,
        "windows recovered": 0 if mode == "none" else lost,
        "max abs error": 0.0 if mode == "full" else None,
        "violation rate (pooled)": 0.0 if mode == "full" else None,
        "recovery s": None,
    }


def mode_table(plan: BackupPlan, current: RecoveryReport) -> pd.DataFrame:
    """approx vs full vs none: measured where that mode was run on the plan this run
    started with and recovered the same kind of failure (a crash, a machine loss), else
    projected for this one. A measured approx row counts its own recovery's backup set,
    a projected one the plan's (a re-plan or the online control may have changed it)."""
    log = resources.pipeline_log()
    sig = log.started.get("signature") or plan_signature(plan)  # as ``live.remember`` keeps it
    stored = {"full": len(plan.sensors), "none": 0}
    rows = []
    for mode in MODES:
        entry = log.reports.get(mode)
        if mode == current.mode:
            measured = current.to_dict()
        elif (
            entry
            and entry["signature"] == sig
            and entry["report"].get("failure", "machine") == current.failure
        ):
            measured = entry["report"]
        else:
            n = stored.get(mode, len(plan.backup_sensors))
            rows.append(_projected_row(mode, n, current))
            continue
        n = stored.get(mode, len(measured["backup_sensors"]))  # approx: that run's own set
        rows.append(_measured_row(mode, n, measured))
    return pd.DataFrame(rows)


def display_modes(table: pd.DataFrame) -> pd.DataFrame:
    """The mode table as people read it: a figure a mode has not measured says so, and
    one a measured mode has none of (none recovers nothing) is n/a."""
    shown = table.astype(object)
    rate = "violation rate (pooled)"
    for name in ("backup readings", "max abs error", rate, "recovery s"):
        shown[name] = [
            ("n/a" if ran == "measured" else "not run")
            if v is None or (isinstance(v, float) and np.isnan(v))
            else v
            for v, ran in zip(table[name], table["figures"], strict=True)
        ]
    shown[rate] = [pct(v) if isinstance(v, float) else v for v in shown[rate]]
    return shown


def pipeline_inputs(
    report: RecoveryReport, history: SensorHistory, plan: BackupPlan
) -> tuple[SensorHistory, BackupPlan] | None:
    """The data and plan the pipeline ran on (this session's may have changed since)."""
    log = resources.pipeline_log()
    if log.history is not None and log.plan is not None:
        in_force = None
        if log.monitor is not None:  # the plan of the version the stream runs with now
            spec = resources.pipeline_manager().spec_in_force()
            in_force = log.monitor.plan_for(spec.linear_map)
        return log.history, in_force or log.plan
    if set(report.sensors) <= set(history.sensors):
        return history, plan
    return None


def report_metrics(report: RecoveryReport) -> None:
    c = st.columns(6)
    c[0].metric("Windows lost", report.windows_lost)
    c[1].metric(
        "Windows recovered", report.windows_recovered, f"{report.windows_pending} pending", **QUIET
    )
    if report.eps_by_sensor and report.errors:  # units differ: errors in eps units
        ratio = np.asarray(report.errors, dtype=float) / np.asarray(report.eps_by_sensor)
        col = int(np.nanargmax(np.nanmax(ratio, axis=0)))
        c[2].metric(
            "Max error / eps",
            f"{float(np.nanmax(ratio)):.3g}",
            f"{report.sensors[col]} (eps {report.eps_by_sensor[col]:g})",
            **QUIET,
            help="Each sensor's error over its own eps (one eps per unit group): above 1 "
            "is a miss. The raw errors are in different units.",
        )
    else:
        err = "n/a" if report.max_abs_error is None else f"{report.max_abs_error:.3g}"
        c[2].metric("Max abs error", err, f"eps {report.eps:g}", **QUIET)
    worst = report.violation_rate_worst_sensor
    c[3].metric(
        "Violation rate, worst sensor",
        pct(worst),
        f"delta {100 * report.delta:g} %; pooled {pct(report.violation_rate)}",
        **QUIET,
        help="The guarantee is per sensor: the worst rebuilt sensor's share of its recovered "
        "windows off by more than eps. Pooled: over every (window, rebuilt sensor) pair.",
    )
    c[4].metric("Recovery time", f"{report.recovery_seconds:.2f} s")
    c[5].metric(
        "Backup readings read",
        f"{report.backup_rows:,}",
        f"whole backup: {report.backup_bytes / 1e3:,.1f} kB on disk",
        **QUIET,
        help="The readings the recovery read from the backup for the lost rows; below it, "
        "the size of the whole backup at rest when the recovery ran (every batch's, "
        "compacted), not the size of what was read.",
    )
    served = ", ".join(f"version {k}: {n}" for k, n in report.rows_by_version.items())
    lost = span(report.lost_rows[0], report.lost_rows[1], "row")
    st.caption(
        f"{report.note}. Spark {report.spark_version}; lost: {lost}"
        + (f"; rows rebuilt per governing plan version: {served}." if served else ".")
    )


def report_charts(history: SensorHistory, report: RecoveryReport) -> None:
    """Recovered vs true for a chosen sensor, errors against eps, rates against delta."""
    rebuilt = [s for s in report.sensors if s not in report.backup_sensors]
    options = rebuilt + [s for s in report.sensors if s not in rebuilt]
    sensor = st.selectbox("Sensor", options, key="w_recovery_sensor")
    frame = recovery_frame(history, report, sensor)
    span = lost_span(history, report)
    st.plotly_chart(charts.recovery_chart(frame, sensor, span, report.eps_for(sensor)))
    errors = rebuilt_errors(report)
    if not rebuilt or not errors.size:  # empty charts on a -1..4 axis said nothing
        st.info(
            f"Every sensor was backed up in mode {report.mode}: nothing was rebuilt, so there "
            "is no rebuild error to chart (the recovered windows are exact)."
        )
        return
    left, right = st.columns(2)
    threshold = 1.0 if report.eps_by_sensor else report.eps  # per-sensor: in eps units
    left.plotly_chart(charts.error_histogram(errors, threshold, bool(report.eps_by_sensor)))
    rates = {s: r for s, r in report.violation_rates.items() if s in rebuilt}
    title = (
        "Violation rate per rebuilt sensor (over its recovered windows not held whole "
        "by the backup)"
    )
    right.plotly_chart(charts.violation_bars(rates, report.delta, title))


def recovery_section(
    session_history: SensorHistory,
    session_plan: BackupPlan,
    report: RecoveryReport,
    running: bool = True,
) -> None:
    """The last recovery: figures, recovered vs true, errors vs eps, rates vs delta, modes.
    ``running``: the pipeline is still running, so pending windows may yet finish."""
    inputs = pipeline_inputs(report, session_history, session_plan)
    if inputs is None:
        st.info("The last recovery ran on data this server no longer holds: start a new run.")
        return
    history, plan = inputs
    st.subheader(f"Recovery report (mode {report.mode})")
    st.session_state[PENDING] = report.windows_pending > 0 and running
    report_metrics(report)
    note = promise_note(report, plan)
    if note:
        st.warning(note)
    if report.windows_unrecoverable:
        st.warning(
            f"{plural(report.windows_unrecoverable, 'lost window')} cannot be rebuilt and "
            "stay without a result: a row they need had no whole backup when recovery ran "
            "(with arrival delays, its backed-up readings can arrive after the failure)."
        )
    if report.windows_recovered:
        report_charts(history, report)
    elif report.windows_pending and not running:
        st.info(
            f"{plural(report.windows_pending, 'lost window')} reach past the failure and "
            "stay unfinished: the pipeline stopped before the restarted query reached their "
            "end. Start a new run to measure another recovery."
        )
    elif report.windows_pending:
        st.info(
            f"{plural(report.windows_pending, 'lost window')} reach past the failure: the "
            "restarted query finishes them from the rebuilt rows, and this report updates "
            "when it does."
        )
    elif report.windows_lost == 0:
        st.info(
            "No window was lost: every window the stream had completed was out before the "
            "query died (the failure came between two committed batches, or after the "
            "replay had ended). Nothing needed rebuilding."
        )
    kind = "crash" if report.failure == "crash" else "machine loss"
    st.subheader(f"approx vs full vs none, for this {kind}")
    table = mode_table(plan, report)
    st.dataframe(display_modes(table), hide_index=True)
    st.plotly_chart(charts.mode_bars(table))
    st.caption(
        f"Measured rows come from runs of this plan in that mode that recovered a {kind}; "
        "run the pipeline in another mode and fail it the same way to measure the others."
    )
