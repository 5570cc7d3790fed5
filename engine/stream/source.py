"""Where a query reads readings from: a small seam, one class per kind of source.

A source gives the streaming DataFrame (and what has landed, as a batch), says what
given micro-batches consumed
of it (read from the query's checkpoint: how is the source's business) and
defines what a crash destroys of it. Today's source is a directory where Parquet
files land: the live pipeline's (what ``engine.live.feeder`` writes, ``FEED_SCHEMA``)
and the production job's (``READING_SCHEMA``; any URI Spark reads). A Kafka topic
would be another class with the same three methods, and its crash semantics would
be "the consumed offsets are gone from retention". PySpark is imported inside
methods only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from engine.backup.dataset import local_path
from engine.errors import DataError, PipelineError

# Spark's file source remembers each file read for this long (a file older than the newest
# read by more is skipped): a century, so no landed file is skipped for its age. The
# memory it costs is one entry per landed file, as the source's log in the checkpoint.
MAX_FILE_AGE = "36500d"

# the live feed's columns (``engine.live.batch.FEED_COLUMNS``), as Spark reads them
FEED_SCHEMA = "seq long, event_time timestamp, arrival_time timestamp, sensor string, value double"


class StreamSource(Protocol):
    """What a streaming query needs from a source of readings."""

    def read_stream(self, spark: Any) -> Any:
        """A streaming DataFrame of the source's readings."""
        ...

    def read_batch(self, spark: Any) -> Any:
        """What has landed so far, as a batch DataFrame (a re-plan reads its fit period)."""
        ...

    def consumed(self, checkpoint: str | Path, batches: Iterable[int]) -> list[Path]:
        """The input the given micro-batches of the query checkpointed at ``checkpoint``
        read ([] where it cannot be seen from here)."""
        ...

    def destroy_consumed(self, checkpoint: Path, batches: Iterable[int]) -> list[Path]:
        """What a crash destroys: the input the given (finished) batches consumed.

        Returns what was destroyed, for the operator's log.
        """
        ...


@dataclass(frozen=True)
class LandingDirSource:
    """Parquet files landing in ``directory`` (a path or a URI), read by Spark's file
    source with ``schema`` (a DDL string; other columns of a file are ignored),
    ``max_files_per_trigger`` files a micro-batch at most (None: every new file).

    What a batch consumed is the file source's log in the query's checkpoint. A crash
    destroys the landed files whose batch had finished: their readings then exist only
    in the backup (files not consumed yet stay for the restart).
    """

    directory: str | Path
    max_files_per_trigger: int | None = 10
    schema: str = FEED_SCHEMA

    def read_stream(self, spark: Any) -> Any:
        # Spark's file source skips, for good, a file older than ``maxFileAge`` (default 7
        # days) before the newest it has read: a file landed late, or moved in keeping its
        # modification time, was never read and nothing said so. Every landed file counts.
        reader = spark.readStream.schema(self.schema).option("maxFileAge", MAX_FILE_AGE)
        if self.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", self.max_files_per_trigger)
        return reader.parquet(str(self.directory))

    def read_batch(self, spark: Any) -> Any:
        return spark.read.schema(self.schema).parquet(str(self.directory))

    def consumed(self, checkpoint: str | Path, batches: Iterable[int]) -> list[Path]:
        """Landed files read by ``batches``, from the file source's log in ``checkpoint``
        ([] when the checkpoint is not on a local or mounted path)."""
        try:
            folder = local_path(checkpoint)
        except DataError:
            return []  # a cluster filesystem's log: Spark's to read
        return sorted(consumed_files(folder, set(batches)))

    def destroy_consumed(self, checkpoint: Path, batches: Iterable[int]) -> list[Path]:
        files = self.consumed(checkpoint, batches)
        try:
            for f in files:
                f.unlink(missing_ok=True)
        except OSError as err:
            raise PipelineError(
                f"cannot delete consumed input under {str(self.directory)!r}: {err}"
            ) from err
        return files


# -- what a file-source query consumed, from its checkpoint ------------------


def consumed_files(checkpoint: Path, batches: set[int]) -> set[Path]:
    """The files ``batches`` read, each from its own log entry (``sources/0/N``) or, once
    Spark compacted it away, the first ``M.compact`` at or after it (which holds every
    batch up to M): a few small files a batch, not the whole log."""
    log_dir = checkpoint / "sources" / "0"
    if not batches or not log_dir.is_dir():
        return set()
    names = {p.name for p in log_dir.iterdir()}
    compacts = sorted(int(n.removesuffix(".compact")) for n in names if n.endswith(".compact")
                      and n.removesuffix(".compact").isdigit())  # fmt: skip
    entries: dict[str, list[tuple[int, Path]]] = {}
    found: set[Path] = set()
    for batch in batches:
        name = str(batch)
        if name not in names:
            later = [c for c in compacts if c >= batch]
            if not later:
                continue  # not logged (yet)
            name = f"{later[0]}.compact"
        if name not in entries:
            entries[name] = source_log_entries(log_dir / name)
        found.update(f for b, f in entries[name] if b == batch)
    return found


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
