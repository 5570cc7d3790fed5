"""Page building blocks shared by several pages: the plan in force and its guarantee.

Every figure of a guarantee is shown with the backtest beside the model's
probability, never the model's number alone, and a missing backtest is said
plainly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from engine.errors import EngineError
from engine.planning import BackupPlan, PlanParameters, contract_assessment
from engine.planning.verdict import VERDICT_TEST
from ui import background, plans, resources, state
from ui.format import eps_text, format_percent, pct
from ui.plans import PlanningData

PREVIEW_LABEL = "preview, not yet backtested"
# The verdict's three states at a glance: holds, not enough evidence, fails.
VERDICT_STYLE = {
    "holds": st.success,
    "unsettled": st.warning,
    "fails": st.error,
    "not measured": st.warning,
}
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
        st.warning(too_few_sensors(state.current_dataset(), n, " on the Data page"))
        return False
    return True


def too_few_sensors(dataset: state.Dataset, chosen: int, where: str = "") -> str:
    """Why nothing can be planned: the file has too few sensors, or too few are chosen."""
    if len(dataset.history.sensors) < state.MIN_SENSORS:
        return (
            f"{dataset.name} has only one sensor: a plan rebuilds sensors from others, so "
            f"upload a file with at least {state.MIN_SENSORS} sensor columns."
        )
    return f"Choose at least {state.MIN_SENSORS} sensors{where} (got {chosen})."


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
    other_pipeline_note(data)
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


def other_pipeline_note(data: PlanningData) -> None:
    """A pipeline runs on other data than this session's (another browser session
    started it): say so, as the Live page's status and controls are that pipeline's."""
    log = resources.pipeline_log()
    if log.data_key is None or log.data_key == data.key:
        return
    if resources.pipeline_manager().status().state not in LIVE_STATES:
        return
    started = log.started
    st.warning(
        f"A live pipeline is running on other data than this session's "
        f"({started.get('source', 'another dataset')}, {started.get('sensors', '?')} "
        f"sensors, started at {started.get('at', '?')}): the Live page's status, failure "
        "and recovery are that pipeline's, not this plan's. Stop it to stream this data."
    )


def live_line(plan: BackupPlan) -> None:
    status = resources.pipeline_manager().status()
    p = plan.parameters
    st.info(
        f"Plan of record: the live pipeline's plan (version {status.plan_version}, "
        f"{len(plan.backup_sensors)} of {len(plan.sensors)} sensors backed up; "
        f"{eps_text(plan.sensors, p)}, "
        f"delta {p.delta:g}, window {p.window}). Every page shows this plan while the "
        "pipeline runs; the Live page lists its versions and why each changed. Stop the "
        "pipeline to tune a new one."
    )


def backtest_key(data: PlanningData, params: PlanParameters) -> tuple:
    return ("backtest", data.key, params)


def start_backtest(data: PlanningData, params: PlanParameters) -> None:
    """Backtest ``params`` in a background job (cached when done); progress and Cancel
    are shown by ``background.job_panel``."""
    cache, key = resources.plan_cache(), backtest_key(data, params)

    def work(progress: background.Progress) -> BackupPlan:
        progress(0.0, "fitting the model and calibrating targets")
        return plans.measure_plan(data, params, cache, progress)

    cancel_superseded_backtest(st.session_state.get(_LAST_BACKTEST), key)
    st.session_state[_LAST_BACKTEST] = key
    background.submit(key, "backtest", work)


_LAST_BACKTEST = "_last_backtest"  # the key of the backtest this session started last


def cancel_superseded_backtest(previous: tuple | None, key: tuple) -> None:
    """Cancel ``previous``, this session's last backtest, if it still runs for other
    parameters: each setting an operator passed through left one running (six shared
    two cores). Another session's backtests are left alone (sessions may differ)."""
    if previous is None or previous == key:
        return
    job = background.runner().get(previous)
    if job is not None and job.state == "running":
        background.runner().forget(previous)


def current_plan(data: PlanningData, params: PlanParameters) -> BackupPlan:
    """The measured plan for ``params`` if one is cached, else the preview while a
    backtest runs in the background (automatic) or waits for its button."""
    cache = resources.plan_cache()
    measured = plans.cached_measured_plan(data, params, cache)
    if measured is not None:
        return measured
    if params.method == "paper" and len(data.history.sensors) > PAPER_WARN_N:
        slow_paper_preview(data, params)
    with st.spinner("Fitting the model and calibrating targets...", show_time=True):
        preview = plans.preview_plan(data, params, cache)
    backtest_controls(data, params)
    return preview


