"""The Plan page's tables: each sensor's status, and what backup costs at fleet scale
(full backup against the crash and range contracts and no backup; ``engine.costs``)."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from engine.costs import REPLAN_SOURCE, CostReport, where_it_pays
from engine.errors import EngineError
from engine.planning import BackupPlan
from ui import resources
from ui.format import eps_text, format_money, format_percent, format_quantity
from ui.panels import QUIET

TABLE_FORMAT = {
    "sensor": st.column_config.TextColumn(width="medium"),
    "status": st.column_config.TextColumn(width="small"),
    "reconstructed from (top 3 by weight, coef)": st.column_config.TextColumn(width="medium"),
    "model error bound": st.column_config.TextColumn("error bound", width="small"),
    "model P(miss)": st.column_config.TextColumn(
        "P(miss)",
        width="small",
        help="The model's probability that the sensor's window, rebuilt whole, misses eps: "
        "the range contract's case, for a crash plan too (its measured figure is the "
        "backtest's)",
    ),
    "backtest miss rate (rebuilt windows)": st.column_config.TextColumn(
        "backtest miss",
        width="small",
        help="Misses over the backtest windows where the sensor was not backed up "
        "(rebuilt, or for a max or min crash plan keeping its readings; backed-up windows "
        "are not counted); for a crash plan each window "
        "counts the share of its failure positions that missed. The backtest re-plans at "
        "each fold, so a sensor this plan backs up may have been rebuilt there, and one it "
        "rebuilds may never have been",
    ),
    "backtest misses / rebuilt windows": st.column_config.TextColumn(
        "misses / windows",
        width="small",
        help="The backtest's fold plans' misses over their windows where the sensor was not "
        "backed up (rebuilt; or, under a max or min crash plan, keeping its readings), not "
        "this plan's",
    ),
    "conditional variance": None,  # in the expander below the table: the page stays narrow
    "variance target": None,
}
VARIANCE_COLUMNS = ["sensor", "conditional variance", "variance target"]


def measured_bytes_per_reading() -> tuple[float | None, float | None]:
    """Parquet bytes per backup row the live pipeline wrote as its batches committed, and
    per row its backup holds at rest (after compaction); None where it has none."""
    manager = resources.pipeline_manager()
    s = manager.status()
    written = s.backup_bytes / s.backup_rows if s.backup_rows else None
    try:
        size = manager.backup_size()
    except EngineError:  # a store being replaced: the written figure still stands
        size = None
    at_rest = size.backup_bytes / size.backup_rows if size and size.backup_rows else None
    return written, at_rest


def quality(plan: BackupPlan) -> str:
    """The plan's measured quality under its own contract (a crash plan's crash figures,
    a range plan's whole-window ones), or the model's claim when it was not backtested."""
    bt, p = plan.backtest, plan.parameters
    eps = eps_text(plan.sensors, p)
    if not plan.measured or bt is None:
        return f"within {eps} by the model (not backtested)"
    if bt.crash is None:
        return f"{eps}, measured: worst sensor {bt.worst_label()}; pooled {bt.pooled_label()}"
    crash = bt.crash
    missed, windows = crash.worst_counts
    worst = (
        "no sensor left out of the backup"
        if crash.worst_sensor is None
        else f"{crash.worst_sensor} missed {missed:.3g} of its {windows:,} windows not backed up "
        f"({format_percent(crash.violation_rate_worst_sensor, 1)})"
    )
    return (
        f"a failure loses {crash.exposure} rows; {eps}, measured: worst sensor {worst}; pooled "
        f"{format_percent(crash.violation_rate_mean, 1)} of {crash.scored:,} (failure, window, "
        "sensor) triples"
    )


STRATEGY_OUTCOME = {
    "full backup": "exact",
    "no backup": "lost windows stay lost",
}


def _outcome(name: str, plan: BackupPlan, whole: BackupPlan) -> str:
    """A strategy's outcome after a failure: each contract's row states its own plan's
    measured quality (``whole``: the same query planned for the range contract), or says
    that nothing measured it; never the other contract's figure."""
    own = plan.query.contract
    if name == own:
        return quality(plan)
    if name == "crash":  # a range plan: no crash plan was made, so none was measured
        return (
            "not planned for a crash: set an exposure on Tune for a crash plan's own "
            "fraction and measurement (priced here at this plan's fraction)"
        )
    if name == "range":  # a crash plan's query planned for whole windows
        if whole.measured and whole.backtest is not None:
            return f"whole windows rebuilt by the range plan: {quality(whole)}"
        return (
            "whole windows rebuilt by the range plan's model preview, not backtested "
            "(measure it on Tune with no exposure)"
        )
    return STRATEGY_OUTCOME[name]


def _amount(x: float) -> str:
    """A number of the unit its column names: three significant digits, whole above 1,000,
    never an exponent ("< 0.001" below 0.001, as ``format_quantity``)."""
    return f"{x:,.0f}" if x >= 1000 else format_quantity(x)


def cost_table(report: CostReport, plan: BackupPlan, whole: BackupPlan) -> pd.DataFrame:
    """One row per strategy: what it persists, holds and writes, and each line of its
    bill. ``whole``: the plan's query planned for the range contract (``plans.range_plan``:
    ``plan`` itself for a range plan)."""
    full = report.full
    rows = []
    strategies = [full, report.contracts["crash"], report.contracts["range"], report.none]
    for cost in strategies:
        label = f"{cost.name} contract" if cost.name in report.contracts else cost.name
        outcome = _outcome(cost.name, plan, whole)
        rows.append(
            {
                "strategy": label,
                "readings persisted": format_percent(cost.fraction, 1),
                # in the units the prices are per (GB = 2^30 bytes, MB = 2^20)
                "storage held (GB)": _amount(cost.stored_gb),
                "write bandwidth (MB/s)": _amount(cost.write_mb_per_s),
                "PUTs a month": format_quantity(cost.files_per_month),
                "executors": format_quantity(report.executors(cost)),
                **{f"$ {k}": format_money(v) for k, v in cost.lines().items()},
                "$ a month": format_money(cost.total),
                "saved": format_money(full.total - cost.total),
                "after a failure": outcome,
            }
        )
    return pd.DataFrame(rows)


