"""Pure per-batch functions that ``foreachBatch`` calls (the recovery job's are
``engine.live.rebuild``).

Everything here works on pandas frames and NumPy arrays; no Spark, no I/O, no
clock. A feed frame has ``FEED_COLUMNS``: ``seq`` is the reading's row in the
history (windows are counted in readings: window ``j`` covers rows
``[j*slide, j*slide + window)``), ``event_time``/``arrival_time`` are naive UTC
timestamps, ``sensor`` a name, ``value`` a float.

The driver keeps a small ``WindowState`` between batches: the rows of the
windows that are still open, as a (R, n) array with NaN where a reading has not
arrived yet. A window is emitted once all of its rows are complete, in window
order, exactly once.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from engine.errors import ParameterError
from engine.live.records import LIVE, RECOVERED
from engine.model.linear import LinearMap, column_indices
from engine.query import WindowQuery
from engine.windows import window_aggregates, window_errors

FEED_COLUMNS: tuple[str, ...] = ("seq", "event_time", "arrival_time", "sensor", "value")
BACKUP_COLUMNS: tuple[str, ...] = ("seq", "event_time", "sensor", "value")
LATE_COLUMNS: tuple[str, ...] = ("seq", "event_time", "sensor", "value", "arrival_time")


@dataclass(frozen=True)
class WindowParams:
    """Window geometry in readings, and the aggregate (``of`` a query: checked there)."""

    sensors: tuple[str, ...]
    window: int
    slide: int
    aggregate: str

    @classmethod
    def of(cls, sensors: Sequence[str], query: WindowQuery) -> WindowParams:
        return cls(tuple(sensors), query.window, query.effective_slide, query.aggregate)


@dataclass(frozen=True, eq=False)
class WindowState:
    """Open rows kept between batches.

    Attributes
    ----------
    start : reading index (``seq``) of buffer row 0; equals ``next_window * slide``.
    next_window : id of the next window to emit.
    values : (R, n) readings, NaN where not yet arrived.
    times : (R,) datetime64[ns] event times, NaT where unknown.
    filled : (R,) rows completed by reconstruction (their windows are ``recovered``).
    damaged_until : rows with ``seq <= damaged_until`` lost readings in a failure;
        once their backed-up sensors are present, the rest is reconstructed. A state that
        skipped past windows no backup could complete takes it up to the row before its
        ``start``: those rows' windows were given up (``engine.live.recovery``).
    left_out : (R, n) readings a crash lost of kept-readings sensors: ``values`` holds
        their linear-map rebuild (so every consumer of the rows sees finite readings),
        but a window's max or min leaves them out (``aggregate_each_window``).
        ``None`` is taken as none left out.
    stored : (R, n) readings a micro-batch backed up beyond its plan version's set (a
        batch over a crash plan's exposure, or one after a recovery, backs up every
        sensor): recovery returns them as read, so the shadow check scores them so.
        ``None`` is taken as none (a snapshot from before this record: those readings
        are scored as rebuilt, which can only overstate the misses).
    """

    start: int
    next_window: int
    values: np.ndarray
    times: np.ndarray
    filled: np.ndarray
    damaged_until: int = -1
    left_out: np.ndarray | None = None
    stored: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("left_out", "stored"):
            cells = getattr(self, name)
            if cells is None:
                object.__setattr__(self, name, np.zeros(self.values.shape, dtype=bool))
            elif cells.shape != self.values.shape:
                raise ParameterError(
                    f"{name} must have the values' shape {self.values.shape}, got {cells.shape}"
                )

    @property
    def left_out_cells(self) -> np.ndarray:
        """(R, n) bool: ``left_out``, never None."""
        assert self.left_out is not None  # set by __post_init__
        return self.left_out

    @property
    def stored_cells(self) -> np.ndarray:
        """(R, n) bool: ``stored``, never None."""
        assert self.stored is not None  # set by __post_init__
        return self.stored

    @classmethod
    def empty(cls, n_sensors: int, next_window: int = 0, slide: int = 1) -> WindowState:
        return cls(
            start=next_window * slide,
            next_window=next_window,
            values=np.zeros((0, n_sensors)),
            times=np.zeros(0, dtype="datetime64[ns]"),
            filled=np.zeros(0, dtype=bool),
        )

    @property
    def buffered_rows(self) -> int:
        return int(self.values.shape[0])

    def to_bytes(self) -> bytes:
        """Serialise (``np.savez``) for the store's ``state`` table."""
        buf = io.BytesIO()
        np.savez(
            buf,
            meta=np.array([self.start, self.next_window, self.damaged_until], dtype=np.int64),
            values=self.values,
            times=self.times.astype("datetime64[ns]").view(np.int64),
            filled=self.filled,
            left_out=self.left_out_cells,
            stored=self.stored_cells,
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes) -> WindowState:
        with np.load(io.BytesIO(blob)) as data:
            start, next_window, damaged = (int(v) for v in data["meta"])
            # a snapshot from before kept-readings sensors has no left-out cells
            left_out = data["left_out"].copy() if "left_out" in data.files else None
            # nor one from before the record of readings a full batch stored
            stored = data["stored"].copy() if "stored" in data.files else None
            return cls(
                start=start,
                next_window=next_window,
                values=data["values"].copy(),
                times=data["times"].view("datetime64[ns]").copy(),
                filled=data["filled"].copy(),
                damaged_until=damaged,
                left_out=left_out,
                stored=stored,
            )


