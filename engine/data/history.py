"""Load sensor history (CSV / Parquet, wide or long) into a validated ``SensorHistory``.

Reading and decoding the file (DuckDB, column types, the time column, wide or
long layout) is ``engine.data.reader``; this module sorts the readings, handles
missing values and describes the result. Rows in messages are 1-based data
rows in file order (the header is not counted). Times become
``datetime64[ns]``, naive = UTC; zone-aware times are converted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.data.clock import put_on_clock
from engine.data.files import (
    NO_NAME,
    THOUSANDS_LIKE,
    check_file,
    check_names,
    connect,
    read_csv,
    read_parquet,
)
from engine.data.names import resolve_sensors
from engine.data.numeric_times import EARLY_TIMES
from engine.data.options import DEFAULT_OPTIONS, LoadOptions
from engine.data.range import check_range
from engine.data.reader import Decoded, decode, format_ns, shorten
from engine.errors import DataError, ParameterError, named

EDGE_FILL_FRACTION = 0.05  # leading/trailing gaps up to this share of rows are filled
GAP_FACTOR = 1.5  # a step longer than this times the median step is a gap
# A sensor missing this share of its readings or more is mostly interpolation: said as a
# warning, since its model and the backtest's truth then rest on filled-in values (two
# loggers a second apart miss exactly half each).
MOSTLY_FILLED = 0.5
# Steps this share of the file shorter than the median step / GAP_FACTOR: another rate
SHORT_STEPS = 0.1
UNSTEADY = "the sampling interval is not steady"  # the note's words (``warning_notes``)
# how an operator reads a file without some of its sensors, on the CLI and in the app
LEAVE_OUT = "--sensors on the command line, Sensors to read on the Data page"


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

    def early_times(self) -> str | None:
        """The note on numeric times read as dates before 1980 (they may be Excel serial
        days, YYYYMMDD dates or a relative clock; ``engine.data.numeric_times``), else None."""
        return next((n for n in self.notes if EARLY_TIMES in n), None)

    def warning_notes(self) -> list[str]:
        """The loader's notes an operator must not miss, said as warnings by the CLI and
        the Data page: numeric times read as early dates, a sampling interval that is
        not steady (a horizon in rows spans another time), decimals that look like
        thousands separators, a column without a name (a saved row index read as a
        sensor)."""
        words = (EARLY_TIMES, UNSTEADY, THOUSANDS_LIKE, NO_NAME)
        return [n for n in self.notes if any(w in n for w in words)]

    def mostly_filled(self) -> str | None:
        """One sentence when some sensors missed ``MOSTLY_FILLED`` of their readings or more
        and the gaps were filled (sensors read out of step with each other, or rarely),
        else None."""
        if self.missing_policy != "interpolate":
            return None
        sparse = [s for s, r in self.missing_rate.items() if r >= MOSTLY_FILLED]
        if not sparse:
            return None
        listed = named([f"{s} ({100 * self.missing_rate[s]:.0f} %)" for s in sparse])
        return (
            f"{len(sparse)} of {len(self.sensors)} sensors missed {100 * MOSTLY_FILLED:.0f} % "
            f"of the rows or more ({listed}), filled by interpolation: "
            "their model and the backtest's truth rest mostly on filled-in values (sensors "
            "read at other times than each other, or rarely); put them onto one clock "
            "(--clock STEP, or the Data page's clock step)"
        )


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
        # The arrays' buffers, not ``tobytes()`` copies (a 10,000-sensor history is ~1 GB).
        digest.update(np.ascontiguousarray(self.times.view(np.int64), dtype="<i8").data)
        digest.update(np.ascontiguousarray(self.values, dtype="<f8").data)
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
    return _assemble(_read(Path(path), options, None), options)


def load_sensors(
    path: str | Path, wanted: Sequence[str], options: LoadOptions = DEFAULT_OPTIONS
) -> tuple[SensorHistory, tuple[str, ...]]:
    """``load_history`` of only the sensors named in ``wanted`` (exact names) that the file
    holds, and the names of its other sensors, which are not read.

    A wide file's other columns are never parsed or checked (a note, a blank or a
    failed sensor beside the ones used), so only the time column and these decide
    what loads and which rows are missing. A name in ``wanted`` the file lacks is
    absent from the result: the caller says what that means.
    """
    decoded = _read(Path(path), options, frozenset(wanted))
    return _assemble(decoded, options), decoded.ignored


def _read(path: Path, options: LoadOptions, wanted: frozenset[str] | None) -> Decoded:
    kind = check_file(path)
    with connect() as con:
        found: list[str] = []  # the file's own notes (a header cell without a name)
        if kind == "parquet":
            found = read_parquet(con, path, options)
        else:
            found = read_csv(con, path, options)
        decoded = decode(con, path.name, options, wanted)
        decoded.notes.extend(found)
    if decoded.ignored:
        n = len(decoded.sensors)
        decoded.notes.append(
            f"read only the sensors used ({n} of {n + len(decoded.ignored)}); not read: "
            f"{shorten(decoded.ignored)}"
        )
    return decoded


def history_from_frame(
    df: pd.DataFrame, source: str = "<frame>", options: LoadOptions = DEFAULT_OPTIONS
) -> SensorHistory:
    """Validate an in-memory frame like ``load_history`` (a DatetimeIndex becomes a column)."""
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    index_is_time = isinstance(df.index, pd.DatetimeIndex) and df.index.name not in df.columns
    frame = df.reset_index(drop=not index_is_time)
    frame.columns = [str(c) for c in frame.columns]
    check_names(source, list(frame.columns))
    for name, dtype in zip(frame.columns, frame.dtypes, strict=True):
        if dtype == np.dtype(object) or isinstance(dtype, pd.CategoricalDtype):
            frame[name] = frame[name].astype("string")  # the parser names bad values
    with connect() as con:
        con.register("frame_view", frame)
        con.execute("CREATE TABLE raw AS SELECT * FROM frame_view")
        decoded = decode(con, source, options)
    return _assemble(decoded, options)


def _name_time_column(decoded: Decoded) -> None:
    """The header's unnamed column read as the time column is no saved row index: its
    note (a warning, ``NO_NAME``) becomes a plain one, in place."""
    unnamed = f"{NO_NAME}: read as {decoded.time_column!r}"
    decoded.notes[:] = [
        f"the time column is unnamed in the header line (read as {decoded.time_column!r})"
        if unnamed in n
        else n
        for n in decoded.notes
    ]


def _assemble(decoded: Decoded, options: LoadOptions) -> SensorHistory:
    if options.sensors is not None:
        _keep_sensors(decoded, options.sensors)
    if decoded.layout == "long":  # each sensor kept a column of the backup and recovered files
        check_names(decoded.source, list(decoded.sensors), "sensor")
    _name_time_column(decoded)
    source, sensors, notes = decoded.source, decoded.sensors, decoded.notes
    if "time" in sensors:
        raise DataError(f"{source}: a sensor is named 'time', which is reserved for the time axis")
    times, values = _sort_wide(decoded)  # a time written twice is refused, clock or not
    if options.clock_s is not None:
        values = _infinite_as_missing(values, decoded.notes)  # not averaged in
        times, values = put_on_clock(decoded.notes, times, values, options.clock_s)
    n_rows_raw = times.size
    values, rate = _mark_missing(decoded, values)
    check_range(source, times, values, sensors)
    times, values, filled, unfilled = _handle_missing(times, values, options.missing, notes)
    dropped = n_rows_raw - times.size
    need = len(sensors) + 2 if options.min_rows is None else options.min_rows
    if times.size < need:
        raise DataError(
            f"{source}: {times.size} rows left after missing-value handling ({options.missing}, "
            f"{dropped} of {n_rows_raw} dropped) for {len(sensors)} sensors; "
            f"need at least {need} rows{_blame(unfilled, sensors)}"
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


def _keep_sensors(decoded: Decoded, items: tuple[str, ...]) -> None:
    """Keep only the chosen sensors, before missing values and the row minimum see the rest."""
    chosen = resolve_sensors(decoded.sensors, items)
    index = [decoded.sensors.index(s) for s in chosen]
    decoded.notes.append(f"selected {len(chosen)} of {len(decoded.sensors)} sensors")
    decoded.values, decoded.sensors = decoded.values[:, index], tuple(chosen)


def _sort_wide(decoded: Decoded) -> tuple[np.ndarray, np.ndarray]:
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
            f"{format_ns(times[i])} (rows {rows[i]} and {rows[i + 1]}){_long_hint(decoded)}"
        )
    return times, values


def _long_hint(decoded: Decoded) -> str:
    """A hint to read a (time, x, y) file as long when ``x`` holds a few whole numbers
    (station ids 101, 102, 103: the file was read wide, so its times repeat), else ""."""
    if decoded.layout != "wide" or len(decoded.sensors) != 2:
        return ""
    for j, name in enumerate(decoded.sensors):
        ids = decoded.values[:, j]
        distinct = np.unique(ids[~np.isnan(ids)])
        if 1 < distinct.size <= ids.size // 2 and np.all(distinct == np.round(distinct)):
            return (
                f"; if column {name!r} names the sensors, this is a long file (time, sensor, "
                "value): choose the long layout (--layout long on the command line, Layout "
                "on the Data page)"
            )
    return ""


def _infinite_as_missing(values: np.ndarray, notes: list[str]) -> np.ndarray:
    """Infinite readings as NaN (a sensor cannot read inf), said in ``notes``."""
    infinite = np.isinf(values)
    if not infinite.any():
        return values
    notes.append(f"{int(infinite.sum())} infinite values were treated as missing")
    return np.where(infinite, np.nan, values)


def _mark_missing(decoded: Decoded, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Infinite readings become NaN; returns values and the per-sensor missing rate."""
    values = _infinite_as_missing(values, decoded.notes)
    rate = np.isnan(values).mean(axis=0)
    empty = np.flatnonzero(rate == 1.0)
    if empty.size:
        raise DataError(
            f"{decoded.source}: sensor {decoded.sensors[empty[0]]!r} has no values "
            f"(all {values.shape[0]} rows missing): leave it out ({LEAVE_OUT})"
        )
    return values, rate


