"""Load sensor history (CSV / Parquet, wide or long) into a validated ``SensorHistory``.

DuckDB parses the file. CSV columns are read with explicit types (the time
candidates as text, everything else as DOUBLE) so a stray bad value cannot
silently turn a sensor into text; if that fast read fails, the file is re-read
as text and the first unparsable value is named by column and row. Rows in
messages are 1-based data rows in file order (the header is not counted).
Times become ``datetime64[ns]``, naive = UTC; zone-aware times are converted.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import duckdb
import numpy as np
import pandas as pd

from engine.errors import DataError, ParameterError

Layout = Literal["auto", "wide", "long"]
MissingPolicy = Literal["interpolate", "drop"]

TIME_NAMES = frozenset(
    {"time", "timestamp", "datetime", "date", "ts", "event_time", "hours_since_start"}
)
SENSOR_NAMES = frozenset({"sensor", "sensor_id", "sensor_name", "id", "name", "channel", "tag"})
VALUE_NAMES = frozenset({"value", "reading", "measurement", "val"})
NULL_STRINGS = ["", "NA", "N/A", "NaN", "nan", "NULL", "null", "None"]
SUFFIXES = {".csv": "csv", ".txt": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet"}
UNIT_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "min": 60 * 10**9, "h": 3600 * 10**9}
UNIT_WORDS = {"ns": "nanoseconds", "us": "microseconds", "ms": "milliseconds", "s": "seconds"}
UNIT_WORDS |= {"min": "minutes", "h": "hours"}
EDGE_FILL_FRACTION = 0.05  # leading/trailing gaps up to this share of rows are filled
GAP_FACTOR = 1.5  # a step longer than this times the median step is a gap
_NUMERIC_TYPES: tuple[str, ...] = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT")
_NUMERIC_TYPES += ("DOUBLE", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT", "DECIMAL")


@dataclass(frozen=True)
class LoadOptions:
    """How to read a history file; every field is checked on construction."""

    layout: Layout = "auto"
    time_column: str | None = None  # auto-detect when None
    missing: MissingPolicy = "interpolate"  # linear in time, then drop rows still missing
    numeric_time_unit: str = "s"  # unit of a numeric time column: "s", "min", "h", "ms"
    min_rows: int | None = None  # None: sensors + 2, what fitting a model needs

    def __post_init__(self) -> None:
        _check_choice("layout", self.layout, ("auto", "wide", "long"))
        _check_choice("missing", self.missing, ("interpolate", "drop"))
        _check_choice("numeric_time_unit", self.numeric_time_unit, tuple(UNIT_NS))
        if self.time_column is not None and not (
            isinstance(self.time_column, str) and self.time_column
        ):
            raise ParameterError(
                f"time_column must be a column name or None, got {self.time_column!r}"
            )
        if self.min_rows is not None and (not isinstance(self.min_rows, int) or self.min_rows < 2):
            raise ParameterError(f"min_rows must be an integer >= 2 or None, got {self.min_rows!r}")


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ParameterError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


DEFAULT_OPTIONS = LoadOptions()


@dataclass(frozen=True)
class DataReport:
    """What the loader found and did; ``notes`` are sentences for the operator."""

    source: str
    layout: str
    time_column: str
    n_rows_raw: int
    n_rows: int
    sensors: tuple[str, ...]
    sampling_interval_s: float
    n_gaps: int
    n_duplicate_timestamps: int
    missing_rate: dict[str, float]
    constant_sensors: tuple[str, ...]
    duplicate_sensors: tuple[tuple[str, str], ...]
    missing_policy: str
    n_values_filled: int
    n_rows_dropped: int
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-friendly dict of every field."""
        return asdict(self)


