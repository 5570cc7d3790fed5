"""Decode a history read into DuckDB into raw readings.

DuckDB parses the file (``engine.data.files``). CSV columns are read with
explicit types (the time candidates as text, everything else as DOUBLE) so a
stray bad value cannot silently turn a sensor into text; if that fast read
fails, the file is re-read as text and the first unparsable value is named by
column and row. Rows in
messages are 1-based data rows in file order (the header is not counted).
``decode`` turns the table into ``Decoded`` readings (int64 ns times, float
values, NaN = missing); ``engine.data.history`` sorts, fills and validates them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from engine.data.numeric_times import check_numeric_times
from engine.data.options import UNIT_NS, UNIT_WORDS, LoadOptions
from engine.data.zones import offsets_read, refuse_ambiguous_zones
from engine.errors import DataError

TIME_NAMES = frozenset(
    {"time", "timestamp", "datetime", "date", "ts", "event_time", "hours_since_start"}
)
SENSOR_NAMES = frozenset({"sensor", "sensor_id", "sensor_name", "id", "name", "channel", "tag"})
VALUE_NAMES = frozenset({"value", "reading", "measurement", "val"})
_NUMERIC_TYPES: tuple[str, ...] = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT")
_NUMERIC_TYPES += ("DOUBLE", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT", "DECIMAL")
# int64 nanoseconds hold 1677-09-21 .. 2262-04-11; whole days inside that span are accepted
_NS_SPAN = "BETWEEN TIMESTAMPTZ '1677-09-22 00:00:00+00' AND TIMESTAMPTZ '2262-04-11 00:00:00+00'"
_NS_PROBLEM = "time {value!r} is outside 1677-09-22 .. 2262-04-11, the span nanosecond times hold"


@dataclass
class Decoded:
    """Readings as parsed, before sorting and missing-value handling."""

    source: str
    layout: str
    time_column: str
    times: np.ndarray  # (T,) int64 ns
    values: np.ndarray  # (T, n) float64, NaN = missing
    sensors: tuple[str, ...]
    rows: np.ndarray | None  # (T,) 1-based file rows (wide) or None (long)
    notes: list[str]
    ignored: tuple[str, ...] = ()  # the file's sensors not read (``decode``'s ``wanted``)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _kind(sql_type: str) -> str:
    upper = sql_type.upper()
    if upper.endswith("]") or upper.startswith(("STRUCT", "MAP", "UNION")):
        return "nested"  # DOUBLE[] starts like a number but holds a list per row
    if upper.startswith(("TIMESTAMP", "DATE")):
        return "time"
    if upper.startswith(_NUMERIC_TYPES):
        return "numeric"
    return "text" if upper == "VARCHAR" else "other"


def shorten(names: Sequence[str], limit: int = 6) -> str:
    """Up to ``limit`` names, quoted and comma-separated, with the total if cut."""
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def format_ns(ns: int) -> str:
    """An int64 ns time as a readable timestamp."""
    return str(pd.Timestamp(int(ns)))


@dataclass
class _Table:
    """The DuckDB table ``raw`` holding the file as read, with its column types."""

    con: duckdb.DuckDBPyConnection
    source: str
    schema: dict[str, str]

    def kind(self, name: str) -> str:
        return _kind(self.schema[name])

    def count(self, predicate: str) -> int:
        row = self.con.execute(f"SELECT count(*) FROM raw WHERE {predicate}").fetchone()
        return int(row[0]) if row else 0

    def require_none(self, predicate: str, column: str, problem: str) -> None:
        """Raise ``DataError`` at the first row (file order) where ``predicate`` holds."""
        if self.count(predicate) == 0:
            return
        got = self.con.execute(
            f"SELECT coalesce({predicate}, false) AS bad, CAST({_q(column)} AS VARCHAR) AS v "
            "FROM raw"
        ).fetchnumpy()
        index = int(np.argmax(np.ma.filled(got["bad"], False)))
        value = np.ma.filled(got["v"].astype(object), None)[index]
        message = problem.format(value=value)
        raise DataError(f"{self.source}: column {column!r} row {index + 1}: {message}")

    def is_id_like(self, name: str) -> bool:
        """Text whose values are mostly not numbers (sensor ids, not a sensor with a typo)."""
        if self.kind(name) != "text":
            return False
        col = _q(name)
        row = self.con.execute(
            f"SELECT count({col}), count(TRY_CAST({col} AS DOUBLE)) FROM raw"
        ).fetchone()
        return row is not None and row[1] < 0.5 * row[0]


def decode(
    con: duckdb.DuckDBPyConnection,
    source: str,
    options: LoadOptions,
    wanted: frozenset[str] | None = None,
) -> Decoded:
    """Decode the table ``raw``: find the time column and the layout, parse every value.

    ``wanted``: only these sensors (exact names) are read where the file holds them: a
    wide file's other columns are never parsed, a long file's other sensors are left
    out after the pivot, and ``Decoded.ignored`` names them. A wide file naming one of
    them as a column is read wide.
    """
    schema = {str(r[0]): str(r[1]) for r in con.execute("DESCRIBE raw").fetchall()}
    table = _Table(con, source, schema)
    if table.count("true") == 0:
        raise DataError(f"{source}: has a header but no data rows")
    time_col, how = _find_time_column(table, options)
    notes = [f"time column {time_col!r} ({how})"]
    time_expr, unit = _time_expression(table, time_col, options, notes)
    others = [n for n in schema if n != time_col]
    named = wanted is not None and options.layout == "auto" and not wanted.isdisjoint(others)
    roles = None if named else _long_roles(table, time_col, others, options.layout)
    if roles is not None:
        _refuse_time_of_day_ids(table, time_col, roles[0])
    time = (time_expr, unit)
    if roles is None:
        chosen = others if wanted is None else [n for n in others if n in wanted]
        decoded = _decode_wide(table, time_col, time, chosen, notes, need_one=wanted is None)
        decoded.ignored = tuple(n for n in others if n not in chosen)
    else:
        decoded = _keep_wanted(_decode_long(table, time_col, time, roles, notes), wanted)
    if unit is not None:
        stated = options.numeric_time_unit is not None
        said = check_numeric_times(source, time_col, decoded.times, unit, _unit_words(unit), stated)
        decoded.notes.extend([said] if said else [])
    return decoded


def _keep_wanted(decoded: Decoded, wanted: frozenset[str] | None) -> Decoded:
    """A long file's ``wanted`` sensors only (all when None); the others in ``ignored``."""
    if wanted is not None:
        keep = [j for j, s in enumerate(decoded.sensors) if s in wanted]
        decoded.ignored = tuple(s for s in decoded.sensors if s not in wanted)
        decoded.values = decoded.values[:, keep]
        decoded.sensors = tuple(decoded.sensors[j] for j in keep)
    return decoded


