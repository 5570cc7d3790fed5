"""Read the production job's backup (a Parquet dataset written by Spark) with DuckDB.

No Spark needed. Exactly once, for either layout:

* the job's own (``engine.job.layout``): one ``batch_id=N`` directory per
  micro-batch, read only when it holds ``_SUCCESS`` (Spark writes it after the
  batch's files are all in place; a replay overwrites the whole directory), so
  files of an attempt that failed before its commit are never counted;
* compacted batches (``engine.job.compaction``): ``batch_id=A-B`` holds
  batches ``A`` to ``B`` rewritten as one directory; once its ``_SUCCESS`` is
  there it supersedes every ``batch_id=N`` with ``A <= N <= B`` (skipped here
  even before the compaction deletes them);
* Spark's file sink (a user's own job, the exported snippet): when the
  directory has its log (``_spark_metadata``), only the files it committed.

Otherwise every ``*.parquet`` under the directory is read. Names that start
with ``_`` or ``.`` are skipped (as Spark and Hive do).

The directory is taken exactly as named: the files are listed here, never
through a glob, so ``[ ] * ?`` in a path are ordinary characters. A time range
reads only the files of its ``date`` (and ``hour``) partitions.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from engine.atomic import write_atomically
from engine.errors import DataError

META_DIR = "_spark_metadata"
BATCH_PREFIX = "batch_id="
COMMIT_MARKER = "_SUCCESS"
TIME = "CAST(event_time AS TIMESTAMP)"
HOURLY_BELOW_S = 60.0  # sampling faster than this partitions the backup by hour too
# Each partition key of the backup from the reading's UTC time (Spark's date_format).
PARTITION_FORMATS = {"date": "yyyy-MM-dd", "hour": "HH"}
# The job's shadow-check results beside the backup (``_lacuna/results/batch_id=N/``) are
# Parquet files named ``.pq``, so that ``<backup>/**/*.parquet`` (DuckDB's first query
# of a dataset) reads the backup rows alone; jobs before named them ``.parquet``.
RESULTS_SUFFIX = ".pq"
RESULTS_SUFFIXES = (RESULTS_SUFFIX, ".parquet")


def partition_columns(sampling_interval_s: float) -> tuple[str, ...]:
    """Coarse time keys of the backup: a day, or an hour for sub-minute data."""
    return ("date", "hour") if sampling_interval_s < HOURLY_BELOW_S else ("date",)


def local_path(uri: str | Path) -> Path:
    """A local path from a plain path or a ``file:`` URI; other schemes are a ``DataError``."""
    text = str(uri)
    parsed = urlparse(text)
    if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # "C:" is a drive, not a scheme
        if parsed.scheme != "file":
            return Path(text)
        # Hadoop (so Spark) takes a file: URI's path literally ("a%20b" is a directory
        # named so); a percent-encoded URI of an existing directory is decoded.
        raw = Path(parsed.path)
        return raw if raw.exists() else Path(unquote(parsed.path))
    raise DataError(
        f"recover, status and compact read local or mounted paths; copy or mount "
        f"{text!r} first (scheme {parsed.scheme!r})"
    )


def is_dataset(uri: str | Path) -> bool:
    return local_path(uri).is_dir()


def committed_files(root: Path) -> list[Path]:
    """The Parquet files of the dataset at ``root`` (see the module docstring)."""
    meta = root / META_DIR
    if meta.is_dir():
        return _logged_files(root, meta)
    found = []
    for folder, dirs, files in os.walk(root):
        visible = [d for d in dirs if not d.startswith(("_", "."))]
        batches = set(live_batches(folder, visible, marked=True))
        dirs[:] = sorted(d for d in visible if d in batches or batch_range(d) is None)
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".parquet")]
    return found


def batch_range(name: str) -> tuple[int, int] | None:
    """The micro-batches a directory holds: ``batch_id=N`` is ``(N, N)``, a compacted
    ``batch_id=A-B`` is ``(A, B)``; None for any other name."""
    value = name.removeprefix(BATCH_PREFIX)
    if value == name:
        return None
    first, dash, last = value.partition("-")
    if first.isdigit() and (last.isdigit() if dash else not last):
        return int(first), int(last or first)
    return None


def is_compacted(name: str) -> bool:
    """Whether a batch directory name is a compaction's (``batch_id=A-B``)."""
    return batch_range(name) is not None and "-" in name.removeprefix(BATCH_PREFIX)