@dataclass(frozen=True, eq=False, repr=False)
class SensorHistory:
    """Validated readings: ``times`` (T,) datetime64[ns] strictly increasing, ``values`` (T, n).

    The arrays are stored as read-only views: derive new arrays, never edit them.
    """

    times: np.ndarray
    values: np.ndarray
    sensors: tuple[str, ...]
    report: DataReport = field(repr=False)

    def __post_init__(self) -> None:
        times, values = np.asarray(self.times), np.asarray(self.values)
        if times.dtype != np.dtype("datetime64[ns]") or times.ndim != 1:
            raise DataError(f"times must be 1-D datetime64[ns], got {times.dtype} {times.shape}")
        if values.dtype != np.float64 or values.shape != (times.size, len(self.sensors)):
            raise DataError(
                f"values must be float64 of shape ({times.size}, {len(self.sensors)}), "
                f"got {values.dtype} {values.shape}"
            )
        if np.any(np.diff(times.view(np.int64)) <= 0):
            raise DataError("times must be strictly increasing")
        if not np.all(np.isfinite(values)):
            raise DataError("values must all be finite")
        for name, array in (("times", times), ("values", values)):
            view = array.view()
            view.setflags(write=False)
            object.__setattr__(self, name, view)

    def __repr__(self) -> str:
        size = f"rows={self.times.size}, sensors={len(self.sensors)}"
        return f"SensorHistory({self.report.source!r}, {size})"

    def select(self, sensors: Sequence[str]) -> SensorHistory:
        """Keep only ``sensors`` (in the given order); unknown names raise ``ParameterError``."""
        names = list(sensors)
        unknown = [s for s in names if s not in self.sensors]
        if unknown or not names or len(set(names)) != len(names):
            raise ParameterError(
                f"select needs distinct known sensors; unknown: {unknown}, got {names!r}"
            )
        index = [self.sensors.index(s) for s in names]
        note = f"selected {len(names)} of {len(self.sensors)} sensors"
        return _derive(self, self.times, self.values[:, index], tuple(names), note)

    def rows(self, start: int, stop: int) -> SensorHistory:
        """Rows ``[start, stop)`` as a new history; needs ``0 <= start < stop <= T``."""
        if not 0 <= start < stop <= self.times.size:
            raise ParameterError(
                f"rows needs 0 <= start < stop <= {self.times.size}, got {(start, stop)!r}"
            )
        note = f"rows {start}..{stop - 1} of {self.times.size}"
        return _derive(self, self.times[start:stop], self.values[start:stop], self.sensors, note)

    def to_frame(self) -> pd.DataFrame:
        """Wide frame: column ``time`` first, then one float column per sensor."""
        frame = pd.DataFrame(np.array(self.values), columns=list(self.sensors))
        frame.insert(0, "time", np.array(self.times))
        return frame

    def fingerprint(self) -> str:
        """``"sha256:<hex>"`` over sensor names, times (int64 ns) and values (float64, C order)."""
        digest = hashlib.sha256(json.dumps(list(self.sensors)).encode("utf-8"))
        digest.update(np.ascontiguousarray(self.times.view(np.int64), dtype="<i8").tobytes())
        digest.update(np.ascontiguousarray(self.values, dtype="<f8").tobytes())
        return "sha256:" + digest.hexdigest()


def _derive(
    parent: SensorHistory,
    times: np.ndarray,
    values: np.ndarray,
    sensors: tuple[str, ...],
    note: str,
) -> SensorHistory:
    """A history over a subset, with the report's statistics recomputed for that subset."""
    interval, gaps = _describe_steps(times.view(np.int64))
    constant, duplicates = _describe_sensors(values, sensors)
    report = replace(
        parent.report,
        n_rows=times.size,
        sensors=sensors,
        sampling_interval_s=interval if times.size > 1 else parent.report.sampling_interval_s,
        n_gaps=gaps,
        missing_rate={s: parent.report.missing_rate[s] for s in sensors},
        constant_sensors=constant,
        duplicate_sensors=duplicates,
        notes=(*parent.report.notes, note),
    )
    return SensorHistory(times, np.ascontiguousarray(values), sensors, report)


@dataclass
class _Decoded:
    """Readings as parsed, before sorting and missing-value handling."""

    source: str
    layout: str
    time_column: str
    times: np.ndarray  # (T,) int64 ns
    values: np.ndarray  # (T, n) float64, NaN = missing
    sensors: tuple[str, ...]
    rows: np.ndarray | None  # (T,) 1-based file rows (wide) or None (long)
    notes: list[str]


