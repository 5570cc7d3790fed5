"""Mergeable window aggregates: the production job's open-window state, pure pandas.

Each micro-batch yields *partials* per (window, sensor), computed on the
executors: the aggregate's partial state of the readings (``n`` and the
aggregate's fields, ``engine.aggregates``) and, for an aggregate that is not
linear (max, min), the partial state of a rebuilt sensor's rebuilt readings.
On the driver, ``recovered_partials`` turns the second into the state of the readings
a recovery of that batch gives (``rebuilt_n``: readings a recovery has,
``rebuilt_<field>``; ``stored_n``: those of them the batch's backup stored, exact):
a sensor the batch backed up has its own readings, any other its rebuilt ones, under
the plan version the batch ran under. Each field merges by its own reduction (a sum, a
max or a min), so a window that spans micro-batches, plan versions and batches over
the exposure is the merge of its batches' partials, and its shadow check scores what a
recovery of the window really returns. ``WindowState`` holds the windows not yet
closed; a window closes when the watermark (largest event time seen minus the
allowed lateness) reaches its end, and its shadow check is computed here, once.

``WindowState`` is a snapshot per micro-batch id: the job stores the state
after batch ``b`` under ``b`` and a replayed batch ``b`` starts again from the
state stored before it, so no partial is counted twice.

Times are ``int64`` epoch microseconds (UTC) in the state, as Arrow stores them.

Under the crash contract the state also keeps the open windows' rows (``rows``: one
per event time, a column per sensor; ``engine.job.crash_check``), stored in the
snapshot beside the partials; a snapshot written without them restores with none.
"""

from __future__ import annotations

import io
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from engine.aggregates import Aggregate, get_aggregate
from engine.errors import PipelineError
from engine.model.linear import LinearMap
from engine.partial_state import COUNT, Reduce, merged_partials

KEYS = ["window_start", "window_end", "sensor"]
RESULT_COLUMNS = [*KEYS, "n", "value", "rebuilt", "error", "miss", "backed_up", "plan_version"]
NO_TIME = np.iinfo(np.int64).min
ROWS_KEY = "lacuna_rows"  # the snapshot's metadata key of the open windows' rows
REBUILT = "rebuilt_"  # the prefix of the recovered readings' state columns
STORED = "stored_n"  # a window's readings of a sensor that its batches' backup stored
FIRST = "first_version"  # the oldest plan version a batch of the window ran under
# a count that is not known (``stored_n`` of a window open when a state from before the
# column was restored; ``rebuilt_n`` of avg/sum where the backups' counts do not say
# which time steps a recovery has): the window's shadow check is left out (NaN). Large
# enough that no count of later batches brings a sum of it back to zero or above.
UNKNOWN = -(2**40)
# a checkpoint written before the rebuilt state took its fields' names
_OLD_NAMES = {"rebuilt": "rebuilt_agg"}


def partial_columns(aggregate: str) -> list[str]:
    """The columns of ``aggregate``'s partials: keys, the state, the recovered state and
    how many of the recovered readings were stored."""
    names = [f.name for f in get_aggregate(aggregate).state_fields]
    return [*KEYS, *names, *(REBUILT + n for n in names), STORED, FIRST]


COUNTS = (COUNT.name, REBUILT + COUNT.name, STORED, FIRST)  # the partials' integers


def partial_schema(aggregate: str) -> str:
    """``partial_columns`` as a Spark DDL schema (counts long, the rest double)."""
    types = {"window_start": "long", "window_end": "long", "sensor": "string"}
    return ", ".join(
        f"{c} {types.get(c, 'long' if c in COUNTS else 'double')}"
        for c in partial_columns(aggregate)
    )


def _empty(aggregate: str) -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype="int64") for c in KEYS})
    frame["sensor"] = frame["sensor"].astype(object)
    for c in partial_columns(aggregate)[len(KEYS) :]:
        frame[c] = pd.Series(dtype="int64" if c in COUNTS else "float64")
    return frame


