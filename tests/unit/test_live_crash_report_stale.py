"""Readings of rows between a skipped lost range and the restarted query's first row are
stale (dropped with the windows given up), not late.

When no backup can complete a lost row (mode ``none``; a crash whose batch has no whole
backup), the restarted query's state starts at the next slide boundary past it; its
``damaged_until`` stayed at the last lost row, so the readings of the rows between,
which arrive on time after the restart, went to the ``late`` table and counter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.live.batch import WindowState, advance_windows, results_frame
from engine.live.crash import recover_crash
from engine.live.failure import CrashedBatch
from engine.live.operator_state import pack_state
from engine.live.records import BatchWrite
from engine.live.recovery import LostRange, find_damaged_until, recover_lost_range
from engine.live.spec import StreamSpec
from engine.live.store import BackupStore
from engine.query import WindowQuery
from tests.helpers import fit_map

SENSORS = ("a", "b")
W, L = 8, 4  # sliding windows of 8 rows, every 4


def history(rows: int = 40) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(rows, len(SENSORS)))


def readings(x: np.ndarray, rows: range) -> pd.DataFrame:
    t0 = np.datetime64("2024-01-01T00:00", "ns")
    out = [(r, t0 + np.timedelta64(r, "h"), s, float(x[r, SENSORS.index(s)]))
           for r in rows for s in SENSORS]  # fmt: skip
    frame = pd.DataFrame(out, columns=["seq", "event_time", "sensor", "value"])
    frame["arrival_time"] = frame["event_time"]
    return frame


def make_spec(x: np.ndarray) -> StreamSpec:
    query = WindowQuery(5.0, 0.05, W, slide=L, aggregate="avg")
    return StreamSpec(SENSORS, ("a",), fit_map(x, SENSORS, ("a",)), query)


def commit_rows_0_to_9(store: BackupStore, spec: StreamSpec, x: np.ndarray) -> None:
    """Run 0's batch 0: rows 0-9 read and committed, the state before the crashed batch."""
    adv = advance_windows(WindowState.empty(2, 0, L), readings(x, range(10)), spec.window_params)
    store.commit_batch(BatchWrite(run=0, batch_id=0, results=results_frame(adv.closed, SENSORS),
                                  state=pack_state(adv.state, None), max_seq=9))  # fmt: skip


def test_mode_none_drops_the_rows_before_its_restart_as_stale() -> None:
    """A machine loss at row 13 in mode none: windows 2-3 (rows 8-19) are given up, the
    restart begins at window 4 (row 16); rows 14-15 belong to given-up windows only."""
    x = history()
    spec = make_spec(x)
    out = recover_lost_range(None, None, spec, "none", LostRange(2, 8, 13), run=0)  # type: ignore[arg-type]
    assert (out.seed.start, out.seed.next_window, out.seed.damaged_until) == (16, 4, 15)
    adv = advance_windows(out.seed, readings(x, range(14, 24)), spec.window_params)
    assert adv.late.empty and adv.stale == 2 * len(SENSORS)
    assert adv.closed.ids.tolist() == [4]


def test_a_crash_no_backup_completes_drops_the_rows_before_its_restart_as_stale(
    tmp_path: Path,
) -> None:
    """Mode none, a crash in the batch of rows 10-13 (window 1, rows 4-11, was open): no
    backup completes them, the state skips to window 4 (row 16); rows 14-15 arriving after
    the restart are stale."""
    x = history()
    spec = make_spec(x)
    with BackupStore(tmp_path / "s.duckdb") as store:
        commit_rows_0_to_9(store, spec, x)
        out = recover_crash(store, spec, "none", CrashedBatch(0, 1, 10, 13, 0))
    assert out.seed.start == 16 and out.seed.damaged_until == 15
    after = advance_windows(out.seed, readings(x, range(14, 24)), spec.window_params)
    assert after.late.empty and after.stale == 2 * len(SENSORS)


@pytest.mark.parametrize(
    ("last_row", "next_window", "want"),
    [
        (13, 4, 15),  # skipped to row 16: rows 14-15 given up with the lost windows
        (13, 2, 13),  # the seed holds rebuilt rows from row 8: the last lost row
        (15, 4, 15),  # the lost range ends at the boundary: nothing skipped
    ],
)
def test_damaged_until_reaches_the_row_before_a_skipped_restart(
    last_row: int, next_window: int, want: int
) -> None:
    assert find_damaged_until(last_row, next_window, L) == want


@pytest.mark.parametrize(
    ("mode", "backed_up", "recovered"),
    [
        ("none", range(0), []),  # mode none backs nothing up: windows 1-3 lost
        ("approx", range(10, 13), [1]),  # a's reading of row 13 was on its way: 2-3 lost
    ],
)
def test_a_crash_whose_last_rows_have_no_backup_leaves_a_state_that_closes_windows(
    tmp_path: Path, mode: str, backed_up: range, recovered: list[int]
) -> None:
    """The crashed batch (rows 10-13) left no backup reading of its last rows: the state
    held a window open on rows it can never get, and the restarted query closed no window
    again. It skips past them instead: the windows holding row 13 are lost, window 4 on
    closes."""
    from tests.helpers import write_backup_batch

    x = history()
    spec = make_spec(x)
    with BackupStore(tmp_path / "s.duckdb") as store:
        commit_rows_0_to_9(store, spec, x)
        backup = readings(x, backed_up)
        backup = backup[backup["sensor"] == "a"]
        nbytes = write_backup_batch(store.batch_uri(0, 1), backup) if len(backup) else 0
        out = recover_crash(store, spec, mode, CrashedBatch(0, 1, 10, 13, len(backup), nbytes))
    assert out.seed.next_window == 4 and out.window_ids.tolist() == recovered
    after = advance_windows(out.seed, readings(x, range(14, 40)), spec.window_params,
                            spec.recovery_map(mode) if mode != "none" else None)  # fmt: skip
    assert after.closed.ids.tolist() == list(range(4, 9))