def load_history(path: str | Path, options: LoadOptions = DEFAULT_OPTIONS) -> SensorHistory:
    """Load a CSV (.csv/.txt/.tsv) or Parquet (.parquet/.pq) history, wide or long.

    Parameters
    ----------
    path : the file. Wide = a time column + one numeric column per sensor; long =
        (time, sensor, value) rows, detected or forced with ``options.layout``.
    options : layout, time column, missing-value policy, unit of a numeric time.

    Returns
    -------
    SensorHistory with ``times`` (T,) sorted and unique, ``values`` (T, n) finite,
    and a ``DataReport`` of what was found and done.

    Raises
    ------
    DataError : one line naming the file, and the column and row where possible.
    """
    path = Path(path)
    kind = _check_file(path)
    with _connect() as con:
        if kind == "parquet":
            _read_parquet(con, path)
        else:
            _read_csv(con, path, options)
        decoded = _decode(con, path.name, options)
    return _assemble(decoded, options)


def history_from_frame(
    df: pd.DataFrame, source: str = "<frame>", options: LoadOptions = DEFAULT_OPTIONS
) -> SensorHistory:
    """Validate an in-memory frame like ``load_history`` (a DatetimeIndex becomes a column)."""
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    index_is_time = isinstance(df.index, pd.DatetimeIndex) and df.index.name not in df.columns
    frame = df.reset_index(drop=not index_is_time)
    frame.columns = [str(c) for c in frame.columns]
    _check_names(source, list(frame.columns))
    for name, dtype in zip(frame.columns, frame.dtypes, strict=True):
        if dtype == np.dtype(object) or isinstance(dtype, pd.CategoricalDtype):
            frame[name] = frame[name].astype("string")  # the parser names bad values
    with _connect() as con:
        con.register("frame_view", frame)
        con.execute("CREATE TABLE raw AS SELECT * FROM frame_view")
        decoded = _decode(con, source, options)
    return _assemble(decoded, options)


