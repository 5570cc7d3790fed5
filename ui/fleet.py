"""Backup volume and cost at fleet scale: full checkpointing, the plan, no backup (no Streamlit).

A plan is made on the sensors of one site; a fleet runs the same kind of plan at
every site, so the plan's backup fraction scales to ``sensors_per_site x sites``.
Storage is what the retention keeps at steady state (``retention_days`` of
readings), billed per GB-month.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from engine.errors import ParameterError
from ui.format import format_money, format_percent, format_quantity

# Amazon S3 Standard, US East (N. Virginia), first 50 TB per month, from
# https://aws.amazon.com/s3/pricing/ ($0.023 per GB-month since December 2016;
# taken 2026-11-23, not re-read live from this machine: check it for your region).
DEFAULT_PRICE = 0.023
PRICE_SOURCE = "Amazon S3 Standard, us-east-1, first 50 TB: $0.023 per GB-month (taken 2026-11-23)"
DAYS_PER_MONTH = 365.25 / 12
GB = 1e9


@dataclass(frozen=True)
class FleetSpec:
    """The fleet to project onto: sizes, sampling, retention and storage price."""

    sensors_per_site: int
    sites: int = 1
    interval_s: float = 3600.0
    retention_days: float = 30.0
    price_per_gb_month: float = DEFAULT_PRICE
    bytes_per_reading: float = 16.0

    def __post_init__(self) -> None:
        for name in ("sensors_per_site", "sites"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("interval_s", "retention_days", "bytes_per_reading"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
        if not (math.isfinite(self.price_per_gb_month) and self.price_per_gb_month >= 0):
            raise ParameterError(
                f"price_per_gb_month must be a finite number >= 0, got {self.price_per_gb_month!r}"
            )

    @property
    def sensors(self) -> int:
        return self.sensors_per_site * self.sites

    def readings_per_month(self, fraction: float) -> float:
        """Readings persisted per month when ``fraction`` of the sensors are backed up."""
        return fraction * self.sensors * DAYS_PER_MONTH * 86400.0 / self.interval_s

    def stored_bytes(self, fraction: float) -> float:
        """Bytes held at steady state: ``retention_days`` of persisted readings."""
        per_day = fraction * self.sensors * 86400.0 / self.interval_s
        return per_day * self.retention_days * self.bytes_per_reading

    def cost_per_month(self, fraction: float) -> float:
        return self.stored_bytes(fraction) / GB * self.price_per_gb_month


def fleet_table(spec: FleetSpec, backup_fraction: float, quality: str) -> pd.DataFrame:
    """full / plan / none: readings per month, storage held, $ per month, what a failure gives."""
    rows = (
        ("full checkpointing", 1.0, "exact"),
        ("plan (approx)", backup_fraction, quality),
        ("no backup", 0.0, "lost windows stay lost"),
    )
    return pd.DataFrame(
        [
            {
                "strategy": name,
                "sensors persisted": format_percent(f, 1),
                "readings per month": format_quantity(spec.readings_per_month(f)),
                "storage held": format_quantity(spec.stored_bytes(f), "B"),
                "$ per month": format_money(spec.cost_per_month(f)),
                "after a failure": outcome,
            }
            for name, f, outcome in rows
        ]
    )
