"""The figures the cost model takes from our own benchmarks, with where each comes from.

``bench/bench_production.py`` runs the production job (``python -m engine run``:
the plan's backup, the windows and the shadow check) against plain Spark
queries on the same micro-batches, in one run (``bench/results/production.json``,
``local[2]``: two cores, the real Beijing file's 132 sensors, a plan backing up
20 of them). Per reading, in wall seconds on those two cores:

* ``plain_full`` writes every reading, ``plain_approx`` only the plan's: their
  difference over the readings the plan leaves out is what writing one reading
  durably costs (``write_core_us``, in core-microseconds);
* ``plain_windows`` computes the windows and writes no backup: the job without
  any backup (``job_core_us``);
* ``lacuna`` is the whole production job; what it takes beyond the windows and
  the plan's own backup writes is the shadow check and plan versions
  (``shadow_core_us``, 0 where the difference is within the noise below 0).

Each batch size of the benchmark gives its own figures: small micro-batches
are dominated by per-batch overhead. ``nearest_point`` picks the benchmark's
batch size nearest a fleet's (in readings per micro-batch, on a log scale).

``bench/bench_recovery.py`` (``bench/results/recovery.json``, the same file's 132
channels, one process, DuckDB) rebuilt lost ranges of one day up to twelve
weeks from Lacuna's backup and from a full backup; ``RecoveryRates`` is the line
through the shortest and the longest range (seconds = fixed + per reading).

``bench/bench_job_replan.py`` (``bench/results/job_replan.json``) timed a scheduled
re-plan of the production job, with its backtest, on the 132 channels: the
fixed cost Lacuna adds per site and plan horizon (``REPLAN_CORE_S``).

A test checks every figure here against those JSON files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import ParameterError

__all__ = [
    "BENCHMARK_POINTS",
    "MEASURED_RECOVERY",
    "PRODUCTION_SOURCE",
    "RECOVERY_SOURCE",
    "REPLAN_CORE_S",
    "REPLAN_SOURCE",
    "BenchmarkPoint",
    "RecoveryRates",
    "nearest_point",
]

PRODUCTION_SOURCE = (
    "bench/results/production.json, local[2] (2 cores), beijing_132 (20 of 132 sensors "
    "backed up), steady readings/s of the production job, plain full backup, plain "
    "plan's backup and plain windows"
)
RECOVERY_SOURCE = (
    "bench/results/recovery.json, beijing_132 (a plan backing up 21 of 132 sensors), "
    "median seconds to rebuild a lost range of 1 day and of 12 weeks (3,168 and 266,112 "
    "readings; one process, DuckDB), from Lacuna's backup and from a full backup; a line "
    "through the two"
)


@dataclass(frozen=True)
class BenchmarkPoint:
    """One batch size of the production benchmark: steady readings per second."""

    rows_per_file: int  # history rows per landing file = per micro-batch
    sensors: int
    backup_sensors: int
    cores: int
    lacuna: float  # the production job (backup of the plan, windows, shadow check)
    plain_full: float  # a plain query writing every reading
    plain_approx: float  # a plain query writing the plan's readings
    plain_windows: float  # a plain query computing the windows, no backup

    def __post_init__(self) -> None:
        for name in ("lacuna", "plain_full", "plain_approx", "plain_windows"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ParameterError(f"{name} must be readings/s > 0, got {value!r}")
        if not 0 <= self.backup_sensors < self.sensors:
            raise ParameterError(
                f"backup_sensors must be in [0, sensors), got {self.backup_sensors!r}"
            )

    @property
    def readings_per_batch(self) -> int:
        return self.rows_per_file * self.sensors

    @property
    def backup_fraction(self) -> float:
        return self.backup_sensors / self.sensors

    def _us(self, rate: float) -> float:
        """Core-microseconds per reading at ``rate`` readings/s on ``cores``."""
        return self.cores * 1e6 / rate

    @property
    def write_core_us(self) -> float:
        """Core-microseconds to write one reading to the durable backup."""
        extra = self._us(self.plain_full) - self._us(self.plain_approx)
        return max(0.0, extra / (1.0 - self.backup_fraction))

    @property
    def job_core_us(self) -> float:
        """Core-microseconds per reading of the job without any backup (its windows)."""
        return self._us(self.plain_windows)

    @property
    def shadow_core_us(self) -> float:
        """Core-microseconds per reading Lacuna adds: the shadow check and plan versions
        (0 where the benchmark could not tell it from noise: ``own_work_unresolved``)."""
        return max(0.0, self._own_us)

    @property
    def own_work_unresolved(self) -> bool:
        """The job with Lacuna ran at least as fast as plain windows plus its backup: its
        own work is below the benchmark's noise at this size, and counts 0."""
        return self._own_us <= 0.0

    @property
    def _own_us(self) -> float:
        return self._us(self.lacuna) - self.job_core_us - self.write_core_us * self.backup_fraction

    def describe(self) -> str:
        return (
            f"{self.rows_per_file:,} rows x {self.sensors} sensors per micro-batch "
            f"({self.readings_per_batch:,} readings)"
        )


