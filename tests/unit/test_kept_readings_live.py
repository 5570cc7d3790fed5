"""Kept-readings sensors: after a crash, a max/min window of such a sensor takes the
extreme of the readings it kept, not of a rebuild of the lost ones.

The streamed windows are checked against a brute force over the whole history (each
window's rows, the lost cells of kept sensors removed); the spec's rules, the window
state's snapshot and the stored plan versions carry the kept sensors.
"""

from __future__ import annotations

import io
import itertools
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import duckdb
import numpy as np
import pandas as pd
import pytest

from engine.errors import ParameterError
from engine.live.batch import (
    WindowParams,
    WindowState,
    advance_windows,
    aggregate_each_window,
    shadow_errors,
)
from engine.live.operator_state import pack_state, unpack_state
from engine.live.spec import StreamSpec
from engine.live.store import BackupStore
from engine.live.versions import PlanVersion, read_versions
from engine.model import LinearMap
from engine.query import WindowQuery
from tests.helpers import fit_map

SENSORS = ("a", "b", "c", "d")
BACKUP = ("a", "b")
KEPT = ("c",)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_values(rows: int, seed: int) -> np.ndarray:
    """Correlated sensors with bursts, so the lost rows often hold a window's extreme."""
    rng = np.random.default_rng(seed)
    base = np.cumsum(rng.normal(size=(rows, 2)), axis=0)
    mix = np.array([[1.0, 0.0, 0.7, 0.2], [0.0, 1.0, 0.4, 0.9]])
    return base @ mix + rng.standard_t(3, size=(rows, 4))


def long_rows(x: np.ndarray, rows: range, sensors: tuple[str, ...] = SENSORS) -> pd.DataFrame:
    times = np.datetime64("2026-01-01T00:00", "ns") + np.arange(len(x)) * np.timedelta64(1, "h")
    idx = [SENSORS.index(s) for s in sensors]
    seq = np.repeat(np.asarray(rows, dtype=np.int64), len(idx))
    return pd.DataFrame(
        {
            "seq": seq,
            "event_time": times[seq],
            "arrival_time": times[seq],
            "sensor": np.tile(np.asarray(sensors, dtype=object), len(rows)),
            "value": x[np.asarray(rows, dtype=np.int64)][:, idx].reshape(-1),
        }
    )


def crash_stream(
    x: np.ndarray, params: WindowParams, lm: LinearMap, lost: range, kept: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, WindowState]:
    """Stream ``x`` in small batches; the batch of rows ``lost`` keeps only its backup
    (the crash path: damaged rows, the linear map, ``kept``); the state between the
    crash and the next batch goes through the store's snapshot. Returns the closed
    windows' ids, aggregates, recovered flags and the state right after the crash."""
    rng = np.random.default_rng(len(x) + params.window)
    state = WindowState.empty(len(SENSORS), 0, params.slide)
    ids, aggs, recovered = [], [], []
    cuts = sorted({0, lost.start, lost.stop, len(x), *rng.integers(1, len(x), size=6).tolist()})
    after_crash = state
    for lo, hi in itertools.pairwise(cuts):
        if lo == lost.start:
            state = replace(state, damaged_until=lost.stop - 1)
            adv = advance_windows(state, long_rows(x, range(lo, hi), BACKUP), params, lm, kept)
            after_crash = unpack_state(pack_state(adv.state, None), None)
        else:  # the live query: the damaged-row path with the plan's map, nothing kept
            frame = long_rows(x, range(lo, hi)).sample(frac=1.0, random_state=lo)
            adv = advance_windows(state, frame, params, lm)
        state = after_crash if lo == lost.start else adv.state
        ids.append(adv.closed.ids)
        aggs.append(adv.closed.aggregates)
        recovered.append(adv.closed.recovered)
        assert np.isfinite(adv.closed.block).all()  # nothing left out leaks into the rows
    return np.concatenate(ids), np.vstack(aggs), np.concatenate(recovered), after_crash