def _find_time_column(table: _Table, options: LoadOptions) -> tuple[str, str]:
    names = list(table.schema)
    if options.time_column is not None:
        if options.time_column not in table.schema:
            raise DataError(
                f"{table.source}: time column {options.time_column!r} not found; "
                f"columns: {shorten(names)}"
            )
        return options.time_column, "as given"
    for name in names:
        if name.lower() in TIME_NAMES:
            return name, "detected by name"
    first = _q(names[0])
    if table.kind(names[0]) == "time":
        return names[0], "first column holds datetimes"
    if table.kind(names[0]) == "text":
        row = table.con.execute(
            f"SELECT TRY_CAST({first} AS TIMESTAMPTZ) IS NOT NULL AND TRY_CAST({first} AS DOUBLE) "
            f"IS NULL FROM raw WHERE {first} IS NOT NULL LIMIT 1"
        ).fetchone()
        if row is not None and row[0]:
            return names[0], "first column holds datetimes"
    raise DataError(
        f"{table.source}: no time column: pass time_column, name it one of "
        f"{', '.join(sorted(TIME_NAMES))}, or put datetimes first; columns: {shorten(names)}"
    )


def _time_expression(
    table: _Table, name: str, options: LoadOptions, notes: list[str]
) -> tuple[str, int | None]:
    """SQL giving the time column as int64 ns (unit None) or as a number in ``unit`` ns."""
    col, kind = _q(name), table.kind(name)
    table.require_none(f"{col} IS NULL", name, "missing time")
    if kind == "numeric" or (
        kind == "text" and table.count(f"TRY_CAST({col} AS DOUBLE) IS NULL") == 0
    ):
        return f"TRY_CAST({col} AS DOUBLE)", _numeric_unit(name, options, notes)
    if kind == "text":
        parsed = f"TRY_CAST({col} AS TIMESTAMPTZ)"
        refuse_ambiguous_zones(table.con, table.source, name)
        table.require_none(f"{parsed} IS NULL", name, "cannot parse {value!r} as a time")
        table.require_none(f"NOT ({parsed} {_NS_SPAN})", name, _NS_PROBLEM)
        zoned = _refuse_mixed_zones(table, name)
        if zoned or table.count(f"TRY_CAST({col} AS TIMESTAMP) <> CAST({parsed} AS TIMESTAMP)"):
            offsets = offsets_read(table.con, name, parsed)
            said = f" (UTC offset read: {offsets})" if offsets else ""
            notes.append(f"times with a UTC offset were converted to UTC{said}")
        return f"epoch_ns({parsed})", None
    if kind == "time":
        if "TIME ZONE" in table.schema[name].upper():
            notes.append("zone-aware times were converted to UTC")
        table.require_none(f"NOT (CAST({col} AS TIMESTAMPTZ) {_NS_SPAN})", name, _NS_PROBLEM)
        return f"epoch_ns(CAST({col} AS TIMESTAMP_NS))", None
    raise DataError(f"{table.source}: column {name!r} has type {table.schema[name]}, not times")


