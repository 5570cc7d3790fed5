"""Tune: eps, delta, window, slide, aggregate, method; instant re-plan and what-if curves."""

import time

import streamlit as st

from ui import charts, panels, plans, resources, shell, state, unit_eps, whatif, widgets

shell.frame()
st.title("Tune")
with panels.page_guard():
    data = state.planning_data()
    if not panels.require_sensors(data):
        st.stop()
    n, rows = len(data.history.sensors), data.history.values.shape[0]
    name = state.current_dataset().name
    st.caption(f"Planning for {n} sensors, {rows:,} readings each ({name}).")
    live = panels.live_plan(data)
    if live is not None:  # the plan in force first; what is tuned below applies at a restart
        panels.live_line(live)
    single = not (
        unit_eps.mixed_units(data.history.sensors, state.params()) and unit_eps.per_unit_on()
    )
    interval = data.history.report.sampling_interval_s
    params = widgets.parameter_widgets(n, rows, single_eps=single, sampling_interval_s=interval)
    widgets.auto_backtest_toggle()
    if params is None:
        st.stop()
    params = unit_eps.unit_eps_widgets(data.history, params)
    t0 = time.perf_counter()
    plan = panels.current_plan(data, params)
    if not plan.measured:
        st.caption(f"Re-planned in {1000 * (time.perf_counter() - t0):.0f} ms (model only).")
    panels.status_line(plan)
    panels.guarantee(plan)
    curves = plans.whatif_curves(data, plan, resources.plan_cache())
    measured = whatif.measured_points(data, params)
    st.subheader("What if: backup fraction (model projection; diamonds: backtests' mean)")
    c1, c2 = st.columns(2)
    # with one eps per unit group the axis is the factor every group's eps is scaled by
    by_eps = [(m.factor if params.eps_by_sensor else m.eps, m.backup_fraction) for m in measured]
    now = curves.now  # the shown plan's own figure: marker = headline
    eps_x, eps_now, eps_label = plans.eps_axis(curves, params)
    c1.plotly_chart(
        charts.whatif_chart(eps_x, curves.fraction_by_eps, eps_now, now, eps_label, by_eps)
    )
    c2.plotly_chart(
        charts.whatif_chart(curves.delta, curves.fraction_by_delta, params.delta, now, "delta")
    )
    whatif.caption(curves, params)
    whatif.measured_section(data, params, measured)