def brute_force(
    x: np.ndarray, params: WindowParams, lm: LinearMap, lost: range, kept: tuple[str, ...]
) -> np.ndarray:
    """Each window on its own: backup sensors exact, lost rows of the others rebuilt,
    the lost readings of ``kept`` sensors not taken (unless the window has no other)."""
    rows = np.array(x, dtype=float)
    pick = np.array([[SENSORS.index(s) for s in lm.backup]])
    rebuilt = lm.apply(x[lost.start : lost.stop][:, pick[0]])
    for j, s in enumerate(lm.sensors):
        if s not in BACKUP:
            rows[lost.start : lost.stop, SENSORS.index(s)] = rebuilt[:, j]
    fn = max if params.aggregate == "max" else min
    count = (len(x) - params.window) // params.slide + 1
    out = np.zeros((count, len(SENSORS)))
    for k in range(count):
        for i, s in enumerate(SENSORS):
            span = range(k * params.slide, k * params.slide + params.window)
            vals = [rows[r, i] for r in span if not (s in kept and r in lost)]
            out[k, i] = fn(vals or [rows[r, i] for r in span])
    return out


CASES = [(6, 6, 13, 2), (6, 2, 13, 3), (5, 3, 9, 3), (8, 3, 20, 1), (4, 1, 17, 3)]


@pytest.mark.parametrize("aggregate", ["max", "min"])
@pytest.mark.parametrize(("window", "slide", "first", "m"), CASES)
def test_a_crash_leaves_the_lost_readings_of_kept_sensors_out_of_every_window(
    aggregate: str, window: int, slide: int, first: int, m: int
) -> None:
    x = make_values(40, window * 7 + slide)
    lm = fit_map(x, SENSORS, BACKUP)
    params = WindowParams(SENSORS, window, slide, aggregate)
    lost = range(first, first + m)
    ids, aggs, recovered, _ = crash_stream(x, params, lm, lost, KEPT)
    expected = brute_force(x, params, lm, lost, KEPT)
    np.testing.assert_array_equal(ids, np.arange(len(expected)))  # each once, in order
    np.testing.assert_allclose(aggs, expected, rtol=0, atol=1e-12)
    touched = (ids * slide <= lost[-1]) & (ids * slide + window - 1 >= lost[0])
    np.testing.assert_array_equal(recovered, touched)  # unmeasured, as every rebuilt window


def test_the_rule_changes_the_answer_and_a_machine_loss_keeps_the_linear_map() -> None:
    """Without kept sensors the same crash gives the linear-map rebuild; with them the
    kept sensor's windows differ where a rebuilt reading would have been the extreme."""
    x = make_values(40, 3)
    lm = fit_map(x, SENSORS, BACKUP)
    params = WindowParams(SENSORS, 6, 2, "max")
    lost = range(13, 16)
    _, kept_aggs, _, _ = crash_stream(x, params, lm, lost, KEPT)
    _, mapped, _, _ = crash_stream(x, params, lm, lost, ())
    np.testing.assert_allclose(mapped, brute_force(x, params, lm, lost, ()), atol=1e-12)
    c, d = SENSORS.index("c"), SENSORS.index("d")
    assert not np.allclose(kept_aggs[:, c], mapped[:, c])  # the rule is not a no-op here
    np.testing.assert_array_equal(kept_aggs[:, d], mapped[:, d])  # d is rebuilt either way


def test_the_left_out_cells_survive_the_snapshot_and_an_old_snapshot_has_none() -> None:
    x = make_values(30, 5)
    lm = fit_map(x, SENSORS, BACKUP)
    params = WindowParams(SENSORS, 8, 2, "max")
    *_, state = crash_stream(x, params, lm, range(20, 22), KEPT)
    assert state.left_out_cells.any()
    back = WindowState.from_bytes(state.to_bytes())
    np.testing.assert_array_equal(back.left_out_cells, state.left_out_cells)
    np.testing.assert_array_equal(back.values, state.values)
    with np.load(io.BytesIO(state.to_bytes())) as data:  # as written before
        old = {k: data[k] for k in data.files if k != "left_out"}
    buf = io.BytesIO()
    np.savez(buf, **old)
    legacy = WindowState.from_bytes(buf.getvalue())
    assert legacy.left_out_cells.shape == state.values.shape and not legacy.left_out_cells.any()


def test_a_window_that_lost_every_reading_keeps_the_rebuilt_extreme() -> None:
    block = np.array([[1.0, 5.0], [9.0, 7.0], [2.0, 3.0], [4.0, 8.0]])
    left = np.array([[False, True], [True, True], [False, False], [False, True]])
    got = aggregate_each_window(block, 2, 2, 2, "max", left)
    np.testing.assert_array_equal(got, [[1.0, 7.0], [4.0, 3.0]])
    got = aggregate_each_window(block, 2, 2, 2, "min", left)
    np.testing.assert_array_equal(got, [[1.0, 5.0], [2.0, 3.0]])
    with pytest.raises(ParameterError, match="'avg'"):
        aggregate_each_window(block, 2, 2, 2, "avg", left)


