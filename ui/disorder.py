"""Disorder page glue: run the out-of-order experiment (cached) and chart it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from engine.data import SensorHistory
from engine.disorder import DisorderReport, MethodReport, run_disorder_experiment
from engine.planning import PlanParameters
from engine.planning.verdict import delta_digits
from ui import background, resources
from ui.charts import ACCENT, BACKUP_COLOUR, REBUILT_COLOUR, _layout
from ui.format import format_percent, plural

PRESETS = {
    "exponential, mean 30 min": "exp:1800",
    "exponential mixture: 80 % ~10 min, 20 % ~4 h": "mix:0.8,exp:600,exp:14400",
    "Pareto (heavy tail), shape 1.5, from 10 min": "pareto:1.5,600",
}
METHODS = {
    "ours": "ours (adaptive K)",
    "mp_kslack": "MP-K-slack",
    "fixed_watermark": "fixed watermark",
    "no_buffer": "no buffer",
}
COLOURS = {
    "ours": BACKUP_COLOUR,
    "mp_kslack": REBUILT_COLOUR,
    "fixed_watermark": "#9467bd",
    "no_buffer": "#999999",
}
MAX_ROWS = 720
MIN_WINDOWS = 10  # windows a replay needs for its coverage and accuracy figures


def least_rows(params: PlanParameters) -> int:
    return MIN_WINDOWS * params.window


def enough_rows(n_rows: int, params: PlanParameters) -> bool:
    """Whether the data holds ``MIN_WINDOWS`` windows; else say what to change."""
    least = least_rows(params)
    if n_rows >= least:
        return True
    st.warning(
        f"The replay needs at least {MIN_WINDOWS} windows of rows ({MIN_WINDOWS} x "
        f"{params.window} = {least:,} rows) and the data has {n_rows:,}: set the window to "
        f"at most {max(1, n_rows // MIN_WINDOWS)} rows on Tune."
    )
    return False


def run(
    history: SensorHistory, delays: str, params: PlanParameters, seed: int
) -> DisorderReport | None:
    """The experiment's typed report (cached per inputs), or None while it runs in a
    background job (about 1 s per 10k readings; the job panel reruns the page).

    With one eps per unit group each sensor is scored against its own eps: the
    readings are divided by their sensor's eps and the target is eps = 1 (window
    aggregates and their errors scale with the readings; K and latencies do not).
    """
    eps = params.eps_vector(history.sensors)
    per_sensor = bool(params.eps_by_sensor)
    key = (
        "disorder", history.fingerprint(), delays, tuple(eps) if per_sensor else params.eps,
        params.delta, params.window, params.slide, params.aggregate, seed,
    )  # fmt: skip
    cache = resources.plan_cache()
    report = cache.get(key)
    if report is not None:
        return report

    def work(progress: background.Progress) -> DisorderReport:
        progress(0.0, f"replaying {history.values.size:,} readings with four buffers")
        scored = replace(history, values=history.values / eps) if per_sensor else history
        out = run_disorder_experiment(
            scored, delays, eps_thr=1.0 if per_sensor else params.eps, delta=params.delta,
            window=params.window, slide=params.slide, aggregate=params.aggregate,
            rng=np.random.default_rng(seed), progress=progress,
        )  # fmt: skip
        return cache.put(key, out)

    background.forget_if_done(key, lambda: cache.get(key) is not None)
    background.submit(key, "disorder replay", work)
    background.job_panel(key, "Replaying out of order")  # Cancel stops it within a step
    return None


CHOICES = {
    "w_delays": "_disorder_delays",
    "w_disorder_rows": "_disorder_rows",
    "w_seed": "_disorder_seed",
}


def remember_choices(lo: int, hi: int) -> None:
    """Seed the widgets from the session's last choices, or the defaults (Streamlit drops
    a widget's key when a page without it runs); rows stay within [lo, hi]."""
    defaults = {"w_delays": next(iter(PRESETS)), "w_disorder_rows": min(MAX_ROWS, hi), "w_seed": 0}
    for widget, kept in CHOICES.items():
        if widget not in st.session_state:
            st.session_state[widget] = st.session_state.get(kept, defaults[widget])
    st.session_state["w_disorder_rows"] = int(min(max(st.session_state["w_disorder_rows"], lo), hi))


