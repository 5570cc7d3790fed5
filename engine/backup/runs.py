"""The live pipeline's backup: a Parquet dataset written by Spark, read with DuckDB.

Layout (the production job's, with one more level because the live pipeline
restarts Spark's batch ids at 0 in a new run after a failure)::

    <backup>/run=R/batch_id=N/date=YYYY-MM-DD/part-*.parquet

Columns ``event_time`` (UTC, TIMESTAMP_MICROS), ``sensor``, ``value``,
``plan_version`` (the production reader's), plus ``seq`` (the reading index
the live recovery selects by). Spark writes a batch with
``mode("overwrite")`` into its own ``batch_id=N`` directory, so a replayed
batch replaces it, and its committer writes ``_SUCCESS`` there once every
file is in place.

Exactly once: the store reads a batch's files only when the batch is
committed in its ``batches`` table (the DuckDB transaction that follows the
write) *and* its directory holds ``_SUCCESS``. A directory without a store
marker (a crash between the write and the commit) is ignored, and the replay
overwrites it. A store-committed batch with rows whose directory lacks
``_SUCCESS`` lost its backup: that is a ``StoreError``, never a silent gap.

Compaction (``engine.backup.run_compaction``) rewrites a run's committed batches
``A`` to ``B`` as one ``run=R/batch_id=A-B/date=D/part-00000.parquet`` per date,
whose rows carry their batch as the column ``source_batch`` (a path cannot say which
of ``A..B`` a row came from). As in the production job's layout, a compacted directory
counts once its ``_SUCCESS`` is written, and from then on it stands for every
committed batch within ``A..B``: a reader takes its files instead of theirs, never
both and never neither.

This module needs only DuckDB and pyarrow; Spark's half, the write, is
``engine.live.backup_writer``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads

from engine.backup.dataset import (
    BATCH_PREFIX,
    COMMIT_MARKER,
    batch_range,
    is_compacted,
    live_batches,
)
from engine.errors import DataError, StoreError

RUN_PREFIX = "run="
SOURCE_BATCH = "source_batch"  # a compacted row's batch (its path names the span A-B)
_IN_COMPACTION = {"batch_id": SOURCE_BATCH}  # a compacted file's names for columns
PARTITIONS = ("date",)
TABLE_COLUMNS = ("run", "batch_id", "seq", "event_time", "sensor", "value", "plan_version")
_TYPES = (
    "INTEGER",
    "BIGINT",
    "BIGINT",
    "TIMESTAMP",
    "VARCHAR",
    "DOUBLE",
    "INTEGER",
)


def normalize_uri(uri: str | Path) -> str:
    """A backup location as the store records it: an absolute path, or a URI as given."""
    text = str(uri)
    scheme = urlparse(text).scheme
    if scheme in ("", "file") or len(scheme) == 1:  # "C:" is a drive
        return str(local_root(text).absolute())
    return text


def local_root(uri: str | Path) -> Path:
    """The local directory of a plain path or ``file:`` URI (``StoreError`` otherwise)."""
    from engine.backup.dataset import local_path

    try:
        return local_path(uri)
    except DataError as err:
        raise StoreError(f"the embedded store reads local or mounted backups: {err}") from err


def check_no_legacy_rows(cur: duckdb.DuckDBPyConnection, store: Path) -> None:
    """``StoreError`` if the store at ``store`` keeps backup rows in DuckDB (the old layout)."""
    cur.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'backup'")
    if cur.fetchone() is None:
        return
    cur.execute("SELECT count(*) FROM backup")
    (rows,) = cur.fetchone() or (0,)
    if rows:
        raise StoreError(
            f"the store {str(store)!r} keeps {rows} backup rows in DuckDB, from before "
            "the backup became a Parquet dataset; archive this run and start a new one"
        )


def claim_location(cur: duckdb.DuckDBPyConnection, store: Path, backup: str | Path | None) -> str:
    """The store's backup location (its ``meta`` table): recorded, else ``backup``, else
    ``<store dir>/backup``; a new one is recorded. ``StoreError`` if ``backup`` differs."""
    cur.execute("SELECT value FROM meta WHERE key = 'backup'")
    row = cur.fetchone()
    given = None if backup is None else normalize_uri(backup)
    if row is not None:
        if given is not None and given != row[0]:
            raise StoreError(f"the store {str(store)!r} backs up to {row[0]!r}, not {given!r}")
        return str(row[0])
    uri = given or normalize_uri(store.parent / "backup")
    cur.execute("INSERT INTO meta VALUES ('backup', ?)", [uri])
    return uri


def batch_uri(backup: str, run: int, batch_id: int) -> str:
    """Where Spark writes batch ``(run, batch_id)`` of the backup at ``backup``."""
    return f"{backup.rstrip('/')}/{RUN_PREFIX}{run}/{BATCH_PREFIX}{batch_id}"


def batch_files(root: Path, keys: Iterable[tuple[int, int]]) -> list[Path]:
    """Parquet files of the store-committed batches ``keys`` ((run, batch_id) pairs).

    A batch within a marked compaction is read from it (its files once, however many of
    its batches are asked for). Raises ``StoreError`` naming a batch that is in no marked
    compaction and whose directory has no ``_SUCCESS``.
    """
    found: list[Path] = []
    spans: dict[int, list[tuple[int, int, Path]]] = {}
    taken: set[Path] = set()
    for run, batch_id in keys:
        if run not in spans:
            spans[run] = compactions(root / f"{RUN_PREFIX}{run}")
        cover = next((f for a, b, f in spans[run] if a <= batch_id <= b), None)
        if cover is not None:
            if cover not in taken:
                taken.add(cover)
                found += parquet_under(cover)
            continue
        folder = root / f"{RUN_PREFIX}{run}" / f"{BATCH_PREFIX}{batch_id}"
        if not (folder / COMMIT_MARKER).exists():
            raise StoreError(
                f"batch {batch_id} of run {run} is committed in the store but its backup "
                f"{str(folder)!r} has no {COMMIT_MARKER}: its backup rows are lost"
            )
        found += parquet_under(folder)
    return found


def compactions(run_dir: Path) -> list[tuple[int, int, Path]]:
    """The marked compactions ``(A, B, directory)`` of one run's directory that count
    (``live_batches``: one inside a wider marked one, left by a crash before its
    deletion, does not), widest first."""
    if not run_dir.is_dir():
        return []
    names = [d.name for d in os.scandir(run_dir) if d.is_dir()]
    out = []
    for name in live_batches(run_dir, names, marked=True):
        span = batch_range(name)
        if span is not None and is_compacted(name):
            out.append((span[0], span[1], run_dir / name))
    return sorted(out, key=lambda s: (s[0] - s[1], s[0]))


def parquet_under(folder: Path) -> list[Path]:
    found: list[Path] = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found += [
            Path(here) / f
            for f in sorted(files)
            if f.endswith(".parquet") and not f.startswith(("_", "."))
        ]
    return found


def in_compaction(root: Path, file: Path) -> bool:
    """Whether ``file`` (under ``root``) belongs to a compacted ``batch_id=A-B`` directory."""
    parts = file.relative_to(root).parts
    return len(parts) > 1 and is_compacted(parts[1])


def read_rows(
    root: Path, files: Sequence[Path], where: str = "", params: Sequence[Any] = ()
) -> pa.Table:
    """The rows of ``files`` as Arrow with ``TABLE_COLUMNS`` (event_time naive UTC).

    ``where`` is a DuckDB condition over those columns with ``?`` for ``params``.
    The files are listed, never globbed, so ``[ ] * ?`` in a path are literal.
    """
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        if not files:
            cols = ", ".join(
                f"CAST(NULL AS {t}) AS {c}" for c, t in zip(TABLE_COLUMNS, _TYPES, strict=True)
            )
            return con.execute(f"SELECT {cols} LIMIT 0").to_arrow_table()
        typed = list(zip(TABLE_COLUMNS, _TYPES, strict=True))
        cols = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in typed)
        packed_cols = ", ".join(f"CAST({_IN_COMPACTION.get(c, c)} AS {t}) AS {c}" for c, t in typed)
        # plain batches take run and batch_id from their paths; compacted ones hold them
        plain = [str(f) for f in files if not in_compaction(root, f)]
        packed = [str(f) for f in files if in_compaction(root, f)]
        parts = []
        if plain:
            con.register(
                "plain",
                pads.dataset(
                    plain, format="parquet", partitioning="hive", partition_base_dir=str(root)
                ),
            )
            parts.append(f"SELECT {cols} FROM plain")
        if packed:  # run from the path; each row's batch is its source_batch column
            run_only = pads.partitioning(pa.schema([("run", pa.int32())]), flavor="hive")
            con.register(
                "packed",
                pads.dataset(
                    packed, format="parquet", partitioning=run_only, partition_base_dir=str(root)
                ),
            )
            parts.append(f"SELECT {packed_cols} FROM packed")
        rows = " UNION ALL ".join(parts)
        sql = f"SELECT * FROM ({rows}) {'WHERE ' + where if where else ''}"
        return con.execute(sql + " ORDER BY seq, sensor, run", list(params)).to_arrow_table()
    except (duckdb.Error, OSError, pa.ArrowException) as err:
        raise StoreError(f"cannot read the Parquet backup under {str(root)!r}: {err}") from err
    finally:
        con.close()


def file_bytes(files: Iterable[Path]) -> int:
    """Bytes on disk of ``files``."""
    return sum(f.stat().st_size for f in files)