PAPER_WARN_N = 40  # sensors; the seed's greedy took 80 s on 132
_PAPER_OK = "_paper_confirmed"


def slow_paper_preview(data: PlanningData, params: PlanParameters) -> None:
    """Warn before the paper method on many sensors; then select in the background.

    Stops the page until the preview is cached (the job panel reruns it)."""
    cache = resources.plan_cache()
    if plans.cached_preview(data, params, cache):
        return
    if st.session_state.get(_PAPER_OK) != data.key:
        paper_warning(data)
        st.stop()
    key = ("paper-preview", data.key, params)
    background.forget_if_done(key, lambda: plans.cached_preview(data, params, cache))
    background.submit(key, "paper selection", lambda _: plans.preview_plan(data, params, cache))
    background.job_panel(key, "Selecting with the paper method", cancellable=False)
    st.stop()


def backtest_controls(data: PlanningData, params: PlanParameters) -> None:
    """Start the backtest (automatically or by button) and show its progress."""
    key = backtest_key(data, params)
    cache = resources.plan_cache()
    background.forget_if_done(
        key, lambda: plans.cached_measured_plan(data, params, cache) is not None
    )
    if background.runner().get(key) is None:
        auto = state.auto_backtest()
        if auto or st.button("Run backtest", type="primary", key="run_backtest"):
            start_backtest(data, params)
    folds = plans.max_folds()
    background.job_panel(key, f"Backtesting the plan ({folds} folds at most)")


def paper_warning(data: PlanningData) -> None:
    """The seed's greedy solves a system per candidate: ask before running it on many sensors."""
    n = len(data.history.sensors)
    st.warning(
        f"Method paper (the seed's literal greedy, a baseline) on {n} sensors can take "
        "minutes: 80 s measured on 132 sensors, and every backtest fold runs it again. "
        "greedy selects in milliseconds. The what-if curves always use greedy."
    )
    if st.button("Run the paper method anyway", key="confirm_paper"):
        st.session_state[_PAPER_OK] = data.key
        st.rerun()


def status_line(plan: BackupPlan) -> None:
    """One line saying whether the figures below are measured."""
    p = plan.parameters
    eps = eps_text(plan.sensors, p)
    what = (
        f"{eps}, delta {p.delta:g}, window {p.window}, slide {p.effective_slide}, "
        f"{p.aggregate}, {p.method}"
    )
    if plan.measured and plan.backtest is not None:
        bt = plan.backtest
        verdict = contract_assessment(bt, p.delta)
        text = (
            f"Plan measured by a rolling-origin backtest ({bt.n_folds} folds, each plan kept "
            f"for its horizon of {bt.step} rows and every window in it scored, misses counted "
            f"where a sensor was not backed up): {what}. {contract_text(p.exposure)} "
        )
        VERDICT_STYLE[verdict.state](text + f"**Verdict: {verdict.sentence()}.**")
        if bt.crash is not None:  # the crash plan's other figure: a range rebuilt whole
            st.caption(f"Range contract (whole windows rebuilt): {bt.assess(p.delta).sentence()}.")
    elif plan.backtest is not None:
        st.warning(f"The backtest could not score this plan ({plan.backtest.note}): {what}.")
    else:
        st.info(
            f"Plan is a {PREVIEW_LABEL}: the figures are the model's projection ({what}). "
            + contract_text(p.exposure)
        )
    plan_warnings(plan)


def contract_text(exposure: int | None) -> str:
    """Which contract the plan's figures belong to, in one sentence."""
    if exposure is None:
        return (
            "Range contract: the figures are for whole windows rebuilt from the backup (a "
            "machine lost with its window state, or a range recovered)."
        )
    return (
        f"Crash contract: the figures are for a failure that loses at most {exposure} "
        f"consecutive row{'' if exposure == 1 else 's'} (one micro-batch) while the open "
        "windows' state survives; the range figure (whole windows rebuilt) is beside it."
    )


def plan_warnings(plan: BackupPlan) -> None:
    """The plan's own warnings (e.g. several units under one eps), one box each."""
    for warning in plan.warnings:
        label = "Mixed units" if "units" in warning and "one eps" in warning else "Warning"
        st.warning(f"{label}: {warning}.")