def cost_metrics(report: CostReport, contract: str = "range") -> None:
    """Full backup's bill, each contract's and what it saves, and the break-even of
    ``contract`` (the plan's own)."""
    c = st.columns(4)
    c[0].metric("Full backup, per month", format_money(report.full.total))
    for col, name in zip(c[1:3], ("range", "crash"), strict=True):
        saving = report.saving(name)
        col.metric(
            f"{name.capitalize()} contract, per month",
            format_money(report.contracts[name].total),
            f"{format_money(saving)} saved" if saving >= 0 else f"{format_money(-saving)} more",
            **QUIET,
        )
    even = report.break_even[contract].sensors_per_site
    c[3].metric(
        f"Break-even ({contract})",
        "never"
        if math.isinf(even)
        else "any size"  # pays with fewer than one sensor a site: with every one
        if even < 1
        else f"{math.ceil(even):,} sensors/site",
        f"at {report.inputs.fleet.interval_s:g} s per reading",
        **QUIET,
        help="Sensors per site at which the saving equals what Lacuna itself costs "
        "(its shadow check, a re-plan per site and horizon).",
    )


def recovery_line(report: CostReport, contract: str) -> str:
    """How long what one failure loses under ``contract`` and a lost day take to rebuild,
    Lacuna against full: a crash's micro-batch in flight; under the range contract the
    open windows (a whole window, or the micro-batch when it holds more)."""
    lost, day = report.recovery_lost_s[contract], report.recovery_day_s
    rates = report.inputs.recovery

    def reach(readings: float) -> str:  # a line read far beyond what was measured says so
        times = rates.beyond(readings)
        return f", extrapolated to {format_quantity(times)}x the largest range measured" if (
            times > 1.5) else ""  # fmt: skip

    day_readings = report.inputs.fleet.readings_per_second * 86400.0
    readings = report.readings_lost[contract]
    what = (
        "a crash's lost micro-batch"
        if contract == "crash"
        else "a failure's lost open windows (their state is lost: a whole window)"
        if readings > report.readings_per_batch[contract]
        else "a failure's lost micro-batch"
    )
    return (
        f"Recovery (one process, {rates.source}), {contract} contract: {what} "
        f"({format_quantity(readings)} readings{reach(readings)}) "
        f"takes {format_quantity(lost['lacuna'], 's')} from Lacuna's backup, "
        f"{format_quantity(lost['full'], 's')} from a full one; a lost day "
        f"({format_quantity(day_readings)} readings{reach(day_readings)}) "
        f"{format_quantity(day['lacuna'], 's')} against {format_quantity(day['full'], 's')}."
    )


def cost_section(report: CostReport, plan: BackupPlan, whole: BackupPlan) -> None:
    """The cost model's answer: metrics, where it pays, the bill by line, recovery, sources
    (``whole`` as in ``cost_table``)."""
    own = plan.query.contract
    cost_metrics(report, own)
    lines = where_it_pays(report, own)
    show = st.success if report.saving(own) > 0 else st.warning
    show("\n\n".join(lines))
    st.dataframe(cost_table(report, plan, whole), hide_index=True)
    inputs = report.inputs
    executors = report.executors(report.full)
    rates = inputs.rates
    share = (
        f"A full backup takes {format_percent(report.full_backup_share)} of the job's core "
        f"time ({format_quantity(executors)} executors of "
        f"{inputs.compute.cores_per_executor} cores at this fleet's rate)."
        if rates.write_core_us + rates.job_core_us > 0
        else "Write and job rates are 0: the bill counts no compute for writing or the job."
    )
    st.caption(
        f"{share} Each amount is computed unrounded and shown to the cent, so a row's lines "
        "may not add up to its total to the cent. " + recovery_line(report, own)
    )
    st.caption(
        f"Sources. Store: {inputs.store.source}. Compute rates: {inputs.rates.source}. "
        f"Executors: {inputs.compute.source}. Re-plans: {REPLAN_SOURCE}."
    )


def display_table(rows: list[dict], unmeasured: str | None) -> pd.DataFrame:  # type: ignore[type-arg]
    """The per-sensor table as people read it: percentages and SI numbers, no exponents
    (the column headers are shortened by ``TABLE_FORMAT``). ``unmeasured``: what the
    backtest rate says when the backtest measured nothing (``plans.unmeasured_label``);
    None for a measured plan, whose sensors without a rate were never rebuilt."""
    table = pd.DataFrame(rows)
    table["model P(miss)"] = [format_percent(p, 2) for p in table["model P(miss)"]]
    rate = "backtest miss rate (rebuilt windows)"
    table[rate] = [
        unmeasured or ("never rebuilt" if p is None or math.isnan(p) else format_percent(p))
        for p in table[rate]
    ]
    bound = "model error bound"
    table[bound] = [
        "none (keeps readings)" if v is None or math.isnan(v) else format_quantity(v)
        for v in table[bound]
    ]
    for name in ("conditional variance", "variance target"):
        table[name] = [format_quantity(v) for v in table[name]]
    return table