@dataclass(frozen=True, eq=False)
class ClosedWindows:
    """Windows emitted by one batch.

    ``ids`` (W,), ``starts``/``ends`` (W,) event times of the first and last row,
    ``aggregates`` (W, n), ``recovered`` (W,) windows holding reconstructed rows,
    ``block`` (B, n) the complete rows the windows cover (window ``ids[0]``
    starts at block row 0); ``stored`` (B, n) its readings a micro-batch backed up
    beyond its plan version's set (``WindowState.stored``; None: none).
    """

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    aggregates: np.ndarray
    recovered: np.ndarray
    block: np.ndarray
    stored: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def stored_cells(self) -> np.ndarray:
        """(B, n) bool: ``stored``, never None."""
        if self.stored is None:
            return np.zeros(self.block.shape, dtype=bool)
        return self.stored


@dataclass(frozen=True, eq=False)
class WindowAdvance:
    """Result of one batch: the next state, the windows it closed, the late readings.

    ``stale`` counts readings of rows whose windows were given up after a failure
    (dropped, not late); ``duplicates`` second readings of a (row, sensor).
    """

    state: WindowState
    closed: ClosedWindows
    late: pd.DataFrame
    duplicates: int
    stale: int = 0


def select_backup_rows(batch: pd.DataFrame, sensors: Sequence[str]) -> pd.DataFrame:
    """Readings of ``sensors`` only, with ``BACKUP_COLUMNS`` (the backup writer's rows)."""
    if not sensors or batch.empty:
        return batch.iloc[0:0][list(BACKUP_COLUMNS)]
    keep = batch["sensor"].isin(list(sensors)).to_numpy()
    return batch.loc[keep, list(BACKUP_COLUMNS)].reset_index(drop=True)