def _connect() -> duckdb.DuckDBPyConnection:
    """In-memory DuckDB, UTC session (naive times are UTC), no progress bar on stdout."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false; SET TimeZone = 'UTC'")
    return con


def _check_file(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(
            f"{path.name}: unsupported file extension {path.suffix!r}; use {', '.join(SUFFIXES)}"
        )
    if path.stat().st_size == 0:
        raise DataError(f"{path.name}: file is empty")
    return kind


def _check_names(source: str, names: list[str]) -> None:
    if not names:
        raise DataError(f"{source}: no columns")
    seen: set[str] = set()
    for position, name in enumerate(names, start=1):
        if name in seen:
            raise DataError(f"{source}: duplicate column name {name!r} (column {position})")
        seen.add(name)


def _read_header(path: Path) -> tuple[list[str], str]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            line = handle.readline()
    except UnicodeDecodeError as err:
        raise DataError(f"{path.name}: not UTF-8 text ({err.reason})") from err
    if not line.strip():
        raise DataError(f"{path.name}: file is empty (no header line)")
    tsv = path.suffix.lower() == ".tsv"
    delim = "\t" if tsv else max([",", "\t", ";", "|"], key=line.count)
    names = next(csv.reader([line], delimiter=delim))
    return [n.strip() or f"column{i + 1}" for i, n in enumerate(names)], delim


def _read_csv(con: duckdb.DuckDBPyConnection, path: Path, options: LoadOptions) -> None:
    names, delim = _read_header(path)
    _check_names(path.name, names)
    query = (
        "CREATE TABLE raw AS SELECT * FROM read_csv(?, header = true, auto_detect = false, "
        "delim = ?, columns = ?, nullstr = ?)"
    )
    if len(names) != 3 and options.layout != "long":
        text = {names[0], options.time_column} | {n for n in names if n.lower() in TIME_NAMES}
        types = {n: "VARCHAR" if n in text else "DOUBLE" for n in names}
        try:
            con.execute(query, [str(path), delim, types, NULL_STRINGS])
            return
        except duckdb.Error:
            pass  # re-read as text below, which names the offending column and row
    try:
        con.execute(query, [str(path), delim, dict.fromkeys(names, "VARCHAR"), NULL_STRINGS])
    except duckdb.Error as err:
        raise DataError(f"{path.name}: cannot read CSV: {_duckdb_message(err)}") from err


def _read_parquet(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except (OSError, ValueError) as err:
        raise DataError(f"{path.name}: not a readable Parquet file ({err})") from err
    _check_names(path.name, names)
    try:
        con.execute("CREATE TABLE raw AS SELECT * FROM read_parquet(?)", [str(path)])
    except duckdb.Error as err:
        raise DataError(f"{path.name}: cannot read Parquet: {_duckdb_message(err)}") from err


def _duckdb_message(err: duckdb.Error) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    head = lines[0].split("Error: ", 1)[-1] if lines else type(err).__name__
    return "; ".join([head] + [ln for ln in lines[1:] if ln.startswith("Expected")])


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _kind(sql_type: str) -> str:
    upper = sql_type.upper()
    if upper.startswith(("TIMESTAMP", "DATE")):
        return "time"
    if upper.startswith(_NUMERIC_TYPES):
        return "numeric"
    return "text" if upper == "VARCHAR" else "other"


def _short(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _fmt(ns: int) -> str:
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


def _decode(con: duckdb.DuckDBPyConnection, source: str, options: LoadOptions) -> _Decoded:
    schema = {str(r[0]): str(r[1]) for r in con.execute("DESCRIBE raw").fetchall()}
    table = _Table(con, source, schema)
    if table.count("true") == 0:
        raise DataError(f"{source}: has a header but no data rows")
    time_col, how = _find_time_column(table, options)
    notes = [f"time column {time_col!r} ({how})"]
    time_expr, unit = _time_expression(table, time_col, options, notes)
    others = [n for n in schema if n != time_col]
    roles = _long_roles(table, others, options.layout)
    if roles is None:
        return _decode_wide(table, time_col, (time_expr, unit), others, notes)
    return _decode_long(table, time_col, (time_expr, unit), roles, notes)


def _find_time_column(table: _Table, options: LoadOptions) -> tuple[str, str]:
    names = list(table.schema)
    if options.time_column is not None:
        if options.time_column not in table.schema:
            raise DataError(
                f"{table.source}: time column {options.time_column!r} not found; "
                f"columns: {_short(names)}"
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
        f"{', '.join(sorted(TIME_NAMES))}, or put datetimes first; columns: {_short(names)}"
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
        table.require_none(f"{parsed} IS NULL", name, "cannot parse {value!r} as a time")
        if table.count(f"TRY_CAST({col} AS TIMESTAMP) <> CAST({parsed} AS TIMESTAMP)"):
            notes.append("times with a UTC offset were converted to UTC")
        return f"epoch_ns({parsed})", None
    if kind == "time":
        if "TIME ZONE" in table.schema[name].upper():
            notes.append("zone-aware times were converted to UTC")
        return f"epoch_ns(CAST({col} AS TIMESTAMP_NS))", None
    raise DataError(f"{table.source}: column {name!r} has type {table.schema[name]}, not times")


def _numeric_unit(name: str, options: LoadOptions, notes: list[str]) -> int:
    unit, why = options.numeric_time_unit, "numeric_time_unit"
    if unit == "s" and "hour" in name.lower():
        unit, why = "h", "its name contains 'hour'"
    notes.append(
        f"numeric time column {name!r} read as {UNIT_WORDS[unit]} since 1970-01-01 ({why})"
    )
    return UNIT_NS[unit]


def _long_roles(table: _Table, others: list[str], layout: str) -> tuple[str, str] | None:
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
    if len(ids) == 1:
        return ids[0], b if ids[0] == a else a
    return (a, b) if layout == "long" else None


def _number_expressions(table: _Table, names: list[str]) -> list[str]:
    """SQL casting each column to DOUBLE; the first unparsable value raises ``DataError``."""
    for name in names:
        if table.kind(name) not in ("numeric", "text"):
            raise DataError(
                f"{table.source}: column {name!r} has type {table.schema[name]}, not numbers"
            )
    text = [n for n in names if table.kind(n) == "text"]
    preds = [f"{_q(n)} IS NOT NULL AND TRY_CAST({_q(n)} AS DOUBLE) IS NULL" for n in text]
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
        raise DataError(
            f"{table.source}: column {name!r} row {bad[0] + 1}: time {x[bad[0]]!r} is out of range"
        )
    if np.all(x == np.round(x)) and np.max(np.abs(x)) < 2**53:
        return x.astype(np.int64) * unit  # exact for integer offsets
    return np.round(x * unit).astype(np.int64)


def _decode_wide(
    table: _Table, time_col: str, time: tuple[str, int | None], sensors: list[str], notes: list[str]
) -> _Decoded:
    if not sensors:
        raise DataError(f"{table.source}: no numeric sensor columns besides {time_col!r}")
    exprs = _number_expressions(table, sensors)
    columns = ", ".join(f"{e} AS s{i}" for i, e in enumerate(exprs))
    got = table.con.execute(f"SELECT {time[0]} AS t, {columns} FROM raw").fetchnumpy()
    values = np.column_stack([got[f"s{i}"] for i in range(len(sensors))]).astype(np.float64)
    times = _to_ns(table, time_col, got["t"], time[1])
    rows = np.arange(1, times.size + 1)
    return _Decoded(table.source, "wide", time_col, times, values, tuple(sensors), rows, notes)


def _decode_long(
    table: _Table,
    time_col: str,
    time: tuple[str, int | None],
    roles: tuple[str, str],
    notes: list[str],
) -> _Decoded:
    sensor, value = roles
    table.require_none(f"{_q(sensor)} IS NULL", sensor, "missing sensor id")
    (expr,) = _number_expressions(table, [value])
    got = table.con.execute(
        f"SELECT {time[0]} AS t, CAST({_q(sensor)} AS VARCHAR) AS k, {expr} AS v FROM raw"
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
            f"{table.source}: sensor {names[codes[i]]!r} has two readings at {_fmt(t[i])} "
            f"(rows {i + 1} and {j + 1})"
        )
    values = np.full((times.size, len(names)), np.nan)
    values[inv, codes] = _as_float(got["v"])
    notes.append(
        f"long layout ({time_col!r}, {sensor!r}, {value!r}): {t.size} rows pivoted to "
        f"{times.size} time steps x {len(names)} sensors"
    )
    sensors = tuple(str(n) for n in names)
    return _Decoded(table.source, "long", time_col, times, values, sensors, None, notes)


def _assemble(decoded: _Decoded, options: LoadOptions) -> SensorHistory:
    source, sensors, notes = decoded.source, decoded.sensors, decoded.notes
    if "time" in sensors:
        raise DataError(f"{source}: a sensor is named 'time', which is reserved for the time axis")
    times, values = _sort_wide(decoded)
    n_rows_raw = times.size
    values, rate = _mark_missing(decoded, values)
    times, values, filled, dropped = _handle_missing(times, values, options.missing, notes)
    need = len(sensors) + 2 if options.min_rows is None else options.min_rows
    if times.size < need:
        raise DataError(
            f"{source}: {times.size} rows left after missing-value handling ({options.missing}, "
            f"{dropped} of {n_rows_raw} dropped) for {len(sensors)} sensors; "
            f"need at least {need} rows"
        )
    interval, gaps, constant, duplicates = _describe(times, values, sensors, notes)
    report = DataReport(
        source=source,
        layout=decoded.layout,
        time_column=decoded.time_column,
        n_rows_raw=n_rows_raw,
        n_rows=times.size,
        sensors=sensors,
        sampling_interval_s=interval,
        n_gaps=gaps,
        n_duplicate_timestamps=0,
        missing_rate={s: float(r) for s, r in zip(sensors, rate, strict=True)},
        constant_sensors=constant,
        duplicate_sensors=duplicates,
        missing_policy=options.missing,
        n_values_filled=filled,
        n_rows_dropped=dropped,
        notes=tuple(notes),
    )
    return SensorHistory(times.view("datetime64[ns]"), values, sensors, report)


def _sort_wide(decoded: _Decoded) -> tuple[np.ndarray, np.ndarray]:
    """Sort rows by time (noting it) and reject duplicate timestamps, naming their rows."""
    times, values, rows = decoded.times, decoded.values, decoded.rows
    if rows is None:  # long layout: already unique and sorted by the pivot
        return times, values
    if np.any(np.diff(times) < 0):
        order = np.argsort(times, kind="stable")
        times, values, rows = times[order], values[order], rows[order]
        decoded.notes.append("rows were not in time order; sorted by time")
    same = np.flatnonzero(np.diff(times) == 0)
    if same.size:
        i = same[0]
        raise DataError(
            f"{decoded.source}: column {decoded.time_column!r}: duplicate timestamp "
            f"{_fmt(times[i])} (rows {rows[i]} and {rows[i + 1]})"
        )
    return times, values


def _mark_missing(decoded: _Decoded, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Infinite readings become NaN; returns values and the per-sensor missing rate."""
    infinite = np.isinf(values)
    if infinite.any():
        values = np.where(infinite, np.nan, values)
        decoded.notes.append(f"{int(infinite.sum())} infinite values were treated as missing")
    rate = np.isnan(values).mean(axis=0)
    empty = np.flatnonzero(rate == 1.0)
    if empty.size:
        raise DataError(
            f"{decoded.source}: sensor {decoded.sensors[empty[0]]!r} has no values "
            f"(all {values.shape[0]} rows missing)"
        )
    return values, rate