def test_shadow_errors_of_a_crashed_window_stay_finite() -> None:
    x = make_values(30, 8)
    lm = fit_map(x, SENSORS, BACKUP)
    params = WindowParams(SENSORS, 6, 3, "min")
    state = replace(WindowState.empty(4), damaged_until=3)
    rows = pd.concat([long_rows(x, range(0, 4), BACKUP), long_rows(x, range(4, 12))])
    adv = advance_windows(state, rows, params, lm, KEPT)
    assert adv.closed.recovered.tolist() == [True, True, False]  # windows 0-2; rows 0-3 lost
    assert adv.state.left_out_cells.sum() == 0  # the rows holding them are past
    assert np.isfinite(shadow_errors(adv.closed, params, lm)).all()
    with pytest.raises(ParameterError, match="max and min only"):
        advance_windows(state, rows, replace(params, aggregate="sum"), lm, KEPT)


# ---------------------------------------------------------------- the stream spec


def kept_spec(aggregate: str = "max", exposure: int | None = 3, **kw: object) -> StreamSpec:
    x = make_values(40, 1)
    backup = kw.pop("backup", BACKUP)
    query = WindowQuery(1.0, 0.05, 8, slide=2, aggregate=aggregate, exposure=exposure)
    return StreamSpec(SENSORS, backup, fit_map(x, SENSORS, backup), query, **kw)  # type: ignore[arg-type]


def test_a_spec_takes_kept_sensors_only_where_the_rule_holds() -> None:
    assert kept_spec(kept_sensors=("c", "d")).kept_sensors == ("c", "d")
    assert kept_spec().kept_sensors == ()
    assert kept_spec("avg").kept_sensors == ()  # none kept: any aggregate
    bad = [
        ({"kept_sensors": ("zz",)}, "not among the sensors: got \\['zz'\\]"),
        ({"kept_sensors": ("a",)}, "cannot be backup sensors too: got \\['a'\\]"),
        ({"kept_sensors": ("c", "c")}, "unique names, got \\('c', 'c'\\)"),
        ({"kept_sensors": ["c"]}, "tuple of unique names, got \\['c'\\]"),
        ({"aggregate": "avg", "kept_sensors": ("c",)}, "max and min queries only, got.*'avg'"),
        ({"aggregate": "sum", "kept_sensors": ("c",)}, "got aggregate 'sum'"),
        ({"exposure": None, "kept_sensors": ("c",)}, "shorter than the window.*got exposure None"),
        ({"exposure": 8, "kept_sensors": ("c",)}, "window \\(8 rows\\), got exposure 8"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ParameterError, match=message):
            kept_spec(**kwargs)  # type: ignore[arg-type]


def test_from_plan_carries_the_kept_sensors_that_the_plan_does_not_back_up() -> None:
    base = kept_spec()
    plan = SimpleNamespace(
        sensors=SENSORS, backup_sensors=("a", "b", "d"), query=base.query,
        linear_map=fit_map(make_values(40, 1), SENSORS, ("a", "b", "d")),
        kept_sensors=("c", "d"),
    )  # fmt: skip
    spec = StreamSpec.from_plan(plan)  # type: ignore[arg-type]
    assert spec.kept_sensors == ("c",)  # d is backed up: exact, nothing to keep


def test_plan_versions_store_their_kept_sensors_and_older_rows_read_none(tmp_path: Path) -> None:
    base = kept_spec()
    kept = replace(base, kept_sensors=KEPT)
    first = PlanVersion.initial(kept, T0)
    with BackupStore(tmp_path / "s.duckdb") as store:
        assert store.write_version(first.record())
        assert not store.write_version(first.record())  # the same version: skipped
        got = read_versions(store, base)
    assert got[0].spec.kept_sensors == KEPT
    # A store from before the column: its version rows read as nothing kept.
    old = tmp_path / "old.duckdb"
    with BackupStore(old) as store:
        store.write_version(PlanVersion.initial(base, T0).record())
    con = duckdb.connect(str(old))
    con.execute("ALTER TABLE plan_versions DROP COLUMN kept_sensors")
    con.close()
    with BackupStore(old) as store:
        assert read_versions(store, kept)[0].spec.kept_sensors == ()
        cols = store.read_table("plan_versions").columns
    assert "kept_sensors" in cols
