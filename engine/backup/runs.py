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

from engine.backup.dataset import BATCH_PREFIX, COMMIT_MARKER
from engine.errors import DataError, StoreError

RUN_PREFIX = "run="
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

    Raises ``StoreError`` naming a batch whose directory has no ``_SUCCESS``.
    """
    found: list[Path] = []
    for run, batch_id in keys:
        folder = root / f"{RUN_PREFIX}{run}" / f"{BATCH_PREFIX}{batch_id}"
        if not (folder / COMMIT_MARKER).exists():
            raise StoreError(
                f"batch {batch_id} of run {run} is committed in the store but its backup "
                f"{str(folder)!r} has no {COMMIT_MARKER}: its backup rows are lost"
            )
        for here, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
            found += [
                Path(here) / f
                for f in sorted(files)
                if f.endswith(".parquet") and not f.startswith(("_", "."))
            ]
    return found


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
        dataset = pads.dataset(
            [str(f) for f in files],
            format="parquet",
            partitioning="hive",
            partition_base_dir=str(root),
        )
        con.register("files", dataset)
        cols = ", ".join(
            f"CAST({c} AS {t}) AS {c}" for c, t in zip(TABLE_COLUMNS, _TYPES, strict=True)
        )
        sql = f"SELECT * FROM (SELECT {cols} FROM files) {'WHERE ' + where if where else ''}"
        return con.execute(sql + " ORDER BY seq, sensor, run", list(params)).to_arrow_table()
    except (duckdb.Error, OSError, pa.ArrowException) as err:
        raise StoreError(f"cannot read the Parquet backup under {str(root)!r}: {err}") from err
    finally:
        con.close()


def file_bytes(files: Iterable[Path]) -> int:
    """Bytes on disk of ``files``."""
    return sum(f.stat().st_size for f in files)
