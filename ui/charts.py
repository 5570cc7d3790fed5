"""Plotly figures for the pages (no Streamlit here: figures in, figures out)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from engine.costs import CostReport
from engine.data import SensorHistory
from ui.format import format_money

BACKUP_COLOUR, REBUILT_COLOUR, ACCENT = "#d62728", "#1f77b4", "#2ca02c"
MAX_POINTS = 4000


def _layout(fig: go.Figure, title: str, height: int = 380, **axes: str) -> go.Figure:
    fig.update_layout(
        title=title,
        height=height,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.2},
    )
    if "x" in axes:
        fig.update_xaxes(title=axes["x"])
    if "y" in axes:
        fig.update_yaxes(title=axes["y"])
    return fig


def preview_chart(history: SensorHistory, sensors: Sequence[str], limit: int = 12) -> go.Figure:
    """Readings over time of up to ``limit`` sensors, spread over the choice (every k-th),
    thinned to ``MAX_POINTS`` rows."""
    step = max(1, history.values.shape[0] // MAX_POINTS)
    stride = -(-len(sensors) // limit)  # ceil: every group of a mixed choice shows up
    fig = go.Figure()
    for name in list(sensors)[::stride][:limit]:
        j = history.sensors.index(name)
        fig.add_trace(
            go.Scattergl(
                x=history.times[::step],
                y=history.values[::step, j],
                mode="lines",
                name=name,
                line={"width": 1},
            )
        )
    shown = len(list(sensors)[::stride][:limit])
    return _layout(fig, f"Readings ({shown} of {len(sensors)} chosen sensors)", 360, y="value")


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 tick values covering [lo, hi] on a log axis (at least the two ends' decades)."""
    if not (lo > 0 and hi > 0):
        return []
    ticks = []
    for power in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1):
        for m in (1.0, 2.0, 5.0):
            v = m * 10.0**power
            if lo <= v * (1 + 1e-9) and v <= hi * (1 + 1e-9):
                ticks.append(float(f"{v:.12g}"))
    return ticks


def whatif_chart(
    x: Sequence[float],
    y: Sequence[float],
    current: float,
    now: float,
    label: str,
    measured: Sequence[tuple[float, float]] = (),
) -> go.Figure:
    """Model projection of the backup fraction against one parameter (log x axis).

    ``now`` is the shown plan's backup fraction (the headline's), marked at
    ``current``; ``measured`` holds (x, backup fraction) pairs from backtests.
    """
    fig = go.Figure(
        go.Scatter(
            x=list(x),
            y=[100 * v for v in y],
            mode="lines+markers",
            name="model projection",
            line={"shape": "hv", "color": REBUILT_COLOUR},
        )
    )
    if measured:
        fig.add_trace(
            go.Scatter(
                x=[m[0] for m in measured], y=[100 * m[1] for m in measured],
                mode="markers+lines", name="backtest: mean over folds",
                marker={"symbol": "diamond", "size": 10, "color": ACCENT},
                line={"dash": "dot", "color": ACCENT},
            )
        )  # fmt: skip
    # A trace, not add_vline: shapes on a log axis take log10 coordinates. Its words go
    # in the legend: written beside the marker they ran off a narrow chart's edge.
    fig.add_trace(
        go.Scatter(
            x=[current, current, current],
            y=[0, 100 * now, 105],
            mode="lines+markers",
            line={"dash": "dash", "color": BACKUP_COLOUR},
            marker={"size": [0, 11, 0], "color": BACKUP_COLOUR},
            name=f"current plan: {label} = {current:g}, {100 * now:.1f} %",
            hovertemplate=f"now: {label} = {current:g}, {100 * now:.1f} %<extra></extra>",
        )
    )
    ticks = log_ticks(min(x), max(x))
    if len(ticks) > 6:  # a narrow column: 1 and 5 only, so labels stay level and whole
        ticks = [t for t in ticks if f"{t:g}".strip("0.")[0] in "15"]
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks], tickangle=0)
    fig.update_yaxes(range=[0, 105])
    return _layout(fig, f"Backup fraction vs {label}", 320, x=label, y="% of sensors backed up")