# bench/results/production.json, "local[2]" -> "beijing_132" -> "sizes" -> N -> kind ->
# "steady_readings_per_s" (the run of 2026-11-25, commit cd6c55a).
BENCHMARK_POINTS: tuple[BenchmarkPoint, ...] = (
    BenchmarkPoint(100, 132, 20, 2, 31647.8, 57053.0, 60550.5, 35666.9),
    BenchmarkPoint(1000, 132, 20, 2, 357508.3, 445277.4, 583497.1, 349103.7),
    BenchmarkPoint(10000, 132, 20, 2, 1719197.7, 1267524.5, 2917771.9, 2043343.7),
)


def nearest_point(
    readings_per_batch: float, points: tuple[BenchmarkPoint, ...] = BENCHMARK_POINTS
) -> BenchmarkPoint:
    """The benchmark point whose micro-batch size is nearest (log scale) to a fleet's."""
    if not (math.isfinite(readings_per_batch) and readings_per_batch > 0):
        raise ParameterError(f"readings per micro-batch must be > 0, got {readings_per_batch!r}")
    return min(points, key=lambda p: abs(math.log(p.readings_per_batch / readings_per_batch)))


@dataclass(frozen=True)
class RecoveryRates:
    """Seconds to rebuild a lost stretch of ``readings``: ``fixed + per_reading * readings``,
    for Lacuna (its backup, then the linear map) and for a full backup (read it all)."""

    lacuna_fixed_s: float
    lacuna_per_reading_s: float
    full_fixed_s: float
    full_per_reading_s: float
    source: str = RECOVERY_SOURCE
    measured: tuple[float, float] | None = None  # the readings of the ranges measured

    def __post_init__(self) -> None:
        for name in ("lacuna_fixed_s", "lacuna_per_reading_s", "full_fixed_s",
                     "full_per_reading_s"):  # fmt: skip
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ParameterError(f"{name} must be a number of seconds >= 0, got {value!r}")

    @classmethod
    def through(
        cls,
        short: tuple[int, float, float],
        long: tuple[int, float, float],
        source: str = RECOVERY_SOURCE,
    ) -> RecoveryRates:
        """The line through two measured ranges: (readings, lacuna s, full s) each."""
        (n0, l0, f0), (n1, l1, f1) = short, long
        if not n1 > n0 > 0:
            raise ParameterError(f"need two ranges of increasing size, got {n0!r} and {n1!r}")
        lacuna = max(0.0, (l1 - l0) / (n1 - n0))
        full = max(0.0, (f1 - f0) / (n1 - n0))
        return cls(max(0.0, l0 - lacuna * n0), lacuna, max(0.0, f0 - full * n0), full, source,
                   (float(n0), float(n1)))  # fmt: skip

    def beyond(self, readings: float) -> float:
        """How many times the largest measured range ``readings`` is (below 1: within, or
        below the smallest; 0 when nothing says what was measured)."""
        return 0.0 if self.measured is None else readings / self.measured[1]

    def seconds(self, readings: float, strategy: str) -> float:
        """Seconds to rebuild ``readings`` with ``strategy`` ``"lacuna"`` or ``"full"``."""
        if strategy == "lacuna":
            return self.lacuna_fixed_s + self.lacuna_per_reading_s * readings
        if strategy == "full":
            return self.full_fixed_s + self.full_per_reading_s * readings
        raise ParameterError(f"strategy must be 'lacuna' or 'full', got {strategy!r}")


# bench/results/recovery.json, "cases" -> "beijing_132" -> "recovery" -> "1_day" and
# "12_weeks": rows (24, 2016) x 132 sensors, "seconds_median" of "lacuna" and "full_duckdb".
MEASURED_RECOVERY = RecoveryRates.through((24 * 132, 0.0213, 0.0215), (2016 * 132, 0.0591, 0.1245))


# bench/results/job_replan.json, "inside" -> "replan_s": 8.751 s on the 2-core machine,
# counted as both cores busy for all of it.
REPLAN_CORE_S = 2 * 8.751
REPLAN_SOURCE = (
    "bench/results/job_replan.json: a scheduled re-plan with its backtest on 132 sensors "
    "took 8.751 s on 2 cores (counted as 17.5 core-seconds); a plan of many more sensors "
    "costs more (bench/results/plan_scale.json: a model-only plan of 10,000 sensors, "
    "without a backtest, took about 40 CPU-seconds): set the figure for a site of thousands"
)
