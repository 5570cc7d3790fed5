"""Readings as Spark rows, shared by the production job and the live pipeline.

A reading has ``event_time`` (timestamp, UTC), ``sensor`` (string) and ``value``
(double); the backup keeps the plan's sensors' readings with the plan version
and the layout's partition keys (``engine.backup.dataset.partition_columns``).
PySpark is imported inside functions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.backup.dataset import PARTITION_FORMATS

READING_SCHEMA = "event_time timestamp, sensor string, value double"


def backup_rows(
    readings: Any,
    backup_sensors: Sequence[str],
    plan_version: int,
    partitions: Sequence[str],
    extra: Sequence[str] = (),
) -> Any:
    """Readings of the backup sensors, long format, with their partition keys.

    ``extra`` columns of ``readings`` are kept too (the live pipeline's ``seq``);
    the production reader ignores columns it does not know. A reading without
    an event time has no place in time to be recovered at: not kept (the job
    counts it as unusable).
    """
    from pyspark.sql import functions as F

    keep = F.col("sensor").isin(list(backup_sensors)) & F.col("event_time").isNotNull()
    out = readings.filter(keep).select(
        "event_time", "sensor", "value", F.lit(int(plan_version)).alias("plan_version"), *extra
    )
    for key in partitions:
        out = out.withColumn(key, F.date_format("event_time", PARTITION_FORMATS[key]))
    return out
