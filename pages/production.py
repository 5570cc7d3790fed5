"""Production: watch a `python -m engine run` job from its backup, and rebuild a lost range."""

import streamlit as st

from ui import job_events, panels, production, shell

shell.frame()
st.title("Production job")
st.caption(
    "A job started with `python -m engine run` (the command on the Export page) keeps its "
    "plan versions, per-batch metrics, every closed window's shadow check and its alerts "
    "beside the backup. This page reads them back with DuckDB; no Spark is needed."
)
backup = production.backup_input()
if not backup:
    st.info("Give the job's --backup location to see what it has done.")
else:
    follow = st.toggle(
        f"Follow the job: read it again every {production.FOLLOW_S} s", key="prod_follow"
    )

    @st.fragment(run_every=production.FOLLOW_S if follow else None)
    def board() -> None:
        with panels.page_guard():
            status = production.load(backup)
            c1, c2 = st.columns([1, 5])
            c1.button("Refresh", key="prod_refresh")
            c2.caption(f"Read at {production.now_utc()} UTC.")
            production.headline(status)
            production.live_rates(status)
            production.batches_chart(status)
            st.subheader("Plan versions")
            production.versions_table(status)
            st.subheader("Alerts, re-plans and expiries")
            job_events.show_events(status)
            st.subheader("Rebuild a lost range")
            production.recover_range(status)
            st.subheader("Housekeeping")
            production.housekeeping(status)

    board()
