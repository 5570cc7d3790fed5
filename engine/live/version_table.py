"""The store's ``plan_versions`` table: a version in (idempotent by id, closing the
versions before it) and every version out, as ``VersionRecord`` values.

Times are kept as naive UTC (DuckDB ``TIMESTAMP``) and read back aware. The caller
(``engine.live.store.BackupStore``) holds the cursor and the transaction.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import duckdb

from engine.errors import StoreError
from engine.live.records import VERSION_COLUMNS, VersionRecord

__all__ = ["insert_version", "read_version_rows"]


def insert_version(cur: duckdb.DuckDBPyConnection, v: VersionRecord) -> bool:
    """Insert ``v`` unless its id exists (``False``); close the open versions before it.

    The same version written again (a replayed batch, a restart) is skipped; another
    plan under an existing id is a ``StoreError``: skipping it would tag rows with a
    version that says another plan governed them.
    """
    cur.execute(
        "SELECT first_seq, backup_sensors, reconstruction, kept_sensors FROM plan_versions"
        " WHERE id = ?",
        [v.id],
    )
    row = cur.fetchone()
    if row is not None:
        same = (int(row[0]), json.loads(row[1]), row[2], _names(row[3])) == (
            v.first_seq, list(v.backup_sensors), v.reconstruction, list(v.kept_sensors),
        )  # fmt: skip
        if not same:
            raise StoreError(
                f"plan version {v.id} is already stored with another plan (from reading "
                f"{int(row[0])}, backup {json.loads(row[1])}); not overwriting it"
            )
        return False
    cur.execute(
        "UPDATE plan_versions SET last_seq = ?, last_time = ? WHERE id < ? AND last_seq IS NULL",
        [v.first_seq - 1, _naive(v.closes_at), v.id],
    )
    cur.execute(
        f"INSERT INTO plan_versions ({', '.join(VERSION_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(VERSION_COLUMNS))})",
        [
            v.id,
            _naive(v.created_at),
            v.reason,
            v.detail,
            v.first_seq,
            v.last_seq,
            _naive(v.first_time),
            _naive(v.last_time),
            json.dumps(list(v.backup_sensors)),
            v.reconstruction,
            v.calibration,
            json.dumps(list(v.kept_sensors)),
        ],
    )
    return True


def read_version_rows(cur: duckdb.DuckDBPyConnection) -> list[VersionRecord]:
    """Every plan version, oldest first."""
    cur.execute(f"SELECT {', '.join(VERSION_COLUMNS)} FROM plan_versions ORDER BY id")
    out = []
    for r in cur.fetchall():
        v = dict(zip(VERSION_COLUMNS, r, strict=True))
        v["backup_sensors"] = tuple(json.loads(v["backup_sensors"]))
        v["kept_sensors"] = tuple(_names(v["kept_sensors"]))
        v["first_time"] = _aware(v["first_time"])
        v["last_time"] = _aware(v["last_time"])
        v["created_at"] = _aware(v["created_at"])
        out.append(VersionRecord(**v))
    return out


def _names(text: str | None) -> list[str]:
    """A JSON list of sensor names; NULL (a row from before the column) is none."""
    return [] if text is None else list(json.loads(text))


def _naive(t: datetime | None) -> datetime | None:
    """An aware time as naive UTC (DuckDB TIMESTAMP); naive times are taken as UTC."""
    if t is None or t.tzinfo is None:
        return t
    return t.astimezone(UTC).replace(tzinfo=None)


def _aware(t: Any) -> datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t