# what DuckDB also reads as a naive TIMESTAMP, dropping it: a UTC offset, Z or UTC after a
# clock time ("...12:00+02:00", "...12:00:00.5Z", "...12:00 -0500", "...12:00 utc")
_OFFSET = r"\d:\d{2}(:\d{2}(\.\d+)?)?\s*(Z|[+-]\d{2}(:?\d{2})?|[Uu][Tt][Cc]|GMT)\s*$"


def _refuse_mixed_zones(table: _Table, name: str) -> int:
    """``DataError`` when some times carry a UTC offset or a zone and others none: the
    naive ones would be read as UTC and the two kinds interleaved, hours apart, silently.
    Returns how many times carry one.

    A time carries one when DuckDB reads it as a zoned time but not as a naive one
    (whatever it parses as a zone: ``America/New_York``, ``EST``, ``CET``, ``PST8PDT``,
    ``Etc/GMT+5``; a pattern of names missed the abbreviations), or when the offsets a
    naive read also takes follow its clock (``_OFFSET``)."""
    col = _q(name)
    zoned = (
        f"(regexp_matches(trim({col}), '{_OFFSET}') OR (TRY_CAST({col} AS TIMESTAMP) IS NULL "
        f"AND TRY_CAST({col} AS TIMESTAMPTZ) IS NOT NULL))"
    )
    some = table.count(zoned)
    if some == 0 or some == table.count("true"):
        return some
    got = table.con.execute(
        f"SELECT {zoned} AS z, CAST({_q(name)} AS VARCHAR) AS v FROM raw"
    ).fetchnumpy()
    z = np.ma.filled(got["z"], False).astype(bool)
    v = np.ma.filled(got["v"].astype(object), None)
    with_, without = int(np.argmax(z)), int(np.argmax(~z))
    raise DataError(
        f"{table.source}: column {name!r} mixes times with a UTC offset (row {with_ + 1}: "
        f"{v[with_]!r}) and times without one (row {without + 1}: {v[without]!r}); the "
        "ones without would be taken as UTC: give every time an offset, or none"
    )


def _unit_words(unit_ns: int) -> str:
    """``"seconds"`` for the unit of ``unit_ns`` nanoseconds (``UNIT_WORDS``)."""
    return next(w for u, w in UNIT_WORDS.items() if UNIT_NS[u] == unit_ns)


def _numeric_unit(name: str, options: LoadOptions, notes: list[str]) -> int:
    unit, why = options.numeric_time_unit or "s", "numeric_time_unit"
    if options.numeric_time_unit is None:
        why = "the default numeric time unit"
        if "hour" in name.lower():  # a unit given always wins
            unit, why = "h", "its name contains 'hour'"
    notes.append(
        f"numeric time column {name!r} read as {UNIT_WORDS[unit]} since 1970-01-01 ({why})"
    )
    return UNIT_NS[unit]