def keep_choices() -> None:
    for widget, kept in CHOICES.items():
        st.session_state[kept] = st.session_state[widget]


TABLE_FORMAT = {
    "avg latency (h)": st.column_config.NumberColumn("latency (h)", format="%.2f", width="small"),
    "avg K (h)": st.column_config.NumberColumn("K (h)", format="%.2f", width="small"),
    "provisional accuracy": st.column_config.NumberColumn(
        "provisional", format="percent", width="small"
    ),
    "final accuracy": st.column_config.NumberColumn("final", format="percent", width="small"),
    "corrections": st.column_config.NumberColumn(width="small"),
    "late tuples": st.column_config.NumberColumn("late", width="small"),
    "closed at the end": st.column_config.NumberColumn(
        "closed at end",
        width="small",
        help="Windows still open when the replay ended, closed by its end: left out of the "
        "latency, which they would inflate (a delay longer than the rest of the stream)",
    ),
}


SIMPLER = ("no_buffer", "fixed_watermark")


def scored_note(report: DisorderReport, params: PlanParameters) -> str | None:
    """What the accuracy figures are over ("N (window, sensor) results scored"); None,
    with the reason shown, when no window could be scored (the figures would be NaN)."""
    scored = int(report.parameters.get("evaluated_results", 0))
    if scored:
        return (
            f"accuracy over the {scored:,} (window, sensor) results whose window holds all "
            f"{params.window} readings"
        )
    st.warning(
        f"No window could be scored: the replay's windows are of event time, and none held "
        f"all {params.window} readings of a sensor (gaps in time, or sensors on different "
        "clocks), so there is no truth to compare with and no coverage for adaptive K to "
        "steer by. Resample the data onto one steady clock, or replay more rows."
    )
    return None


def verdict(report: DisorderReport, delta: float) -> list[str]:
    """Plain sentences: ours against every baseline, and whether a simpler one is as good."""
    target, by = 1 - delta, report.methods
    digits = delta_digits(delta)  # the target and the accuracies beside it alike
    ours, mp = by["ours"], by["mp_kslack"]
    ratio = ours.avg_latency_s / mp.avg_latency_s if mp.avg_latency_s else float("nan")
    share = "" if math.isnan(ratio) else f", {100 * ratio:.0f} % of MP-K-slack's"
    lines = [
        f"Ours: provisional accuracy {format_percent(ours.provisional_accuracy, digits)} "
        f"(target {format_percent(target, digits)}) at {_hours(ours.avg_latency_s)} average "
        f"latency{share}; final results "
        f"{format_percent(ours.final_accuracy, 0)} within eps after "
        f"{plural(ours.corrections, 'correction')}."
    ]
    if ours.flush_closed_windows:
        lines.append(
            f"{plural(ours.flush_closed_windows, 'window')} still open when the replay ended "
            "(a delay longer than the rest of the stream) closed at its end and are left out "
            "of the latency."
        )
    good = [
        m for m in SIMPLER
        if by[m].provisional_accuracy >= target and by[m].avg_latency_s <= ours.avg_latency_s
    ]  # fmt: skip
    for m in good:
        r = by[m]
        lines.append(
            f"A simpler buffer is as good here: {METHODS[m]} meets the target "
            f"({format_percent(r.provisional_accuracy, digits)}) at {_hours(r.avg_latency_s)} "
            f"latency, no more than ours. For these delays and this tolerance, adaptive K "
            "buys nothing."
        )
    missed = [m for m in SIMPLER if by[m].provisional_accuracy < target]
    if missed:
        lines.append(
            "Below the target: "
            + ", ".join(
                f"{METHODS[m]} {format_percent(by[m].provisional_accuracy, digits)}" for m in missed
            )
            + "."
        )
    return lines


def _hours(seconds: float) -> str:
    """A latency; NaN (every scored window closed at the end of the replay) is "n/a"."""
    if math.isnan(seconds):
        return "n/a"
    return f"{seconds / 3600:.2f} h" if seconds >= 36 else f"{seconds:.0f} s"


