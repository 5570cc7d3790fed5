"""The production job's shadow check under the crash contract, on the driver.

A crash plan (``exposure`` m) promises that a failure losing m consecutive rows of
the rebuilt sensors leaves a window within eps, for all but ``delta`` of the
``w + m - 1`` failure positions touching it. The partial aggregates the job keeps
cannot say that (they hold a window's aggregate, not its rows in order), so for a
crash plan the job also keeps the open windows' rows: each micro-batch's readings,
pivoted on the executors to one row per event time with a column per sensor
(``transforms.wide_readings``), are collected to the driver and merged into
``WindowState.rows``; when a window closes, each of its ``w`` rows is rebuilt as the
plan version its batch was backed up under rebuilds it (``VERSION``: that version's set
exact, its map for the rest, its kept-readings sensors left out,
``engine.aggregates.leave_out``), so a window that straddles a version change is scored
as a failure there would really lose it, and scored by
``engine.planning.feedback.window_misses``, the same quantity the live pipeline's
controller gets. Rows no open window needs are then dropped.

What it costs per micro-batch: one more Spark job (a scan and a pivot of the batch's
readings), the batch's ``times x sensors`` numbers collected to the driver and kept
until their last window closes (about ``window + slide + lateness`` time steps x
sensors in the state, written with it after every batch), and on the driver
``O(closed windows x (w + m - 1) x sensors)`` for the scores (max/min:
``x w`` more). A crash plan's batches hold at most m rows (a batch over that backs
up every sensor), so the collected rows stay small. The rows of a batch over m are
marked ``WHOLE``: a failure that loses them recovers them from the backup exactly, and
the check scores them so (scored as rebuilt, they overstated the misses).

A window is measured for a sensor when the window has exactly ``w`` rows and the
sensor's readings, and the backup readings that rebuild it, are all numbers there;
otherwise its miss is NaN and the monitor does not count it (a window with a time
step missing cannot say which m rows a failure would lose).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import ParameterError
from engine.export import BackupConfig
from engine.job.partials import WindowState
from engine.model.linear import LinearMap
from engine.planning.feedback import (
    leave_out_under_versions,
    rebuild_under_versions,
    window_misses,
)

TIME = "event_us"
WHOLE = "backed_up_whole"  # 1.0 at a time step whose batch backed up every sensor, else 0.0
# the plan version of the batch that brought the time step; -1 where batches under two
# versions (or a job from before the column) brought parts of it: which set backed it up
# is not known, so the online controller does not measure its windows
VERSION = "plan_version"


def check_closed(
    state: WindowState,
    batch: pd.DataFrame,
    starts_us: np.ndarray,
    window_us: int,
    config: BackupConfig,
    lm: LinearMap,
    cutoff_us: int,
    versions: Mapping[int, tuple[LinearMap, BackupConfig]] | None = None,
) -> tuple[np.ndarray, pd.DataFrame]:
    """The crash misses (``crash_misses``) of the windows starting at ``starts_us``, which
    the merge that moved ``state``'s watermark closed, and every row merged (the closed
    windows' included, for the online controller); ``batch``'s rows (``collect_rows``)
    join ``state.rows`` first, and only the rows an open window needs stay there."""
    rows = keep_rows(state, batch, config.sensors, window_us, cutoff_us)
    return crash_misses(rows, starts_us, window_us, config, lm, versions), rows


def keep_rows(
    state: WindowState, batch: pd.DataFrame, sensors: Sequence[str], window_us: int, cutoff_us: int
) -> pd.DataFrame:
    """``batch``'s rows merged into ``state.rows``: every row merged is returned (the
    closed windows' included), and only those an open window needs stay in the state."""
    rows = merge_rows(state.rows, batch, sensors, cutoff_us)
    state.rows = open_rows(rows, state.watermark_us, window_us)  # replaced whole
    return rows


def collect_rows(
    readings: Any, sensors: Sequence[str], whole: bool = False, version: int = -1
) -> pd.DataFrame:
    """The batch's readings, one row per event time (``TIME`` + ``sensors`` + ``WHOLE`` +
    ``VERSION``), collected; ``whole``: the batch backed up every sensor (it held more
    than m rows); ``version``: the plan version the batch was backed up under."""
    from engine.job.transforms import wide_readings

    frame = wide_readings(readings, sensors).toPandas().reindex(columns=[TIME, *sensors])
    frame[WHOLE] = 1.0 if whole else 0.0
    frame[VERSION] = float(version)
    return frame


def merge_rows(
    kept: pd.DataFrame, batch: pd.DataFrame, sensors: Sequence[str], cutoff_us: int
) -> pd.DataFrame:
    """``kept`` and ``batch`` rows as one, sorted by time: a time step in both takes each
    sensor's reading from the batch where it has one, and is ``WHOLE`` only when every
    part of it was (rows kept by a job before the column are not), and has a ``VERSION``
    only when every part of it came under that one. Rows at or past ``cutoff_us``
    (stamped in the future, as the partials drop them) are left out."""
    columns = [TIME, *sensors, WHOLE, VERSION]
    parts = [f.reindex(columns=columns) for f in (kept, batch) if not f.columns.empty]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == TIME else float) for c in columns})
    both = pd.concat(parts, ignore_index=True)
    both = both[both[TIME].notna() & (both[TIME] < cutoff_us)]
    both[TIME] = both[TIME].astype("int64")
    both[WHOLE] = both[WHOLE].fillna(0.0)
    both[VERSION] = both[VERSION].fillna(-1.0)
    steps = both.groupby(TIME, sort=True)
    merged = steps[list(sensors)].last()  # last skips NaN: the latest number of each
    merged[WHOLE] = steps[WHOLE].min()
    first, last = steps[VERSION].min(), steps[VERSION].max()
    merged[VERSION] = first.where(first == last, -1.0)
    return merged.reset_index().reindex(columns=columns).astype(dict.fromkeys(columns[1:], float))


