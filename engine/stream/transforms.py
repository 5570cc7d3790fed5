"""Thin Spark transformations of the production job (no session, no I/O).

Every function takes and returns DataFrames, so the work runs on executors:
the backup filter, the windowed aggregates and the shadow check. The driver
only starts queries and keeps small summaries.

Readings have ``event_time`` (timestamp, UTC), ``sensor`` (string) and
``value`` (double). Windows are Spark's event-time windows, aligned to the
epoch: ``window`` and ``slide`` readings of ``sampling_interval_s`` seconds
each, so a window covers ``[start, start + window * dt)``.

PySpark is imported inside functions only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from engine.aggregates import AGGREGATES
from engine.errors import ParameterError
from engine.model.linear import LinearMap

READING_SCHEMA = "event_time timestamp, sensor string, value double"
BACKUP_COLUMNS: tuple[str, ...] = ("event_time", "sensor", "value", "plan_version")
RESULT_SCHEMA = (
    "window_start timestamp, window_end timestamp, sensor string, n long, "
    "value double, rebuilt double, error double, miss boolean, backed_up boolean"
)
HOURLY_BELOW_S = 60.0  # sampling faster than this partitions the backup by hour too


@dataclass(frozen=True)
class WindowSpec:
    """Event-time window geometry of the job, in seconds, and its tolerance."""

    window_s: float
    slide_s: float
    watermark_s: float
    aggregate: str
    eps: float

    def __post_init__(self) -> None:
        if not (self.window_s > 0 and 0 < self.slide_s <= self.window_s):
            raise ParameterError(
                f"need 0 < slide <= window seconds, got {self.slide_s!r} and {self.window_s!r}"
            )
        if not self.watermark_s >= 0:
            raise ParameterError(f"watermark must be >= 0 seconds, got {self.watermark_s!r}")
        if self.aggregate not in AGGREGATES:
            raise ParameterError(f"aggregate must be one of {AGGREGATES}, got {self.aggregate!r}")
        if not self.eps > 0:
            raise ParameterError(f"eps must be > 0, got {self.eps!r}")

    @classmethod
    def from_parameters(cls, parameters: dict[str, Any], watermark_s: float) -> WindowSpec:
        """From a backup config's ``parameters`` (window and slide in readings)."""
        dt = float(parameters["sampling_interval_s"])
        return cls(
            window_s=parameters["window"] * dt,
            slide_s=parameters["slide"] * dt,
            watermark_s=watermark_s,
            aggregate=parameters["aggregate"],
            eps=float(parameters["eps"]),
        )


def partition_columns(sampling_interval_s: float) -> tuple[str, ...]:
    """Coarse time keys of the backup: a day, or an hour for sub-minute data."""
    return ("date", "hour") if sampling_interval_s < HOURLY_BELOW_S else ("date",)


def backup_rows(
    readings: Any, backup_sensors: Sequence[str], plan_version: int, partitions: Sequence[str]
) -> Any:
    """Readings of the backup sensors, long format, with their partition keys."""
    from pyspark.sql import functions as F

    out = readings.filter(F.col("sensor").isin(list(backup_sensors))).select(
        "event_time", "sensor", "value", F.lit(int(plan_version)).alias("plan_version")
    )
    if "date" in partitions:
        out = out.withColumn("date", F.date_format("event_time", "yyyy-MM-dd"))
    if "hour" in partitions:
        out = out.withColumn("hour", F.date_format("event_time", "HH"))
    return out


def _window(spec: WindowSpec) -> Any:
    from pyspark.sql import functions as F

    return F.window("event_time", f"{spec.window_s:g} seconds", f"{spec.slide_s:g} seconds")


def window_aggregates(readings: Any, spec: WindowSpec) -> Any:
    """Per (window, sensor): n and the job's aggregate; a streaming aggregation.

    With a watermark, append mode emits each window once, after the watermark
    passes its end.
    """
    from pyspark.sql import functions as F

    agg = {"avg": F.avg, "sum": F.sum, "max": F.max, "min": F.min}[spec.aggregate]
    return (
        readings.withWatermark("event_time", f"{spec.watermark_s:g} seconds")
        .groupBy(_window(spec).alias("w"), "sensor")
        .agg(F.count("value").alias("n"), agg("value").alias("value"))
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "sensor",
            "n",
            "value",
        )
    )


def window_readings(readings: Any, spec: WindowSpec) -> Any:
    """Per window: its readings as a list (max/min need every reading to rebuild)."""
    from pyspark.sql import functions as F

    return (
        readings.withWatermark("event_time", f"{spec.watermark_s:g} seconds")
        .groupBy(_window(spec).alias("w"))
        .agg(F.collect_list(F.struct("event_time", "sensor", "value")).alias("readings"))
        .select(
            F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "readings"
        )
    )


def map_frames(spark: Any, lm: LinearMap) -> tuple[Any, Any]:
    """The linear map as two small DataFrames: (target, backup, coef), (target, intercept)."""
    coef_rows = [
        (t, b, float(lm.coef[i, j]))
        for i, t in enumerate(lm.targets)
        for j, b in enumerate(lm.backup)
    ]
    coef = spark.createDataFrame(coef_rows, "target string, backup string, coef double")
    icpt = spark.createDataFrame(
        [(t, float(lm.intercept[i])) for i, t in enumerate(lm.targets)],
        "target string, intercept double",
    )
    return coef, icpt


