"""Recovery after a crash the window state survived: rebuild the lost micro-batch only.

A crash (``engine.live.failure``, kind ``"crash"``) takes the micro-batch in flight:
its input is gone, but the window state of the last committed batch is in the store
and the crashed batch's backup was written before the crash. Recovery reads that
backup, completes the batch's rows with the plan's linear map (the backed-up sensors
exact, the others rebuilt: the damaged-row path of ``advance_windows``), closes every
window those rows complete (``recovered`` results), and commits the batch under its
own id with them, so its backup rows are part of the store from then on. The
restarted query is seeded with the state after it: the windows still open hold the
rebuilt rows and are finished, as ``recovered``, by the live query.

A max/min plan's kept-readings sensors (``StreamSpec.kept_sensors``) are the exception:
their lost readings are left out of every window (``WindowState.left_out``), so each
window the crash touches takes the extreme of the readings it kept, the rows before
the stretch from the surviving state and the rows after it as they arrive. Only
here: a machine loss keeps no window state and rebuilds every sensor.

Only the crashed batch's rows (``m`` at most when the pipeline keeps the exposure:
``engine.live.exposure``) are rebuilt: every window is exact except those rows of
the rebuilt sensors, the crash contract's case. No Spark: one micro-batch.

With the out-of-order stage, readings the stage held back at the last commit die with
the crash as well (its snapshot keeps the backup set's readings alone): the rows they
belong to, from the first row the committed state does not hold complete (a gap, or
the rows past its last), are lost too.
They are completed the same way, from the backup the earlier batches wrote as the
readings arrived, and counted in the lost range, so a loss longer than the exposure
is reported under the range contract. A row whose backup reading had not arrived by
the crash cannot be completed: the windows holding it are lost, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from engine.backup import runs as backup_parquet
from engine.live.batch import WindowState, advance_windows, results_frame
from engine.live.failure import CrashedBatch
from engine.live.operator_state import unpack_state
from engine.live.records import BACKUP_COLUMNS, BatchWrite, VersionRecord
from engine.live.recovery import LostRange, find_damaged_until
from engine.live.spec import StreamSpec, check_mode
from engine.live.store import BackupStore

__all__ = ["CrashRecovery", "crash_lost_range", "in_flight_from", "recover_crash"]


@dataclass(frozen=True, eq=False)
class CrashRecovery:
    """What recovering a crashed batch produced."""

    lost: LostRange
    window_ids: np.ndarray  # windows the rebuilt rows closed at once
    seed: WindowState  # the restarted query's state (the rebuilt rows of open windows)
    rows_read: int  # backup rows of the crashed batch
    stored: tuple[str, ...]  # sensors the crashed batch backed up (exact after recovery)
    kept: tuple[str, ...] = ()  # sensors whose lost readings were left out of their windows


def crash_lost_range(
    crashed: CrashedBatch, state: WindowState, spec: StreamSpec, first_row: int | None = None
) -> LostRange:
    """The rows the crash lost (the crashed batch's, from ``first_row`` when readings of
    earlier rows were in flight: ``in_flight_from``), and the first window holding one."""
    w, step = spec.window, spec.slide
    first = crashed.first_row if first_row is None else min(first_row, crashed.first_row)
    first_holding = max(0, -(-(first - w + 1) // step))
    return LostRange(max(state.next_window, first_holding), first, crashed.last_row)


def in_flight_from(state: WindowState, before: int) -> int | None:
    """The first row before ``before`` the committed state does not hold complete: a row
    with a reading missing, or past its last row. The out-of-order stage held such a
    row's readings back at the commit (it releases whole windows, so usually the newest
    rows whole), and its snapshot keeps the backup set's readings alone: the others
    died with the crash. None when the state holds every row before ``before``."""
    held = state.start + state.buffered_rows  # the first row the state has not seen
    stop = min(state.buffered_rows, before - state.start)
    holes = np.flatnonzero(np.isnan(state.values[: max(stop, 0)]).any(axis=1))
    first = int(state.start + holes[0]) if holes.size else held
    return first if first < before else None


def recover_crash(
    store: BackupStore,
    spec: StreamSpec,
    mode: str,
    crashed: CrashedBatch,
    version: VersionRecord | None = None,
) -> CrashRecovery:
    """Rebuild ``crashed``'s rows from its backup onto the surviving window state.

    ``spec`` is the plan version that governed the batch. Commits the batch (its
    backup rows, the windows it closes) under ``(crashed.run, crashed.batch_id)``, and
    ``version``, the plan version the batch started (a queued re-plan took effect
    there), with it, as the batch's commit would have.
    Rows the committed state holds incomplete before the batch (readings in flight in
    the out-of-order stage) are lost with it and rebuilt from the earlier batches'
    backup. A row without a whole backup (mode ``none``, or no backed-up sensor) cannot
    be rebuilt: the windows holding it are lost and the state skips past them.
    """
    check_mode(mode)
    state = _surviving_state(store, crashed.run, spec)
    rows = _batch_backup(store, crashed)
    own = len(rows)  # the crashed batch's backup rows (committed under its id below)
    present = set(rows["sensor"])  # sensors backed up throughout the lost rows
    # readings in flight at the last commit died with the crash too: their rows are
    # lost and rebuilt, from the backup the earlier batches wrote as they arrived
    flight = in_flight_from(state, crashed.first_row)
    if flight is not None and crashed.batch_id >= 0:
        earlier = store.read_backup(flight, crashed.first_row - 1).to_pandas()
        earlier["arrival_time"] = earlier["event_time"]
        rows = pd.concat([earlier[list(_EMPTY)], rows[list(_EMPTY)]], ignore_index=True)
        present &= set(earlier["sensor"])  # a full crashed batch: not the rows before it
    lost = crash_lost_range(crashed, state, spec, flight)
    if lost.rows == 0:
        return CrashRecovery(lost, np.zeros(0, dtype=np.int64), state, 0, ())
    damaged = replace(state, damaged_until=max(state.damaged_until, lost.last_row))
    repair = spec.recovery_map(mode) if mode != "none" else None
    kept = spec.kept_sensors if mode == "approx" else ()
    # a batch over the exposure or after a recovery stored sensors beyond the set
    beyond = ~rows["sensor"].isin(list(spec.stored_sensors(mode))).to_numpy()
    advance = advance_windows(damaged, rows, spec.window_params, repair, kept, stored=beyond)
    seed, closed = advance.state, advance.closed
    if _holes(seed, lost.last_row):  # rows no backup can complete: their windows are lost
        seed = _past(seed, lost.last_row, spec)
    store.commit_batch(
        BatchWrite(
            run=crashed.run,
            batch_id=crashed.batch_id,
            backup_rows=own,
            backup_bytes=crashed.backup_bytes,
            results=results_frame(closed, spec.sensors),
            max_seq=lost.last_row,
            version=version,
        )
    )
    stored = tuple(s for s in spec.sensors if s in present)
    left_out = tuple(s for s in kept if s not in present)
    return CrashRecovery(lost, closed.ids, seed, len(rows), stored, left_out)


def _surviving_state(store: BackupStore, run: int, spec: StreamSpec) -> WindowState:
    """The window state of ``run``'s last committed batch (or its seed, or empty)."""
    blob = store.load_state(run)
    if blob is None:
        return WindowState.empty(len(spec.sensors), 0, spec.slide)
    return unpack_state(blob, None)  # a disorder stage is restarted by the caller