def live_batches(folder: str | Path, names: list[str], marked: bool) -> list[str]:
    """The batch directories among ``names`` in ``folder`` a reader counts, in batch order.

    A compacted ``batch_id=A-B`` counts once its commit marker is there, and then
    hides every batch directory within ``A..B`` (a smaller compaction's too). A
    plain ``batch_id=N`` counts when ``marked`` is False (results and metrics: each
    a single file renamed into place) or when its own marker is there (backup rows).
    """
    found = []
    for name in names:
        span = batch_range(name)
        if span is None:
            continue
        compacted = is_compacted(name)
        if (compacted or marked) and not os.path.exists(os.path.join(folder, name, COMMIT_MARKER)):
            continue
        found.append((span, compacted, name))
    covers = [span for span, compacted, _ in found if compacted]
    return [
        name
        for span, _, name in sorted(found)
        if not any(a <= span[0] and span[1] <= b and (a, b) != span for a, b in covers)
    ]


def remove_superseded(folder: Path, marked: bool) -> int:
    """Delete the batch directories of ``folder`` that a counted compaction holds (those
    ``live_batches`` hides: a crash after a compaction's marker left them); how many."""
    if not folder.is_dir():
        return 0
    spans = {d.name: batch_range(d.name) for d in os.scandir(folder) if d.is_dir()}
    found = {name: span for name, span in spans.items() if span is not None}
    live = set(live_batches(folder, list(found), marked))
    covers = [found[name] for name in live if is_compacted(name)]
    removed = 0
    for name, (lo, hi) in found.items():
        if name not in live and any(a <= lo and hi <= b for a, b in covers):
            shutil.rmtree(folder / name)
            removed += 1
    return removed


def batch_files(
    folder: Path, suffix: str | tuple[str, ...], marked: bool
) -> list[tuple[str, Path]]:
    """(batch directory, file) for the ``*<suffix>`` files of ``folder``'s live batches
    (``live_batches``), in batch order; hidden names skipped."""
    if not folder.is_dir():
        return []
    names = [d.name for d in os.scandir(folder) if d.is_dir()]
    return [
        (name, folder / name / f)
        for name in live_batches(folder, names, marked)
        for f in sorted(os.listdir(folder / name))
        if f.endswith(suffix) and not f.startswith((".", "_"))
    ]


def replace_file(path: Path, data: bytes) -> None:
    """Replace a local file with ``data`` whole or not at all (``engine.atomic``), its
    folder created if need be.

    Drops the checksum file Hadoop's local file system keeps beside a file it
    wrote (``.name.crc``): it would no longer match, and Hadoop (so Spark)
    refuses to read a file whose checksum does not match.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    write_atomically(path, lambda tmp: tmp.write_bytes(data))


def write_compacted(path: Path, table: pa.Table) -> None:
    """Backup rows as one compacted Parquet file at ``path`` (replaced atomically).

    Sorted by sensor, then reading index and time, each sensor's ``seq`` and
    ``event_time`` step evenly, and delta encoding stores them in a few bits; the
    values, split by byte significance, compress better under zstd; the rest is
    dictionary-encoded. The file then costs about the values' 8 bytes a reading,
    whichever share of the sensors it holds, where the long layout's small files
    repeat each reading's time for every sensor. Timestamps in microseconds, as Spark
    writes them (Spark refuses nanoseconds).
    """
    names = table.column_names
    order = [(c, "ascending") for c in ("sensor", "seq", "event_time") if c in names]
    encoding = {c: "DELTA_BINARY_PACKED" for c in ("seq", "event_time") if c in names}
    if "value" in names and pa.types.is_floating(table.schema.field("value").type):
        encoding["value"] = "BYTE_STREAM_SPLIT"
    buf = io.BytesIO()
    pq.write_table(
        table.sort_by(order),
        buf,
        coerce_timestamps="us",
        compression="zstd",
        use_dictionary=[c for c in names if c not in encoding],
        column_encoding=encoding,
    )
    replace_file(path, buf.getvalue())


def _logged_files(root: Path, meta: Path) -> list[Path]:
    """Files added (and not deleted) by the batches of Spark's file-sink log."""
    entries = {}
    for f in meta.iterdir():
        stem = f.name.removesuffix(".compact")
        if stem.isdigit() and not f.name.startswith("."):
            entries[int(stem)] = f
    compacts = [b for b, f in entries.items() if f.name.endswith(".compact")]
    first = max(compacts, default=0)
    live: dict[str, Path] = {}
    for batch in sorted(b for b in entries if b >= first):
        for item in _log_entries(entries[batch]):
            path = _relocated(root, item["path"])
            if item.get("action", "add") == "delete":
                live.pop(str(path), None)
            else:
                live[str(path)] = path
    return sorted(live.values())