def _long_roles(
    table: _Table, time_col: str, others: list[str], layout: str
) -> tuple[str, str] | None:
    """(sensor column, value column) if the file is long, else None."""
    if layout == "wide":
        return None
    if len(others) != 2:
        if layout == "long":
            raise DataError(
                f"{table.source}: long layout needs exactly three columns (time, sensor, value), "
                f"got {len(others) + 1}"
            )
        return None
    a, b = others
    for sensor, value in ((a, b), (b, a)):
        if sensor.lower() in SENSOR_NAMES and value.lower() in VALUE_NAMES:
            return sensor, value
    ids = [n for n in others if table.is_id_like(n)]
    if len(ids) == 1 and layout != "long" and _times_unique(table, time_col):
        # A long file holds several sensors per time step; a text column beside one
        # reading per time is a status or a label, not a sensor id (it was pivoted
        # into one sensor per label, silently).
        raise DataError(
            f"{table.source}: column {ids[0]!r} holds text, not numbers, and every time "
            "appears once, so this is not a long file (time, sensor, value): drop that "
            "column, or choose the long layout if it does name sensors"
        )
    if len(ids) == 1:
        return ids[0], b if ids[0] == a else a
    return (a, b) if layout == "long" else None


_TIME_OF_DAY = r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(\s*[AaPp][Mm])?"


def _refuse_time_of_day_ids(table: _Table, time_col: str, sensor: str) -> None:
    """``DataError`` when a long file's sensor-id column is a time of day: named as a time,
    or every value ``HH:MM[:SS]``. A date beside a time-of-day column was pivoted into a
    sensor per clock time ('00:00:00', '01:00:00', ...) read once a day."""
    col = _q(sensor)
    match = f"regexp_full_match(trim(CAST({col} AS VARCHAR)), '{_TIME_OF_DAY}')"
    row = table.con.execute(f"SELECT count({col}), count(*) FILTER ({match}) FROM raw").fetchone()
    timed = sensor.lower() in TIME_NAMES or (row is not None and 0 < row[0] == row[1])
    if timed:
        raise DataError(
            f"{table.source}: column {sensor!r} holds times of day, not sensor ids, beside "
            f"the dates of column {time_col!r}: combine the date and time columns into one "
            "timestamp column (e.g. '2024-03-01 00:00:00') and read the file again"
        )


def _times_unique(table: _Table, time_col: str) -> bool:
    """No time value appears twice (NULL times aside)."""
    col = _q(time_col)
    row = table.con.execute(f"SELECT count({col}), count(DISTINCT {col}) FROM raw").fetchone()
    return row is not None and row[0] == row[1]


def _number_expressions(table: _Table, names: list[str]) -> list[str]:
    """SQL casting each column to DOUBLE; the first unparsable value raises ``DataError``."""
    for name in names:
        if table.kind(name) == "nested":
            raise DataError(
                f"{table.source}: column {name!r} is a list column ({table.schema[name]}); "
                "each sensor needs one number per row"
            )
        if table.kind(name) not in ("numeric", "text"):
            raise DataError(
                f"{table.source}: column {name!r} has type {table.schema[name]}, not numbers"
            )
    text = [n for n in names if table.kind(n) == "text"]
    # DuckDB reads digit separators ('41_25' as 4125): a value with '_' is no number here
    preds = [
        f"{_q(n)} IS NOT NULL AND (TRY_CAST({_q(n)} AS DOUBLE) IS NULL OR contains({_q(n)}, '_'))"
        for n in text
    ]
    if preds:
        counts = table.con.execute(
            "SELECT " + ", ".join(f"count(*) FILTER (WHERE {p})" for p in preds) + " FROM raw"
        ).fetchone()
        for name, pred, bad in zip(text, preds, counts or (), strict=True):
            if bad:
                table.require_none(pred, name, "cannot parse {value!r} as a number")
    # NULL -> NaN in SQL: plain (not masked) arrays come back much faster
    return [f"coalesce(TRY_CAST({_q(n)} AS DOUBLE), 'NaN'::DOUBLE)" for n in names]


