"""One eps per unit group: the Tune page's tolerance widgets for mixed-unit sensors.

eps is in the aggregate's unit, so sensors of different units (degC, ug/m3,
hPa) need different tolerances. Units are guessed from the sensor names
(``engine.data.units``); the operator corrects them with ``SENSOR_OR_GLOB = UNIT``
lines. With more than one unit group, each group gets its own eps (seeded at a
tenth of the group's typical spread, like the single default), carried into the
plan as per-sensor eps.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from engine.data import SensorHistory
from engine.data.units import parse_unit_overrides, unit_groups
from engine.errors import EngineError
from engine.planning import PlanParameters
from ui import state

PER_UNIT = "eps_per_unit"  # the operator's choice, kept across pages (not a widget key)
MAX_COLUMNS = 3


def per_unit_on() -> bool:
    """Whether eps is set per unit group (the single eps input is then off).

    The toggle's value of this run when it exists (read before the toggle is drawn),
    else the choice kept from an earlier page.
    """
    if "w_eps_per_unit" in st.session_state:
        return bool(st.session_state["w_eps_per_unit"])
    return bool(st.session_state.get(PER_UNIT, True))


def mixed_units(sensors: tuple[str, ...], p: PlanParameters) -> bool:
    """More than one unit group among ``sensors`` (with the operator's corrections)."""
    return len(unit_groups(sensors, p.units)) > 1


def _unit_overrides(sensors: tuple[str, ...], p: PlanParameters) -> tuple[tuple[str, str], ...]:
    if "w_unit_lines" not in st.session_state:
        st.session_state["w_unit_lines"] = "\n".join(f"{s} = {u}" for s, u in p.units)
    with st.expander("Units of the sensors (guessed from the names; correct them here)"):
        text = st.text_area(
            "Unit corrections, one `SENSOR_OR_GLOB = UNIT` per line",
            key="w_unit_lines",
            placeholder="*_CO = mg/m3\nnode07 = degC",
            help="Names ending in _TEMP, _DEWP, _degC are degC; _PM2.5, _PM10, _SO2 ug/m3; "
            "_PRES, _hPa hPa; _pct %; unknown names get a group of their own pattern.",
        )
        try:
            overrides = parse_unit_overrides(text, sensors)
        except EngineError as err:
            st.error(f"{err}; the last good units are kept")
            overrides = p.units
        groups = unit_groups(sensors, overrides)
        st.dataframe(
            [{"unit": u, "sensors": len(m), "members": ", ".join(m)} for u, m in groups.items()],
            hide_index=True,
        )
    return overrides


def _group_inputs(
    history: SensorHistory, groups: dict[str, list[str]], p: PlanParameters
) -> tuple[tuple[str, float], ...]:
    given = dict(p.eps_by_sensor)
    pairs: list[tuple[str, float]] = []
    items = list(groups.items())
    for row in range(0, len(items), MAX_COLUMNS):
        cols = st.columns(MAX_COLUMNS)
        for col, (unit, members) in zip(cols, items[row : row + MAX_COLUMNS], strict=False):
            key = f"w_eps_unit_{unit}"
            if key not in st.session_state:
                kept = [given[s] for s in members if s in given]  # a sensor added keeps its group's
                st.session_state[key] = kept[0] if kept else state.group_default(history, members)
            value = col.number_input(
                f"eps for {unit} ({len(members)} sensors)",
                min_value=1e-6,
                step=0.1,
                format="%.3g",
                key=key,
                help=f"Tolerance in {unit}: "
                + ", ".join(members[:8])
                + (" ..." if len(members) > 8 else ""),
            )
            pairs += [(s, float(value)) for s in members]
    return tuple(pairs)


def unit_eps_widgets(history: SensorHistory, p: PlanParameters) -> PlanParameters:
    """Unit corrections and, for mixed units, one eps per group -> ``PlanParameters``."""
    sensors = history.sensors
    overrides = _unit_overrides(sensors, p)
    groups = unit_groups(sensors, overrides)
    if len(groups) < 2:
        return _keep(replace(p.with_query(eps_by_sensor=()), units=overrides))
    if "w_eps_per_unit" not in st.session_state:
        st.session_state["w_eps_per_unit"] = per_unit_on()
    on = st.toggle(
        f"One eps per unit group ({len(groups)} units among the chosen sensors)",
        key="w_eps_per_unit",
        help="eps is in the aggregate's unit: 2 degC and 2 ug/m3 are not the same tolerance.",
    )
    st.session_state[PER_UNIT] = bool(on)
    per = _group_inputs(history, groups, p) if on else ()
    return _keep(replace(p.with_query(eps_by_sensor=per), units=overrides))


def _keep(new: PlanParameters) -> PlanParameters:
    state.set_params(new)
    return new
