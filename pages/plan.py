"""Plan & savings: the backup set, each sensor's status, the guarantee and what it saves."""

import streamlit as st

from ui import charts, panels, plans, savings, shell, widgets

shell.frame()
st.title("Backup plan and savings")
with panels.page_guard():
    data, plan = panels.page_plan()
    panels.guarantee(plan)
    st.subheader("Sensors")
    table = savings.display_table(plans.backup_table(plan))
    st.dataframe(
        table,
        hide_index=True,
        column_config=savings.TABLE_FORMAT,
        height=min(36 * (len(table) + 1) + 2, 740),
    )
    with st.expander("Model variances (conditional variance given the backup, and target)"):
        st.dataframe(table[savings.VARIANCE_COLUMNS], hide_index=True)
    st.subheader("Projected savings at fleet scale")
    fleet = widgets.fleet_inputs(
        len(plan.sensors), plan.sampling_interval_s, savings.measured_bytes_per_reading()
    )
    savings.metrics(plan, fleet)
    compare = savings.comparison(plan, fleet)
    st.dataframe(compare, hide_index=True, column_config=savings.FLEET_FORMAT)
    st.plotly_chart(charts.savings_bars(fleet, plan.backup_fraction))
