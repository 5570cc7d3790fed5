"""What a plan saves in volume: backup readings and bytes per day (the exported config's
``savings``). What that volume costs an operator (storage with replication, write
bandwidth, requests, compute, recovery) is ``engine.costs``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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

    def to_dict(self) -> dict[str, float]:
        return asdict(self)
