"""Savings figures: the plan against full checkpointing and no backup, at fleet scale."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from engine.planning import BackupPlan
from ui import resources
from ui.fleet import PRICE_SOURCE, FleetSpec, fleet_table
from ui.format import eps_text, format_money, format_percent, format_quantity
from ui.panels import QUIET

TABLE_FORMAT = {
    "sensor": st.column_config.TextColumn(width="medium"),
    "status": st.column_config.TextColumn(width="small"),
    "reconstructed from (top 3, coef)": st.column_config.TextColumn(width="medium"),
    "model error bound": st.column_config.TextColumn("error bound", width="small"),
    "model P(miss)": st.column_config.TextColumn("P(miss)", width="small"),
    "backtest miss rate (rebuilt windows)": st.column_config.TextColumn(
        "backtest miss",
        width="small",
        help="Misses over the backtest windows where the sensor "
        "was rebuilt (backed-up windows are not counted)",
    ),
    "backtest misses / rebuilt windows": st.column_config.TextColumn(
        "misses / rebuilt", width="small"
    ),
    "conditional variance": None,  # in the expander below the table: the page stays narrow
    "variance target": None,
}
VARIANCE_COLUMNS = ["sensor", "conditional variance", "variance target"]
FLEET_FORMAT = {
    name: st.column_config.TextColumn(width="small")
    for name in ("sensors persisted", "readings per month", "storage held", "$ per month")
}


def measured_bytes_per_reading() -> float | None:
    """Parquet bytes per backup row the live pipeline wrote, if it wrote any."""
    s = resources.pipeline_manager().status()
    return s.backup_bytes / s.backup_rows if s.backup_rows else None


def quality(plan: BackupPlan) -> str:
    bt, p = plan.backtest, plan.parameters
    eps = eps_text(plan.sensors, p)
    if plan.measured and bt is not None:
        return f"{eps}, measured: worst sensor {bt.worst_label()}; pooled {bt.pooled_label()}"
    return f"within {eps} by the model (not backtested)"


def metrics(plan: BackupPlan, fleet: FleetSpec) -> None:
    f = plan.backup_fraction
    full, mine = fleet.cost_per_month(1.0), fleet.cost_per_month(f)
    c = st.columns(4)
    c[0].metric(
        "Readings persisted per month",
        format_quantity(fleet.readings_per_month(f)),
        f"of {format_quantity(fleet.readings_per_month(1.0))} ({format_percent(f, 1)})",
        **QUIET,
    )
    c[1].metric(
        "Storage held",
        format_quantity(fleet.stored_bytes(f), "B"),
        f"full: {format_quantity(fleet.stored_bytes(1.0), 'B')}",
        **QUIET,
    )
    c[2].metric("Cost per month: plan", format_money(mine))
    c[3].metric(
        "Cost per month: full backup", format_money(full), f"{format_money(full - mine)} saved",
        **QUIET,
    )  # fmt: skip
    st.caption(
        f"{fleet.sensors:,} sensors ({fleet.sensors_per_site:,} per site x {fleet.sites:,} "
        f"sites) every {fleet.interval_s:g} s, {fleet.retention_days:g} days kept, "
        f"{fleet.bytes_per_reading:g} B per reading. Price: {PRICE_SOURCE}."
    )


def comparison(plan: BackupPlan, fleet: FleetSpec):  # type: ignore[no-untyped-def]
    return fleet_table(fleet, plan.backup_fraction, quality(plan))


def display_table(rows: list[dict]) -> pd.DataFrame:  # type: ignore[type-arg]
    """The per-sensor table as people read it: percentages and SI numbers, no exponents
    (the column headers are shortened by ``TABLE_FORMAT``)."""
    table = pd.DataFrame(rows)
    table["model P(miss)"] = [format_percent(p, 2) for p in table["model P(miss)"]]
    rate = "backtest miss rate (rebuilt windows)"
    table[rate] = [
        "never rebuilt" if p is None or math.isnan(p) else format_percent(p) for p in table[rate]
    ]
    for name in ("model error bound", "conditional variance", "variance target"):
        table[name] = [format_quantity(v) for v in table[name]]
    return table