@dataclass
class WindowState:
    """Open windows' partials after micro-batch ``batch_id`` (``-1``: before any)."""

    aggregate: str
    batch_id: int = -1
    max_event_us: int = NO_TIME
    watermark_us: int = NO_TIME
    open: pd.DataFrame = field(default_factory=pd.DataFrame)  # no columns: none open yet
    # small JSON-able facts the job keeps with the state (the monitor's tally); replaced
    # whole, never mutated in place, so a shallow copy of the state is a copy
    extra: dict[str, Any] = field(default_factory=dict)
    # the open windows' rows, ``event_us`` + a column per sensor (crash contract only;
    # empty otherwise); replaced whole too, never mutated in place
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __post_init__(self) -> None:
        if self.open.columns.empty:
            self.open = _empty(self.aggregate)

    @property
    def columns(self) -> list[str]:
        return partial_columns(self.aggregate)

    def merge(self, partials: pd.DataFrame, max_event_us: int, lateness_us: int) -> pd.DataFrame:
        """Fold one batch's partials in; return the merged partials of windows now closed.

        Partials of windows that closed in an earlier batch are late and dropped,
        as Spark's watermark drops them.
        """
        opened = self.open
        fresh = partials.loc[partials["window_end"] > self.watermark_us, self.columns]
        # only a (window, sensor) that is open already or comes twice needs combining:
        # at 1,056 sensors a batch's 440,000 partials are mostly neither (0.1 s saved)
        twice = fresh["window_start"].isin(opened["window_start"].unique()) | fresh.duplicated(
            ["window_start", "sensor"], keep=False
        )
        combined = _combine(pd.concat([opened, fresh[twice]], ignore_index=True), self.aggregate)
        merged = (
            pd.concat([combined, fresh[~twice]], ignore_index=True)
            .sort_values(KEYS, kind="stable")
            .reset_index(drop=True)
        )
        self.max_event_us = max(self.max_event_us, int(max_event_us))
        if self.max_event_us != NO_TIME:
            self.watermark_us = max(self.watermark_us, self.max_event_us - int(lateness_us))
        done = merged["window_end"] <= self.watermark_us
        self.open = merged[~done].reset_index(drop=True)
        return merged[done].reset_index(drop=True)

    def snapshot(self) -> bytes:
        """Arrow IPC bytes: the open partials plus the scalars in the schema metadata, and
        the open windows' rows (when kept) as Arrow IPC bytes there too (``ROWS_KEY``)."""
        meta = {
            "aggregate": self.aggregate,
            "batch_id": self.batch_id,
            "max_event_us": self.max_event_us,
            "watermark_us": self.watermark_us,
            "extra": self.extra,
        }
        table = pa.Table.from_pandas(self.open, preserve_index=False)
        stored = {"lacuna_state": json.dumps(meta).encode()}
        if not self.rows.columns.empty:  # Arrow metadata values are bytes: the rows' IPC
            stored[ROWS_KEY] = _ipc_bytes(pa.Table.from_pandas(self.rows, preserve_index=False))
        table = table.replace_schema_metadata(stored)
        sink = io.BytesIO()
        with ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        return sink.getvalue()

    @classmethod
    def restore(cls, data: bytes) -> WindowState:
        try:
            table = ipc.open_file(pa.BufferReader(data)).read_all()
            meta = json.loads(table.schema.metadata[b"lacuna_state"])
            rows = table.schema.metadata.get(ROWS_KEY.encode())
            kept = pd.DataFrame() if rows is None else _from_ipc(rows).to_pandas()
        except (pa.ArrowInvalid, KeyError, TypeError, ValueError) as err:
            raise PipelineError(f"window state in the checkpoint is unreadable: {err}") from None
        aggregate = str(meta["aggregate"])
        frame = table.to_pandas().rename(columns=_OLD_NAMES) if table.num_rows else None
        if frame is not None and STORED not in frame:  # what was stored is not known
            frame[STORED] = np.int64(UNKNOWN)
        if frame is not None and FIRST not in frame:  # nor which version it ran under
            frame[FIRST] = np.int64(-1)
        return cls(
            aggregate=aggregate,
            batch_id=int(meta["batch_id"]),
            max_event_us=int(meta["max_event_us"]),
            watermark_us=int(meta["watermark_us"]),
            open=pd.DataFrame() if frame is None else frame[partial_columns(aggregate)],
            extra=dict(meta.get("extra", {})),
            rows=kept,
        )


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return sink.getvalue()


def _from_ipc(data: bytes) -> pa.Table:
    return ipc.open_stream(pa.BufferReader(data)).read_all()


def collected_partials(table: pa.Table, window_us: int, aggregate: str) -> tuple[pd.DataFrame, int]:
    """A batch's partials as collected from the executors, ready to merge; and how
    many readings had no sensor or no time (a null key: dropped here).

    ``table`` has ``batch_partials``' columns, plus ``rebuilt_partials``' rows for
    an aggregate that is not linear (whose ``missing``, ``max_event_us`` and
    ``readings`` are null). Adds ``window_end`` and the rebuilt state columns the
    executors left out (none rebuilt: count 0, fields NaN).
    """
    keyed = pc.and_(pc.is_valid(table["window_start"]), pc.is_valid(table["sensor"]))
    unusable = pc.sum(table.filter(pc.invert(keyed))["readings"]).as_py() or 0
    frame = table.filter(keyed).to_pandas()
    frame["window_end"] = frame["window_start"] + int(window_us)
    for name in partial_columns(aggregate)[len(KEYS) :]:
        if name not in frame:
            frame[name] = 0 if name in COUNTS else np.nan
    counts = [*COUNTS, "missing", "readings"]
    frame[counts] = frame[counts].fillna(0).astype(np.int64)
    return frame, int(unusable)


