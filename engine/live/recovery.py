"""Recovery after a failure, as a Spark batch job.

What was lost: every window without a final result when the query died, i.e.
the rows from ``first_window * slide`` up to the largest reading index the
failed query had consumed (``last_row``). The job reads the backup rows of that
range from the DuckDB store (Arrow -> ``spark.createDataFrame``), pivots them
wide, rebuilds the missing sensors with the plan's linear map in
``mapInPandas``, aggregates every window that lies inside the range in
``applyInPandas`` and writes those as ``recovered`` results. Windows that run
past ``last_row`` are finished by the restarted live query, which is seeded
with the rebuilt rows.

Its scored report is ``engine.live.recovery_report``. PySpark is imported
inside functions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from engine.live.batch import ClosedWindows, WindowState, results_frame
from engine.live.rebuild import aggregate_windows_frame, reconstruct_frame, seed_state
from engine.live.records import BatchWrite
from engine.live.spec import StreamSpec, check_mode
from engine.live.store import RECOVERY_BATCH, BackupStore
from engine.live.versions import PlanVersion
from engine.model.linear import LinearMap


@dataclass(frozen=True)
class LostRange:
    """Rows ``first_row .. last_row`` (inclusive) lost their live windows."""

    first_window: int
    first_row: int
    last_row: int

    @property
    def rows(self) -> int:
        return max(0, self.last_row - self.first_row + 1)

    def lost_windows(self, slide: int) -> np.ndarray:
        """Ids of every window that needs a lost row (none when no row was lost: a crash
        that took no batch leaves its open windows to the restarted query, whole)."""
        if self.rows == 0:
            return np.zeros(0, dtype=np.int64)
        return np.arange(self.first_window, self.last_row // slide + 1, dtype=np.int64)

    def inside_windows(self, window: int, slide: int) -> np.ndarray:
        """Ids of the lost windows that end at or before ``last_row``."""
        stop = (self.last_row - window + 1) // slide + 1 if self.last_row >= window - 1 else 0
        return np.arange(self.first_window, max(self.first_window, stop), dtype=np.int64)


def find_damaged_until(last_row: int, next_window: int, slide: int) -> int:
    """The ``damaged_until`` of a restarted query's state at window ``next_window``: the
    failure's last lost row, or, when the state skips past windows no backup could
    complete, the last row before its first. The rows between belong only to windows
    given up with the lost ones: their readings are stale (dropped), not late."""
    return max(last_row, next_window * slide - 1)


def find_lost_range(store: BackupStore, slide: int) -> LostRange:
    """The lost range after a failure, from what the store holds."""
    first_window = store.last_window() + 1
    return LostRange(first_window, first_window * slide, store.horizon())


@dataclass(frozen=True, eq=False)
class RecoveryOutcome:
    """What the recovery job produced: recovered windows and the restart state."""

    window_ids: np.ndarray  # (W,)
    seed: WindowState
    rows_read: int
    rows_by_version: dict[int, int] = field(default_factory=dict)  # rebuilt rows each served
    # (lost rows, n): the readings the backup held (not NaN), row 0 = the range's first;
    # None when nothing was read. A window whose lost readings of a sensor were all
    # held was not rebuilt for it (``stored_cells``).
    stored: np.ndarray | None = None


def recover_lost_range(
    spark: Any,
    store: BackupStore,
    spec: StreamSpec,
    mode: str,
    lost: LostRange,
    run: int,
    versions: Sequence[PlanVersion] = (),
) -> RecoveryOutcome:
    """Run the recovery job and commit its windows under ``(run, RECOVERY_BATCH)``.

    ``versions`` are the stored plan versions (``engine.live.versions``): in
    ``approx`` mode each row of the range is rebuilt with the map of the
    version that governed it (``reconstruct_frame``); without versions, with
    ``spec``'s map. ``rows_by_version`` counts the rebuilt rows each served.
    """
    check_mode(mode)
    if mode == "none" or lost.rows == 0:
        next_window = max(lost.first_window, lost.last_row // spec.slide + 1)
        seed = WindowState.empty(len(spec.sensors), next_window, spec.slide)
        seed = replace(
            seed, damaged_until=find_damaged_until(lost.last_row, next_window, spec.slide)
        )
        return RecoveryOutcome(np.zeros(0, dtype=np.int64), seed, 0)
    ordered = sorted(versions, key=lambda v: -v.id) if mode == "approx" else []
    maps = [v.spec.linear_map for v in ordered] or [spec.recovery_map(mode)]
    ranges = [(v.first_seq, v.last_seq) for v in ordered] or None
    # every sensor's readings: a batch over the exposure, or after a recovery, backed up
    # sensors beyond its plan's set, and those are exact, not rebuilt
    stored = tuple(dict.fromkeys([*(s for lm in maps for s in lm.backup), *spec.sensors]))
    table = store.read_backup(lost.first_row, lost.last_row, stored)
    if table.num_rows == 0:
        return recover_lost_range(spark, store, spec, "none", lost, run)
    rebuilt = _rebuild_rows(spark, table, spec, maps, stored, ranges).persist()
    try:
        inside = lost.inside_windows(spec.window, spec.slide)
        windows = _aggregate_windows(spark, rebuilt, spec, inside)
        seed = _seed_from_tail(rebuilt, spec, lost, inside)
        served = _rows_by_map(rebuilt)
    finally:
        rebuilt.unpersist()
    by_version = {ordered[i].id: n for i, n in served.items()} if ordered else {}
    names = _positional(spec.sensors)
    closed = ClosedWindows(
        ids=windows["window_id"].to_numpy(dtype=np.int64),
        starts=windows["window_start"].to_numpy(dtype="datetime64[ns]"),
        ends=windows["window_end"].to_numpy(dtype="datetime64[ns]"),
        aggregates=windows[names].to_numpy(dtype=float),
        recovered=np.ones(len(windows), dtype=bool),
        block=np.zeros((0, len(spec.sensors))),
    )
    store.commit_batch(
        BatchWrite(run=run, batch_id=RECOVERY_BATCH, results=results_frame(closed, spec.sensors))
    )
    cells = stored_cells(table, spec.sensors, lost)
    return RecoveryOutcome(closed.ids, seed, int(table.num_rows), by_version, cells)


def stored_cells(table: Any, sensors: Sequence[str], lost: LostRange) -> np.ndarray:
    """(lost rows, n) bool: which readings of the lost range the backup ``table`` (Arrow:
    seq, sensor, value) holds, NaN values not counted."""
    cells = np.zeros((max(lost.rows, 0), len(sensors)), dtype=bool)
    seq = table.column("seq").to_numpy(zero_copy_only=False).astype(np.int64)
    value = table.column("value").to_numpy(zero_copy_only=False).astype(float)
    names = table.column("sensor").to_numpy(zero_copy_only=False)
    column = pd.Categorical(names, categories=list(sensors)).codes.astype(int)  # -1: unknown
    row = seq - lost.first_row
    ok = ~np.isnan(value) & (column >= 0) & (row >= 0) & (row < cells.shape[0])
    cells[row[ok], column[ok]] = True
    return cells


def _positional(sensors: tuple[str, ...], prefix: str = "s") -> list[str]:
    # Sensor names may hold dots ("PM2.5") that Spark reads as struct access.
    return [f"{prefix}{i}" for i in range(len(sensors))]


def _rebuild_rows(
    spark: Any,
    table: Any,
    spec: StreamSpec,
    maps: Sequence[LinearMap],
    stored: tuple[str, ...],
    ranges: Sequence[tuple[int, int | None]] | None = None,
) -> Any:
    """Backup rows (long, Arrow) -> wide -> every sensor rebuilt (Spark DataFrame)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    columns = _positional(stored, "b")
    inputs = dict(zip(stored, columns, strict=True))
    outputs = [f"s{spec.sensors.index(s)}" for s in maps[0].sensors]
    long = spark.createDataFrame(table.to_pandas())
    wide = (
        long.groupBy("seq", "event_time")
        .pivot("sensor", list(stored))
        .agg(F.first("value"))
        .toDF("seq", "event_time", *columns)
    )
    fields = [T.StructField("seq", T.LongType()), T.StructField("event_time", T.TimestampType())]
    fields += [T.StructField(c, T.DoubleType()) for c in _positional(spec.sensors)]
    fields.append(T.StructField("complete", T.BooleanType()))
    fields.append(T.StructField("map", T.LongType()))
    order = ["seq", "event_time", *_positional(spec.sensors), "complete", "map"]

    def rebuild(frames: Any) -> Any:
        for pdf in frames:
            yield reconstruct_frame(pdf, maps, inputs, outputs, ranges, readings=inputs)[order]

    return wide.mapInPandas(rebuild, T.StructType(fields))