def _handle_missing(
    times: np.ndarray, values: np.ndarray, policy: str, notes: list[str]
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Apply the missing-value policy; returns times, values, values filled and, per
    sensor, the rows dropped for a value of it still missing: (n,) int."""
    filled = 0
    if policy == "interpolate":
        values, filled = _interpolate(times, values)
        if filled:
            notes.append(
                f"filled {filled} missing values by linear interpolation in time "
                f"(edge runs up to {EDGE_FILL_FRACTION:.0%} of rows by the nearest value)"
            )
    missing = np.isnan(values)
    keep = ~missing.any(axis=1)
    dropped = int(keep.size - keep.sum())
    if not dropped:
        return times, values, filled, np.zeros(values.shape[1], dtype=np.int64)
    notes.append(f"dropped {dropped} rows that still had missing values")
    return times[keep], values[keep], filled, missing.sum(axis=0)


def _blame(unfilled: np.ndarray, sensors: tuple[str, ...]) -> str:
    """``"; the rows dropped lack readings of ..."``, naming the (up to 3) sensors whose
    missing values dropped the most rows (``unfilled`` (n,) rows per sensor), or ""."""
    order = [j for j in np.argsort(-unfilled, kind="stable")[:3] if unfilled[j]]
    if not order:
        return ""
    which = ", ".join(f"{sensors[j]!r} ({int(unfilled[j])} rows)" for j in order)
    return (
        f"; the rows dropped lack readings of {which}: leave such a sensor out "
        f"({LEAVE_OUT}) or fill its gaps"
    )


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
    unsteady = _unsteady_steps(times, interval)
    if unsteady:
        notes.append(
            f"{UNSTEADY} ({unsteady}): the interval used is the "
            f"median step, {interval:g} s, so a horizon or window counted in rows spans "
            "another time where the steps differ; resample the file onto one interval"
        )
    if constant:
        notes.append(
            f"constant sensors {shorten(constant)} are reconstructed exactly by their mean"
        )
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


def _unsteady_steps(times: np.ndarray, interval: float) -> str:
    """How the steps of ``times`` (T,) int64 ns change, or "" when steady: the median
    step of the first and last quarter differ by more than ``GAP_FACTOR`` x (the rate
    changed), or more than ``SHORT_STEPS`` of the steps are under the median step of
    ``interval`` s divided by ``GAP_FACTOR`` (a faster rate in the middle)."""
    steps = np.diff(times.astype(np.int64)).astype(np.float64) / 1e9
    if steps.size < 8:
        return ""
    part = steps.size // 4
    first, last = float(np.median(steps[:part])), float(np.median(steps[-part:]))
    if max(first, last) > GAP_FACTOR * min(first, last):
        where = f"{first:g} s over the first quarter of the rows, {last:g} s over the last"
        return f"a median step of {where}"
    short = float(np.mean(steps < interval / GAP_FACTOR))
    if short > SHORT_STEPS:
        return f"{100 * short:.0f} % of the steps are shorter than {interval / GAP_FACTOR:g} s"
    return ""


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
