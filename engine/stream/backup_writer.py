"""Spark's half of the live pipeline's Parquet backup (layout: ``engine.backup_parquet``).

``write_batch`` runs inside ``foreachBatch``: a filter and a partitioned,
overwriting write on the executors, before the store's DuckDB transaction.
The production job's own copy of this write is
``engine.stream.transforms.backup_rows`` + ``engine.stream.sink`` (branch
prodjob); they share the layout below ``run=R`` and the columns.

PySpark is imported inside functions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.backup_parquet import PARTITIONS
from engine.errors import PipelineError


def write_batch(df: Any, target: str, sensors: Sequence[str], plan_version: int) -> int:
    """Write the rows of ``sensors`` in micro-batch ``df`` to ``target``; their Parquet bytes.

    Runs on the executors (a filter and a partitioned write); ``df`` has the
    feed's columns (seq, event_time, arrival_time, sensor, value).
    """
    from pyspark.sql import functions as F

    spark = df.sparkSession
    # INT96 is Spark's default; DuckDB and the production reader expect micros in UTC.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    rows = df.filter(F.col("sensor").isin(list(sensors))).select(
        "event_time",
        "sensor",
        "value",
        F.lit(int(plan_version)).alias("plan_version"),
        "seq",
        F.date_format("event_time", "yyyy-MM-dd").alias("date"),
    )
    try:
        rows.write.mode("overwrite").partitionBy(*PARTITIONS).parquet(target)
        return _written_bytes(spark, target)
    except Exception as err:  # py4j raises many types; one readable line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PipelineError(f"cannot write the backup batch to {target!r}: {first}") from err


def _written_bytes(spark: Any, target: str) -> int:
    """Bytes of the Parquet files under ``target``, through Hadoop (any URI Spark writes)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(target)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    files = fs.listFiles(path, True)
    total = 0
    while files.hasNext():
        status = files.next()
        name = status.getPath().getName()
        if name.endswith(".parquet") and not name.startswith(("_", ".")):
            total += int(status.getLen())
    return total
