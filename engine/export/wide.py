"""Recovery's inner loop in numpy: long backup rows to a wide matrix, and every sensor rebuilt.

At 1,056 sensors and a 12-week range (343,000 backup readings, 2,016 time
steps) pandas' ``pivot_table`` and ``LinearMap.apply``'s column scatter into a
row-major result were most of ``recover_dataset`` after the config; both are
replaced here, and ``tests/unit/test_wide.py`` checks them against those
reference routines. ``overlay`` writes readings the backup holds of rebuilt sensors over
their rebuilt values; ``infinite_readings`` makes a backup reading that cannot be
(inf) missing, so its time step is not rebuilt; ``add_empty_steps`` keeps the time steps
whose every reading is missing, and ``say_uncovered`` says what of an asked range the
steps leave out.
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from engine.model.linear import LinearMap


def widen(long: pa.Table | None, sensors: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Long readings to wide: ``times`` (T,) ascending and ``values`` (T, m), NaN where none.

    ``long`` has columns ``event_time``, ``sensor`` and ``value`` (None: no
    rows); ``sensors`` (m) are the columns wanted, in that order. The result is
    ``long.to_pandas().pivot_table(index="event_time", columns="sensor",
    values="value", aggfunc="last")`` reindexed to ``sensors``: a time is a row
    when any sensor (wanted or not) has a non-null reading then, and a (time,
    sensor) read twice keeps the last non-null reading in ``long``'s order
    (``read_backup_arrow`` fixes none, as ``read_backup``'s sort fixed none
    among ties: two different readings of one sensor at one time are
    ambiguous in the backup itself).
    """
    if long is None or long.num_rows == 0:
        return np.array([], dtype="datetime64[us]"), np.full((0, len(sensors)), np.nan)
    value = long["value"].to_numpy().astype(float)  # null -> NaN
    times = long["event_time"].to_numpy()
    sensor = long["sensor"].combine_chunks().dictionary_encode()
    code = sensor.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    lookup = pd.Index(sensors).get_indexer(sensor.dictionary.to_pylist())
    known = ~np.isnan(value) & ~np.isnat(times) & (code >= 0)  # pandas drops null keys too
    times, row = np.unique(times[known], return_inverse=True)
    column = lookup[code[known]]
    wanted = column >= 0
    flat = row[wanted] * len(sensors) + column[wanted]
    value = value[known][wanted]
    if flat.size and np.bincount(flat).max() > 1:  # read twice: keep the last
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]
        flat, value = flat[last], value[last]
    wide = np.full((times.size, len(sensors)), np.nan)
    wide.reshape(-1)[flat] = value
    return times, wide


def conflicting_readings(long: pa.Table | None) -> str | None:
    """One sentence when some (time, sensor) holds two different readings in ``long``
    (``widen`` keeps the last; a replayed batch's identical copy is no conflict), else None."""
    if long is None or long.num_rows == 0:
        return None
    spread = (
        long.filter(pc.is_valid(long["value"]))
        .group_by(["event_time", "sensor"])
        .aggregate([("value", "min"), ("value", "max")])
    )
    differ = spread.filter(pc.not_equal(spread["value_min"], spread["value_max"]))
    if differ.num_rows == 0:
        return None
    first = differ.sort_by([("event_time", "ascending"), ("sensor", "ascending")]).slice(0, 1)
    sensor, when = first["sensor"][0].as_py(), first["event_time"][0].as_py()
    return (
        f"{differ.num_rows} (time, sensor) pair(s) hold two different readings in the backup "
        f"(e.g. {sensor} at {when}): the last one read was used; two committed batches "
        "disagree, so check what else wrote to the backup"
    )


def rebuild(lm: LinearMap, backup_values: np.ndarray) -> np.ndarray:
    """``lm.apply(backup_values)``, (T, m) -> (T, n), laid out column by column.

    The result is a Fortran-ordered view, so each sensor's column is contiguous:
    filling it sensor by sensor is a block copy (``apply`` scatters ``n``
    strided columns into a row-major array), and a Parquet writer takes the
    columns without copying them. Rebuilt values equal ``apply``'s to rounding
    (the product is computed transposed).
    """
    x = np.asarray(backup_values, dtype=float)
    out = np.empty((len(lm.sensors), x.shape[0]))
    position = {name: i for i, name in enumerate(lm.sensors)}
    out[[position[s] for s in lm.backup]] = x.T
    out[[position[s] for s in lm.targets]] = lm.coef @ x.T + lm.intercept[:, None]
    return out.T