def _log_entries(log: Path) -> list[dict[str, Any]]:
    """The file entries of one batch of Spark's file-sink log (after its version line); a
    ``DataError`` naming the log when it is not what Spark writes (truncated, garbage)."""
    try:
        items = [json.loads(x) for x in log.read_text().splitlines()[1:] if x.strip()]
        if not all(isinstance(i, dict) and isinstance(i.get("path"), str) for i in items):
            raise ValueError("an entry without a file path")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DataError(
            f"Spark's file-sink log {log} is unreadable ({_first_line(err)}): restore it from "
            "a copy (it lists the batch's committed files)"
        ) from None
    return items


def _relocated(root: Path, uri: str) -> Path:
    """The logged file under ``root``: keep its partition directories and name.

    The log holds absolute URIs from when it was written; the dataset may since
    have been copied or mounted elsewhere.
    """
    parts = Path(unquote(urlparse(uri).path)).parts
    tail = [parts[-1]]
    for part in reversed(parts[:-1]):
        if "=" not in part:
            break
        tail.insert(0, part)
    return root.joinpath(*tail)


@dataclass(frozen=True)
class TimeRange:
    """``[start, end)`` in UTC; ``None`` is open."""

    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        if self.start and self.end and self.end <= self.start:
            raise DataError(f"--to must be after --from, got {self.start} and {self.end}")

    @classmethod
    def parse(cls, start: str | None, end: str | None) -> TimeRange:
        return cls(_parse_time(start, "--from"), _parse_time(end, "--to"))

    def keeps(self, partition: dict[str, str]) -> bool:
        """Whether a file of this ``date``/``hour`` partition can hold readings in range."""
        if "date" not in partition:
            return True
        try:
            lo = datetime.fromisoformat(partition["date"]).replace(tzinfo=UTC)
            span = timedelta(days=1)
            if "hour" in partition:
                lo, span = lo + timedelta(hours=int(partition["hour"])), timedelta(hours=1)
        except ValueError:  # e.g. Hive's __HIVE_DEFAULT_PARTITION__ for readings without a time
            return True  # read it: the time filter on the rows decides

        return (self.end is None or lo < self.end) and (
            self.start is None or lo + span > self.start
        )