def _batch_backup(store: BackupStore, crashed: CrashedBatch) -> pd.DataFrame:
    """The crashed batch's backup rows (``BACKUP_COLUMNS``), read from its Parquet directory."""
    if crashed.backup_rows == 0 or crashed.batch_id < 0:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _EMPTY.items()})
    root = backup_parquet.local_root(store.backup_uri)
    files = backup_parquet.batch_files(root, [(crashed.run, crashed.batch_id)])
    rows = backup_parquet.read_rows(root, files).select(list(BACKUP_COLUMNS)).to_pandas()
    rows["arrival_time"] = rows["event_time"]  # read back now: never late
    return rows


_EMPTY = {
    "seq": "int64",
    "event_time": "datetime64[ns]",
    "sensor": "object",
    "value": "float64",
    "arrival_time": "datetime64[ns]",
}


def _holes(state: WindowState, last_row: int) -> bool:
    """Does the state hold a row up to ``last_row`` with a reading still missing, or not
    hold one at all (past its last row: no backup reading of it, e.g. in mode ``none``)?"""
    if last_row >= state.start + state.buffered_rows:  # its windows would wait for ever
        return True
    stop = min(state.buffered_rows, last_row - state.start + 1)
    return stop > 0 and bool(np.isnan(state.values[:stop]).any())


def _past(state: WindowState, last_row: int, spec: StreamSpec) -> WindowState:
    """An empty state at the first window that starts after ``last_row`` (the rows
    before it stale: ``find_damaged_until``)."""
    next_window = last_row // spec.slide + 1
    empty = WindowState.empty(len(spec.sensors), next_window, spec.slide)
    return replace(empty, damaged_until=find_damaged_until(last_row, next_window, spec.slide))
