"""Prices an operator pays for a backup, each with where it comes from (editable in the UI).

Published list prices for US East (N. Virginia), as AWS states them; they were
not read live from this machine: check them for your region and contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import ParameterError

__all__ = ["COMPUTE", "STORES", "ComputePrices", "StorePrices"]


@dataclass(frozen=True)
class StorePrices:
    """A durable store: what holding, writing and requesting cost there.

    ``storage_per_gb_month`` is per GB (2^30 bytes, as clouds bill) held on the store's
    disks, so every replica counts (``replication``: 3 for HDFS by default; 1 for an
    object store, whose price already covers its own redundancy). ``put_per_1000`` is
    the price of 1,000 write requests (one per file). ``bandwidth_per_mbps_month`` is
    the price of one MB/s (2^20 bytes a second) of sustained durable write bandwidth
    for a month (provisioned throughput of a block volume beyond what it includes; 0
    where writes are not billed by throughput).
    """

    name: str
    storage_per_gb_month: float
    replication: int
    put_per_1000: float
    bandwidth_per_mbps_month: float
    source: str

    def __post_init__(self) -> None:
        for field in ("storage_per_gb_month", "put_per_1000", "bandwidth_per_mbps_month"):
            value = getattr(self, field)
            if isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
                raise ParameterError(f"{field} must be a price >= 0, got {value!r}")
        if isinstance(self.replication, bool) or not isinstance(self.replication, int):
            raise ParameterError(f"replication must be an integer >= 1, got {self.replication!r}")
        if self.replication < 1:
            raise ParameterError(f"replication must be an integer >= 1, got {self.replication!r}")


S3_SOURCE = (
    "Amazon S3 Standard, us-east-1 (aws.amazon.com/s3/pricing): $0.023 per GB-month for "
    "the first 50 TB, $0.005 per 1,000 PUT requests, data in free; S3 keeps its own "
    "redundant copies, so replication 1"
)
HDFS_SOURCE = (
    "HDFS (dfs.replication 3, its default) on Amazon EBS gp3 volumes, us-east-1 "
    "(aws.amazon.com/ebs/pricing): $0.08 per GB-month; each volume includes 125 MiB/s of "
    "throughput, which a backup stays below unless one volume takes about 8 million "
    "16-byte readings a second, so no throughput price (above it: $0.040 per MiB/s-month "
    "provisioned, to be set here); no request price"
)
STORES: dict[str, StorePrices] = {
    "object store (S3 Standard)": StorePrices(
        "object store (S3 Standard)", 0.023, 1, 0.005, 0.0, S3_SOURCE
    ),
    "HDFS on EBS gp3, 3 replicas": StorePrices(
        "HDFS on EBS gp3, 3 replicas", 0.08, 3, 0.0, 0.0, HDFS_SOURCE
    ),
}


@dataclass(frozen=True)
class ComputePrices:
    """What an executor costs: its cores and its price per hour."""

    cores_per_executor: int = 4
    executor_per_hour: float = 0.192
    source: str = (
        "Amazon EC2 m5.xlarge (4 vCPU, 16 GiB), Linux on-demand, us-east-1 "
        "(aws.amazon.com/ec2/pricing/on-demand): $0.192 per hour, one executor each"
    )

    def __post_init__(self) -> None:
        cores = self.cores_per_executor
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise ParameterError(f"cores_per_executor must be an integer >= 1, got {cores!r}")
        price = self.executor_per_hour
        if isinstance(price, bool) or not (math.isfinite(price) and price >= 0):
            raise ParameterError(f"executor_per_hour must be a price >= 0, got {price!r}")

    @property
    def per_core_second(self) -> float:
        return self.executor_per_hour / 3600.0 / self.cores_per_executor


COMPUTE = ComputePrices()