def _backtest_metrics(plan: BackupPlan, left: DeltaGenerator, right: DeltaGenerator) -> None:
    """The measured figures, or plainly why there are none."""
    p, bt = plan.parameters, plan.backtest
    if not (plan.measured and bt is not None):
        reason = "not run yet" if bt is None else f"could not be computed: {bt.note}"
        left.metric("Backtest rate, worst sensor", "not run" if bt is None else "n/a")
        right.metric("Backtest rate, pooled", "not run" if bt is None else "n/a")
        st.caption(
            f"Backtest {reason}: the model's probability alone is not a guarantee "
            "(it assumes errors independent over time), so treat this as a projection."
        )
        return
    if bt.crash is not None and bt.n_folds:
        _crash_metrics(plan, left, right)
        return
    misses, rebuilt = bt.worst_counts
    left.metric(
        "Backtest rate, worst sensor",
        pct(bt.violation_rate_worst_sensor),
        f"{misses:,} of {rebuilt:,} rebuilt windows; delta {pct(p.delta, 1)}",
        **QUIET,
        help=f"Worst sensor: {bt.worst_sensor or 'none rebuilt'}, over the windows where it "
        f"was rebuilt; 95 % upper bound holding for all sensors at once (Bonferroni) "
        f"{pct(bt.violation_rate_worst_sensor_ucb95)}.",
    )
    right.metric(
        "Backtest rate, pooled",
        pct(bt.violation_rate_mean),
        f"of {bt.windows:,} (window, rebuilt sensor) pairs, {bt.n_folds} folds",
        **QUIET,
    )
    st.caption(
        f"Measured where sensors were rebuilt: pooled {bt.pooled_label()}; worst sensor: "
        f"{bt.worst_label()} (95 % upper bound over all sensors "
        f"{pct(bt.violation_rate_worst_sensor_ucb95)}; over all its windows, counting backed-up "
        f"ones as hits, {pct(bt.violation_rate_worst_sensor_all_windows)}) against the target "
        f"delta = {p.delta:g}. Test: {VERDICT_TEST}. The model alone claims "
        f"{format_percent(plan.model_worst_probability, 2)}. The backtest's plans backed up "
        f"{pct(bt.backup_fraction_mean)} of the sensors on average; this plan backs up "
        f"{pct(plan.backup_fraction)}. The figures are for a plan kept {bt.step} rows (its "
        f"horizon), as in the backtest: re-plan on that cadence (the live pipeline does it on "
        f"schedule). {bt.note}"
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
        format_percent(plan.model_worst_probability, 2),
        help="Model only, under the seed's assumptions (errors independent over time, "
        "model never stale), for a window rebuilt whole: the range contract's case, "
        "whichever contract the plan is for. The backtest beside it is the measured figure "
        "of the plan's own contract.",
    )
    _backtest_metrics(plan, c[2], c[3])


def _crash_metrics(plan: BackupPlan, left: DeltaGenerator, right: DeltaGenerator) -> None:
    """A crash-contract plan's measured figures: (failure, window, sensor) triples."""
    p, bt = plan.parameters, plan.backtest
    assert bt is not None and bt.crash is not None
    crash = bt.crash
    missed, windows = crash.worst_counts
    left.metric(
        "Backtest rate, worst sensor",
        pct(crash.violation_rate_worst_sensor),
        f"crash contract: {missed:.3g} of {windows:,} windows not backed up; "
        f"delta {pct(p.delta, 1)}",
        **QUIET,
        help=f"Worst sensor: {crash.worst_sensor or 'none left out of the backup'}: of the "
        f"failures touching its windows not backed up ({crash.positions} positions a window, "
        f"each losing {crash.exposure} rows), the fraction that left its window off by more "
        "than eps (a max or min plan's kept sensors are not rebuilt: their lost readings "
        "are left out).",
    )
    right.metric(
        "Backtest rate, pooled",
        pct(crash.violation_rate_mean),
        f"of {crash.scored:,} (failure, window, sensor) triples, {bt.n_folds} folds",
        **QUIET,
    )
    st.caption(
        f"Crash contract: a failure loses {crash.exposure} consecutive rows at a uniformly "
        f"random position; every window it touches is exact but for those rows of the rebuilt "
        f"sensors. Range contract (whole windows rebuilt, as a long recovery): pooled "
        f"{bt.pooled_label()}; worst sensor {bt.worst_label()}. The model alone claims "
        f"{format_percent(plan.model_worst_probability, 2)} for whole windows. The figures are "
        f"for a plan kept {bt.step} rows (its horizon), as in the backtest: re-plan on that "
        f"cadence (the live pipeline does it on schedule). {bt.note}"
    )