def _rows_by_map(rebuilt: Any) -> dict[int, int]:
    """Rebuilt rows per map index (rows no map could rebuild are not counted)."""
    from pyspark.sql import functions as F

    counts = rebuilt.filter(F.col("complete")).groupBy("map").count().collect()
    return {int(r["map"]): int(r["count"]) for r in counts}


def _aggregate_windows(spark: Any, rebuilt: Any, spec: StreamSpec, ids: np.ndarray) -> pd.DataFrame:
    """Aggregates of the windows ``ids`` (wide pandas: window_id, start, end, s0..).

    Windows are cut into chunks of consecutive windows, a few per core; every row
    goes to the chunks whose windows hold it (``explode``), and each chunk is
    aggregated window by window in ``applyInPandas``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    names = _positional(spec.sensors)
    if ids.size == 0:
        return pd.DataFrame(columns=["window_id", "window_start", "window_end", *names])
    w, step = spec.window, spec.slide
    first, last = int(ids[0]), int(ids[-1])
    per_chunk = max(1, -(-ids.size // (2 * spark.sparkContext.defaultParallelism)))
    rows_per_chunk = per_chunk * step
    seq = F.col("seq") - first * step
    lo = F.greatest(F.lit(0), F.ceil((seq - (per_chunk - 1) * step - w + 1) / rows_per_chunk))
    hi = F.least(F.lit((last - first) // per_chunk), F.floor(seq / rows_per_chunk))
    exploded = (
        rebuilt.filter(F.col("complete"))
        .withColumn("lo", lo.cast("long"))
        .withColumn("hi", hi.cast("long"))
        .filter(F.col("lo") <= F.col("hi"))  # sequence(5, 1) would count down
        .withColumn("chunk", F.explode(F.sequence("lo", "hi")))
        .drop("complete", "lo", "hi", "map")
    )
    schema = T.StructType(
        [
            T.StructField("window_id", T.LongType()),
            T.StructField("window_start", T.TimestampType()),
            T.StructField("window_end", T.TimestampType()),
        ]
        + [T.StructField(c, T.DoubleType()) for c in names]
    )
    params = spec.window_params

    def per_chunk_frame(pdf: pd.DataFrame) -> pd.DataFrame:
        c = int(pdf["chunk"].iloc[0])
        start = first + c * per_chunk
        return aggregate_windows_frame(pdf, start, min(last, start + per_chunk - 1), params, names)

    windows = exploded.groupBy("chunk").applyInPandas(per_chunk_frame, schema).toPandas()
    return windows.sort_values("window_id", ignore_index=True)


def _seed_from_tail(
    rebuilt: Any, spec: StreamSpec, lost: LostRange, inside: np.ndarray
) -> WindowState:
    """State for the restarted query: rebuilt rows of the windows that run past the range."""
    from pyspark.sql import functions as F

    next_window = int(inside[-1]) + 1 if inside.size else lost.first_window
    start = next_window * spec.slide
    tail = rebuilt.filter((F.col("seq") >= start) & F.col("complete")).drop("map").toPandas()
    tail = tail.rename(columns=dict(zip(_positional(spec.sensors), spec.sensors, strict=True)))
    have = set(tail["seq"].tolist())
    missing = [r for r in range(start, lost.last_row + 1) if r not in have]
    if missing:  # a window that needs a row nobody can rebuild is lost: skip past it
        next_window = max(next_window, max(missing) // spec.slide + 1)
    damaged = find_damaged_until(lost.last_row, next_window, spec.slide)
    return seed_state(tail, spec.sensors, next_window, spec.slide, damaged)


def stored_throughout(
    versions: Sequence[PlanVersion], lost: LostRange, mode: str
) -> tuple[str, ...]:
    """Sensors every version governing a row of ``lost`` backs up (in ``mode``)."""
    governing = [
        v
        for v in versions
        if v.first_seq <= lost.last_row and (v.last_seq is None or v.last_seq >= lost.first_row)
    ] or list(versions[-1:])
    sensors = governing[0].spec.sensors
    return tuple(s for s in sensors if all(s in v.spec.stored_sensors(mode) for v in governing))
