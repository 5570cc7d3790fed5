"""Widgets that read the operator's choices into engine configs.

Widget values survive page switches because each widget is seeded from the
session's ``PlanParameters`` (Streamlit forgets a widget's key when a page
without it runs).
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from engine.aggregates import aggregate_names
from engine.data import LoadOptions
from engine.data.options import UNIT_WORDS, parse_step
from engine.errors import EngineError, ParameterError
from engine.live import default_exposure
from engine.planning import PlanParameters
from engine.planning.horizon import HORIZON_MIN_WINDOWS, default_horizon
from ui import state

EXACT_MAX_N = 20
AUTO_UNIT = "auto"  # the numeric time unit not said: the loader's own rules (as the CLI)
DELTAS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
METHOD_HELP = (
    "greedy: ours (fast, near-minimal); paper: the seed's greedy, literally; "
    f"exact: branch and bound, the true minimum (only up to {EXACT_MAX_N} sensors)"
)


def _seed(key: str, value: object) -> None:
    if key not in st.session_state:
        st.session_state[key] = value


def load_options() -> LoadOptions:
    """Layout, time column, numeric time unit, clock and sensors to read of an upload
    (auto-detected, every column, by default)."""
    cols = st.columns(3)
    layout = cols[0].selectbox(
        "Layout",
        ["auto", "wide", "long"],
        help="wide: one column per sensor; long: (time, sensor, value) rows",
        key="w_layout",
    )
    time_column = cols[1].text_input(
        "Time column", "", placeholder="auto-detect", key="w_time_column"
    )
    units = [AUTO_UNIT, *UNIT_WORDS]
    unit = cols[2].selectbox(
        "Numeric time unit",
        units,
        format_func=lambda u: "auto-detect" if u == AUTO_UNIT else UNIT_WORDS[u],
        help="what a time column of plain numbers counts, since 1970-01-01; auto-detect "
        "reads hours when the column's name says 'hour', else seconds, and refuses "
        "numbers that look like dates (Excel days, YYYYMMDD), as the CLI does without "
        "--time-unit",
        key="w_time_unit",
    )
    clock = st.text_input(
        "Clock step",
        "",
        placeholder="times as read",
        help="put the readings onto one clock of this step, e.g. 1min or 30s: each reading "
        "moves to the nearest step and a sensor's readings in one step are averaged. For "
        "sensors read at other times than each other (loggers on their own clocks), which "
        "otherwise share no rows and are mostly filled in",
        key="w_clock",
    )
    try:
        clock_s = parse_step(clock) if clock.strip() else None
    except ParameterError as err:
        st.error(f"Clock step: {err}; the times are read as they are")
        clock_s = None
    read = st.text_input(
        "Sensors to read",
        "",
        placeholder="every sensor",
        help="names or globs, comma-separated (e.g. *_TEMP,Dongsi_*), as the CLI's --sensors: "
        "the others are left out before missing values are handled, so a dead sensor (no "
        "reading at all) or one that drops many rows does not block the file",
        key="w_read_sensors",
    )
    items = tuple(s.strip() for s in read.split(",") if s.strip())
    return LoadOptions(
        layout=layout,
        time_column=time_column.strip() or None,
        numeric_time_unit=None if unit == AUTO_UNIT else unit,
        clock_s=clock_s,
        sensors=items or None,
    )


def _set_selection(sensors: list[str]) -> None:
    st.session_state["w_sensors"] = sensors


def sensor_picker(sensors: tuple[str, ...]) -> list[str]:
    """Multiselect of the sensors to plan for, with quick groups by name suffix."""
    _seed("w_sensors", state.selection())
    groups = state.sensor_groups(sensors)
    if 1 < len(groups) <= 12:
        # at most 6 buttons a row, so "only PM2.5 (12)" is never cut to "onl..."
        cols = [c for i in range(0, len(groups) + 2, 6) for c in st.columns(6)]
        for col, (name, members) in zip(cols, groups.items(), strict=False):
            col.button(
                f"only {name} ({len(members)})",
                on_click=_set_selection,
                args=(members,),
                key=f"w_group_{name}",
                width="stretch",
            )
        cols = cols[len(groups) : len(groups) + 2]
        cols[-2].button(
            "all",
            on_click=_set_selection,
            args=(list(sensors),),
            key="w_group_all",
            width="stretch",
        )
        default = state.default_selection(sensors)
        cols[-1].button(
            "default",
            on_click=_set_selection,
            args=(default,),
            key="w_group_default",
            width="stretch",
        )
    chosen = st.multiselect(
        "Sensors",
        list(sensors),
        key="w_sensors",
        help="eps is in the aggregate's unit: mixed units get one eps per unit group on Tune.",
    )
    before = state.selection()
    if chosen != before:
        state.set_selection(chosen)
        if len(chosen) >= state.MIN_SENSORS:
            if state.reselect_parameters(before, chosen):
                st.info(
                    "The chosen sensors have a unit no eps was set for: its group's eps is "
                    "its default (see Tune); the other parameters are kept."
                    if state.params().eps_by_sensor
                    else f"eps reset to {state.params().eps:g}: the chosen sensors have a unit "
                    "the last eps was not set for; the other parameters are kept (see Tune)."
                )
            _forget_parameter_widgets()
    return chosen


def _forget_parameter_widgets() -> None:
    keys = ("w_eps", "w_delta", "w_window", "w_slide", "w_agg", "w_method", "w_horizon")
    for key in (*keys, "w_exposure"):
        st.session_state.pop(key, None)


def _seed_parameters(p: PlanParameters, n_sensors: int) -> None:
    _seed("w_eps", float(p.eps))
    _seed("w_delta", p.delta if p.delta in DELTAS else 0.05)
    _seed("w_window", int(p.window))
    _seed("w_slide", int(p.effective_slide))
    _seed("w_agg", p.aggregate)
    _seed("w_method", p.method if (p.method != "exact" or n_sensors <= EXACT_MAX_N) else "greedy")
    _seed("w_horizon", int(p.horizon or 0))
    _seed("w_exposure", int(p.exposure or 0))


def _window_changed() -> None:
    """A tumbling window stays tumbling: its slide follows the new window."""
    if state.params().slide is None:
        st.session_state["w_slide"] = int(st.session_state["w_window"])


def _window_widgets(left: DeltaGenerator, right: DeltaGenerator, n_rows: int) -> tuple[int, int]:
    """Window and slide in readings; the slide never exceeds the window."""
    window = left.number_input(
        "Window (readings)",
        min_value=1,
        max_value=max(1, n_rows // 4),
        step=1,
        key="w_window",
        on_change=_window_changed,
    )
    if st.session_state["w_slide"] > window:  # before the slide widget exists in this run
        st.session_state["w_slide"] = int(window)
    slide = right.number_input(
        "Slide (readings; = window: tumbling)",
        min_value=1,
        max_value=int(window),
        step=1,
        key="w_slide",
    )
    return int(window), int(slide)


HORIZON_HELP = (
    "Rows this plan will be used before it is re-planned. Calibration aims at the miss "
    "rate of a plan kept this long, the backtest keeps each fold's plan this long and "
    "scores every window in it, and the exported config's valid_until follows from it. "
    "0 uses the default: whole windows covering about a day of readings, at least "
    f"{HORIZON_MIN_WINDOWS} windows, at most a quarter of the history."
)


def _horizon_widget(col: DeltaGenerator, n_rows: int, window: int, interval_s: float) -> int | None:
    """The plan's horizon in rows; None (the input's 0) for the derived default."""
    default = default_horizon(n_rows, window, interval_s)
    rows = col.number_input(
        f"Horizon (rows the plan is used; 0: default, {default:,})",
        min_value=0,
        max_value=max(1, n_rows),
        step=1,
        key="w_horizon",
        help=HORIZON_HELP,
    )
    return int(rows) or None


EXPOSURE_HELP = (
    "The crash contract: the most consecutive rows one failure can lose. The pipeline "
    "commits the open windows' state with every micro-batch, so a crash loses the batch in "
    "flight only; the plan is calibrated for losing that many rows at any position, and the "
    "live pipeline backs up every sensor for a batch that holds more. The Live page's "
    "replay commits at most this many rows a batch (default: a quarter window, rounded "
    "up). 0: the range contract, whole windows rebuilt (a lost machine with its state, "
    "or a recovered range); its figure is shown beside the crash contract's either way."
)


def _exposure_widget(col: DeltaGenerator, window: int) -> int | None:
    """The crash contract's exposure in rows; None (the input's 0) for the range contract.

    A smaller window lowers the most it can be: the exposure is clamped to it here, as
    Streamlit would reset an out-of-range value to 0, the range contract."""
    most = max(1, 4 * int(window))
    asked = st.session_state.get("w_exposure") or 0
    if asked > most:  # before the widget exists in this run
        col.info(
            f"Exposure lowered from {asked} to {most} rows: a "
            f"window of {window} rows allows at most {most}; the crash contract stays."
        )
        st.session_state["w_exposure"] = most
    rows = col.number_input(
        f"Exposure: rows a failure loses (0: whole windows; default {default_exposure(window)})",
        min_value=0,
        max_value=most,
        step=1,
        key="w_exposure",
        help=EXPOSURE_HELP,
    )
    return int(rows) or None


def parameter_widgets(
    n_sensors: int, n_rows: int, single_eps: bool = True, sampling_interval_s: float = 0.0
) -> PlanParameters | None:
    """eps, delta, window, slide, aggregate, method and horizon -> ``PlanParameters``.

    ``single_eps=False``: eps is set per unit group (``ui.unit_eps``), so the single
    eps input is shown disabled. Returns None (after an ``st.error`` naming the
    value) when they are invalid.
    """
    p = state.params()
    _seed_parameters(p, n_sensors)
    c1, c2, c3 = st.columns(3)
    if single_eps:
        eps = c1.number_input(
            "eps: tolerance (unit of the aggregate)",
            min_value=1e-6,
            step=0.1,
            format="%.3g",
            key="w_eps",
        )
    else:  # the single eps is not in force: never show its stale value
        c1.text_input(
            "eps: tolerance (unit of the aggregate)",
            "one eps per unit group, below",
            disabled=True,
            key="w_eps_per_unit_note",
        )
        eps = p.eps
    delta = c2.select_slider("delta: allowed miss rate", DELTAS, key="w_delta")
    agg = c3.selectbox("Aggregate", aggregate_names(), key="w_agg")
    c4, c5, c6 = st.columns(3)
    window, slide = _window_widgets(c4, c5, n_rows)
    methods = ["greedy", "paper"] + (["exact"] if n_sensors <= EXACT_MAX_N else [])
    if st.session_state["w_method"] not in methods:
        st.session_state["w_method"] = "greedy"
    method = c6.selectbox("Method", methods, key="w_method", help=METHOD_HELP)
    h1, h2, _ = st.columns(3)
    horizon = _horizon_widget(h1, n_rows, window, sampling_interval_s)
    exposure = _exposure_widget(h2, window)
    try:
        asked = p.with_query(
            eps=float(eps),
            delta=float(delta),
            window=window,
            slide=None if slide == window else slide,
            aggregate=agg,
            horizon=horizon,
            exposure=exposure,
        )
        new = replace(asked, method=method)
    except EngineError as err:
        st.error(str(err))
        return None
    state.set_params(new)
    return new


def auto_backtest_toggle() -> bool:
    _seed("w_auto", state.auto_backtest())
    value = st.toggle(
        "Backtest every change automatically",
        key="w_auto",
        help="Off: changes show an instant preview (model only) until you press Run backtest.",
    )
    st.session_state[state.AUTO_BACKTEST] = bool(value)
    return bool(value)
