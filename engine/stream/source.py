"""Where the live query reads readings from: a small seam, one class per kind of source.

A source gives the streaming DataFrame (columns ``FEED_COLUMNS``: seq, event_time,
arrival_time, sensor, value) and defines what a crash destroys of it. Today's
source is a directory where Parquet files land (what ``engine.live.feeder``
writes); a Kafka topic would be another class with the same two methods, and
its crash semantics would be "the consumed offsets are gone from retention".
PySpark is imported inside methods only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from engine.errors import PipelineError


class StreamSource(Protocol):
    """What the live pipeline needs from a source of readings."""

    def read_stream(self, spark: Any) -> Any:
        """A streaming DataFrame with ``FEED_COLUMNS``."""
        ...

    def destroy_consumed(self, checkpoint: Path, batches: Iterable[int]) -> list[Path]:
        """What a crash destroys: the input the given (finished) batches consumed.

        Returns what was destroyed, for the operator's log.
        """
        ...


def feed_schema() -> Any:
    """The Spark schema of a feed frame (``engine.live.batch.FEED_COLUMNS``)."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("seq", T.LongType()),
            T.StructField("event_time", T.TimestampType()),
            T.StructField("arrival_time", T.TimestampType()),
            T.StructField("sensor", T.StringType()),
            T.StructField("value", T.DoubleType()),
        ]
    )


@dataclass(frozen=True)
class LandingDirSource:
    """Parquet files landing in ``directory``, read by Spark's file source.

    A crash destroys the landed files whose batch had finished: their readings
    then exist only in the backup (files not consumed yet stay for the restart).
    """

    directory: Path
    max_files_per_trigger: int = 10

    def read_stream(self, spark: Any) -> Any:
        return (
            spark.readStream.schema(feed_schema())
            .option("maxFilesPerTrigger", self.max_files_per_trigger)
            .parquet(str(self.directory))
        )

    def consumed_files(self, checkpoint: Path, batches: Iterable[int]) -> list[Path]:
        """Landed files read by ``batches``, from the file source's log in ``checkpoint``."""
        done = set(batches)
        log = read_source_log(checkpoint)
        return sorted({f for b, files in log.items() if b in done for f in files})

    def destroy_consumed(self, checkpoint: Path, batches: Iterable[int]) -> list[Path]:
        files = self.consumed_files(checkpoint, batches)
        try:
            for f in files:
                f.unlink(missing_ok=True)
        except OSError as err:
            raise PipelineError(
                f"cannot delete consumed input under {str(self.directory)!r}: {err}"
            ) from err
        return files


# -- what a file-source query consumed, from its checkpoint ------------------


def read_source_log(checkpoint: Path) -> dict[int, list[Path]]:
    """Files per batch id, from the file source's log in a Spark checkpoint."""
    log_dir = checkpoint / "sources" / "0"
    batches: dict[int, list[Path]] = {}
    if not log_dir.is_dir():
        return batches
    for entry in sorted(log_dir.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith(".crc"):
            continue
        for batch, path in source_log_entries(entry):
            batches.setdefault(batch, []).append(path)
    return batches


def source_log_entries(entry: Path) -> list[tuple[int, Path]]:
    """(batch id, file) of one file of the file source's log (``sources/0/N``, or the
    ``N.compact`` Spark writes every tenth batch, which holds every batch up to N)."""
    found = []
    for line in entry.read_text().splitlines()[1:]:  # the first line is the log's version
        if line.strip():
            item = json.loads(line)
            found.append((int(item["batchId"]), Path(unquote(urlparse(item["path"]).path))))
    return found


def spark_committed_batches(checkpoint: Path) -> set[int]:
    """Batch ids in the checkpoint's commit log: the batches Spark finished."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return set()
    return {int(p.name) for p in commits.iterdir() if p.name.isdigit()}
