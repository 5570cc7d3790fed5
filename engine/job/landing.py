"""What the landing directory holds that Spark's file source would read wrongly, or never.

Two things an operator's scripts really produce (local or mounted paths; a
cluster filesystem's files are left to Spark):

* Parquet files in a plain subdirectory of ``--source``: Spark's file source
  reads the files of the directory itself (and Hive-style ``key=value``
  directories as partitions), never ``sub/x.parquet``. Nothing fails: their
  readings are simply never backed up. ``unread_files`` finds them so the job
  can say so (event ``unread_landing_files``).
* ``event_time`` as pandas writes it by default: ``INT64 TIMESTAMP(NANOS)``,
  which Spark cannot read as a timestamp. ``time_kind`` reads it from the file's
  footer, so the job reads such files as integers and truncates them to
  microseconds (as DuckDB does); an ``INT64`` column without a timestamp type
  (epoch numbers) is not a time at all, and is refused naming the unit its
  values look like.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import DataError, PipelineError

SHOWN = 3  # unread files named in the event
UNREAD_CHECK_S = 60.0  # how often the landing directory's subdirectories are listed
Say = Callable[[dict[str, Any]], None]
# epoch values of today's times, by unit: seconds 1.7e9, ms 1.7e12, us 1.7e15, ns 1.7e18
_UNITS = ((1e11, "s"), (1e14, "ms"), (1e17, "us"), (float("inf"), "ns"))


def unread_files(source: Path, limit: int = 1000) -> list[Path]:
    """Parquet files under a subdirectory of ``source`` that the file source never reads
    (a directory on the way that is not ``key=value``; hidden names skipped), at most
    ``limit``. Spark reads a ``key=value`` tree as partitions, so those are not listed."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        rel = Path(folder).relative_to(source).parts
        if rel and not all("=" in part for part in rel):
            found += [Path(folder) / f for f in sorted(files) if f.endswith(".parquet")]
            if len(found) >= limit:
                return found[:limit]
    return found


def unread_event(source: Path, files: list[Path]) -> dict[str, object]:
    shown = [str(f.relative_to(source)) for f in files[:SHOWN]]
    return {
        "event": "unread_landing_files",
        "files": len(files),
        "examples": shown,
        "why": (
            f"{len(files)} Parquet file(s) in subdirectories of --source (e.g. {shown[0]}) "
            "will never be read: the job reads the files of the source directory itself "
            "(and key=value partition directories); move them into it (any file there is "
            "read, however old its modification time)"
        ),
    }


def time_kind(path: Path) -> str:
    """How ``path`` stores ``event_time``: ``"nanos"`` (INT64 nanoseconds), ``"integer"``
    (a plain number), or ``"timestamp"`` (what Spark reads: micros, millis, INT96; also a
    file that is unreadable or lacks the column, which Spark then reports)."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return "timestamp"
    if "event_time" not in schema.names:
        return "timestamp"
    kind = schema.field("event_time").type
    if pa.types.is_timestamp(kind):
        return "nanos" if kind.unit == "ns" else "timestamp"
    return "integer" if pa.types.is_integer(kind) else "timestamp"


def refuse_integer_times(path: Path) -> None:
    """``PipelineError`` for a file whose ``event_time`` is a plain integer, naming the
    unit its values look like (from the footer's statistics)."""
    unit = _guessed_unit(path)
    looks = f" (its values look like epoch {_UNIT_NAMES[unit]})" if unit else ""
    example = unit or "s"
    raise PipelineError(
        f"input file {path}: event_time is an integer{looks}, not a timestamp; write it as "
        f"a timestamp, e.g. df['event_time'] = pd.to_datetime(df['event_time'], "
        f"unit='{example}', utc=True), then move it back into the source directory: the "
        "job resumes from its checkpoint, and the micro-batch that failed was not committed"
    )


_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


def _guessed_unit(path: Path) -> str | None:
    try:
        meta = pq.read_metadata(path)
        column = meta.schema.names.index("event_time")
        highs = [
            abs(int(stats.max))
            for g in range(meta.num_row_groups)
            if (stats := meta.row_group(g).column(column).statistics) is not None
            and stats.has_min_max
        ]
    except (OSError, pa.ArrowException, ValueError, TypeError):
        return None
    if not highs:
        return None
    return next(unit for bound, unit in _UNITS if max(highs) < bound)


class LandingWatch:
    """The job's view of its landing directory, per micro-batch (``engine.job.sink``)."""

    def __init__(self, source: str | None) -> None:
        self.source = source
        self._said_nanos = False
        self._unread: tuple[float, int] = (float("-inf"), 0)  # (checked at, files found)

    def readings(self, spark: Any, batch: Any, files: list[Path], say: Say) -> Any:
        """The batch's readings: Spark's, unless one of its landing ``files`` holds
        nanosecond times (pandas' default), when they are read from the files and
        truncated to microseconds (said once); a file whose times are integers is
        refused by name. ``files``: the batch's, from the source's log (local paths)."""
        from engine.job.transforms import landed_readings

        kinds = {f: time_kind(f) for f in files}
        for f, kind in kinds.items():
            if kind == "integer":
                refuse_integer_times(f)
        nanos = [f.as_uri() for f, kind in kinds.items() if kind == "nanos"]
        if not nanos:
            return batch.select("event_time", "sensor", "value")
        if not self._said_nanos:
            self._said_nanos = True
            say(
                {
                    "event": "nanosecond_timestamps",
                    "files": len(nanos),
                    "example": nanos[0],
                    "why": "landing files with nanosecond event times (pandas' default) are "
                    "read truncated to microseconds, the resolution of the backup",
                }
            )
        others = [f.as_uri() for f, kind in kinds.items() if kind != "nanos"]
        return landed_readings(spark, others, nanos)

    def watch(self, now: float, say: Say) -> None:
        """Once a minute at most: say the Parquet files in subdirectories of the landing
        directory, which the file source never reads, when their number changes."""
        from engine.backup.dataset import local_path

        checked, said = self._unread
        if self.source is None or now - checked < UNREAD_CHECK_S:
            return
        try:
            source = local_path(self.source)
        except DataError:
            return  # a cluster filesystem's directory: not listed here
        found = unread_files(source) if source.is_dir() else []
        self._unread = (now, len(found))
        if found and len(found) != said:
            say(unread_event(source, found))