def advance_windows(
    state: WindowState,
    batch: pd.DataFrame,
    params: WindowParams,
    linear_map: LinearMap | None = None,
    kept: Sequence[str] = (),
    stored: np.ndarray | None = None,
) -> WindowAdvance:
    """Add a batch's readings to the open rows and emit every window now complete.

    Readings of sensors outside ``params.sensors`` are ignored; readings for rows
    before ``state.start`` are returned as late (or counted as stale when the row
    was lost in a failure, ``seq <= state.damaged_until``); a second reading of the same
    (row, sensor) is counted as a duplicate and dropped (the first one wins).
    ``linear_map`` completes damaged rows (see ``WindowState``). ``kept`` (a crash's
    recovery of a max/min query only): the damaged readings of these sensors are
    completed too, but marked ``left_out``, so the windows holding them take the
    extreme of the sensor's other readings. ``stored`` (one per row of ``batch``; None:
    none): readings their micro-batch backed up beyond the plan's set
    (``WindowState.stored``).
    """
    if kept and params.aggregate not in ("max", "min"):
        raise ParameterError(
            f"kept sensors apply to max and min only, got aggregate {params.aggregate!r}"
        )
    n = len(params.sensors)
    ours = batch["sensor"].isin(list(params.sensors)).to_numpy()
    known = batch[ours]
    flags = np.zeros(len(known), dtype=bool) if stored is None else np.asarray(stored, bool)[ours]
    seq = known["seq"].to_numpy(dtype=np.int64)
    before = seq < state.start
    stale = before & (seq <= state.damaged_until)
    late = known.loc[before & ~stale, list(LATE_COLUMNS)].reset_index(drop=True)
    fresh = known.loc[~before]
    seq = seq[~before]
    col = pd.Categorical(fresh["sensor"], categories=list(params.sensors)).codes.astype(np.int64)
    values, times, filled, left_out, stored_at = _grown(
        state, int(seq.max()) + 1 if seq.size else 0, n
    )
    rel = seq - state.start
    first = np.zeros(seq.size, dtype=bool)
    first[np.unique(rel * n + col, return_index=True)[1]] = True
    new = first & np.isnan(values[rel, col])
    values[rel[new], col[new]] = fresh["value"].to_numpy(dtype=float)[new]
    stored_at[rel[new], col[new]] = flags[~before][new]
    times[rel] = fresh["event_time"].to_numpy(dtype="datetime64[ns]")
    if linear_map is not None and state.damaged_until >= state.start:
        cols = column_indices(params.sensors, kept)
        _fill_damaged(values, filled, left_out, state, params.sensors, linear_map, cols)
    grown = WindowState(
        state.start,
        state.next_window,
        values,
        times,
        filled,
        state.damaged_until,
        left_out,
        stored_at,
    )
    next_state, closed = emit_windows(grown, params)
    return WindowAdvance(next_state, closed, late, int(seq.size - new.sum()), int(stale.sum()))