def summary(report: DisorderReport) -> pd.DataFrame:
    rows = []
    for name, label in METHODS.items():
        m: MethodReport = report.methods[name]
        rows.append(
            {
                "method": label,
                "avg latency (h)": m.avg_latency_s / 3600,
                "avg K (h)": m.avg_k_s / 3600,
                "provisional accuracy": m.provisional_accuracy,
                "final accuracy": m.final_accuracy,
                "corrections": m.corrections,
                "late tuples": m.late_tuples,
                "closed at the end": m.flush_closed_windows,
            }
        )
    return pd.DataFrame(rows)


def k_chart(report: DisorderReport) -> go.Figure:
    """K over time: MP-K-slack dashed underneath, ours drawn last and wider, so where the
    two are equal ours is not hidden under the other line."""
    fig = go.Figure()
    for name in ("mp_kslack", "ours"):
        pts = np.asarray(report.methods[name].k_over_time, dtype=float).reshape(-1, 2)
        ours = name == "ours"
        fig.add_trace(
            go.Scatter(
                x=pts[:, 0] / 3600,
                y=pts[:, 1] / 3600,
                mode="lines",
                name=METHODS[name],
                line={"color": COLOURS[name], "shape": "hv", "width": 3 if ours else 2,
                      "dash": "solid" if ours else "dash"},
            )
        )  # fmt: skip
    return _layout(fig, "Buffer size K over time", 340, x="stream time (h)", y="K (h)")


def latency_chart(report: DisorderReport) -> go.Figure:
    names = list(METHODS)
    fig = go.Figure(
        go.Bar(
            x=[METHODS[n] for n in names],
            y=[report.methods[n].avg_latency_s / 3600 for n in names],
            marker_color=[COLOURS[n] for n in names],
        )
    )
    return _layout(fig, "Latency to first result", 340, y="hours (from window end)")


def accuracy_chart(report: DisorderReport, delta: float) -> go.Figure:
    names = list(METHODS)
    fig = go.Figure(
        go.Bar(
            x=[METHODS[n] for n in names],
            y=[100 * report.methods[n].provisional_accuracy for n in names],
            marker_color=[COLOURS[n] for n in names],
        )
    )
    fig.add_hline(
        y=100 * (1 - delta),
        line_dash="dash",
        line_color=ACCENT,
        annotation_text=f"target 1 - delta = {1 - delta:g}",
    )
    fig.update_yaxes(range=[min(80.0, 100 * (1 - 2 * delta)), 100.5])
    return _layout(fig, "Provisional results within eps", 340, y="% of results")


DASHES = {"ours": "solid", "mp_kslack": "dash", "fixed_watermark": "dot", "no_buffer": "dashdot"}


def cumulative_chart(report: DisorderReport) -> go.Figure:
    """Share of results within eps as corrections land; methods that overlap stay visible
    through their dashes, and a flat 100 % is said in the title."""
    fig = go.Figure()
    lowest = 100.0
    for name in METHODS:
        pts = np.asarray(report.methods[name].cumulative_accuracy, dtype=float).reshape(-1, 2)
        if len(pts):
            lowest = min(lowest, float(100 * pts[:, 1].min()))
        fig.add_trace(
            go.Scatter(
                x=pts[:, 0] / 3600, y=100 * pts[:, 1], mode="lines", name=METHODS[name],
                line={"color": COLOURS[name], "width": 3, "dash": DASHES[name]},
            )
        )  # fmt: skip
    fig.add_hline(y=100, line_dash="dot", line_color="#bbb", layer="below")
    fig.update_yaxes(range=[min(lowest, 99.0) - 0.5, 100.4])
    if lowest >= 100.0:
        fig.add_annotation(
            x=0.5, y=0.3, xref="paper", yref="paper", showarrow=False,
            text="every method at 100 % throughout", font={"color": "#555"},
        )  # fmt: skip
    return _layout(
        fig,
        "Cumulative accuracy",
        340,
        x="stream time (h)",
        y="% of results within eps",
    )
