"""Pure functions of the recovery job: rebuild lost rows, aggregate them, seed the restart.

``reconstruct_frame`` (the job's ``mapInPandas``) rebuilds every sensor from
the backed-up ones, each row with the plan version that governed it;
``aggregate_windows_frame`` (its ``applyInPandas``) turns wide rows into window
aggregates; ``seed_state`` hands the restarted query the rebuilt rows of the
windows still open. No Spark, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from engine.errors import ParameterError
from engine.live.batch import WindowParams, WindowState
from engine.model.linear import LinearMap
from engine.windows import window_aggregates

__all__ = ["aggregate_windows_frame", "reconstruct_frame", "seed_state"]


def reconstruct_frame(
    pdf: pd.DataFrame,
    maps: Sequence[LinearMap],
    inputs: Mapping[str, str],
    outputs: Sequence[str],
    ranges: Sequence[tuple[int, int | None]] | None = None,
    readings: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Rebuild all sensors for the recovery job's ``mapInPandas``.

    ``pdf`` has ``seq``, ``event_time`` and one column per backed-up sensor
    (``inputs`` maps a sensor to its column). ``maps`` are the plans whose
    backups the range may hold, newest first. With ``ranges`` (the first and
    last ``seq`` each map's plan version governed, last None while in force),
    a row is rebuilt with the map that governed it. A row its governing map
    cannot rebuild (no version covers it, or a reading is missing, e.g. one that
    arrived out of order under another plan) falls back to the first map whose
    backup sensors it all holds. The result has ``seq``, ``event_time``, one
    column per ``maps[0].sensors`` named by ``outputs``, ``complete`` (False
    where no map's backup is whole; values NaN) and ``map``, the index of the
    map used (-1 if none). ``readings`` names the column of any sensor whose own
    reading the backup may hold beyond its plan's set (a micro-batch over the
    exposure, or after a recovery, backs up every sensor): in a row a map rebuilt,
    such a reading replaces the rebuilt value, exactly as it was read.
    """
    first = maps[0]
    if len(outputs) != len(first.sensors):
        raise ParameterError(f"expected {len(first.sensors)} output columns, got {len(outputs)}")
    if ranges is not None and len(ranges) != len(maps):
        raise ParameterError(f"expected {len(maps)} version ranges, got {len(ranges)}")
    seq = pdf["seq"].to_numpy(dtype=np.int64)
    rebuilt = np.full((len(pdf), len(first.sensors)), np.nan)
    used = np.full(len(pdf), -1, dtype=np.int64)
    passes = [True, False] if ranges is not None else [False]
    for governed_only in passes:
        for i, lm in enumerate(maps):
            absent = [s for s in lm.backup if s not in inputs]
            if absent or set(lm.sensors) != set(first.sensors):
                raise ParameterError(
                    f"recovery map does not fit the frame: sensors {lm.sensors!r}, "
                    f"backup columns missing for {absent!r}"
                )
            backup = pdf[[inputs[s] for s in lm.backup]].to_numpy(dtype=float)
            ok = (used < 0) & ~np.isnan(backup).any(axis=1)
            if governed_only and ranges is not None:
                lo, hi = ranges[i]
                ok &= (seq >= lo) & (seq <= (np.iinfo(np.int64).max if hi is None else hi))
            if ok.any():
                order = [lm.sensors.index(s) for s in first.sensors]
                rebuilt[ok] = lm.apply(backup[ok])[:, order]
                used[ok] = i
    for j, sensor in enumerate(first.sensors):
        column = (readings or {}).get(sensor)
        if column is not None:
            read = pdf[column].to_numpy(dtype=float)
            exact = (used >= 0) & ~np.isnan(read)
            rebuilt[exact, j] = read[exact]
    out = pd.DataFrame(rebuilt, columns=list(outputs), index=pdf.index)
    out.insert(0, "event_time", pdf["event_time"])
    out.insert(0, "seq", pdf["seq"].astype(np.int64))
    out["complete"] = used >= 0
    out["map"] = used
    return out


def aggregate_windows_frame(
    pdf: pd.DataFrame,
    first_id: int,
    last_id: int,
    params: WindowParams,
    columns: Sequence[str],
) -> pd.DataFrame:
    """Aggregate windows ``first_id .. last_id`` from wide rows (the recovery job's
    ``applyInPandas``, one call per chunk of consecutive windows).

    ``pdf`` holds ``seq``, ``event_time`` and ``columns`` (one per sensor, in
    ``params.sensors`` order), in any order, possibly with repeated rows. A window
    with a missing or NaN row cannot be recovered and is left out. Returns
    ``window_id``, ``window_start``, ``window_end`` and ``columns``.
    """
    w, step = params.window, params.slide
    rows = pdf.sort_values("seq").drop_duplicates("seq")
    seq = rows["seq"].to_numpy(dtype=np.int64)
    base = int(seq[0]) if seq.size else 0
    span = int(seq[-1]) - base + 1 if seq.size else 0
    values = np.full((span, len(columns)), np.nan)
    times = np.full(span, np.datetime64("NaT"), dtype="datetime64[ns]")
    values[seq - base] = rows[list(columns)].to_numpy(dtype=float)
    times[seq - base] = rows["event_time"].to_numpy(dtype="datetime64[ns]")
    ids, aggs = [], []
    for j in range(first_id, last_id + 1):
        lo = j * step - base
        if lo < 0 or lo + w > span or np.isnan(values[lo : lo + w]).any():
            continue
        ids.append(j)
        aggs.append(window_aggregates(values[lo : lo + w], w, w, params.aggregate)[0])
    firsts = np.asarray(ids, dtype=np.int64) * step - base
    out = pd.DataFrame(
        np.vstack(aggs) if aggs else np.zeros((0, len(columns))), columns=list(columns)
    )
    out.insert(0, "window_end", times[firsts + w - 1] if ids else times[:0])
    out.insert(0, "window_start", times[firsts] if ids else times[:0])
    out.insert(0, "window_id", np.asarray(ids, dtype=np.int64))
    return out


def seed_state(
    rows: pd.DataFrame,
    sensors: Sequence[str],
    next_window: int,
    slide: int,
    damaged_until: int,
) -> WindowState:
    """Window state for a restarted query, holding reconstructed rows.

    ``rows`` is wide: ``seq``, ``event_time`` and one column per sensor; rows
    before ``next_window * slide`` are ignored. Every given row is marked filled.
    """
    start = next_window * slide
    rows = rows[rows["seq"] >= start].sort_values("seq")
    end = int(rows["seq"].max()) + 1 if len(rows) else start
    n = len(sensors)
    values = np.full((end - start, n), np.nan)
    times = np.full(end - start, np.datetime64("NaT"), dtype="datetime64[ns]")
    filled = np.zeros(end - start, dtype=bool)
    rel = rows["seq"].to_numpy(dtype=np.int64) - start
    values[rel] = rows[list(sensors)].to_numpy(dtype=float)
    times[rel] = rows["event_time"].to_numpy(dtype="datetime64[ns]")
    filled[rel] = True
    return WindowState(start, next_window, values, times, filled, damaged_until)
