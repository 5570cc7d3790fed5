"""Page building blocks shared by several pages: the plan in force and its guarantee.

Every figure of a guarantee is shown with the backtest beside the model's
probability, never the model's number alone, and a missing backtest is said
plainly.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from engine.errors import EngineError
from engine.plan import BackupPlan, PlanParameters
from ui import plans, resources, state
from ui.plans import PlanningData

PREVIEW_LABEL = "preview, not yet backtested"
QUIET = {"delta_color": "off", "delta_arrow": "off"}  # a metric's delta as plain context


@contextlib.contextmanager
def page_guard() -> Iterator[None]:
    """The page edge: an ``EngineError`` becomes one ``st.error`` line, never a traceback."""
    try:
        yield
    except EngineError as err:
        st.error(str(err))


def require_sensors(data: PlanningData) -> bool:
    n = len(data.history.sensors)
    if n < state.MIN_SENSORS:
        st.warning(f"Choose at least {state.MIN_SENSORS} sensors on the Data page (got {n}).")
        return False
    return True


def page_plan() -> tuple[PlanningData, BackupPlan]:
    """The current data and plan for a page, its status line shown; stops a page
    that has too few sensors chosen."""
    data = state.planning_data()
    note = st.session_state.pop(state.RESTORE_NOTE, None)
    if note:
        st.caption(note)
    if not require_sensors(data):
        st.stop()
    live = live_plan(data)
    if live is not None:
        live_line(live)
        return data, live
    plan = current_plan(data, state.params())
    status_line(plan)
    return data, plan


LIVE_STATES = ("running", "failed", "recovering")


def live_plan(data: PlanningData) -> BackupPlan | None:
    """The plan of record while a pipeline runs on ``data``: the plan of the version in
    force (a re-plan counts once it takes effect at a batch); None when no pipeline
    runs on it."""
    log = resources.pipeline_log()
    if log.monitor is None or log.data_key != data.key:
        return None
    manager = resources.pipeline_manager()
    if manager.status().state not in LIVE_STATES:
        return None
    return log.monitor.plan_for(manager.spec_in_force().linear_map)


def live_line(plan: BackupPlan) -> None:
    status = resources.pipeline_manager().status()
    p = plan.parameters
    st.info(
        f"Plan of record: the live pipeline's plan (version {status.plan_version}, "
        f"{len(plan.backup_sensors)} of {len(plan.sensors)} sensors backed up; eps {p.eps:g}, "
        f"delta {p.delta:g}, window {p.window}). Every page shows this plan while the "
        "pipeline runs; the Live page lists its versions and why each changed. Stop the "
        "pipeline to tune a new one."
    )


def run_backtest(data: PlanningData, params: PlanParameters) -> BackupPlan | None:
    """``make_plan`` with its backtest under ``st.status``; None if it cannot be computed."""
    folds = plans.max_folds()
    with st.status(f"Backtesting the plan ({folds} folds at most)...", expanded=True) as box:
        bar = st.progress(0.0, text="fitting the model and calibrating targets")

        def progress(fraction: float, message: str) -> None:
            bar.progress(min(1.0, max(0.0, fraction)), text=message)

        try:
            plan = plans.measure_plan(data, params, resources.plan_cache(), progress)
        except EngineError as err:
            box.update(label="Backtest could not be computed", state="error")
            st.warning(f"The backtest could not be computed: {err}")
            return None
        label = f"Backtest done: {plan.backtest.n_folds if plan.backtest else 0} folds"
        box.update(label=label, state="complete", expanded=False)
    return plan


def current_plan(data: PlanningData, params: PlanParameters) -> BackupPlan:
    """The measured plan for ``params`` (backtesting it now when automatic), else the preview."""
    cache = resources.plan_cache()
    measured = plans.cached_measured_plan(data, params, cache)
    if measured is not None:
        return measured
    if state.auto_backtest():
        measured = run_backtest(data, params)
        if measured is not None:
            return measured
    with st.spinner("Fitting the model and calibrating targets...", show_time=True):
        preview = plans.preview_plan(data, params, cache)
    backtest_button(data, params)
    return preview


def backtest_button(data: PlanningData, params: PlanParameters) -> None:
    clicked = st.button("Run backtest", type="primary", key="run_backtest")
    if clicked and run_backtest(data, params) is not None:
        st.rerun()


def status_line(plan: BackupPlan) -> None:
    """One line saying whether the figures below are measured."""
    p = plan.parameters
    what = (
        f"eps {p.eps:g}, delta {p.delta:g}, window {p.window}, slide {p.effective_slide}, "
        f"{p.aggregate}, {p.method}"
    )
    if plan.measured and plan.backtest is not None:
        bt = plan.backtest
        verdict = bt.verdict(p.delta)
        text = (
            f"Plan measured by a rolling-origin backtest ({bt.n_folds} folds, re-learnt every "
            f"{bt.step} rows on the last {bt.history}): {what}. "
        )
        if verdict.startswith("DOES NOT HOLD"):
            st.error(text + f"Verdict: {verdict}. Loosen eps, widen delta or add history.")
        elif verdict.startswith("holds:"):
            st.success(text + f"Verdict: {verdict}.")
        else:
            st.warning(text + f"Verdict: {verdict}.")
    elif plan.backtest is not None:
        st.warning(f"The backtest could not score this plan ({plan.backtest.note}): {what}.")
    else:
        st.info(f"Plan is a {PREVIEW_LABEL}: the figures are the model's projection ({what}).")


def pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:.{digits}f} %"


def _backtest_metrics(plan: BackupPlan, left: DeltaGenerator, right: DeltaGenerator) -> None:
    """The measured figures, or plainly why there are none."""
    p, bt = plan.parameters, plan.backtest
    if not (plan.measured and bt is not None):
        reason = "not run yet" if bt is None else f"could not be computed: {bt.note}"
        left.metric("Backtest rate, worst", "not run" if bt is None else "n/a")
        right.metric("Backtest rate, mean", "not run" if bt is None else "n/a")
        st.caption(
            f"Backtest {reason}: the model's probability alone is not a guarantee "
            "(it assumes errors independent over time), so treat this as a projection."
        )
        return
    left.metric(
        "Backtest rate, worst",
        pct(bt.violation_rate_worst_sensor),
        f"target delta {pct(p.delta, 1)}",
        **QUIET,
        help=f"Worst sensor: {bt.worst_sensor}; 95 % upper bound (over all sensors) "
        f"{pct(bt.violation_rate_worst_sensor_ucb95)}.",
    )
    right.metric(
        "Backtest rate, mean",
        pct(bt.violation_rate_mean),
        f"{bt.n_folds} folds, {bt.windows} windows",
        **QUIET,
    )
    st.caption(
        f"Measured: the worst sensor ({bt.worst_sensor}) missed eps in "
        f"{pct(bt.violation_rate_worst_sensor)} of its windows (95 % upper bound over all sensors "
        f"{pct(bt.violation_rate_worst_sensor_ucb95)}, "
        f"{pct(bt.violation_rate_worst_sensor_when_rebuilt)} of the windows where it was "
        f"rebuilt) against the target delta = {p.delta:g}. The model alone claims "
        f"{pct(plan.model_worst_probability, 2)}. The backtest's plans backed up "
        f"{pct(bt.backup_fraction_mean)} of the sensors on average; this plan backs up "
        f"{pct(plan.backup_fraction)}. The figures are for a plan re-learnt every {bt.step} "
        f"rows, as in the backtest: re-plan on that cadence (a plan kept longer was not "
        f"measured; the live monitor re-plans only on alerts). {bt.note}"
    )


def guarantee(plan: BackupPlan) -> None:
    """Backup size, the model's miss probability and the backtest's measured rates."""
    c = st.columns(4)
    c[0].metric(
        "Backed up",
        f"{len(plan.backup_sensors)} of {len(plan.sensors)}",
        f"{pct(1 - plan.backup_fraction, 0)} not persisted",
        **QUIET,
    )
    c[1].metric(
        "Model P(miss), worst",
        pct(plan.model_worst_probability, 2),
        help="Model only, under the seed's assumptions (errors independent over time, "
        "model never stale). The backtest beside it is the measured figure.",
    )
    _backtest_metrics(plan, c[2], c[3])
