"""Production snippets of the exported config: commands and files an operator runs as is.

* ``run_command``: Lacuna's own job (backup, windows, shadow check) with the
  operator's paths;
* ``spark_filter``: a self-contained PySpark script (no Lacuna import) that
  persists only the backup sensors through Spark's file sink; ``recover`` reads
  what it writes;
* ``flink_config`` / ``flink_config_yaml``: Flink 2.x ``config.yaml`` keys for the
  checkpoints of a Flink job doing the same filter (only documented keys).
"""

from __future__ import annotations

import json
import shlex
import textwrap
from dataclasses import dataclass
from typing import Any

import yaml

from engine.backup.dataset import PARTITION_FORMATS, partition_columns
from engine.errors import ConfigError


@dataclass(frozen=True)
class ProductionPaths:
    """Where the operator's job reads and writes (paths or URIs Spark can use)."""

    config: str = "plan.json"
    source: str = "/var/lib/lacuna/landing"
    backup: str = "file:///var/lib/lacuna/backup"
    checkpoint: str = "file:///var/lib/lacuna/checkpoints"

    def __post_init__(self) -> None:
        for name in ("config", "source", "backup", "checkpoint"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(
                    f"production path {name} must be a non-empty string, got {value!r}"
                )


def checkpoint_minutes(slide_s: float, minutes: int | None = None) -> int:
    """Flink checkpoint interval in minutes: the slide, clamped to [1, 10] unless given.

    A checkpoint bounds how much input a restart replays; it does not need to
    follow the window (an hourly slide would otherwise mean hours of replay).
    """
    if minutes is not None:
        if not isinstance(minutes, int) or minutes < 1:
            raise ConfigError(f"checkpoint interval must be >= 1 minute, got {minutes!r}")
        return minutes
    return int(min(10, max(1, round(slide_s / 60.0))))


def flink_interval(slide_s: float, minutes: int | None, exposure_s: float | None) -> str:
    """Flink's checkpoint interval: ``checkpoint_minutes``, and under the crash contract
    (``exposure_s``: the seconds of readings one failure may lose) never longer than that,
    unless ``minutes`` is given. A restore from a checkpoint loses what came after it."""
    chosen = checkpoint_minutes(slide_s, minutes)
    if minutes is not None or exposure_s is None or chosen * 60 <= exposure_s:
        return f"{chosen} min"
    seconds = max(1, int(exposure_s))
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def contract_text(exposure_rows: int | None, sampling_interval_s: float) -> str:
    """What the plan's contract asks of a deployment that is not ``engine run``."""
    if exposure_rows is None:
        return (
            "Range contract: after a failure every open window is rebuilt from this "
            "backup; nothing else needs to survive."
        )
    span = exposure_rows * sampling_interval_s
    return (
        f"Crash contract: the plan's figure is for a failure that loses at most "
        f"{exposure_rows} row{'' if exposure_rows == 1 else 's'} ({span:g} s of readings). "
        "The job that computes the windows must commit their state at least that often, "
        "on storage that survives the failure (engine run does, and backs up every "
        "sensor for a larger micro-batch); otherwise every open window is rebuilt from "
        "this backup and the plan's range-contract figure is the one that holds."
    )


def run_command(paths: ProductionPaths) -> str:
    q = shlex.quote
    return (
        f"python -m engine run --config {q(paths.config)} --source {q(paths.source)} "
        f"--backup {q(paths.backup)} --checkpoint {q(paths.checkpoint.rstrip('/') + '/lacuna')}"
    )


SCRIPT = '''r"""Lacuna backup job: persist only the readings the plan cannot rebuild.

Runs unchanged:  python lacuna_backup.py [--available-now]
            or:  spark-submit --master spark://HOST:7077 lacuna_backup.py
Reads Parquet files with event_time, sensor, value (timestamps in micro- or
milliseconds: pandas writes nanoseconds unless told otherwise) landing in SOURCE
(however old a file's modification time) and writes
the backup sensors' readings to BACKUP as a Parquet dataset partitioned by
{partition_doc}, through Spark's file sink (exactly once via its _spark_metadata
log); resumes from CHECKPOINT. SIGTERM stops it cleanly.
BACKUP and CHECKPOINT may be file:// paths, a shared mount, hdfs://namenode/path or
s3a://bucket/path (add --packages org.apache.hadoop:hadoop-aws:<Spark's Hadoop version>).

{contract}

Rebuild every sensor for a time range (reads BACKUP with DuckDB, no Spark; Lacuna's
engine installed where it runs: pip install /path/to/lacuna):
  python -m engine recover --config {config} --backup BACKUP \\
      --from 2024-01-01 --to 2024-01-02 --out all.csv
Lacuna's full job (backup, window aggregates and the live shadow check):
  {run}
"""

import signal
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

SOURCE = {source!r}
BACKUP = {backup!r}
CHECKPOINT = {checkpoint!r}
BACKUP_SENSORS = {sensors!r}
PLAN_VERSION = 1  # raise it when you deploy a new plan: rows keep the plan they were written under
PARTITIONS = {partitions!r}
FORMATS = {formats!r}  # each partition key from the UTC time


def main(argv):
    spark = SparkSession.builder.appName("lacuna-backup").getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # date partitions in UTC
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    readings = (
        spark.readStream.schema("event_time timestamp, sensor string, value double")
        # Spark skips, for good, a file older than maxFileAge (default 7 days) before the
        # newest it has read: a late file would never be backed up
        .option("maxFileAge", "36500d")
    )
    backup = (
        readings.parquet(SOURCE)
        # a reading without a time cannot be placed in a window: recovery refuses a
        # backup holding one (a null sensor fails isin as well)
        .filter(F.col("sensor").isin(BACKUP_SENSORS) & F.col("event_time").isNotNull())
        .select(
            "event_time",
            "sensor",
            "value",
            F.lit(PLAN_VERSION).alias("plan_version"),
            *(F.date_format("event_time", FORMATS[p]).alias(p) for p in PARTITIONS),
        )
    )
    writer = (
        backup.writeStream.format("parquet")
        .partitionBy(*PARTITIONS)
        .option("path", BACKUP)
        .option("checkpointLocation", CHECKPOINT)
    )
    if "--available-now" in argv:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="10 seconds")
    query = writer.start()
    signal.signal(signal.SIGTERM, lambda *_: query.stop())
    while query.isActive:
        query.awaitTermination(1)
    spark.stop()
    if query.exception() is not None:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
'''


def _in_doc(text: str) -> str:
    """``text`` inside the script's raw docstring, as it is unless it holds three double
    quotes in a row: then every double quote is escaped, so no path can end the docstring
    (a raw string shows the escapes, so only then; a backslash, as in a Windows path, is
    kept as it is)."""
    return text.replace('"', '\\"') if '"""' in text else text


def spark_script(
    backup_sensors: tuple[str, ...],
    paths: ProductionPaths,
    sampling_interval_s: float,
    contract: str,
) -> str:
    """The backup-only PySpark script, its docstring stating the plan's ``contract``
    (``contract_text``)."""
    partitions = list(partition_columns(sampling_interval_s))
    return SCRIPT.format(
        partition_doc=" and ".join(partitions),
        contract=textwrap.fill(contract, 84),
        config=_in_doc(shlex.quote(paths.config)),
        run=_in_doc(run_command(paths)),
        source=paths.source,
        backup=paths.backup,
        checkpoint=paths.checkpoint.rstrip("/") + "/backup",
        sensors=list(backup_sensors),
        partitions=partitions,
        formats={p: PARTITION_FORMATS[p] for p in partitions},
    )


def flink_config(
    backup_sensors: tuple[str, ...],
    paths: ProductionPaths,
    interval: str,
    contract: str = "",
) -> tuple[dict[str, Any], str]:
    """Flink 2.x keys (documented names only) and the same as commented YAML, with the
    plan's ``contract`` (``contract_text``) as a comment."""
    keys: dict[str, Any] = {
        "execution.checkpointing.interval": interval,
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": paths.checkpoint.rstrip("/") + "/flink",
        "execution.checkpointing.incremental": True,
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "state.backend.type": "rocksdb",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "30 s",
    }
    names = ", ".join(json.dumps(s) for s in backup_sensors)  # escaped: no quote, no newline
    header = (
        "# Flink config.yaml checkpoint keys for a Lacuna backup job (Flink 2.x).\n"
        "# The backup sensors are not a Flink option: filter in the job itself, e.g.\n"
        f"#   Set<String> BACKUP_SENSORS = Set.of({names});\n"
        "#   readings.filter(r -> BACKUP_SENSORS.contains(r.sensor)).sinkTo(fileSink);\n"
        "# or in Flink SQL: INSERT INTO backup SELECT * FROM readings WHERE sensor IN (...)\n"
    )
    if contract:
        header += "".join(f"# {line}\n" for line in textwrap.wrap(contract, 86))
    return keys, header + yaml.safe_dump(keys, sort_keys=False)
