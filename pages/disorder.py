"""Disorder: out-of-order arrival, our adaptive K-slack against MP-K-slack and others."""

import streamlit as st

from ui import disorder, panels, shell, state
from ui.format import eps_text

shell.frame()
st.title("Out-of-order streams")
st.caption(
    "The chosen sensors are replayed with random arrival delays. Four buffers see the "
    "same tuples: ours (K adapted by a PD controller on window coverage), MP-K-slack "
    "(K = the largest lateness seen so far: how far behind the newest event time a tuple "
    "arrives), a fixed watermark and no buffer. Late tuples "
    "correct the results afterwards, so every method ends exact."
)
with panels.page_guard():
    data, params = state.planning_data(), state.params()
    if not panels.require_sensors(data):
        st.stop()
    n_rows, least = data.history.values.shape[0], disorder.least_rows(params)
    if not disorder.enough_rows(n_rows, params):
        st.stop()
    c1, c2, c3 = st.columns([2, 1, 1])
    disorder.remember_choices(least, n_rows)  # kept across page switches
    preset = c1.selectbox("Arrival delays", list(disorder.PRESETS), key="w_delays")
    rows = c2.number_input("Rows to replay", least, n_rows, step=24, key="w_disorder_rows")
    seed = c3.number_input("Random seed", 0, 10_000, key="w_seed")
    disorder.keep_choices()
    history = data.history.rows(0, int(rows))
    report = disorder.run(history, disorder.PRESETS[preset], params, int(seed))
    if report is None:
        st.stop()
    scored = disorder.scored_note(report, params)
    if scored is None:
        st.stop()
    target = eps_text(history.sensors, params)
    if params.eps_by_sensor:
        target += " (each sensor scored against its own unit's eps)"
    filled = data.history.report.n_values_filled
    st.caption(
        f"{report.stream['n_tuples']:,.0f} values replayed"
        + (
            f" (the loader filled in {filled:,} of the file's values: those replayed count "
            "as readings here)"
            if filled
            else ""
        )
        + f", {100 * report.stream['late_ratio']:.1f} % "
        f"out of order, max delay {report.stream['max_delay_s'] / 3600:.1f} h; quality target "
        f"{target}, delta {params.delta:g}, window {params.window}, slide "
        f"{params.effective_slide} ({params.aggregate}); "
        f"target coverage lambda = {report.lambda_thr:.2f}; {scored}."
    )
    st.dataframe(disorder.summary(report), hide_index=True, column_config=disorder.TABLE_FORMAT)
    st.info("\n\n".join(disorder.verdict(report, params.delta)))
    left, right = st.columns(2)
    left.plotly_chart(disorder.k_chart(report))
    right.plotly_chart(disorder.latency_chart(report))
    left.plotly_chart(disorder.accuracy_chart(report, params.delta))
    right.plotly_chart(disorder.cumulative_chart(report))