def overlay(
    values: np.ndarray, sensors: tuple[str, ...], readings: np.ndarray, columns: tuple[str, ...]
) -> tuple[np.ndarray, int]:
    """``values`` (T, n) of ``sensors`` with every reading of ``readings`` (T, k) of
    ``columns`` (a subset of ``sensors``) written over it, NaN left out; and how many.

    A rebuilt sensor's reading the backup holds anyway (a micro-batch over the plan's
    exposure backs up every sensor) is the truth: it replaces the rebuilt value.
    """
    out = np.array(values, order="F")
    index = {s: i for i, s in enumerate(sensors)}
    found = ~np.isnan(readings)
    for j, sensor in enumerate(columns):
        out[found[:, j], index[sensor]] = readings[found[:, j], j]
    return out, int(found.sum())


def infinite_readings(
    wide: np.ndarray, times: np.ndarray, sensors: tuple[str, ...], backup: bool = True
) -> str:
    """Make ``wide``'s infinite readings missing, in place; a warning naming the first, or
    "". A sensor cannot read inf. A backup sensor's (``backup``): its time step is not
    rebuilt, like one with a missing reading, instead of rebuilding every sensor there as
    inf; any other (a reading written as read): written empty, never as inf."""
    bad = np.isinf(wide)
    if not bad.any():
        return ""
    row, col = np.argwhere(bad)[0]
    wide[bad] = np.nan
    first = f"(first {sensors[col]} at {pd.Timestamp(times[row]).isoformat()})"
    if not backup:
        return (
            f"{int(bad.sum())} reading(s) written as read are infinite {first}: read as "
            "missing (a sensor the plan rebuilds keeps its rebuilt value there, a sensor "
            "outside the plan is written empty)"
        )
    return (
        f"{int(bad.sum())} backup reading(s) are infinite {first}: their time steps are not "
        "rebuilt (the sensors rebuilt there are left empty)"
    )


def add_empty_steps(
    long: pa.Table, times: np.ndarray, wide: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``widen``'s steps and readings, plus the time steps whose every reading is missing
    (null or NaN): the backup recorded them, so they are written (nothing rebuilt there)
    and counted among the incomplete steps, not left out of the output unsaid."""
    every = np.unique(pc.drop_null(long["event_time"]).to_numpy())
    if every.size == times.size:
        return times, wide
    out = np.full((every.size, wide.shape[1]), np.nan)
    out[np.searchsorted(every, times)] = wide
    return every, out


def say_uncovered(
    times: np.ndarray, start: datetime | None, end: datetime | None, interval_s: float
) -> list[str]:
    """What of ``[start, end)`` the written time steps ``times`` (UTC, ascending) leave
    out, at the plan's interval: the start and the end of the range when the first or
    last step is more than one interval inside it, and the steps missing between them
    (a stretch the stream had no reading of, or lost). One sentence each, or none."""
    if not times.size or not interval_s > 0:
        return []
    step = pd.Timedelta(seconds=interval_s)
    first, last = pd.Timestamp(times[0], tz="UTC"), pd.Timestamp(times[-1], tz="UTC")
    said = []
    # steps of the plan's clock from --from up to the first reading, and after the last
    # reading up to --to (exclusive): a step at --to itself is not in the range
    before = 0 if start is None else int((first - pd.Timestamp(start)) // step)
    after = 0 if end is None else math.ceil((pd.Timestamp(end) - last) / step) - 1
    if before >= 1:
        said.append(
            f"the backup's first reading in the range is at {first.isoformat()}: about "
            f"{before:,} time step(s) after --from hold none"
        )
    if after >= 1:
        said.append(
            f"the backup's last reading in the range is at {last.isoformat()}: about "
            f"{after:,} time step(s) before --to hold none"
        )
    gaps = np.diff(times.astype("datetime64[ns]").astype(np.int64)).astype(float) / 1e9
    holes = gaps > 1.5 * interval_s
    if holes.any():
        missing = int(np.round(gaps[holes] / interval_s).sum() - holes.sum())
        k = int(np.argmax(gaps))
        said.append(
            f"about {missing:,} time step(s) inside the range hold no backup reading (the "
            f"longest stretch between {pd.Timestamp(times[k], tz='UTC').isoformat()} and "
            f"{pd.Timestamp(times[k + 1], tz='UTC').isoformat()}): the stream had none "
            "there, or they are lost; they are not in the output"
        )
    return said