def open_rows(rows: pd.DataFrame, watermark_us: int, window_us: int) -> pd.DataFrame:
    """The rows an open window still needs: a window not closed ends after the
    watermark, so it starts after ``watermark - window``."""
    return rows[rows[TIME] > watermark_us - window_us].reset_index(drop=True)


def crash_misses(
    rows: pd.DataFrame,
    starts_us: np.ndarray,
    window_us: int,
    config: BackupConfig,
    lm: LinearMap,
    versions: Mapping[int, tuple[LinearMap, BackupConfig]] | None = None,
) -> np.ndarray:
    """(W, n) each closed window's crash-contract miss in [0, 1], ``config.sensors`` order.

    Parameters
    ----------
    rows : ``TIME`` + ``config.sensors`` (+ ``WHOLE``), sorted by time: every row of the
        windows; a ``WHOLE`` row is recovered exactly (its batch backed up every sensor).
    starts_us : (W,) the windows' starts, epoch microseconds.
    window_us : the window's length in microseconds (``config.query.window`` rows).
    lm : the version's reconstruction map.
    versions : ``{version: (map, config)}`` of the plan versions rows were backed up
        under (``VERSION``): each row is lost and rebuilt as its own version would (its
        backup set exact, its targets from its map, its kept readings left out); a row
        of no version given (-1: two versions brought it) is scored under ``lm``.

    A sensor backed up in every row of a window misses 0 there (recovered exactly); NaN
    where not measured (see the module).
    """
    query, sensors = config.query, list(config.sensors)
    w, m, n = query.window, query.exposure, len(sensors)
    if m is None:
        raise ParameterError("the crash check needs a plan with an exposure, got none")
    out = np.full((len(starts_us), n), np.nan)
    times = rows[TIME].to_numpy(dtype=np.int64)
    starts = np.asarray(starts_us, dtype=np.int64)
    lo = np.searchsorted(times, starts, side="left")
    whole = np.searchsorted(times, starts + window_us, side="left") - lo == w
    if not whole.any():
        return out
    take = (lo[whole][:, None] + np.arange(w)).ravel()
    truth = rows[sensors].to_numpy(dtype=float)[take]  # (count * w, n), window after window
    given = dict(versions or {})
    plans = [(lm, config), *given.values()]
    version = rows[VERSION].to_numpy(dtype=float)[take] if VERSION in rows else None
    group = np.zeros(len(take), dtype=int)  # 0: the version in force (``lm``)
    if version is not None:
        for k, number in enumerate(given, start=1):
            group[version == number] = k
    rebuilt, _, _ = rebuild_under_versions(
        truth, group, [(lm_k, c.backup_sensors) for lm_k, c in plans], sensors
    )
    kept = [c.kept_readings for _, c in plans]
    leave_out_under_versions(rebuilt, group, kept, sensors, query.aggregate)
    if WHOLE in rows:  # a batch over the exposure backed up every sensor: a loss there is exact
        whole_rows = rows[WHOLE].to_numpy(dtype=float)[take] > 0
        rebuilt[whole_rows] = truth[whole_rows]
    known = np.isfinite(truth) & ~np.isnan(rebuilt)
    count = int(whole.sum())
    misses = window_misses(
        np.where(known, truth, 0.0),
        np.where(known, rebuilt, 0.0),
        count,
        w,
        w,  # the windows' rows laid end to end: window k starts at row k * w
        query.aggregate,
        config.eps_vector(),
        m,
    )
    measured = known.reshape(count, w, n).all(axis=1)
    out[whole] = np.where(measured, misses, np.nan)
    return out


def window_versions(rows: pd.DataFrame, starts_us: np.ndarray, window_us: int) -> np.ndarray:
    """(W,) each window's oldest plan version among its rows: the record its crash misses
    belong to (a version is judged on windows read under it alone); -1 when a row of it
    has no single version (``VERSION`` -1) or it has no row."""
    times = rows[TIME].to_numpy(dtype=np.int64)
    version = rows[VERSION].to_numpy(dtype=float) if VERSION in rows else np.full(len(rows), -1.0)
    starts = np.asarray(starts_us, dtype=np.int64)
    lo = np.searchsorted(times, starts, side="left")
    hi = np.searchsorted(times, starts + window_us, side="left")
    out = np.full(len(starts), -1, dtype=np.int64)
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        part = version[a:b]
        if part.size and (part >= 0).all():
            out[i] = int(part.min())
    return out


def shadow_contract(
    misses: np.ndarray | None, config: BackupConfig, older: int = 0
) -> dict[str, object]:
    """The ``shadow`` metrics' words on what the monitor measured: ``contract`` (range:
    whole windows rebuilt; crash: m-row losses) and, for a crash plan, its rebuilt
    sensors' measured windows (``crash_windows``, (window, sensor) pairs), their missed
    fractions summed (``crash_misses``), the rate (``crash_miss_rate``) and the closed
    windows left out as an older version's record (``crash_windows_older_version``)."""
    if misses is None:
        return {"contract": "range"}
    rebuilt = ~np.isin(config.sensors, list(config.backup_sensors))
    found = misses[:, rebuilt]
    measured = np.isfinite(found)
    windows, missed = int(measured.sum()), float(found[measured].sum())
    return {
        "contract": "crash",
        "exposure_rows": config.query.exposure,
        "crash_windows": windows,
        "crash_misses": round(missed, 6),
        "crash_miss_rate": missed / windows if windows else None,
        "crash_windows_older_version": int(older),
    }
