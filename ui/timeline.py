"""Figures of the live pipeline over time (no Streamlit): one shared time axis.

``frame`` is ``dashboard.points_frame``: one row per micro-batch with a ``time``
column; ``events`` is ``dashboard.events_frame``. Alerts, re-plans, failures and
recoveries are drawn as vertical lines through every panel, so a jump in the
miss rate can be read against the re-plan that followed it.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ui.charts import ACCENT, BACKUP_COLOUR, REBUILT_COLOUR

EVENT_COLOURS = {
    "alert": "#ff7f0e",
    "replan": "#9467bd",
    "failure": BACKUP_COLOUR,
    "recovery": ACCENT,
    "resume": "#17becf",
    "stop": "#7f7f7f",
    "exposure": "#bcbd22",
    "compaction": "#d62728",
}
WORST_COLOURS = ("#8c564b", "#e377c2", "#7f7f7f")


def _events(fig: go.Figure, events: pd.DataFrame, rows: int) -> None:
    """Vertical lines through every panel plus hoverable markers in the first one.

    The lines go into the layout in one assignment: ``fig.add_vline`` per event and
    panel re-validated every shape each call, and the dashboard's figure took 1.9 s to
    build with 8 events (40 lines) on a loaded 2-core machine, longer than the 1.5 s
    between its redraws, so the Live page never went idle.
    """
    if events is None or not len(events):
        return
    axes = [_refs(fig, row) for row in range(1, rows + 1)]
    lines = []
    for kind, group in events.groupby("kind"):
        colour = EVENT_COLOURS.get(str(kind), "#333")
        line = {"color": colour, "dash": "dot", "width": 1}
        lines += [
            {"type": "line", "xref": x, "yref": f"{y} domain", "x0": t, "x1": t, "y0": 0,
             "y1": 1, "line": line}
            for t in group["time"]
            for x, y in axes
        ]  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=group["time"],
                y=[0] * len(group),
                mode="markers",
                marker={"color": colour, "symbol": "triangle-up", "size": 11},
                name=str(kind),
                hovertext=group["text"],
                hoverinfo="text+x",
            ),
            row=1,
            col=1,
        )
    fig.update_layout(shapes=[*fig.layout.shapes, *lines])


def _refs(fig: go.Figure, row: int) -> tuple[str, str]:
    """The x and y axis references of panel ``row`` ('x5', 'y6': a secondary y shifts them)."""
    panel = fig.get_subplot(row, 1)
    return tuple(  # type: ignore[return-value]
        axis.plotly_name.replace("axis", "") for axis in (panel.xaxis, panel.yaxis)
    )


def _line(fig: go.Figure, x: pd.Series, y: pd.Series, name: str, row: int, **kw: object) -> None:
    fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name, **kw), row=row, col=1)


def pipeline_timeline(
    frame: pd.DataFrame, events: pd.DataFrame, delta: float, trigger_s: float
) -> go.Figure:
    """Input rate, batch duration, backlog, backup volume and shadow miss rate over time."""
    titles = (
        "Input rate (readings/s)",
        "Batch duration (ms)",
        "Backlog (readings landed, not processed)",
        "Backup written per batch (readings; kB dotted)",
        "Shadow miss rate (%), every plan version: pooled and worst sensors, against delta",
    )
    fig = make_subplots(
        rows=5, cols=1, shared_xaxes=True, vertical_spacing=0.045, subplot_titles=titles,
        specs=[[{}], [{}], [{}], [{"secondary_y": True}], [{}]],
    )  # fmt: skip
    x = frame["time"]
    _line(fig, x, frame["rows_per_second"], "input rate", 1, line={"color": REBUILT_COLOUR})
    _line(fig, x, frame["duration_ms"], "batch duration", 2, line={"color": "#444"})
    if trigger_s > 0:
        fig.add_hline(y=1000 * trigger_s, line={"dash": "dash", "color": "#999"}, row=2, col=1)
    # No area fill: plotly fills across the gap a failure leaves.
    _line(fig, x, frame["backlog"], "backlog", 3, line={"color": "#ff7f0e"})
    fig.add_trace(
        go.Bar(x=x, y=frame["backup_rows"], name="backup readings", marker_color=BACKUP_COLOUR),
        row=4, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=x, y=frame["backup_bytes"] / 1e3, name="backup kB", mode="lines",
            line={"color": "#444", "dash": "dot"},
        ),
        row=4, col=1, secondary_y=True,
    )  # fmt: skip
    _line(fig, x, 100 * frame["shadow_pooled"], "miss rate, pooled", 5, line={"color": ACCENT})
    for i, col in enumerate(c for c in frame.columns if c.startswith("worst: ")):
        colour = WORST_COLOURS[i % len(WORST_COLOURS)]
        _line(fig, x, 100 * frame[col], col, 5, line={"color": colour, "width": 1})
    fig.add_hline(
        y=100 * delta, line={"dash": "dash", "color": BACKUP_COLOUR}, row=5, col=1,
        annotation_text=f"delta {100 * delta:g} %", annotation_position="top left",
    )  # fmt: skip
    _events(fig, events, 5)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(
        height=980, margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.06}, bargap=0.2,
    )  # fmt: skip
    return fig


def _time_unit(seconds: pd.Series) -> tuple[float, str]:
    top = float(seconds.max()) if len(seconds.dropna()) else 0.0
    return (3600.0, "h") if top >= 2 * 3600 else (60.0, "min") if top >= 120 else (1.0, "s")


def disorder_timeline(frame: pd.DataFrame, events: pd.DataFrame) -> go.Figure:
    """K over time with the watermark gap, late tuples per batch, result versions."""
    size, unit = _time_unit(pd.concat([frame["k_s"], frame["watermark_gap_s"]]))
    titles = (
        f"Buffer K and watermark gap ({unit}; event time)",
        "Late tuples per batch",
        "Result rows over the plotted batches (cumulative): provisional, corrected, final",
    )
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=titles
    )
    x = frame["time"]
    _line(fig, x, frame["k_s"] / size, "K", 1, line={"color": BACKUP_COLOUR, "shape": "hv"})
    _line(fig, x, frame["watermark_gap_s"] / size, "watermark gap", 1, line={"color": "#444"})
    fig.add_trace(
        go.Bar(x=x, y=frame["late"], name="late tuples", marker_color="#ff7f0e"), row=2, col=1
    )
    for name, colour in (("provisional", "#aec7e8"), ("corrections", "#ff7f0e"), ("final", ACCENT)):
        _line(fig, x, frame[name].cumsum(), name, 3, line={"color": colour})
    _events(fig, events, 3)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(
        height=620, margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend={"orientation": "h"}
    )
    return fig
