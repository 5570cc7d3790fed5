"""What a plan saves: backup readings and bytes per day, and their storage cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.errors import ParameterError

__all__ = ["BYTES_PER_READING", "Savings"]

BYTES_PER_READING = 16.0  # 8-byte timestamp + 8-byte float; sensor ids are dictionary-coded


@dataclass(frozen=True)
class Savings:
    """Projected backup volume, per day, at the file's sampling interval."""

    readings_per_day_full: float
    readings_per_day_backup: float
    readings_per_day_saved: float
    bytes_per_reading: float
    bytes_per_day_full: float
    bytes_per_day_backup: float
    bytes_per_day_saved: float
    fraction_saved: float

    def cost_per_month(
        self, price_per_gb_month: float, retention_days: float = 30.0
    ) -> dict[str, float]:
        """Storage cost of keeping ``retention_days`` of backup, full against planned."""
        if price_per_gb_month < 0 or retention_days <= 0:
            raise ParameterError(
                "price and retention must be positive, "
                f"got {price_per_gb_month!r}, {retention_days!r}"
            )
        gb = retention_days / 1e9
        return {
            "full": self.bytes_per_day_full * gb * price_per_gb_month,
            "plan": self.bytes_per_day_backup * gb * price_per_gb_month,
            "none": 0.0,
        }

    def to_dict(self) -> dict[str, float]:
        return asdict(self)