def _combine(partials: pd.DataFrame, aggregate: str) -> pd.DataFrame:
    """One row per (window, sensor): each state field merged by its reduction
    (a batch without rebuilt readings adds nothing: max/min skip NaN)."""
    if partials.empty:
        return _empty(aggregate)
    agg = get_aggregate(aggregate)
    more: dict[str, Reduce] = {STORED: "sum", FIRST: "min"}
    out = merged_partials(partials, KEYS, agg, prefixes=("", REBUILT), more=more)
    return out[partial_columns(aggregate)]


def _state(frame: pd.DataFrame, aggregate: Aggregate, prefix: str = "") -> dict[str, Any]:
    return {f.name: frame[prefix + f.name] for f in aggregate.state_fields}


def recovered_partials(
    partials: pd.DataFrame, stored: Collection[str], lm: LinearMap, aggregate: str, version: int
) -> pd.DataFrame:
    """One batch's partials with ``rebuilt_*`` the state of the readings a recovery of
    the batch returns, ``stored_n`` how many of them its backup stored and
    ``first_version`` the plan ``version`` it ran under; a copy.

    ``stored``: the sensors the batch backed up (the set of the plan version it ran
    under, plus every sensor of a batch over the exposure), recovered exactly: their
    ``rebuilt_*`` is their own state. ``lm``: that version's map, which rebuilds the
    others. For max and min the executors computed their rebuilt readings' state
    (``rebuild_window_partials``, rows with ``n = 0``); for avg and sum it is here, per
    window of the batch: a recovery has the time steps where every backup has a
    reading, each rebuilt as ``intercept + coef @ a_O`` (``a_O``: the backups' mean in
    this batch's part of the window). None when a backup has no reading there; the
    target's ``n`` when every backup has ``n`` too (one grid of time steps); otherwise
    which steps a recovery has is not known from counts, and the window is not scored
    (``UNKNOWN``).
    """
    agg = get_aggregate(aggregate)
    out = partials.copy()
    # the names hashed once (a batch at 1,056 sensors has 440,000 partials), roles by name
    codes, names = pd.factorize(out["sensor"])
    sensor = _Roles(codes, pd.Index(names))
    keep = sensor.of(stored) >= 0
    for f in agg.state_fields:
        out[REBUILT + f.name] = np.where(keep, out[f.name], out[REBUILT + f.name])
    out[STORED] = np.where(keep, out[COUNT.name], 0).astype(np.int64)
    out[FIRST] = np.int64(version)
    if agg.linear:
        _linear_recovered(out, sensor, keep, lm, agg)
    return out


@dataclass(frozen=True)
class _Roles:
    """A column of sensor names as codes into ``names``: where each row's sensor is in a
    list of sensors, without hashing the column again per list."""

    codes: np.ndarray
    names: pd.Index

    def of(self, sensors: Collection[str]) -> np.ndarray:
        """Per row: its sensor's position in ``sensors``, -1 if not there."""
        where = pd.Index(list(sensors)).get_indexer(self.names)
        return np.append(where, -1)[self.codes]  # code -1 (a null name): not there