def _grown(
    state: WindowState, end: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Copies of the state's arrays (values, times, filled, left_out, stored), extended
    with empty rows up to reading ``end``."""
    extra = max(0, end - state.start - state.buffered_rows)
    values = np.vstack([state.values, np.full((extra, n), np.nan)])
    times = np.concatenate([state.times, np.full(extra, np.datetime64("NaT"), "datetime64[ns]")])
    filled = np.concatenate([state.filled, np.zeros(extra, dtype=bool)])
    left_out = np.vstack([state.left_out_cells, np.zeros((extra, n), dtype=bool)])
    stored = np.vstack([state.stored_cells, np.zeros((extra, n), dtype=bool)])
    return values, times, filled, left_out, stored


def _fill_damaged(
    values: np.ndarray,
    filled: np.ndarray,
    left_out: np.ndarray,
    state: WindowState,
    sensors: Sequence[str],
    linear_map: LinearMap,
    kept_cols: list[int],
) -> None:
    """In place: reconstruct the missing readings of damaged rows whose backup is whole;
    those of the ``kept_cols`` sensors are marked ``left_out`` as well."""
    stop = min(values.shape[0], state.damaged_until - state.start + 1)
    backup_cols = column_indices(sensors, linear_map.backup)
    head = values[:stop]
    rows = np.flatnonzero(np.isnan(head).any(axis=1) & ~np.isnan(head[:, backup_cols]).any(axis=1))
    if rows.size == 0:
        return
    rebuilt = linear_map.apply(head[rows][:, backup_cols])[
        :, column_indices(linear_map.sensors, sensors)
    ]
    missing = np.isnan(head[rows])
    head[rows] = np.where(missing, rebuilt, head[rows])
    filled[rows] = True
    if kept_cols:
        cols = np.asarray(kept_cols, dtype=np.int64)
        left_out[np.ix_(rows, cols)] |= missing[:, cols]


def emit_windows(state: WindowState, params: WindowParams) -> tuple[WindowState, ClosedWindows]:
    """Emit the complete windows at the front of the state, in order.

    Returns the state without the rows no open window needs, and the closed windows.
    """
    w, step = params.window, params.slide
    complete = ~np.isnan(state.values).any(axis=1)
    first_gap = int(complete.size if complete.all() else np.argmin(complete))
    stop = max(state.next_window, (first_gap + state.start - w) // step + 1)
    count = stop - state.next_window
    if count == 0:
        return state, _no_windows(len(params.sensors))
    lo = state.next_window * step - state.start
    hi = lo + (count - 1) * step + w
    block = state.values[lo:hi]
    firsts = lo + np.arange(count) * step
    closed = ClosedWindows(
        ids=np.arange(state.next_window, stop, dtype=np.int64),
        starts=state.times[firsts],
        ends=state.times[firsts + w - 1],
        aggregates=aggregate_each_window(
            block, count, w, step, params.aggregate, state.left_out_cells[lo:hi]
        ),
        recovered=window_aggregates(state.filled[lo:hi].astype(float), w, step, "max")[:, 0] > 0,
        block=block,
        stored=state.stored_cells[lo:hi],
    )
    cut = stop * step - state.start
    rest = WindowState(
        start=stop * step,
        next_window=stop,
        values=state.values[cut:],
        times=state.times[cut:],
        filled=state.filled[cut:],
        damaged_until=state.damaged_until,
        left_out=state.left_out_cells[cut:],
        stored=state.stored_cells[cut:],
    )
    return rest, closed


def aggregate_each_window(
    block: np.ndarray,
    count: int,
    window: int,
    slide: int,
    aggregate: str,
    left_out: np.ndarray | None = None,
) -> np.ndarray:
    """(count, n) aggregates of the windows at rows ``k*slide`` of ``block``.

    Each window is aggregated on its own rows, so the live pipeline, the recovery
    job and the scoring give bit-identical results on identical rows. ``left_out``
    (same shape as ``block``; max and min only): cells a window's extreme leaves out;
    a sensor whose readings a window leaves out entirely keeps their extreme.
    """
    if count == 0:
        return np.zeros((0, block.shape[1]))
    out = np.vstack(
        [
            window_aggregates(block[k * slide : k * slide + window], window, window, aggregate)
            for k in range(count)
        ]
    )
    if left_out is None or not left_out.any():
        return out
    if aggregate not in ("max", "min"):
        raise ParameterError(f"readings can be left out of max and min only, got {aggregate!r}")
    pick, skip = (np.max, -np.inf) if aggregate == "max" else (np.min, np.inf)
    for k in range(count):
        rows = slice(k * slide, k * slide + window)
        cols = np.flatnonzero(left_out[rows].any(axis=0) & ~left_out[rows].all(axis=0))
        if cols.size:
            out[k, cols] = pick(np.where(left_out[rows, cols], skip, block[rows, cols]), axis=0)
    return out


def _no_windows(n: int) -> ClosedWindows:
    empty_t = np.zeros(0, dtype="datetime64[ns]")
    return ClosedWindows(
        np.zeros(0, dtype=np.int64),
        empty_t,
        empty_t,
        np.zeros((0, n)),
        np.zeros(0, dtype=bool),
        np.zeros((0, n)),
    )


def shadow_errors(
    closed: ClosedWindows,
    params: WindowParams,
    linear_map: LinearMap,
    rebuilt: np.ndarray | None = None,
) -> np.ndarray:
    """What recovery from the backup sensors would have missed: (W, n) absolute errors.

    Rebuilds the closed windows' rows from their backed-up columns with
    ``linear_map`` (or takes them ``rebuilt``: each row under its own plan version,
    ``engine.live.shadow_rows``) and compares the window aggregates with the live ones.
    """
    if len(closed) == 0:
        return np.zeros((0, len(params.sensors)))
    if rebuilt is None:
        rebuilt = linear_map.rebuild_columns(closed.block, params.sensors)
    return window_errors(closed.block, rebuilt, params.window, params.slide, params.aggregate)


def results_frame(closed: ClosedWindows, sensors: Sequence[str], version: int = 1) -> pd.DataFrame:
    """Long rows for the store's ``results`` table, one per (window, sensor)."""
    n = len(sensors)
    kinds = np.where(closed.recovered, RECOVERED, LIVE)
    return pd.DataFrame(
        {
            "window_id": np.repeat(closed.ids, n),
            "window_start": np.repeat(closed.starts, n),
            "window_end": np.repeat(closed.ends, n),
            "sensor": np.tile(np.asarray(sensors, dtype=object), len(closed)),
            "value": closed.aggregates.reshape(-1),
            "kind": np.repeat(kinds, n),
            "version": np.full(len(closed) * n, version, dtype=np.int32),
            "final": np.ones(len(closed) * n, dtype=bool),
        }
    )
