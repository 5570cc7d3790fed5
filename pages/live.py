"""Live pipeline: stream the current dataset with the current plan, fail it, recover it."""

import streamlit as st

from ui import dashboard, live, panels, recovery, resources, shell

shell.frame()
st.title("Live pipeline")
with panels.page_guard():
    data, plan = panels.page_plan()
    manager = resources.pipeline_manager()
    running = manager.status().state in live.ACTIVE
    c1, c2, c3, c4, c5 = st.columns([1, 1, 1, 1, 1])
    mode = c1.selectbox(
        "Backup mode",
        ["approx", "full", "none"],
        key="w_mode",
        help="approx: the plan's backup set; full: every sensor; none: nothing",
    )
    rate = c2.select_slider(
        "Replay speed (rows/s)", live.RATES, value=live.DEFAULT_RATE, key="w_rate"
    )
    disorder = st.toggle(
        "Out-of-order arrivals (adaptive K-slack, late-tuple corrections)",
        key="w_live_disorder",
        help="Readings arrive with random delays; results are provisional, then corrected.",
    )
    now = manager.status()
    st.session_state.setdefault("w_replan", True)
    if running and now.replan_every_rows:
        live.replanning_switch(now.scheduled_replanning)
        # the next start's choice: kept across runs that do not draw its toggle
        # (Streamlit drops an undrawn widget's value at the end of the run)
        st.session_state["w_replan"] = st.session_state["w_replan"]
        scheduled = bool(st.session_state["w_replan"])
    else:
        scheduled = st.toggle(
            "Re-plan on schedule (off: the plan expires at its horizon)",
            key="w_replan",
            help="Every horizon rows a fresh plan is fitted on the stream's recent rows; "
            "alerts of the live monitor re-plan too.",
        )
    if running and now.plan_version is not None and st.button("Re-plan now", key="replan_now"):
        live.replan_now()
    live.start_button(c3, data, plan.parameters, mode, rate, disorder, running, scheduled)
    failed = manager.status().state == "failed"
    running_plan = live.plan_running(plan)  # the status is judged by the run's own plan
    kind = st.radio(
        "Failure to simulate",
        list(dashboard.FAILURE_LABELS),
        index=0 if running_plan.parameters.exposure is not None else 1,
        format_func=dashboard.FAILURE_LABELS.get,
        horizontal=True,
        key="w_failure_kind",
        disabled=failed,
    )
    if c4.button(
        "Recover" if failed else "Simulate failure",
        key="simulate_failure",
        disabled=manager.status().state not in ("running", "failed"),
    ):
        dashboard.fail_and_recover(already_failed=failed, kind=kind)
    c5.button(  # a callback: the page then draws Start enabled in the same run
        "Stop",
        disabled=manager.status().state not in live.ACTIVE,
        key="stop_pipeline",
        on_click=live.stop,
    )
    live.contract_note(running_plan)
    live.ownership_note()
    live.audit_history()
    live.split_note(data)
    dashboard.live_dashboard(running_plan.parameters.delta)
    report = live.last_report()
    if report is None:
        st.caption(
            "Start the pipeline, let a few batches through, then press Simulate failure: a "
            "crash kills the query in a micro-batch (its input is lost, the window state "
            "kept, its rows rebuilt from the backup); a machine loss also discards the state "
            "and unsaved input, and every open window is rebuilt from the backup."
        )
        st.stop()
    running = manager.status().state in live.ACTIVE
    recovery.recovery_section(data.history, plan, report, running)
