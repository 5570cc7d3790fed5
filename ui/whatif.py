"""Tune page's what-if section: the model's curves and backtest-measured points beside them.

Measured points are backtests at a few eps values, run as one background job
(progress, Cancel) and cached, so an operator can pick a point on a measured
trade-off curve instead of the model's projection alone.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.planning import PlanParameters
from ui import background, charts, plans, resources
from ui.format import format_percent
from ui.plans import MeasuredPoint, PlanningData, WhatIf


def _key(data: PlanningData, params: PlanParameters) -> tuple:
    return ("measured-whatif", data.key, params)


def measured_points(data: PlanningData, params: PlanParameters) -> tuple[MeasuredPoint, ...]:
    """The cached measured points for ``params`` (empty until measured)."""
    return plans.cached_measured_whatif(data, params, resources.plan_cache()) or ()


def caption(curves: WhatIf, params: PlanParameters) -> None:
    note = (
        "" if params.method == curves.method else
        f" The curves re-select with {curves.method} (the {params.method} method is not swept);"
        " the marker is the shown plan's own figure."
    )  # fmt: skip
    st.caption(
        f"Lines: the model's projection ({curves.method} selection re-run from the shown plan's "
        f"targets for each value; {params.aggregate}, window {params.window}); the delta curve "
        "rescales those targets by the Gaussian formula's ratio between the two deltas, "
        "without calibrating again, so a plan made at another delta can back up more or "
        "fewer. Diamonds: backtests (measured): the mean backup fraction of the backtest "
        "folds' plans at that eps, each fitted on no more history than the plan above. "
        f"The marker is the plan above: {format_percent(curves.now)} of sensors backed up.{note}"
    )


def _start(data: PlanningData, params: PlanParameters) -> None:
    cache = resources.plan_cache()
    background.submit(
        _key(data, params),
        "measured what-if",
        lambda progress: plans.measure_whatif(data, params, cache, progress),
    )


def measured_table(points: tuple[MeasuredPoint, ...], params: PlanParameters) -> pd.DataFrame:
    """One row per measured eps; with one eps per unit group the row says the factor
    every group's eps was multiplied by (1 is the plan shown), not a single eps."""
    per_unit = bool(params.eps_by_sensor)
    # the paper method is measured with greedy (``plans.measure_whatif``): x 1 is not it
    now = " (now)" if params.method != "paper" else " (now, greedy: the plan shown is paper's)"
    return pd.DataFrame(
        [
            {
                ("eps factor" if per_unit else "eps"): (
                    f"x {m.factor:g}" if per_unit else f"{m.eps:.3g}"
                )
                + (now if abs(m.factor - 1.0) < 1e-12 else ""),
                "backed up (mean)": format_percent(m.backup_fraction),
                "worst sensor miss": format_percent(m.miss_worst),
                "95 % bound": format_percent(m.miss_worst_ucb95),
                "pooled miss": format_percent(m.miss_mean),
            }
            for m in points
        ]
    )


def measured_section(
    data: PlanningData, params: PlanParameters, points: tuple[MeasuredPoint, ...]
) -> None:
    """Button, progress and results of the measured what-if backtests."""
    factors = ", ".join(f"{f:g}" for f in plans.MEASURED_EPS_FACTORS)
    st.subheader("Measured trade-off (backtests)")
    if not points:
        key = _key(data, params)
        background.forget_if_done(key, lambda: bool(measured_points(data, params)))
        if background.runner().get(key) is None:
            st.caption(
                f"Backtest the plan at eps x {factors} (up to {plans.max_folds()} folds "
                "each, in the background; the page stays usable)."
            )
            if st.button("Measure the trade-off", key="measure_whatif"):
                _start(data, params)
                st.rerun()
        background.job_panel(key, "Measuring the trade-off")
        return
    left, right = st.columns(2)
    per_unit = bool(params.eps_by_sensor)
    series = [(m.factor if per_unit else m.eps, m.miss_worst, m.miss_worst_ucb95) for m in points]
    label = "eps factor (all unit groups)" if per_unit else "eps"
    now = 1.0 if per_unit else params.eps
    crash = params.exposure is not None
    left.plotly_chart(charts.measured_miss_chart(series, now, params.delta, label, crash))
    right.dataframe(measured_table(points, params), hide_index=True)
    st.caption(measured_contract(params.exposure))


def measured_contract(exposure: int | None) -> str:
    """Which contract the measured miss rates count."""
    if exposure is None:
        return "Range contract: misses over rebuilt whole windows, as on the headline."
    return (
        f"Crash contract: a failure loses {exposure} consecutive "
        f"row{'' if exposure == 1 else 's'}; misses over the (failure, window, sensor) "
        "triples of the sensors not backed up, as on the headline."
    )
