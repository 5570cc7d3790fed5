"""Plan & savings: the backup set, each sensor's status, the guarantee and what it saves."""

import pandas as pd
import streamlit as st

from ui import charts, panels, plans, savings, shell, widgets

shell.frame()
st.title("Backup plan and savings")
with panels.page_guard():
    data, plan = panels.page_plan()
    panels.guarantee(plan)
    st.subheader("Sensors")
    table = pd.DataFrame(plans.backup_table(plan))
    st.dataframe(
        table,
        hide_index=True,
        column_config=savings.TABLE_FORMAT,
        height=min(36 * (len(table) + 1) + 2, 740),
    )
    st.subheader("Projected savings")
    price, days, size = widgets.storage_price()
    s = plan.savings(size)
    savings.metrics(s, s.cost_per_month(price, days))
    compare = savings.comparison(plan, s, price, days)
    st.dataframe(compare, hide_index=True)
    st.plotly_chart(charts.savings_bars(compare))
