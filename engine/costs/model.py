"""What input backup costs an operator, per month: full backup against Lacuna's two contracts.

Pure and linear in the fleet's readings per second ``R = sensors / interval``. For a
strategy that persists a fraction ``f`` of the readings:

* storage held: ``R f S`` bytes/s (``S`` bytes per reading at rest: after the job's
  compaction, which stores about the values' 8 bytes a reading) kept ``retention``
  seconds, ``replication`` copies, at the store's price per GB-month (GB = 2^30 bytes);
* durable write bandwidth: ``R f B replication`` bytes/s (``B`` bytes per reading as
  each micro-batch writes them, small files' overhead included), at its price per
  MB/s-month (MB = 2^20 bytes);
* requests: one file per micro-batch and partition, whatever is in them (the same for
  every strategy that writes anything, except the crash contract, whose trigger is at
  most ``crash_exposure_rows`` intervals, so its requests can exceed full backup's).
  A micro-batch runs at most once a trigger and only when something landed: each site
  lands a time step every interval, so ``min(1 / trigger, sites / interval)`` batches a
  second (sites landing at different
  moments: the most there can be), ``partitions`` PUTs each;
* compute: the executors' core time to write ``R f`` readings a second
  (``write_core_us`` each, measured), and for Lacuna its shadow check on every
  reading (``shadow_core_us``, measured) plus one re-plan per site and horizon
  (``replan_core_s``, measured); executors = cores / cores per executor.

``crash`` and ``range`` are Lacuna's two contracts, each with its own backup
fraction (``Contracts``): what a plan saves when a failure loses at most one
micro-batch (crash) or whole windows (range).

Recovery time is the measured line (``RecoveryRates``) at the readings one failure
loses under each contract (``CostReport.readings_lost``) and at one lost day
(``R * 86,400``). A crash loses the micro-batch in flight (``R`` over the batches a
second, its rows capped at the exposure); under the range contract the open windows'
state is lost with it, so a failure loses a whole window's rows (``R`` times the window
in seconds), or the micro-batch when that holds more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.costs.measured import (
    MEASURED_RECOVERY,
    PRODUCTION_SOURCE,
    REPLAN_CORE_S,
    BenchmarkPoint,
    RecoveryRates,
)
from engine.costs.prices import COMPUTE, ComputePrices, StorePrices
from engine.errors import ParameterError

__all__ = [
    "CONTRACTS",
    "GB",
    "MB",
    "SECONDS_PER_MONTH",
    "BreakEven",
    "ComputeRates",
    "Contracts",
    "CostInputs",
    "CostReport",
    "Fleet",
    "JobShape",
    "StrategyCost",
    "compare_costs",
]

SECONDS_PER_MONTH = 365.25 / 12 * 86400.0
HOURS_PER_MONTH = SECONDS_PER_MONTH / 3600.0
# Clouds bill storage per binary gigabyte (AWS: "1 GB is 2^30 bytes", a GiB) and EBS
# throughput per MiB/s: the prices are per those units.
GB, MB = float(2**30), float(2**20)
CONTRACTS = ("crash", "range")


def _positive(name: str, value: float, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ParameterError(f"{name} must be a finite number {bound}, got {value!r}")


def _count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Fleet:
    """The sensors to back up: ``sensors_per_site x sites``, one reading each ``interval_s``;
    ``bytes_per_reading`` as written (the write bandwidth), ``stored_bytes_per_reading`` at
    rest (the storage held; None: as written)."""

    sensors_per_site: int
    sites: int = 1
    interval_s: float = 60.0
    bytes_per_reading: float = 16.0
    stored_bytes_per_reading: float | None = None

    def __post_init__(self) -> None:
        _count("sensors_per_site", self.sensors_per_site)
        _count("sites", self.sites)
        _positive("interval_s", self.interval_s)
        _positive("bytes_per_reading", self.bytes_per_reading)
        if self.stored_bytes_per_reading is not None:
            _positive("stored_bytes_per_reading", self.stored_bytes_per_reading)

    @property
    def bytes_at_rest(self) -> float:
        """Bytes a reading takes in the store once written (and compacted)."""
        if self.stored_bytes_per_reading is None:
            return self.bytes_per_reading
        return self.stored_bytes_per_reading

    @property
    def sensors(self) -> int:
        return self.sensors_per_site * self.sites

    @property
    def readings_per_second(self) -> float:
        return self.sensors / self.interval_s


@dataclass(frozen=True)
class JobShape:
    """How the streaming job writes: a micro-batch every ``trigger_s``, one file per
    partition and batch, ``retention_days`` of backup kept, a re-plan per site every
    ``replan_every_s`` (the plan's horizon)."""

    trigger_s: float = 60.0
    partitions: int = 4
    retention_days: float = 30.0
    replan_every_s: float = 86400.0

    def __post_init__(self) -> None:
        _positive("trigger_s", self.trigger_s)
        _count("partitions", self.partitions)
        _positive("retention_days", self.retention_days)
        _positive("replan_every_s", self.replan_every_s)

    def batches_per_second(self, fleet: Fleet, most_rows: int | None = None) -> float:
        """Micro-batches a second: at most one a trigger, and only when something landed
        (a file source runs no batch on nothing new); each site lands a time step every
        interval, at different moments at most. ``most_rows``: the crash contract's
        exposure, which a batch may not exceed: the trigger is then at most that many
        intervals."""
        trigger = self.trigger_s
        if most_rows is not None:
            trigger = min(trigger, most_rows * fleet.interval_s)
        return min(1.0 / trigger, fleet.sites / fleet.interval_s)

    def readings_per_batch(self, fleet: Fleet, most_rows: int | None = None) -> float:
        """Readings one micro-batch holds on average: what a crash of it loses
        (``most_rows`` as in ``batches_per_second``)."""
        return fleet.readings_per_second / self.batches_per_second(fleet, most_rows)


@dataclass(frozen=True)
class ComputeRates:
    """Core-microseconds per reading: writing it durably, the job's own work (windows),
    Lacuna's shadow check; core-seconds per re-plan. Measured (``from_point``)."""

    write_core_us: float
    job_core_us: float
    shadow_core_us: float
    replan_core_s: float = REPLAN_CORE_S
    source: str = PRODUCTION_SOURCE

    def __post_init__(self) -> None:
        for name in ("write_core_us", "job_core_us", "shadow_core_us", "replan_core_s"):
            _positive(name, getattr(self, name), allow_zero=True)

    @classmethod
    def from_point(cls, point: BenchmarkPoint) -> ComputeRates:
        return cls(
            point.write_core_us,
            point.job_core_us,
            point.shadow_core_us,
            source=f"{PRODUCTION_SOURCE}, at {point.describe()}",
        )


@dataclass(frozen=True)
class Contracts:
    """The backup fraction of each contract: crash (a failure loses at most one
    micro-batch of ``crash_exposure_rows`` rows) and range (whole windows are rebuilt).
    The crash contract holds only if no micro-batch holds more rows than its exposure:
    its job triggers at least every ``crash_exposure_rows`` intervals (None: the job's
    own trigger, an exposure it is assumed to keep). ``window_rows``: the plan's window,
    which a failure under the range contract loses whole (None: not known, a failure is
    priced as its micro-batch)."""

    crash_fraction: float
    range_fraction: float
    crash_exposure_rows: int | None = None
    window_rows: int | None = None

    def __post_init__(self) -> None:
        for name in ("crash_fraction", "range_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (0.0 <= value <= 1.0):
                raise ParameterError(f"{name} must be a fraction in [0, 1], got {value!r}")
        if self.crash_exposure_rows is not None:
            _count("crash_exposure_rows", self.crash_exposure_rows)
        if self.window_rows is not None:
            _count("window_rows", self.window_rows)

    def most_rows(self, contract: str) -> int | None:
        """The most rows one of the contract's micro-batches may hold (None: no limit)."""
        return self.crash_exposure_rows if contract == "crash" else None

    def fraction(self, contract: str) -> float:
        if contract not in CONTRACTS:
            raise ParameterError(f"contract must be one of {CONTRACTS}, got {contract!r}")
        return self.crash_fraction if contract == "crash" else self.range_fraction


@dataclass(frozen=True)
class CostInputs:
    """Everything the cost model needs; each part validated on its own."""

    fleet: Fleet
    store: StorePrices
    job: JobShape
    rates: ComputeRates
    contracts: Contracts
    compute: ComputePrices = COMPUTE
    recovery: RecoveryRates = MEASURED_RECOVERY


@dataclass(frozen=True)
class StrategyCost:
    """One strategy's month: physical figures and what each costs ($)."""

    name: str
    fraction: float  # of the readings persisted
    write_mb_per_s: float  # durable write bandwidth, every replica
    stored_gb: float  # held at steady state, every replica
    files_per_month: float
    cores: float  # busy on average for the backup (and, for Lacuna, its own work)
    storage: float
    bandwidth: float
    requests: float
    compute: float
    replan: float = 0.0

    @property
    def total(self) -> float:
        return self.storage + self.bandwidth + self.requests + self.compute + self.replan

    def lines(self) -> dict[str, float]:
        """$ per month by what is paid for."""
        return {
            "storage": self.storage,
            "write bandwidth": self.bandwidth,
            "requests": self.requests,
            "compute": self.compute + self.replan,
        }


@dataclass(frozen=True)
class BreakEven:
    """Where a contract's saving equals what Lacuna itself costs: the fleet's readings
    per second and, at the fleet's interval and sites, sensors per site (0: pays at any
    size; inf: never at these prices)."""

    readings_per_second: float
    sensors_per_site: float


@dataclass(frozen=True)
class CostReport:
    """Full backup against each contract, with recovery times and break-evens."""

    inputs: CostInputs
    full: StrategyCost
    contracts: dict[str, StrategyCost]
    none: StrategyCost  # no backup at all: nothing paid, lost windows stay lost
    break_even: dict[str, BreakEven]
    recovery_day_s: dict[str, float]  # "lacuna" / "full": one lost day
    # per contract: the readings one of its micro-batches holds (a crash contract's
    # batches are capped at its exposure, the range contract's are not)
    readings_per_batch: dict[str, float]
    # per contract: the readings one failure loses, and "lacuna" / "full" rebuilding them:
    # the crash contract's micro-batch in flight; the range contract's open windows (a
    # whole window, or its micro-batch when that holds more)
    readings_lost: dict[str, float]
    recovery_lost_s: dict[str, dict[str, float]]
    full_backup_share: float = 0.0  # of the job's core time that a full backup takes

    def saving(self, contract: str) -> float:
        """$ per month the contract saves against full backup (negative: it costs more)."""
        return self.full.total - self.contracts[contract].total

    def executors(self, strategy: StrategyCost) -> float:
        return strategy.cores / self.inputs.compute.cores_per_executor


def _strategy(
    inputs: CostInputs,
    rate: float,
    fraction: float,
    name: str,
    lacuna: bool,
    most_rows: int | None = None,
) -> StrategyCost:
    """The month of a strategy persisting ``fraction`` of ``rate`` readings per second,
    its micro-batches of at most ``most_rows`` rows (the crash contract's exposure)."""
    fleet, store, job, rates = inputs.fleet, inputs.store, inputs.job, inputs.rates
    written = rate * fraction * fleet.bytes_per_reading  # bytes/s, one copy
    kept = rate * fraction * fleet.bytes_at_rest  # bytes/s, one copy, once compacted
    stored_gb = kept * job.retention_days * 86400.0 * store.replication / GB
    write_mbps = written * store.replication / MB
    batches = SECONDS_PER_MONTH * job.batches_per_second(fleet, most_rows)
    files = batches * job.partitions if fraction > 0 else 0.0
    cores = rate * fraction * rates.write_core_us * 1e-6
    replan = 0.0
    if lacuna:
        cores += rate * rates.shadow_core_us * 1e-6
        replans = fleet.sites * SECONDS_PER_MONTH / job.replan_every_s
        replan = replans * rates.replan_core_s * inputs.compute.per_core_second
    return StrategyCost(
        name=name,
        fraction=fraction,
        write_mb_per_s=write_mbps,
        stored_gb=stored_gb,
        files_per_month=files,
        cores=cores,
        storage=stored_gb * store.storage_per_gb_month,
        bandwidth=write_mbps * store.bandwidth_per_mbps_month,
        requests=files / 1000.0 * store.put_per_1000,
        compute=cores * inputs.compute.per_core_second * SECONDS_PER_MONTH,
        replan=replan,
    )


def _break_even(inputs: CostInputs, contract: str) -> BreakEven:
    """Saving is ``s0 + a R``: the rate where it crosses 0 (per site: sensors)."""
    f, most = inputs.contracts.fraction(contract), inputs.contracts.most_rows(contract)
    rate = inputs.fleet.readings_per_second

    def saving(r: float) -> float:
        full = _strategy(inputs, r, 1.0, "full", lacuna=False)
        return full.total - _strategy(inputs, r, f, contract, lacuna=True, most_rows=most).total

    s0, slope = saving(0.0), (saving(rate) - saving(0.0)) / rate
    if slope > 0:  # pays above the crossing (at any size when it saves at none)
        r_star = max(0.0, -s0 / slope)
    elif s0 > 0 and slope == 0:  # the same saving at every size
        r_star = 0.0
    else:  # a saving that never rises above 0 (Lacuna's fixed cost: s0 <= 0 at any price)
        r_star = math.inf
    per_site = r_star / inputs.fleet.sites * inputs.fleet.interval_s
    return BreakEven(r_star, per_site)


def compare_costs(inputs: CostInputs) -> CostReport:
    """Full backup against the crash and range contracts for ``inputs`` (all per month)."""
    rate = inputs.fleet.readings_per_second
    full = _strategy(inputs, rate, 1.0, "full backup", lacuna=False)
    none = _strategy(inputs, rate, 0.0, "no backup", lacuna=False)
    contracts = {
        c: _strategy(inputs, rate, inputs.contracts.fraction(c), c, lacuna=True,
                     most_rows=inputs.contracts.most_rows(c))
        for c in CONTRACTS
    }  # fmt: skip
    batch = {
        c: inputs.job.readings_per_batch(inputs.fleet, inputs.contracts.most_rows(c))
        for c in CONTRACTS
    }
    lost = dict(batch)
    if inputs.contracts.window_rows is not None:  # the range contract loses the open windows
        window = rate * inputs.contracts.window_rows * inputs.fleet.interval_s
        lost["range"] = max(batch["range"], window)
    day = rate * 86400.0
    rates = inputs.rates
    core_us = rates.job_core_us + rates.write_core_us
    # both rates 0 (valid: compute left out of the bill): a full backup adds no core time
    share = rates.write_core_us / core_us if core_us > 0 else 0.0
    return CostReport(
        inputs=inputs,
        full=full,
        contracts=contracts,
        none=none,
        break_even={c: _break_even(inputs, c) for c in CONTRACTS},
        recovery_day_s={s: inputs.recovery.seconds(day, s) for s in ("lacuna", "full")},
        readings_per_batch=batch,
        readings_lost=lost,
        recovery_lost_s={
            c: {s: inputs.recovery.seconds(n, s) for s in ("lacuna", "full")}
            for c, n in lost.items()
        },
        full_backup_share=share,
    )