def measured_miss_chart(
    points: Sequence[tuple[float, float, float]],
    current: float,
    delta: float,
    label: str = "eps",
    crash: bool = False,
) -> go.Figure:
    """Backtest miss rates (the worst sensor's, and the largest 95 % bound of any sensor,
    which can be another's) against eps (or the factor every unit group's eps is
    multiplied by: ``label``), delta as a line. ``crash``: the rates are shares of
    (failure, window) pairs of the windows not backed up."""
    xs = [p[0] for p in points]
    fig = go.Figure(
        [
            go.Scatter(
                x=xs, y=[100 * p[1] for p in points], mode="lines+markers",
                name="worst sensor (measured)", marker={"color": BACKUP_COLOUR},
            ),
            go.Scatter(
                x=xs, y=[100 * p[2] for p in points], mode="lines",
                name="largest 95 % bound (any sensor)",
                line={"dash": "dot", "color": BACKUP_COLOUR},
            ),
        ]
    )  # fmt: skip
    fig.add_hline(y=100 * delta, line_dash="dash", line_color=ACCENT,
                  annotation_text=f"delta {100 * delta:g} %")  # fmt: skip
    fig.add_trace(
        go.Scatter(x=[current], y=[0], mode="markers", name=f"current {label}",
                   marker={"symbol": "triangle-up", "size": 12, "color": "#444"})
    )  # fmt: skip
    ticks = log_ticks(min(xs), max(xs)) if xs else []
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    fig.update_yaxes(rangemode="tozero")
    title = f"Backtest miss rate vs {label.split(' (')[0]}"  # whole in a half-width column
    unit = "% of (failure, window) pairs" if crash else "% of rebuilt windows"
    return _layout(fig, title, 320, x=label, y=unit)


def heatmap(
    corr: np.ndarray, sensors: Sequence[str], order: Sequence[int], backup: Sequence[str]
) -> go.Figure:
    """Correlation heatmap, rows in ``order``; backed-up sensors marked with a star."""
    names = [("★ " if sensors[i] in backup else "") + sensors[i] for i in order]
    z = corr[np.ix_(order, order)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=names,
            y=names,
            zmin=-1,
            zmax=1,
            colorscale="RdBu_r",
            colorbar={"title": "corr"},
            hovertemplate="%{y} / %{x}: %{z:.2f}<extra></extra>",
        )
    )
    # sensors are categories: numeric names (loop detector ids) would put rows at their
    # number on a linear axis, out of cluster order
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(showticklabels=False, type="category")  # the rows name the sensors
    # Every row is named (plotly would thin them out): smaller type and a taller figure
    # for many sensors, so 132 rows stay legible.
    font = 10 if len(names) <= 40 else 8 if len(names) <= 80 else 7
    fig.update_yaxes(tickmode="array", tickvals=names, tickfont={"size": font})
    size = int(min(1400, 260 + (font + 3) * len(sensors)))
    return _layout(fig, "Correlation, rows ordered by cluster (★ = backed up)", size)


LINE_COLOURS = {
    "storage": REBUILT_COLOUR,
    "write bandwidth": "#9467bd",
    "requests": "#999999",
    "compute": ACCENT,
}


def cost_bars(report: CostReport) -> go.Figure:
    """$ per month of each strategy, stacked by what is paid for (storage, bandwidth,
    requests, compute), the total on top."""
    strategies = [report.full, report.contracts["crash"], report.contracts["range"], report.none]
    names = [f"{s.name} contract" if s.name in report.contracts else s.name for s in strategies]
    fig = go.Figure()
    for line, colour in LINE_COLOURS.items():
        fig.add_trace(
            go.Bar(x=names, y=[s.lines()[line] for s in strategies], name=line,
                   marker_color=colour)
        )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=names, y=[s.total for s in strategies], mode="text",
            text=[format_money(s.total) for s in strategies], textposition="top center",
            showlegend=False, hoverinfo="skip",
        )
    )  # fmt: skip
    fig.update_layout(barmode="stack")
    top = max(s.total for s in strategies)
    fig.update_yaxes(rangemode="tozero", range=[0, 1.2 * top if top > 0 else 1.0])
    return _layout(fig, "What backup costs per month, by what is paid for", 340, y="$ a month")


