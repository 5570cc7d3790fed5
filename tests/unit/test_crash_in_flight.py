"""A crash with readings in flight (held back by the out-of-order stage at the last
commit): recovery completes their rows from the backup the earlier batches wrote and
the plan's map, instead of abandoning every window open at the crash, and counts
those rows as lost, so the recovery is judged under the contract that really covers it.

The backup is written by PyArrow in Spark's layout (``tests.helpers.write_backup_batch``);
``tests/spark/test_crash_failure.py`` runs crashes through Spark.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.live.batch import WindowState, advance_windows
from engine.live.crash import recover_crash
from engine.live.failure import CrashedBatch
from engine.live.operator_state import pack_state
from engine.live.records import BatchWrite
from engine.live.recovery_report import covering_contract
from engine.live.spec import StreamSpec
from engine.live.store import BackupStore
from engine.query import WindowQuery
from tests.helpers import fit_map, write_backup_batch

SENSORS = ("a", "b", "c", "d")
W = 4  # tumbling windows of 4 rows
EXPOSURE = 2  # the crashed batch: rows 6 and 7


def history(rows: int = 16) -> np.ndarray:
    rng = np.random.default_rng(3)
    base = np.cumsum(rng.normal(size=(rows, 1)), axis=0)
    return base @ np.array([[1.0, 0.8, 0.5, 1.2]]) + 0.05 * rng.normal(size=(rows, 4))


def readings(x: np.ndarray, rows: range, sensors: tuple[str, ...] = SENSORS) -> pd.DataFrame:
    """Long readings (seq, event_time, sensor, value, arrival_time) of ``rows``."""
    t0 = np.datetime64("2024-01-01T00:00", "ns")
    out = [
        (r, t0 + np.timedelta64(r, "h"), s, float(x[r, SENSORS.index(s)]))
        for r in rows
        for s in sensors
    ]
    frame = pd.DataFrame(out, columns=["seq", "event_time", "sensor", "value"])
    frame["arrival_time"] = frame["event_time"]
    return frame


def crash_spec(x: np.ndarray) -> StreamSpec:
    """avg over tumbling windows of ``W`` rows, ``a`` backed up, the crash contract."""
    spec = StreamSpec(SENSORS, ("a",), fit_map(x, SENSORS, ("a",)),
                      WindowQuery(5.0, 0.05, W, aggregate="avg"))  # fmt: skip
    return replace(spec, query=replace(spec.query, exposure=EXPOSURE))


def crash_after(  # type: ignore[no-untyped-def]
    store: BackupStore,
    x: np.ndarray,
    spec: StreamSpec,
    released: pd.DataFrame,
    crashed_stored: tuple[str, ...] = ("a",),
):
    """Batch 0 (rows 0-5, a backed up) committed with the window state of the ``released``
    readings; batch 1 (rows 6-7) crashes after writing its backup (of ``crashed_stored``).
    Recovers it."""
    state = advance_windows(WindowState.empty(len(SENSORS), 0, W), released, spec.window_params)
    first = readings(x, range(6), ("a",))
    nbytes = write_backup_batch(store.batch_uri(0, 0), first)
    store.commit_batch(BatchWrite(run=0, batch_id=0, backup_rows=len(first),
                                  backup_bytes=nbytes, state=pack_state(state.state, None),
                                  max_seq=5))  # fmt: skip
    crashed_rows = readings(x, range(6, 8), crashed_stored)
    nbytes = write_backup_batch(store.batch_uri(0, 1), crashed_rows)
    crashed = CrashedBatch(0, 1, 6, 7, len(crashed_rows), nbytes)
    return state, recover_crash(store, spec, "approx", crashed)


@pytest.mark.parametrize("held", [("a", "b"), SENSORS])
def test_rows_in_flight_at_a_crash_are_rebuilt_from_the_backup_and_counted_lost(
    tmp_path: Path, held: tuple[str, ...]
) -> None:
    """Batch 0 took rows 0-5 in, but the stage held back the ``held`` readings of rows
    4-5 (a and b: the committed state has rows 4-5 with holes; every sensor: the state
    ends at row 3, as the stage releasing whole windows leaves it). Batch 0's backup
    holds a's readings of rows 0-5 (written as they arrived). The crash takes batch 1,
    rows 6-7 (its backup: a). Window 1 (rows 4-7) is rebuilt: a read, the held readings
    of rows 4-5 and every other of rows 6-7 from the map, the rest as read. The loss is
    rows 4-7: more than the exposure, so the range contract covers it."""
    x = history()
    spec = crash_spec(x)
    lm = spec.linear_map
    rest = tuple(s for s in SENSORS if s not in held)
    parts = [readings(x, range(4), SENSORS)] + ([readings(x, range(4, 6), rest)] if rest else [])
    with BackupStore(tmp_path / "s.duckdb") as store:
        state, outcome = crash_after(store, x, spec, pd.concat(parts))
        results = store.read_results()
        batches = store.read_table("batches").set_index("batch_id")["rows"]
    assert state.closed.ids.tolist() == [0] and state.state.buffered_rows == (2 if rest else 0)
    assert batches.to_dict() == {0: 6, 1: 2}  # the crashed batch committed with its own rows
    assert outcome.rows_read == 2 + 2  # a's rows 4-5 of batch 0, and the crashed batch's
    assert (outcome.lost.first_row, outcome.lost.last_row) == (4, 7)
    assert covering_contract("crash", outcome.lost.rows, EXPOSURE) == "range"
    assert outcome.window_ids.tolist() == [1]
    want = x.copy()
    mapped = lm.apply(x[4:8, [0]])  # every sensor of lm.sensors, from a
    for s in SENSORS[1:]:
        j = SENSORS.index(s)
        rows = slice(0, 4) if s in held else slice(2, 4)  # of rows 4-7
        want[4:8][rows, j] = mapped[rows, lm.sensors.index(s)]
    got = results[results["window_id"] == 1].set_index("sensor")["value"]
    np.testing.assert_allclose(got[list(SENSORS)].to_numpy(), want[4:8].mean(axis=0))
    assert outcome.seed.next_window == 2 and outcome.seed.damaged_until == 7


def test_a_crash_with_nothing_in_flight_loses_the_batch_alone(tmp_path: Path) -> None:
    """Every reading of batch 0 released: the loss is the crashed batch's rows, within
    the exposure, and the crash contract covers it."""
    x = history()
    with BackupStore(tmp_path / "s.duckdb") as store:
        _, outcome = crash_after(store, x, crash_spec(x), readings(x, range(6), SENSORS))
    assert (outcome.lost.first_row, outcome.lost.last_row) == (6, 7)
    assert covering_contract("crash", outcome.lost.rows, EXPOSURE) == "crash"
    assert outcome.window_ids.tolist() == [1]


def test_a_full_crashed_batch_does_not_make_the_rows_in_flight_before_it_exact(
    tmp_path: Path,
) -> None:
    """The crashed batch backed up every sensor (over the exposure), the rows in flight
    before it only a: the report scores every sensor but a as rebuilt over the lost
    range, not as backed up throughout it."""
    x = history()
    with BackupStore(tmp_path / "s.duckdb") as store:
        _, outcome = crash_after(store, x, crash_spec(x), readings(x, range(4), SENSORS),
                                 crashed_stored=SENSORS)  # fmt: skip
    assert (outcome.lost.first_row, outcome.lost.last_row) == (4, 7)
    assert outcome.stored == ("a",)


def test_a_crash_of_a_batch_that_stored_every_sensor_is_said_exact_not_under_a_contract() -> None:
    """A batch over the exposure backed up every sensor: its rows come back exactly. The
    note said "the range contract covers it, more than its 2", as if rebuilt."""
    from engine.live.recovery import LostRange
    from engine.live.run_config import _Recovery
    from engine.live.views import _failure_note

    rec = _Recovery(LostRange(1, 4, 7), 0.1, 8, 2, stored=SENSORS, failure="crash")
    exact = _failure_note(rec, "range", EXPOSURE, exact=True)
    assert "came back exactly" in exact and "contract covers" not in exact
    rebuilt = _failure_note(rec, "range", EXPOSURE, exact=False)
    assert "the range contract covers it, more than its 2" in rebuilt


def test_a_failure_in_mode_none_is_not_said_rebuilt_under_a_contract() -> None:
    """Mode none keeps no backup: the note said 'every open window rebuilt (12 rows); the
    range contract covers it' beside 'none can be recovered'."""
    from engine.live.recovery import LostRange
    from engine.live.run_config import _Recovery
    from engine.live.views import _failure_note

    for failure in ("crash", "machine"):
        rec = _Recovery(LostRange(1, 4, 7), 0.1, 8, 2, failure=failure)
        note = _failure_note(rec, "range", None, mode="none")
        assert "mode none keeps no backup, so nothing was rebuilt" in note
        assert "rebuilt (" not in note and "contract covers" not in note