def linear_shadow(aggs: Any, coef: Any, icpt: Any, lm: LinearMap, spec: WindowSpec) -> Any:
    """Shadow check for avg and sum: the rebuilt aggregate is linear in the backups'.

    avg: ``intercept + coef @ avg_O``; sum: ``n * intercept + coef @ sum_O``. A
    window lacking a backup sensor's aggregate is not rebuilt (``rebuilt`` null).
    Returns ``RESULT_SCHEMA`` rows for every (window, sensor).
    """
    from pyspark.sql import functions as F

    keys = ["window_start", "window_end"]
    is_backup = F.col("sensor").isin(list(lm.backup))
    backed = aggs.filter(is_backup).select(
        *keys, F.col("sensor").alias("backup"), F.col("value").alias("bval")
    )
    lin = (
        backed.join(F.broadcast(coef), "backup")
        .groupBy(*keys, "target")
        .agg(F.sum(F.col("coef") * F.col("bval")).alias("lin"), F.count("bval").alias("nb"))
    )
    scale = F.col("n") if spec.aggregate == "sum" else F.lit(1.0)
    complete = F.coalesce(F.col("nb"), F.lit(0)) == len(lm.backup)
    rebuilt = F.when(complete, scale * F.col("intercept") + F.coalesce(F.col("lin"), F.lit(0.0)))
    targets = (
        aggs.filter(~is_backup)
        .join(F.broadcast(icpt), aggs["sensor"] == icpt["target"])
        .join(lin, [*keys, "target"], "left")
        .select(*keys, "sensor", "n", "value", rebuilt.alias("rebuilt"), F.lit(False).alias("bk"))
    )
    backups = aggs.filter(is_backup).select(
        *keys, "sensor", "n", "value", F.col("value").alias("rebuilt"), F.lit(True).alias("bk")
    )
    return _scored(targets.unionByName(backups), spec.eps)


def _scored(frame: Any, eps: float) -> Any:
    from pyspark.sql import functions as F

    error = F.col("rebuilt") - F.col("value")
    return frame.select(
        "window_start",
        "window_end",
        "sensor",
        F.col("n").cast("long").alias("n"),
        F.col("value").cast("double").alias("value"),
        F.col("rebuilt").cast("double").alias("rebuilt"),
        error.cast("double").alias("error"),
        F.coalesce(F.abs(error) > F.lit(float(eps)), F.lit(False)).alias("miss"),
        F.col("bk").alias("backed_up"),
    )


def minmax_shadow(window_lists: Any, lm: LinearMap, spec: WindowSpec) -> Any:
    """Shadow check for max/min: ``applyInPandas`` per window on the executors."""
    from pyspark.sql import functions as F

    exploded = window_lists.select(
        "window_start", "window_end", F.explode("readings").alias("r")
    ).select("window_start", "window_end", "r.event_time", "r.sensor", "r.value")
    fn = make_window_shadow(lm, spec)
    return exploded.groupBy("window_start", "window_end").applyInPandas(fn, RESULT_SCHEMA)


def make_window_shadow(lm: LinearMap, spec: WindowSpec) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A pure function over one window's readings (what ``applyInPandas`` calls)."""
    backup, targets = list(lm.backup), list(lm.targets)
    intercept, coef = np.asarray(lm.intercept), np.asarray(lm.coef)
    reduce = np.max if spec.aggregate == "max" else np.min
    eps = float(spec.eps)

    def shadow(pdf: pd.DataFrame) -> pd.DataFrame:
        wide = pdf.pivot_table(index="event_time", columns="sensor", values="value", aggfunc="last")
        true = pdf.groupby("sensor")["value"].agg(["count", "max" if reduce is np.max else "min"])
        rebuilt: dict[str, float] = {
            s: float(true.loc[s].iloc[1]) for s in backup if s in true.index
        }
        if all(s in wide.columns for s in backup):
            rows = wide[backup].dropna().to_numpy() if backup else np.zeros((len(wide), 0))
            if len(rows):
                values = intercept + rows @ coef.T
                rebuilt.update({t: float(reduce(values[:, i])) for i, t in enumerate(targets)})
        return _window_rows(pdf, true, rebuilt, set(backup), eps)

    return shadow


def _window_rows(
    pdf: pd.DataFrame, true: pd.DataFrame, rebuilt: dict[str, float], backup: set[str], eps: float
) -> pd.DataFrame:
    value = true.iloc[:, 1].astype(float)
    out = pd.DataFrame(
        {
            "window_start": pdf["window_start"].iloc[0],
            "window_end": pdf["window_end"].iloc[0],
            "sensor": true.index.astype(str),
            "n": true["count"].astype("int64").to_numpy(),
            "value": value.to_numpy(),
            "rebuilt": [rebuilt.get(s, np.nan) for s in true.index],
        }
    )
    out["error"] = out["rebuilt"] - out["value"]
    out["miss"] = (out["error"].abs() > eps).fillna(False).astype(bool)
    out["backed_up"] = out["sensor"].isin(backup)
    return out


def shadow_summary(results: Any) -> Any:
    """One row: windows, rebuilt (window, sensor) pairs, misses; small, for the driver."""
    from pyspark.sql import functions as F

    rebuilt = ~F.col("backed_up") & F.col("rebuilt").isNotNull()
    return results.agg(
        F.countDistinct("window_start").alias("windows"),
        F.sum(F.when(rebuilt, 1).otherwise(0)).alias("rebuilt_pairs"),
        F.sum(F.when(F.col("miss"), 1).otherwise(0)).alias("misses"),
        F.max("window_end").alias("last_window_end"),
    )
