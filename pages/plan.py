"""Plan & savings: the backup set, each sensor's status, the guarantee and what it saves."""

import streamlit as st

from engine.costs import compare_costs
from ui import charts, fleet, panels, plans, resources, savings, shell

shell.frame()
st.title("Backup plan and savings")
with panels.page_guard():
    data, plan = panels.page_plan()
    panels.guarantee(plan)
    st.subheader("Sensors")
    table = savings.display_table(plans.backup_table(plan), plans.unmeasured_label(plan))
    st.dataframe(
        table,
        hide_index=True,
        column_config=savings.TABLE_FORMAT,
        height=min(36 * (len(table) + 1) + 2, 740),
    )
    with st.expander("Model variances (conditional variance given the backup, and target)"):
        st.dataframe(table[savings.VARIANCE_COLUMNS], hide_index=True)
    st.subheader("Projected savings at fleet scale: what an operator pays for")
    whole = plans.range_plan(data, plan, resources.plan_cache())
    inputs = fleet.cost_inputs(plan, savings.measured_bytes_per_reading(), whole.backup_fraction)
    report = compare_costs(inputs)
    savings.cost_section(report, plan, whole)
    st.plotly_chart(charts.cost_bars(report))
