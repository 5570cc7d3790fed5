"""DuckDB backup store: append-only, idempotent per micro-batch.

One DuckDB file holds the small tables; the backup rows themselves are a
Parquet dataset written by Spark (``engine.backup.runs``) at the store's
backup location (recorded in ``meta``; default ``<store dir>/backup``):

* ``backup``  (read only, from Parquet) the raw readings the backup writer kept
  (all sensors in ``full`` mode, the plan's backup sensors in ``approx``,
  nothing in ``none``), of batches committed here whose directory holds
  ``_SUCCESS``;
* ``results`` window aggregates, ``kind`` ``'live'`` or ``'recovered'``;
* ``batches`` one marker per committed micro-batch;
* ``plan_log`` every plan the pipeline ran with, and why it changed;
* ``late``    readings that arrived after their windows were closed;
* ``state``   the latest window-state snapshot of each run (operator state);
* ``plan_versions`` every plan the stream ran with: id, creation time, reason,
  the row (``seq``) and event-time range it governed (the last filled when a
  newer version supersedes it), backup set, reconstruction map and calibration
  state (JSON). A version that starts at a micro-batch is written in that
  batch's transaction, so recovery can rebuild each row with its own plan.

A micro-batch is keyed by ``(run, batch_id)``: ``run`` numbers a query lifetime
(a new run starts after a failure discarded the checkpoint, because Spark then
restarts its batch ids at 0). Spark writes the batch's backup files first; its
results, late readings, marker, state and plan version are then one DuckDB
transaction, and a key that is already committed is skipped, so a batch that
Spark replays after a crash never duplicates a row (its backup directory is
overwritten, and only read once the marker is here).

A store written before the backup moved to Parquet (a ``backup`` table with
rows) is refused with a ``StoreError``: archive that run.

DuckDB allows one writer process: every access stays in this process, through
one connection per store file, a fresh cursor per call and a lock per file.
The values it writes and reads are ``engine.live.records``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from engine.backup import runs as backup_parquet
from engine.backup.dataset import remove_superseded
from engine.backup.run_compaction import RunCompaction, compact_run
from engine.errors import StoreError
from engine.live.records import (
    BACKUP_COLUMNS,
    INDEXED_KINDS,
    LATE_COLUMNS,
    RESULT_COLUMNS,
    BatchWrite,
    StoreSize,
    VersionRecord,
)
from engine.live.version_table import insert_version, read_version_rows

RECOVERY_BATCH = -1  # batch id under which a run's recovery results are committed
COMPACT_BATCHES = 32  # plain batch directories a compaction waits for (and compactions a merge)
# Newest committed batches left as Spark wrote them. None need be: a replayed batch the
# store has committed is skipped before its backup is written (``LivePipeline``), so a
# compacted batch is never written again; an uncommitted one is never compacted.
COMPACT_KEEP = 0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE TABLE IF NOT EXISTS results (run INTEGER, batch_id BIGINT, window_id BIGINT,"
    " window_start TIMESTAMP, window_end TIMESTAMP, sensor VARCHAR, value DOUBLE,"
    " kind VARCHAR, version INTEGER, final BOOLEAN)",
    "CREATE TABLE IF NOT EXISTS batches (run INTEGER, batch_id BIGINT, rows BIGINT,"
    " bytes BIGINT, max_seq BIGINT, committed_at TIMESTAMP, PRIMARY KEY (run, batch_id))",
    'CREATE TABLE IF NOT EXISTS plan_log ("at" TIMESTAMP, reason VARCHAR, backup_sensors VARCHAR)',
    "CREATE TABLE IF NOT EXISTS late (run INTEGER, batch_id BIGINT, seq BIGINT,"
    " event_time TIMESTAMP, sensor VARCHAR, value DOUBLE, arrival_time TIMESTAMP)",
    "CREATE TABLE IF NOT EXISTS state (run INTEGER PRIMARY KEY, batch_id BIGINT, snapshot BLOB)",
    "CREATE TABLE IF NOT EXISTS plan_versions (id INTEGER PRIMARY KEY, created_at TIMESTAMP,"
    " reason VARCHAR, detail VARCHAR, first_seq BIGINT, last_seq BIGINT, first_time TIMESTAMP,"
    " last_time TIMESTAMP, backup_sensors VARCHAR, reconstruction VARCHAR, calibration VARCHAR)",
    # a store made before kept-readings sensors gains the column, its rows NULL: none kept
    "ALTER TABLE plan_versions ADD COLUMN IF NOT EXISTS kept_sensors VARCHAR",
)

_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(path: Path) -> threading.RLock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(str(path), threading.RLock())


class BackupStore:
    """The DuckDB backup store at ``path`` (created if missing).

    ``backup`` is where the Parquet backup goes (a path or a URI Spark writes);
    the store records it, so a store reopened without it (a new process,
    recovery) finds its backup. Default ``<store dir>/backup``. Raises
    ``StoreError`` naming the path when it cannot be created or opened, when it
    records another backup location than ``backup``, or when it predates the
    Parquet backup.
    """

    def __init__(
        self,
        path: str | Path,
        now: Callable[[], datetime] | None = None,
        backup: str | Path | None = None,
    ) -> None:
        self.path = Path(path).absolute()
        self._now = now or (lambda: datetime.now(UTC))
        self._lock = _lock_for(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con = duckdb.connect(str(self.path))
        except (OSError, duckdb.Error) as err:
            raise StoreError(f"cannot open the backup store at {str(self.path)!r}: {err}") from err
        with self._cursor() as cur:
            for statement in _SCHEMA:
                cur.execute(statement)
            try:
                backup_parquet.check_no_legacy_rows(cur, self.path)
                self.backup_uri = backup_parquet.claim_location(cur, self.path, backup)
            except StoreError:
                self.close()
                raise

    def batch_uri(self, run: int, batch_id: int) -> str:
        """Where Spark writes the backup files of ``(run, batch_id)``."""
        return backup_parquet.batch_uri(self.backup_uri, run, batch_id)

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def __enter__(self) -> BackupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cursor(self) -> _Cursor:
        return _Cursor(self)

    # -- writes ---------------------------------------------------------------

    def commit_batch(
        self, write: BatchWrite, before_commit: Callable[[], None] | None = None
    ) -> bool:
        """Write a batch and its marker in one transaction.

        Returns ``False`` (and writes nothing) when ``(run, batch_id)`` is already
        committed. ``before_commit`` runs inside the transaction after every row
        is inserted; if it raises, the transaction rolls back (fault injection).
        """
        with self._transaction(f"batch {write.batch_id} of run {write.run}") as cur:
            if self._committed(cur, write.run, write.batch_id):
                return False  # the transaction commits nothing
            self._insert_rows(cur, write)
            if before_commit is not None:
                before_commit()
        return True

    def _insert_rows(self, cur: duckdb.DuckDBPyConnection, w: BatchWrite) -> None:
        key = {"run": w.run, "batch": w.batch_id}
        inserts = (
            ("results", w.results, RESULT_COLUMNS),
            ("late", w.late, LATE_COLUMNS),
        )
        for table, frame, columns in inserts:
            if frame is not None and not frame.empty:
                cur.register("_frame", frame)
                cols = ", ".join(columns)
                cur.execute(f"INSERT INTO {table} SELECT $run, $batch, {cols} FROM _frame", key)
                cur.unregister("_frame")
        cur.execute(
            "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?)",
            [w.run, w.batch_id, w.backup_rows, w.backup_bytes, w.max_seq, self._stamp()],
        )
        if w.state is not None:
            self._write_state(cur, w.run, w.batch_id, w.state)
        if w.version is not None:
            insert_version(cur, w.version)

    def write_version(self, version: VersionRecord) -> bool:
        """Write a plan version on its own (idempotent by id); ``False`` if it existed."""
        with self._transaction(f"plan version {version.id}") as cur:
            return insert_version(cur, version)

    @contextmanager
    def _transaction(self, what: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor whose statements commit together or not at all; a DuckDB error
        becomes a ``StoreError`` naming ``what`` could not be written."""
        with self._cursor() as cur:
            cur.begin()
            try:
                yield cur
                cur.commit()
            except duckdb.Error as err:
                cur.rollback()
                raise StoreError(f"cannot write {what} to {str(self.path)!r}: {err}") from err
            except BaseException:
                cur.rollback()
                raise

    def read_versions(self) -> list[VersionRecord]:
        """Every plan version, oldest first."""
        with self._cursor() as cur:
            return read_version_rows(cur)

    def now(self) -> datetime:
        """The store's clock (injected; used to stamp what it writes)."""
        return self._now()

    def log_plan(self, reason: str, backup_sensors: Sequence[str]) -> None:
        """Append a plan change to ``plan_log``."""
        with self._cursor() as cur:
            cur.execute(
                "INSERT INTO plan_log VALUES (?, ?, ?)",
                [self._stamp(), reason, json.dumps(list(backup_sensors))],
            )

    def save_state(self, run: int, batch_id: int, snapshot: bytes) -> None:
        """The window-state snapshot of ``run`` on its own (no batch marker), e.g. the
        seed a run restarted after a recovery begins with; a committed batch replaces it.
        The old snapshot goes in the same transaction as the new one comes: a crash
        between them must not leave the run with none (it would restart from nothing)."""
        with self._transaction(f"the window state of run {run}") as cur:
            self._write_state(cur, run, batch_id, snapshot)

    @staticmethod
    def _write_state(
        cur: duckdb.DuckDBPyConnection, run: int, batch_id: int, snapshot: bytes
    ) -> None:
        """The run's one state row (the latest snapshot replaces the one before)."""
        cur.execute("DELETE FROM state WHERE run = ?", [run])
        cur.execute("INSERT INTO state VALUES (?, ?, ?)", [run, batch_id, snapshot])

    def delete_state(self, run: int) -> None:
        """Forget the window-state snapshot of ``run`` (part of a simulated failure)."""
        with self._cursor() as cur:
            cur.execute("DELETE FROM state WHERE run = ?", [run])

    # -- reads ----------------------------------------------------------------

    def is_committed(self, run: int, batch_id: int) -> bool:
        with self._cursor() as cur:
            return self._committed(cur, run, batch_id)

    @staticmethod
    def _committed(cur: duckdb.DuckDBPyConnection, run: int, batch_id: int) -> bool:
        cur.execute("SELECT 1 FROM batches WHERE run = ? AND batch_id = ?", [run, batch_id])
        return cur.fetchone() is not None

    def next_run(self) -> int:
        """A run number no batch has used."""
        return self._scalar("SELECT coalesce(max(run), -1) + 1 FROM batches") or 0

    def committed_batches(self, run: int) -> list[int]:
        with self._cursor() as cur:
            cur.execute(
                "SELECT batch_id FROM batches WHERE run = ? AND batch_id >= 0 ORDER BY 1", [run]
            )
            return [int(r[0]) for r in cur.fetchall()]

    def totals(self) -> dict[str, int]:
        """What the committed batches of every run hold: ``batches`` (micro-batches),
        ``backup_rows``, ``backup_bytes`` and ``windows`` (windows with a result, live or
        recovered: what the pipeline's counter counts, recoveries included)."""
        batches = self._scalar("SELECT count(*) FROM batches WHERE batch_id >= 0")
        rows = self._scalar("SELECT coalesce(sum(rows), 0) FROM batches WHERE batch_id >= 0")
        size = self._scalar("SELECT coalesce(sum(bytes), 0) FROM batches WHERE batch_id >= 0")
        windows = self._scalar(
            "SELECT count(DISTINCT window_id) FROM results WHERE list_contains(?, kind)",
            [list(INDEXED_KINDS)],
        )
        return {"batches": int(batches or 0), "backup_rows": int(rows or 0),
                "backup_bytes": int(size or 0), "windows": int(windows or 0)}  # fmt: skip

    def horizon(self) -> int:
        """The largest reading index any committed batch carried (-1 if none)."""
        value = self._scalar("SELECT coalesce(max(max_seq), -1) FROM batches")
        return -1 if value is None else int(value)

    def last_window(self) -> int:
        """The largest reading-indexed window id with a final result (-1 if none).

        Only ``INDEXED_KINDS`` count: a disorder stage's final results are windows of
        event time, whose ids run ahead after a gap in the data (a lost range judged
        from them started late, and the windows between got no result).
        """
        value = self._scalar(
            "SELECT coalesce(max(window_id), -1) FROM results WHERE final"
            " AND list_contains(?, kind)",
            [list(INDEXED_KINDS)],
        )
        return -1 if value is None else int(value)

    def load_state(self, run: int) -> bytes | None:
        with self._cursor() as cur:
            cur.execute("SELECT snapshot FROM state WHERE run = ?", [run])
            row = cur.fetchone()
        return None if row is None else bytes(row[0])

    def read_backup(
        self, first_seq: int, last_seq: int, sensors: Sequence[str] | None = None
    ) -> pa.Table:
        """Backup rows with ``first_seq <= seq <= last_seq`` as Arrow (``BACKUP_COLUMNS``),
        ordered by seq and sensor, read from the Parquet backup with DuckDB."""
        where = "seq BETWEEN ? AND ?"
        params: list[Any] = [first_seq, last_seq]
        if sensors is not None:
            where += " AND list_contains(?, sensor)"
            params.append(list(sensors))
        table = self._read_parquet(where, params)
        return table.select(list(BACKUP_COLUMNS))

    def _backup_files(self) -> tuple[Path, list[Path]]:
        """The backup root and the files of the batches committed here (see the module doc)."""
        with self._cursor() as cur:
            cur.execute("SELECT run, batch_id FROM batches WHERE rows > 0 ORDER BY 1, 2")
            keys = [(int(r), int(b)) for r, b in cur.fetchall()]
        root = backup_parquet.local_root(self.backup_uri)
        return root, backup_parquet.batch_files(root, keys)

    def _read_parquet(self, where: str = "", params: Sequence[Any] = ()) -> pa.Table:
        with self._lock:  # a compaction deletes what it supersedes: list and read as one
            root, files = self._backup_files()
            return backup_parquet.read_rows(root, files, where, params)

    def compact(
        self, run: int, keep: int = COMPACT_KEEP, least: int = COMPACT_BATCHES
    ) -> RunCompaction | None:
        """Compact ``run``'s backup (``engine.backup.run_compaction``) when it pays; what it did.

        The run's committed batches but the newest ``keep`` are eligible. Once ``least``
        of them are still one directory each, they become one compaction; once ``least``
        compactions narrower than ``least**2`` batches exist, they are merged into one (so
        a long run holds about one file per ``least**2`` batches and a date, and no
        compaction rewrites the whole history). ``None`` when neither is due.
        """
        with self._lock:
            with self._cursor() as cur:
                cur.execute(
                    "SELECT batch_id, rows FROM batches WHERE run = ? AND batch_id >= 0 ORDER BY 1",
                    [run],
                )
                committed = [(int(b), int(r)) for b, r in cur.fetchall()]
            eligible = [b for b, rows in committed[: max(len(committed) - keep, 0)] if rows > 0]
            root = backup_parquet.local_root(self.backup_uri)
            run_dir = root / f"{backup_parquet.RUN_PREFIX}{run}"
            remove_superseded(run_dir, marked=True)  # what a crashed compaction left
            spans = backup_parquet.compactions(run_dir)
            plain = [b for b in eligible if not any(a <= b <= c for a, c, _ in spans)]
            if len(plain) >= least:
                return compact_run(root, run, plain)
            narrow = [(a, c) for a, c, _ in spans if c - a + 1 < least * least]
            if len(narrow) >= least:
                lo, hi = min(a for a, _ in narrow), max(c for _, c in narrow)
                return compact_run(root, run, [b for b in eligible if lo <= b <= hi])
            return None

    def read_results(
        self, kind: str | None = None, windows: tuple[int, int] | None = None
    ) -> pd.DataFrame:
        """Window results (``RESULT_COLUMNS`` plus run and batch_id), ordered by window;
        of one ``kind``, and of the window ids ``first..last`` (``windows``), when given."""
        clauses: list[str] = []
        params: list[object] = []
        if kind:
            clauses, params = ["kind = ?"], [kind]
        if windows is not None:
            clauses.append("window_id BETWEEN ? AND ?")
            params += [int(windows[0]), int(windows[1])]
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT * FROM results {where} ORDER BY window_id, kind, sensor"
        with self._cursor() as cur:
            return cur.execute(sql, params).df()

    def read_table(self, table: str) -> pd.DataFrame:
        """A whole table (``backup``, ``batches``, ``plan_log``, ``late``, ...)."""
        tables = {"backup", "results", "batches", "plan_log", "late", "state", "plan_versions"}
        if table not in tables:
            raise StoreError(f"no table {table!r} in the backup store")
        if table == "backup":  # run, batch_id, seq, event_time, sensor, value, plan_version
            return self._read_parquet().to_pandas()
        with self._cursor() as cur:
            return cur.execute(f"SELECT * FROM {table}").df()

    def size(self) -> StoreSize:
        """Backup rows and Parquet bytes, and the DuckDB file's size (see ``StoreSize``)."""
        rows = self._scalar("SELECT coalesce(sum(rows), 0) FROM batches") or 0
        with self._lock:
            _, parquet = self._backup_files()
            parquet_bytes = backup_parquet.file_bytes(parquet)
        files = [self.path, self.path.with_name(self.path.name + ".wal")]
        on_disk = sum(f.stat().st_size for f in files if f.exists())
        return StoreSize(int(rows), parquet_bytes, int(on_disk))

    def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._cursor() as cur:
            cur.execute(sql, list(params))
            row = cur.fetchone()
        return None if row is None else row[0]

    def _stamp(self) -> datetime:
        # DuckDB TIMESTAMP is naive; the store keeps UTC.
        return self._now().astimezone(UTC).replace(tzinfo=None)


class _Cursor:
    """Holds the file's lock and a fresh cursor for one operation."""

    def __init__(self, store: BackupStore) -> None:
        self._store = store

    def __enter__(self) -> duckdb.DuckDBPyConnection:
        self._store._lock.acquire()
        try:
            self._cur = self._store._con.cursor()
        except duckdb.Error as err:
            self._store._lock.release()
            raise StoreError(f"backup store {str(self._store.path)!r} is closed: {err}") from err
        return self._cur

    def __exit__(self, *exc: object) -> None:
        try:
            self._cur.close()
        finally:
            self._store._lock.release()
