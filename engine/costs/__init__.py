"""What input backup costs: full backup against Lacuna's contracts, at fleet scale.

``measured``: the benchmark figures the model takes (throughput of a durable
write, Lacuna's own work, re-planning, recovery), each with its source;
``prices``: store and compute prices with their sources; ``model``: the pure
cost model (``compare_costs``); ``summary``: where it pays, in sentences.
"""

from engine.costs.measured import (
    BENCHMARK_POINTS,
    MEASURED_RECOVERY,
    PRODUCTION_SOURCE,
    RECOVERY_SOURCE,
    REPLAN_CORE_S,
    REPLAN_SOURCE,
    BenchmarkPoint,
    RecoveryRates,
    nearest_point,
)
from engine.costs.model import (
    CONTRACTS,
    GB,
    MB,
    SECONDS_PER_MONTH,
    BreakEven,
    ComputeRates,
    Contracts,
    CostInputs,
    CostReport,
    Fleet,
    JobShape,
    StrategyCost,
    compare_costs,
)
from engine.costs.prices import COMPUTE, STORES, ComputePrices, StorePrices
from engine.costs.summary import where_it_pays

__all__ = [
    "BENCHMARK_POINTS",
    "COMPUTE",
    "CONTRACTS",
    "GB",
    "MB",
    "MEASURED_RECOVERY",
    "PRODUCTION_SOURCE",
    "RECOVERY_SOURCE",
    "REPLAN_CORE_S",
    "REPLAN_SOURCE",
    "SECONDS_PER_MONTH",
    "STORES",
    "BenchmarkPoint",
    "BreakEven",
    "ComputePrices",
    "ComputeRates",
    "Contracts",
    "CostInputs",
    "CostReport",
    "Fleet",
    "JobShape",
    "RecoveryRates",
    "StorePrices",
    "StrategyCost",
    "compare_costs",
    "nearest_point",
    "where_it_pays",
]
