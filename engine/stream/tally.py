"""The live monitor's tally of a plan version, read back from the job's results.

The job's monitor counts each version's rebuilt windows and misses in memory.
A restarted job would start that count again from zero, and a job restarted
more often than it takes to see ``min_windows`` windows per sensor would never
alert. The windows are already durable (``<backup>/_lacuna/results``, one
directory per micro-batch, each row with its ``plan_version``), so on its first
micro-batch the job counts them again, with Spark, for the version in force and
the batches before that micro-batch only: a batch replayed after a crash is
then counted once, by the replay.

PySpark is imported inside functions only.
"""

from __future__ import annotations

from typing import Any


def version_tally(
    spark: Any, results: str, version: int, before_batch: int
) -> dict[str, tuple[int, int]]:
    """sensor -> (misses, rebuilt windows) of plan ``version`` in batches ``< before_batch``.

    A rebuilt window is a row of a sensor not backed up whose error is a
    number (a window whose backups had no reading is not rebuilt), as the
    monitor counts them; the miss is the job's own judgement of it.
    """
    from pyspark.sql import functions as F

    frame = spark.read.option("basePath", results).parquet(results)
    rebuilt = ~F.col("backed_up") & F.col("error").isNotNull() & ~F.isnan(F.col("error"))
    rows = (
        frame.where(
            (F.col("plan_version") == int(version))
            & (F.col("batch_id") < int(before_batch))
            & rebuilt
        )
        .groupBy("sensor")
        .agg(
            F.sum(F.col("miss").cast("long")).alias("misses"),
            F.count(F.lit(1)).alias("windows"),
        )
        .collect()
    )
    return {str(r["sensor"]): (int(r["misses"]), int(r["windows"])) for r in rows}