def _linear_recovered(
    out: pd.DataFrame, sensor: _Roles, keep: np.ndarray, lm: LinearMap, agg: Aggregate
) -> None:
    """``rebuilt_*`` of avg/sum's rebuilt sensors from the backups' batch means, in place."""
    (total,) = agg.fields  # avg and sum keep ``n`` and the readings' sum
    ti = sensor.of(lm.targets)  # -1: not a target
    targets = np.flatnonzero(~keep & (ti >= 0))
    if targets.size == 0:
        return
    row_window, starts = pd.factorize(out["window_start"])
    bi = sensor.of(lm.backup)
    is_b = bi >= 0
    count = out[COUNT.name].to_numpy()
    means = np.full((len(starts), len(lm.backup)), np.nan)
    counts = np.zeros((len(starts), len(lm.backup)), dtype=np.int64)
    counts[row_window[is_b], bi[is_b]] = count[is_b]
    with np.errstate(divide="ignore", invalid="ignore"):
        means[row_window[is_b], bi[is_b]] = out[total.name].to_numpy(float)[is_b] / count[is_b]
    lin = means @ lm.coef.T  # (windows, targets): no larger than the batch's partials
    w = row_window[targets]
    per_reading = lm.intercept[ti[targets]] + lin[w, ti[targets]]
    n = count[targets]
    if lm.backup:
        lo, hi = counts.min(axis=1)[w], counts.max(axis=1)[w]
    else:  # nothing to read: every time step is rebuilt from the intercept
        lo = hi = n
    steps = np.where(lo == 0, 0, np.where((lo == hi) & (hi == n), n, UNKNOWN))
    ok = np.isfinite(per_reading) & (steps > 0)
    rebuilt_n = out[REBUILT + COUNT.name].to_numpy().copy()
    rebuilt_total = out[REBUILT + total.name].to_numpy(float).copy()
    rebuilt_n[targets] = np.where(ok | (steps < 0), steps, 0)
    rebuilt_total[targets] = np.where(ok, n * per_reading, total.empty)
    out[REBUILT + COUNT.name], out[REBUILT + total.name] = rebuilt_n, rebuilt_total


def shadow_results(
    closed: pd.DataFrame, aggregate: str, eps: float | Mapping[str, float]
) -> pd.DataFrame:
    """``RESULT_COLUMNS`` for closed windows' merged partials: true, rebuilt, error, miss.

    ``eps`` is one tolerance, or one per sensor (a plan with per-unit eps).

    ``rebuilt`` is the aggregate of the window's recovered readings
    (``recovered_partials`` of each batch, merged): what ``recover`` over the window
    returns, each batch under the plan version and the set it was backed up under.
    NaN (not scored, never a miss) when a recovery has none of the window's readings
    of the sensor, or when which readings it has is not known (``UNKNOWN``).
    ``backed_up``: the backup stored every reading of the window (error 0).
    ``plan_version``: the oldest version a batch of the window ran under (-1: not
    known), so a version's record holds only windows read under it alone or later.
    """
    if closed.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in RESULT_COLUMNS})
    agg = get_aggregate(aggregate)
    value = pd.Series(agg.finish(_state(closed, agg)), index=closed.index)
    stored = closed[STORED]
    backed = ((stored >= closed[COUNT.name]) & (closed[COUNT.name] > 0)).to_numpy()
    finished = pd.Series(agg.finish(_state(closed, agg, REBUILT)), index=closed.index)
    rebuilt = finished.where((closed[REBUILT + COUNT.name] > 0) & (stored >= 0))
    rebuilt = rebuilt.where(~backed, value)
    out = closed[[*KEYS, "n"]].copy()
    out["value"] = value.astype(float)
    out["rebuilt"] = rebuilt.astype(float)
    out["error"] = out["rebuilt"] - out["value"]
    limit = closed["sensor"].map(eps).to_numpy(dtype=float) if isinstance(eps, Mapping) else eps
    out["miss"] = (out["error"].abs() > limit).fillna(False).astype(bool)
    out["backed_up"] = backed
    out["plan_version"] = closed[FIRST].astype(np.int64)
    return out[RESULT_COLUMNS]


def rebuild_window_partials(pdf: pd.DataFrame, lm: LinearMap, aggregate: str) -> pd.DataFrame:
    """The partial state of every target's rebuilt readings in one window of one batch.

    ``pdf`` holds one window's backup readings (``window_start, window_end,
    event_time, sensor, value``); a time step is rebuilt only when every backup
    sensor has a reading at it. Returns ``partial_columns`` rows per target with
    ``n = 0`` and the other true fields NaN (the true state comes from another
    partial).
    """
    agg = get_aggregate(aggregate)
    wide = pdf.pivot_table(index="event_time", columns="sensor", values="value", aggfunc="last")
    complete = wide.reindex(columns=list(lm.backup)).dropna()
    rows = complete.to_numpy()
    rebuilt = lm.intercept + rows @ lm.coef.T if len(rows) else np.zeros((0, len(lm.targets)))
    state = agg.partial(rebuilt, axis=0)
    out = pd.DataFrame(
        {
            "window_start": pdf["window_start"].iloc[0],
            "window_end": pdf["window_end"].iloc[0],
            "sensor": list(lm.targets),
        }
    )
    for f in agg.state_fields:
        out[f.name] = 0 if f is COUNT else np.nan
        out[REBUILT + f.name] = np.asarray(state[f.name], dtype=float)
    out[REBUILT + COUNT.name] = len(rows)
    out[STORED] = 0
    out[FIRST] = 0  # the driver sets the batch's version (``recovered_partials``)
    return out[partial_columns(aggregate)]