def _band(x: pd.Series, truth: pd.Series, eps: float) -> list[go.Scatter]:
    """The truth ± eps band (an upper edge, then a lower edge filled up to it)."""
    edge = {"mode": "lines", "line": {"width": 0}, "hoverinfo": "skip"}
    return [
        go.Scatter(x=x, y=truth + eps, showlegend=False, **edge),
        go.Scatter(
            x=x,
            y=truth - eps,
            fill="tonexty",
            fillcolor="rgba(68,68,68,0.12)",
            name=f"truth ± eps ({eps:g})",
            **edge,
        ),
    ]


def recovery_chart(
    frame: pd.DataFrame, sensor: str, lost: tuple[object, object] | None, eps: float
) -> go.Figure:
    """Window aggregates of one sensor: truth, live and recovered; failure range shaded.

    ``frame`` columns: ``window_start``, ``truth``, ``live``, ``recovered``.
    """
    x = frame["window_start"]
    fig = go.Figure(
        go.Scatter(
            x=x, y=frame["truth"], name="true aggregate", mode="lines", line={"color": "#444444"}
        )
    )
    fig.add_traces(_band(x, frame["truth"], eps))
    fig.add_trace(
        go.Scatter(
            x=x,
            y=frame["live"],
            name="live result",
            mode="markers",
            marker={"color": REBUILT_COLOUR, "size": 6},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=frame["recovered"],
            name="recovered after failure",
            mode="markers",
            marker={"color": BACKUP_COLOUR, "size": 9, "symbol": "diamond"},
        )
    )
    if lost is not None:
        fig.add_vrect(
            x0=lost[0],
            x1=lost[1],
            fillcolor="rgba(214,39,40,0.12)",
            line_width=0,
            annotation_text="failure: lost range",
            annotation_position="top left",
        )
    return _layout(fig, f"{sensor}: recovered vs true window aggregates", 400, y="aggregate")


def error_histogram(errors: np.ndarray, eps: float, per_sensor: bool = False) -> go.Figure:
    """Absolute window errors of rebuilt sensors, against eps; with ``per_sensor`` each
    error is in its sensor's eps (divided by it) and the line is at 1, said so."""
    top = max(1.25 * eps, float(np.max(errors, initial=0.0)) * 1.05)
    fig = go.Figure(
        go.Histogram(
            x=errors,
            xbins={"start": 0.0, "end": top, "size": top / 25},
            marker_color=REBUILT_COLOUR,
            name="recovered windows",
        )
    )
    fig.update_xaxes(range=[0, top])
    said = "each sensor's eps" if per_sensor else f"eps = {eps:g}"
    fig.add_vline(x=eps, line_dash="dash", line_color=BACKUP_COLOUR, annotation_text=said)
    return _layout(
        fig,
        "Error of recovered window aggregates (rebuilt sensors)",
        320,
        x="|recovered - true| / sensor's eps" if per_sensor else "|recovered - true|",
        y="windows",
    )


def violation_bars(rates: dict[str, float], delta: float, title: str) -> go.Figure:
    """Per-sensor violation rate with delta as a line."""
    names = list(rates)
    values = [100 * rates[s] for s in names]
    colours = [BACKUP_COLOUR if v > 100 * delta else REBUILT_COLOUR for v in values]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=values,
            marker_color=colours,
            name="violation rate",
            text=[f"{v:.1f} %" for v in values],
            textposition="outside",
        )
    )
    fig.update_yaxes(range=[0, max(110.0 * delta, *values, 1.0) * 1.15])
    fig.update_xaxes(type="category")  # numeric sensor names are names, not positions
    fig.add_hline(
        y=100 * delta,
        line_dash="dash",
        line_color=BACKUP_COLOUR,
        annotation_text=f"delta = {delta:g}",
    )
    return _layout(fig, title, 320, y="% of windows with error > eps")