def _handle_missing(
    times: np.ndarray, values: np.ndarray, policy: str, notes: list[str]
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Apply the missing-value policy; returns times, values, values filled, rows dropped."""
    filled = 0
    if policy == "interpolate":
        values, filled = _interpolate(times, values)
        if filled:
            notes.append(
                f"filled {filled} missing values by linear interpolation in time "
                f"(edge runs up to {EDGE_FILL_FRACTION:.0%} of rows by the nearest value)"
            )
    keep = ~np.isnan(values).any(axis=1)
    dropped = int(keep.size - keep.sum())
    if not dropped:
        return times, values, filled, 0
    notes.append(f"dropped {dropped} rows that still had missing values")
    return times[keep], values[keep], filled, dropped


def _interpolate(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, int]:
    """Linear interpolation in time per sensor; edge runs longer than the limit stay NaN.

    ``times`` (T,) int64 ns, ``values`` (T, n); returns filled values and the fill count.
    """
    seconds = (times - times[0]).astype(np.float64) / 1e9
    n_rows, limit = values.shape[0], int(EDGE_FILL_FRACTION * values.shape[0])
    out, filled = values.copy(), 0
    for j in np.flatnonzero(np.isnan(values).any(axis=0)):
        ok = ~np.isnan(values[:, j])
        present = np.flatnonzero(ok)
        lo = 0 if present[0] <= limit else present[0]
        hi = n_rows if n_rows - 1 - present[-1] <= limit else present[-1] + 1
        fill = np.flatnonzero(~ok[lo:hi]) + lo
        out[fill, j] = np.interp(seconds[fill], seconds[ok], values[ok, j])
        filled += fill.size
    return out, filled


def _describe(
    times: np.ndarray, values: np.ndarray, sensors: tuple[str, ...], notes: list[str]
) -> tuple[float, int, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Sampling interval (s), gap count, constant sensors and duplicate pairs, with notes."""
    interval, gaps = _describe_steps(times)
    constant, duplicates = _describe_sensors(values, sensors)
    if gaps:
        notes.append(f"{gaps} gaps longer than {GAP_FACTOR} x the median step of {interval:g} s")
    if constant:
        notes.append(f"constant sensors {_short(constant)} are reconstructed exactly by their mean")
    if duplicates:
        pairs = ", ".join(f"{b!r} = {a!r}" for a, b in duplicates[:3])
        more = ", ..." if len(duplicates) > 3 else ""
        notes.append(f"{len(duplicates)} sensors duplicate another column exactly ({pairs}{more})")
    return interval, gaps, constant, duplicates


def _describe_steps(times: np.ndarray) -> tuple[float, int]:
    """Median step in seconds and the number of steps longer than ``GAP_FACTOR`` x median."""
    if times.size < 2:
        return 0.0, 0
    steps = np.diff(times.astype(np.int64))
    median = float(np.median(steps))
    n_gaps = np.count_nonzero(steps.astype(np.float64) > GAP_FACTOR * median)
    return median / 1e9, int(n_gaps)


def _describe_sensors(
    values: np.ndarray, sensors: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Constant sensors and (first, duplicate) pairs of identical columns."""
    constant = tuple(np.asarray(sensors)[values.max(axis=0) == values.min(axis=0)].tolist())
    # cheap per-column signature first; only columns sharing one are compared in full
    signature = np.column_stack(
        [values[0], values[-1], values.sum(axis=0), (values**2).sum(axis=0)]
    )
    groups: dict[tuple[float, ...], list[int]] = {}
    pairs: list[tuple[str, str]] = []
    for j, key in enumerate(map(tuple, signature.tolist())):
        group = groups.setdefault(key, [])
        match = next((i for i in group if np.array_equal(values[:, i], values[:, j])), None)
        if match is None:
            group.append(j)
        else:
            pairs.append((sensors[match], sensors[j]))
    return constant, tuple(pairs)
