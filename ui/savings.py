"""Savings figures and the plan vs full checkpointing vs no backup comparison."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from engine.data.units import eps_summary
from engine.planning import BackupPlan, Savings
from ui.panels import QUIET, pct

TABLE_FORMAT = {
    "model error bound": st.column_config.NumberColumn(format="%.3g"),
    "model P(miss)": st.column_config.NumberColumn(format="%.2e"),
    "backtest violation rate": st.column_config.NumberColumn(format="percent"),
    "conditional variance": st.column_config.NumberColumn(format="%.3g"),
    "variance target": st.column_config.NumberColumn(format="%.3g"),
}


def metrics(s: Savings, cost: dict[str, float]) -> None:
    c = st.columns(4)
    c[0].metric(
        "Readings not persisted per day",
        f"{s.readings_per_day_saved:,.0f}",
        f"of {s.readings_per_day_full:,.0f}",
        **QUIET,
    )
    c[1].metric(
        "Bytes not persisted per day",
        _bytes(s.bytes_per_day_saved),
        f"{pct(s.fraction_saved, 0)} less",
        **QUIET,
    )
    c[2].metric("Cost per month: plan", money(cost["plan"]))
    c[3].metric(
        "Cost per month: full backup",
        money(cost["full"]),
        f"{money(cost['full'] - cost['plan'])} saved",
        **QUIET,
    )


def money(x: float) -> str:
    """Dollars, positional even for tiny amounts (hourly sensors cost fractions of a cent)."""
    if x >= 0.01 or x == 0:
        return f"${x:,.2f}"
    return "$" + np.format_float_positional(x, precision=3, unique=False, fractional=False)


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def comparison(plan: BackupPlan, s: Savings, price: float, days: float) -> pd.DataFrame:
    """Plan vs full checkpointing vs no backup: volume, cost and what recovery gives."""
    cost = s.cost_per_month(price, days)
    bt = plan.backtest
    p = plan.parameters
    eps = (
        eps_summary(plan.sensors, plan.eps_per_sensor, p.units).replace("eps ", "eps (", 1) + ")"
        if p.eps_by_sensor
        else f"eps = {p.eps:g}"
    )
    quality = (
        f"every window within {eps} except "
        f"{pct(bt.violation_rate_worst_sensor)} (worst sensor, measured)"
        if plan.measured and bt is not None
        else f"within {eps} by the model (not backtested)"
    )
    return pd.DataFrame(
        [
            {
                "strategy": "plan (approx)",
                "sensors persisted": len(plan.backup_sensors),
                "readings per day": s.readings_per_day_backup,
                "MB per day persisted": s.bytes_per_day_backup / 1e6,
                "$ per month": money(cost["plan"]),
                "after a failure": quality,
            },
            {
                "strategy": "full checkpointing",
                "sensors persisted": len(plan.sensors),
                "readings per day": s.readings_per_day_full,
                "MB per day persisted": s.bytes_per_day_full / 1e6,
                "$ per month": money(cost["full"]),
                "after a failure": "exact",
            },
            {
                "strategy": "no backup",
                "sensors persisted": 0,
                "readings per day": 0.0,
                "MB per day persisted": 0.0,
                "$ per month": money(cost["none"]),
                "after a failure": "lost windows stay lost",
            },
        ]
    )