def job_batches_chart(batches: pd.DataFrame, delta: float) -> go.Figure:
    """A production job's per-micro-batch miss rate, per version, under the plan's own
    contract: a crash plan's batches the fraction of m-row losses touching their closed
    windows that miss (the crash check's, what delta is promised for), a range plan's the
    whole rebuilt windows that miss."""
    fig = go.Figure()
    wanted = ("contract", "crash_windows", "crash_misses", "version_pairs", "version_misses")
    extra = [c for c in wanted if c not in batches]
    batches = batches.reindex(columns=[*batches.columns, *extra])  # a job's older metrics
    crash = batches["contract"].eq("crash")
    windows = pd.to_numeric(batches["crash_windows"], errors="coerce").fillna(0.0)
    misses = pd.to_numeric(batches["crash_misses"], errors="coerce").fillna(0.0)
    # a range batch's own version's windows (one that straddles a re-plan is the older
    # version's record); a job before the count: every window the batch closed
    own = pd.to_numeric(batches["version_pairs"], errors="coerce")
    own_missed = pd.to_numeric(batches["version_misses"], errors="coerce")
    counted = own.notna()
    frame = batches.assign(
        scored=windows.where(crash, own.where(counted, batches["rebuilt_pairs"])),
        missed=misses.where(crash, own_missed.where(counted, batches["misses"])),
        unit=np.where(
            crash,
            "(window, rebuilt sensor) pairs (crash contract: m-row losses)",
            "(window, rebuilt sensor) pairs",
        ),
    )
    scored = frame[frame["scored"] > 0]
    for version, rows in scored.groupby("plan_version", sort=True):
        fig.add_trace(
            go.Scatter(
                x=rows["batch_id"],
                y=100 * rows["missed"] / rows["scored"],
                mode="lines+markers",
                name=f"version {version}",
                customdata=rows[["scored", "missed", "unit"]],
                hovertemplate="batch %{x}: %{y:.1f} % (%{customdata[1]:.4g} of "
                "%{customdata[0]} %{customdata[2]})<extra></extra>",
            )
        )
    fig.add_hline(
        y=100 * delta,
        line_dash="dash",
        line_color=BACKUP_COLOUR,
        annotation_text=f"delta = {delta:g}",
    )
    if crash.all() and len(batches):
        y = "% of m-row losses with error > eps"
    elif not crash.any():
        y = "% of rebuilt windows with error > eps"
    else:
        y = "% missing eps (each batch's contract)"
    return _layout(fig, "Miss rate of each micro-batch's closed windows", 320, x="micro-batch", y=y)


def mode_bars(table: pd.DataFrame) -> go.Figure:
    """Backup readings each mode stores, labelled with the windows it recovered; a mode not
    run has no bar and says so (its rows were not measured), with its projected windows."""
    rows = pd.to_numeric(table["backup readings"], errors="coerce")
    labels = [
        ("not run" if np.isnan(r) else f"{int(r)} readings")
        + f", {w}/{lost} windows recovered, {f}"
        for r, w, lost, f in zip(
            rows, table["windows recovered"], table["windows lost"], table["figures"], strict=True
        )
    ]
    fig = go.Figure(
        go.Bar(
            x=rows.fillna(0),  # no bar, the label says "not run"
            y=table["mode"],
            orientation="h",
            text=labels,
            textposition="auto",
            marker_color=[BACKUP_COLOUR, REBUILT_COLOUR, "#999999"][: len(table)],
        )
    )
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Backup readings read for recovery, per mode", 260, x="backup readings")