def _as_float(column: np.ndarray) -> np.ndarray:
    return np.asarray(np.ma.filled(np.ma.asarray(column, dtype=np.float64), np.nan))


def _to_ns(table: _Table, name: str, raw: np.ndarray, unit: int | None) -> np.ndarray:
    """Times as int64 ns since 1970-01-01 (numeric times scaled by ``unit`` ns)."""
    if unit is None:
        return np.asarray(raw, dtype=np.int64)
    x = _as_float(raw)
    bad = np.flatnonzero(~np.isfinite(x) | (np.abs(x) * unit >= 9.2e18))
    if bad.size:
        words = _unit_words(unit)
        raise DataError(
            f"{table.source}: column {name!r} row {bad[0] + 1}: time {float(x[bad[0]])!r} "
            f"is out of range as {words} since 1970-01-01 (another unit? the numeric time "
            "unit option, --time-unit on the command line)"
        )
    if np.all(x == np.round(x)) and np.max(np.abs(x)) < 2**53:
        return x.astype(np.int64) * unit  # exact for integer offsets
    return np.round(x * unit).astype(np.int64)


def _decode_wide(
    table: _Table,
    time_col: str,
    time: tuple[str, int | None],
    sensors: list[str],
    notes: list[str],
    need_one: bool = True,
) -> Decoded:
    if not sensors and need_one:
        raise DataError(f"{table.source}: no numeric sensor columns besides {time_col!r}")
    exprs = _number_expressions(table, sensors)
    columns = "".join(f", {e} AS s{i}" for i, e in enumerate(exprs))
    got = table.con.execute(f"SELECT {time[0]} AS t{columns} FROM raw").fetchnumpy()
    values = np.column_stack(
        [got[f"s{i}"] for i in range(len(sensors))] or [np.empty((len(got["t"]), 0))]
    ).astype(np.float64)
    times = _to_ns(table, time_col, got["t"], time[1])
    rows = np.arange(1, times.size + 1)
    return Decoded(table.source, "wide", time_col, times, values, tuple(sensors), rows, notes)


def _decode_long(
    table: _Table,
    time_col: str,
    time: tuple[str, int | None],
    roles: tuple[str, str],
    notes: list[str],
) -> Decoded:
    sensor, value = roles
    table.require_none(
        f"{_q(sensor)} IS NULL",
        sensor,
        "missing sensor id (an empty cell, or a missing-value marker such as 'NA', 'N/A', "
        "'NaN', 'NULL' or 'None', which are read as missing: rename a sensor so named)",
    )
    (expr,) = _number_expressions(table, [value])
    got = table.con.execute(
        # ids trimmed as a wide file's header names are (', a' is sensor 'a')
        f"SELECT {time[0]} AS t, trim(CAST({_q(sensor)} AS VARCHAR)) AS k, {expr} AS v FROM raw"
    ).fetchnumpy()
    t = _to_ns(table, time_col, got["t"], time[1])
    if np.any(np.diff(t) < 0):
        notes.append("rows were not in time order; sorted by time")
    times, inv = np.unique(t, return_inverse=True)
    codes, names = pd.factorize(np.asarray(got["k"], dtype=object))
    flat = inv.astype(np.int64) * len(names) + codes
    order = np.argsort(flat, kind="stable")
    same = np.flatnonzero(np.diff(flat[order]) == 0)
    if same.size:
        i, j = order[same[0]], order[same[0] + 1]
        raise DataError(
            f"{table.source}: sensor {names[codes[i]]!r} has two readings at {format_ns(t[i])} "
            f"(rows {i + 1} and {j + 1})"
        )
    values = np.full((times.size, len(names)), np.nan)
    values[inv, codes] = _as_float(got["v"])
    notes.append(
        f"long layout ({time_col!r}, {sensor!r}, {value!r}): {t.size} rows pivoted to "
        f"{times.size} time steps x {len(names)} sensors"
    )
    sensors = tuple(str(n) for n in names)
    return Decoded(table.source, "long", time_col, times, values, sensors, None, notes)