def _parse_time(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise DataError(f"{flag} must be an ISO time like 2014-03-01T00:00, got {text!r}") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _partition_of(root: Path, file: Path) -> dict[str, str]:
    rel = file.relative_to(root).parts[:-1]
    return dict(p.split("=", 1) for p in rel if "=" in p)


def read_backup(
    uri: str | Path, span: TimeRange | None = None, allow_incomplete: bool = False
) -> pd.DataFrame:
    """Long backup rows ``event_time, sensor, value, plan_version`` in ``span``, time ordered.

    ``event_time`` is a naive UTC timestamp. A committed batch that is not whole is a
    ``DataError`` (``engine.backup.integrity``) unless ``allow_incomplete``.
    """
    found = _query(uri, span, "ORDER BY event_time, sensor", allow_incomplete, "df")
    if found is None:
        return pd.DataFrame(columns=["event_time", "sensor", "value", "plan_version"])
    return found


def read_backup_arrow(
    uri: str | Path, span: TimeRange | None = None, allow_incomplete: bool = False
) -> pa.Table | None:
    """The rows of ``read_backup`` as Arrow, in no order; None when no file is in ``span``.

    For a caller that widens the rows itself: at 1,056 sensors and 12 weeks the
    sort and the pandas strings took 0.45 s of ``read_backup``'s 0.65 s.
    """
    return _query(uri, span, "", allow_incomplete, "to_arrow_table")


def nothing_in(uri: str | Path, span: TimeRange) -> str:
    """Why ``read_backup`` found no reading in ``span``, as one sentence: no committed batch
    at all (not a job's backup, an empty mount), or none in the range (the dates it holds)."""
    root = local_path(uri)
    files = committed_files(root)
    if not files:
        return (
            f"{str(uri)!r} holds no committed backup batch (no Parquet files in a batch "
            "directory with _SUCCESS, nor in a _spark_metadata log): point --backup at the "
            "job's --backup"
        )
    dates = sorted({d for f in files if (d := _partition_of(root, f).get("date"))})
    held = f" (its date partitions run from {dates[0]} to {dates[-1]})" if dates else ""
    start = "the start" if span.start is None else span.start.isoformat()
    end = "the end" if span.end is None else span.end.isoformat()
    return f"the backup holds no reading from {start} to {end}{held}: nothing to rebuild"


def _query(
    uri: str | Path, span: TimeRange | None, order: str, allow_incomplete: bool, fetch: str
) -> Any:
    """The rows as ``fetch`` gives them (``df``: pandas, ``to_arrow_table``: Arrow), or None
    when no committed file lies in ``span``."""
    from engine.backup.integrity import check_batches

    root = local_path(uri)
    if not root.is_dir():
        raise DataError(f"backup dataset {str(root)!r} is not a directory")
    skip = {f for gap in check_batches(root, allow_incomplete) for f in gap.skip}
    span = span or TimeRange()
    files = [
        f for f in committed_files(root) if span.keeps(_partition_of(root, f)) and f not in skip
    ]
    if not files:
        return None
    # every file's footer, not only the first's: the dataset takes the first's schema and
    # reads a column another file lacks as nulls, which recovery would drop as missing
    _check_files(root, files)
    # no partition columns: the query needs none (the time range already chose the
    # files), and a compacted batch_id=A-B beside batch_id=N would not merge as one type
    where, args = _where(span)
    con = duckdb.connect()
    # Spark writes INT96 (read as naive UTC) or TIMESTAMP_MICROS (UTC-adjusted): in a
    # UTC session both cast to the same naive UTC timestamp.
    con.execute("SET TimeZone = 'UTC'")
    sql = f"SELECT {TIME} AS event_time, sensor, value, plan_version FROM backup {where} {order}"
    try:
        con.register("backup", pads.dataset([str(f) for f in files], format="parquet"))
        rows = getattr(con.execute(sql, args), fetch)()
    except (duckdb.Error, pa.ArrowException, OSError) as err:
        _check_files(root, files)  # DuckDB says "magic bytes not found", not which file
        raise DataError(f"the backup at {str(uri)!r} cannot be read: {_first_line(err)}") from None
    _check_keys(root, files, rows)
    return rows


KEY_COLUMNS = ("event_time", "sensor", "plan_version")  # a reading the job wrote has all three


def _check_keys(root: Path, files: list[Path], rows: Any) -> None:
    """A ``DataError`` naming the first file with a reading that lacks its time, sensor or
    plan version (``rows``: the query's answer, Arrow or pandas): no row the job writes
    does, and recovery could neither place nor rebuild it."""
    for column in KEY_COLUMNS:
        if isinstance(rows, pa.Table):
            nulls = rows.column(column).null_count
        else:
            nulls = int(rows[column].isna().sum())
        if not nulls:
            continue
        where = next((f for f in files if _nulls_in(f, column)), None)
        named = f" (the first in {where.relative_to(root)})" if where is not None else ""
        raise DataError(
            f"the backup at {str(root)!r} holds {nulls:,} reading(s) without "
            f"{'an' if column[0] in 'aeiou' else 'a'} {column}{named}: neither the job nor "
            "its exported script writes one; restore the batch from a copy, or move its files "
            "out of the backup (recover --allow-incomplete then rebuilds around its batch)"
        )


BACKUP_COLUMNS = ("event_time", "sensor", "value", "plan_version")


def _check_columns(root: Path, path: Path, names: list[str]) -> None:
    """A ``DataError`` when a file of the dataset (its column ``names``) lacks the backup's
    columns: a landing directory (readings without ``plan_version``) is not a job backup."""
    lacking = [c for c in BACKUP_COLUMNS if c not in names]
    if lacking:
        landing = "plan_version" in lacking and {"event_time", "sensor"} <= set(names)
        hint = " (it looks like a landing file)" if landing else ""
        raise DataError(
            f"{str(root)!r} is not a job backup: its file {path.relative_to(root)} has no "
            f"{', '.join(lacking)} column{hint}; point --backup at the job's --backup"
        )


def _nulls_in(path: Path, column: str) -> int:
    """Nulls in ``column`` of the one file ``path`` (no partition columns read)."""
    return int(pq.ParquetFile(path).read(columns=[column]).column(column).null_count)


def _check_files(root: Path, files: list[Path]) -> None:
    """A ``DataError`` naming the first file that is not readable Parquet (garbage, empty,
    truncated) or lacks the backup's columns; nothing when every file is fine."""
    import pyarrow.parquet as pq

    for f in files:
        try:
            names = pq.read_schema(f).names
        except (OSError, pa.ArrowException) as err:
            raise DataError(
                f"backup file {f} is not a readable Parquet file ({_first_line(err)}): restore "
                "it from a copy, or move it out of the backup (recover --allow-incomplete then "
                "rebuilds around its batch)"
            ) from None
        _check_columns(root, f, names)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _where(span: TimeRange) -> tuple[str, list[datetime]]:
    clauses, args = [], []
    if span.start is not None:
        clauses.append(f"{TIME} >= ?")
        args.append(span.start.replace(tzinfo=None))
    if span.end is not None:
        clauses.append(f"{TIME} < ?")
        args.append(span.end.replace(tzinfo=None))
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args
