"""Where the live query reads readings from: a small seam, one class per kind of source.

A source gives the streaming DataFrame (columns ``FEED_COLUMNS``: seq, event_time,
arrival_time, sensor, value) and defines what a crash destroys of it. Today's
source is a directory where Parquet files land (what ``engine.stream.feeder``
writes); a Kafka topic would be another class with the same two methods, and
its crash semantics would be "the consumed offsets are gone from retention".
PySpark is imported inside methods only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.errors import PipelineError
from engine.stream.feeder import read_source_log


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
    """The Spark schema of a feed frame (``engine.stream.batch.FEED_COLUMNS``)."""
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
