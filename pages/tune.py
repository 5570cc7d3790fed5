"""Tune: eps, delta, window, slide, aggregate, method; instant re-plan and what-if curves."""

import time

import streamlit as st

from ui import charts, panels, plans, resources, state, unit_eps, widgets

st.title("Tune")
with panels.page_guard():
    data = state.planning_data()
    if not panels.require_sensors(data):
        st.stop()
    n, rows = len(data.history.sensors), data.history.values.shape[0]
    name = state.current_dataset().name
    st.caption(f"Planning for {n} sensors, {rows:,} readings each ({name}).")
    single = not (
        unit_eps.mixed_units(data.history.sensors, state.params()) and unit_eps.per_unit_on()
    )
    params = widgets.parameter_widgets(n, rows, single_eps=single)
    if params is None:
        st.stop()
    params = unit_eps.unit_eps_widgets(data.history, params)
    auto = widgets.auto_backtest_toggle()
    cache = resources.plan_cache()
    t0 = time.perf_counter()
    with st.spinner("Fitting the model and calibrating targets...", show_time=True):
        preview = plans.preview_plan(data, params, cache)
    st.caption(f"Re-planned in {1000 * (time.perf_counter() - t0):.0f} ms (model only).")
    measured = plans.cached_measured_plan(data, params, cache)
    panels.status_line(measured or preview)
    panels.guarantee(measured or preview)
    if measured is None and auto and panels.run_backtest(data, params) is not None:
        st.rerun()
    elif measured is None:
        panels.backtest_button(data, params)
    with st.spinner("Projecting the what-if curves...", show_time=True):
        curves = plans.whatif_curves(data, preview, cache)
    st.subheader("What if: backup fraction (model projections, not backtested)")
    c1, c2 = st.columns(2)
    now = preview.backup_fraction
    eps_x, eps_now, eps_label = plans.eps_axis(curves, params)
    c1.plotly_chart(charts.whatif_chart(eps_x, curves.fraction_by_eps, eps_now, now, eps_label))
    c2.plotly_chart(
        charts.whatif_chart(curves.delta, curves.fraction_by_delta, params.delta, now, "delta")
    )
    st.caption(
        f"Curves: {curves.method} selection re-run on the fitted model for each value "
        f"({params.aggregate}, window {params.window}); the delta curve rescales the "
        "variance targets as the model's formula does. Only a backtest measures a plan."
    )
