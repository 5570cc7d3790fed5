"""Where the production job writes: one durable location, any URI Spark can write.

``<backup>``                 the backup, a Parquet dataset written by Spark's file
                             sink (exactly once: readers follow its
                             ``_spark_metadata`` log), long format, partitioned by
                             ``date`` (and ``hour`` for sub-minute data);
``<backup>/_lacuna/results`` window aggregates and shadow check, Parquet, one
                             ``batch_id=N`` directory per micro-batch, overwritten
                             when Spark replays the batch (idempotent);
``<backup>/_lacuna/metrics`` one JSON line per micro-batch, same layout.

Spark and Hive-style readers skip names starting with ``_``, so the results
never show up as backup rows. ``file://``, a shared mount, ``hdfs://`` and
``s3a://`` (with the hadoop-aws package on the classpath) all work the same.

PySpark is imported inside functions only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.model.linear import LinearMap
from engine.stream.transforms import (
    WindowSpec,
    backup_rows,
    linear_shadow,
    map_frames,
    minmax_shadow,
    shadow_summary,
    window_aggregates,
    window_readings,
)

Log = Callable[[dict[str, Any]], None]


def join_uri(base: str, *parts: str) -> str:
    """``base/part/...`` for a path or a URI (no normalisation of the user's part)."""
    return "/".join([base.rstrip("/"), *parts])


@dataclass(frozen=True)
class SinkPaths:
    """The job's durable locations, derived from the backup URI and the checkpoint URI."""

    backup: str
    checkpoint: str

    @property
    def results(self) -> str:
        return join_uri(self.backup, "_lacuna", "results")

    @property
    def metrics(self) -> str:
        return join_uri(self.backup, "_lacuna", "metrics")

    def query_checkpoint(self, name: str) -> str:
        return join_uri(self.checkpoint, name)


def _trigger(writer: Any, available_now: bool, interval_s: float) -> Any:
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{interval_s:g} seconds")


def start_backup_query(
    readings: Any,
    paths: SinkPaths,
    backup_sensors: tuple[str, ...],
    plan_version: int,
    partitions: tuple[str, ...],
    trigger: tuple[bool, float],
) -> Any:
    """The backup: filter on the executors, Spark's Parquet file sink with its metadata log."""
    rows = backup_rows(readings, backup_sensors, plan_version, partitions)
    writer = (
        rows.writeStream.queryName("lacuna_backup")
        .format("parquet")
        .partitionBy(*partitions)
        .option("path", paths.backup)
        .option("checkpointLocation", paths.query_checkpoint("backup"))
        .outputMode("append")
    )
    return _trigger(writer, *trigger).start()


@dataclass
class ShadowWriter:
    """``foreachBatch`` of the window query: shadow check, results and metrics per batch.

    All work is Spark transformations; the driver collects one summary row.
    """

    spark: Any
    linear_map: LinearMap
    spec: WindowSpec
    paths: SinkPaths
    plan_version: int
    log: Log
    now: Callable[[], float] = time.time
    totals: dict[str, int] = field(default_factory=lambda: {"windows": 0, "misses": 0, "pairs": 0})

    def __post_init__(self) -> None:
        self._coef, self._icpt = map_frames(self.spark, self.linear_map)

    def results(self, closed: Any) -> Any:
        from pyspark.sql import functions as F

        if self.spec.aggregate in ("avg", "sum"):
            out = linear_shadow(closed, self._coef, self._icpt, self.linear_map, self.spec)
        else:
            out = minmax_shadow(closed, self.linear_map, self.spec)
        return out.withColumn("plan_version", F.lit(int(self.plan_version)))

    def __call__(self, closed: Any, batch_id: int) -> None:
        started = self.now()
        closed = closed.persist()
        try:
            # Most micro-batches close no window: skip the shadow jobs for them.
            row = None if closed.isEmpty() else self._score(closed, batch_id)
        finally:
            closed.unpersist()
        windows = int(row["windows"] or 0) if row else 0
        misses = int(row["misses"] or 0) if row else 0
        pairs = int(row["rebuilt_pairs"] or 0) if row else 0
        metrics = {
            "event": "shadow",
            "batch_id": int(batch_id),
            "plan_version": int(self.plan_version),
            "windows": windows,
            "rebuilt_pairs": pairs,
            "misses": misses,
            "miss_rate": misses / pairs if pairs else None,
            "last_window_end": str(row["last_window_end"]) if row and windows else None,
            "seconds": round(self.now() - started, 3),
        }
        if windows:
            self._write_metrics(metrics, batch_id)
        for key, add in (("windows", windows), ("misses", misses), ("pairs", pairs)):
            self.totals[key] += add
        self.log(metrics)

    def _score(self, closed: Any, batch_id: int) -> Any:
        """Shadow-check the closed windows, write them; the one summary row."""
        results = self.results(closed).persist()
        try:
            results.write.mode("overwrite").parquet(
                join_uri(self.paths.results, f"batch_id={batch_id}")
            )
            return shadow_summary(results).collect()[0]
        finally:
            results.unpersist()

    def _write_metrics(self, metrics: dict[str, Any], batch_id: int) -> None:
        line = self.spark.createDataFrame([(json.dumps(metrics),)], "value string")
        line.coalesce(1).write.mode("overwrite").text(
            join_uri(self.paths.metrics, f"batch_id={batch_id}")
        )


def start_window_query(
    readings: Any, writer: ShadowWriter, paths: SinkPaths, trigger: tuple[bool, float]
) -> Any:
    """Windowed aggregation with a watermark (append mode), handed to ``writer`` per batch."""
    spec = writer.spec
    closed = (
        window_aggregates(readings, spec)
        if spec.aggregate in ("avg", "sum")
        else window_readings(readings, spec)
    )
    stream = (
        closed.writeStream.queryName("lacuna_windows")
        .outputMode("append")
        .foreachBatch(writer)
        .option("checkpointLocation", paths.query_checkpoint("windows"))
    )
    return _trigger(stream, *trigger).start()
