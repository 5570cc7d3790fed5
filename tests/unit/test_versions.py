"""Plan versions: stored with their rows, written with the batch that starts them,
read back exactly, and used per row by the recovery frames."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.errors import ParameterError, StoreError
from engine.live.rebuild import reconstruct_frame
from engine.live.records import BackupWritten, BatchWrite
from engine.live.spec import StreamSpec
from engine.live.store import BackupStore
from engine.live.versions import (
    PendingPlan,
    PlanVersion,
    changes,
    map_from_json,
    map_to_json,
    read_versions,
)
from engine.query import WindowQuery
from tests.helpers import fit_map

SENSORS = ("a", "b", "c", "d")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def values(rows: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(rows, 1))
    return base + 0.3 * rng.normal(size=(rows, len(SENSORS)))


def spec(backup: tuple[str, ...], x: np.ndarray) -> StreamSpec:
    return StreamSpec(
        SENSORS,
        backup,
        fit_map(x, SENSORS, backup),
        WindowQuery(0.5, 0.05, 4, slide=2, aggregate="avg"),
    )


def test_a_map_round_trips_through_json_bit_for_bit() -> None:
    lm = fit_map(values(), SENSORS, ("c", "a"))
    back = map_from_json(map_to_json(lm))
    assert back.backup == lm.backup and back.targets == lm.targets
    assert np.array_equal(back.coef, lm.coef) and np.array_equal(back.intercept, lm.intercept)


def test_another_plan_under_a_stored_version_id_is_refused_not_skipped(tmp_path: Path) -> None:
    """A resumed run that numbered its versions from 0 again wrote its next re-plan as
    id 1, which was silently skipped: its rows were tagged with another plan's id."""
    x = values()
    first = PlanVersion.initial(spec(("a",), x), T0)
    one = first.following(PendingPlan(spec(("a", "c"), x), "scheduled", "", T0), 20)
    other = first.following(PendingPlan(spec(("a", "d"), x), "manual", "", T0), 30)
    with BackupStore(tmp_path / "s.duckdb") as store:
        assert store.write_version(first.record()) and store.write_version(one.record())
        assert not store.write_version(one.record())  # the same version again: skipped
        with pytest.raises(StoreError, match="plan version 1 is already stored"):
            store.write_version(other.record())
        got = read_versions(store, first.spec)
    assert [(v.id, v.first_seq, v.spec.backup_sensors) for v in got] == [
        (0, 0, ("a",)),
        (1, 20, ("a", "c")),
    ]


def test_versions_are_written_with_their_batch_and_close_the_one_before(tmp_path: Path) -> None:
    x = values()
    first = PlanVersion.initial(spec(("a",), x), T0, {"method": "backtest"})
    pending = PendingPlan(spec(("a", "c"), x), "alert", "live rate above delta", T0)
    second = replace(first.following(pending, 20), first_time=T0)
    with BackupStore(tmp_path / "s.duckdb") as store:
        assert store.write_version(first.record())
        assert not store.write_version(first.record())  # idempotent by id
        write = BatchWrite(run=0, batch_id=3, max_seq=29, version=second.record(T0))

        def crash() -> None:
            raise RuntimeError("crash inside the transaction")

        with pytest.raises(RuntimeError):
            store.commit_batch(write, before_commit=crash)
        assert [v.id for v in read_versions(store, first.spec)] == [0]  # rolled back
        assert store.commit_batch(write)
        assert not store.commit_batch(write)  # a replayed batch writes nothing twice
        got = read_versions(store, first.spec)
    assert [(v.id, v.reason, v.first_seq, v.last_seq) for v in got] == [
        (0, "initial", 0, 19),
        (1, "alert", 20, None),
    ]
    assert got[0].last_time == T0 and got[0].calibration == {"method": "backtest"}
    assert got[1].spec.backup_sensors == second.spec.backup_sensors == ("a", "c")
    assert np.array_equal(got[1].spec.linear_map.coef, second.spec.linear_map.coef)
    history = changes(got)
    assert history[1]["added"] == ["c"] and history[1]["dropped"] == []


def test_a_bad_reason_is_named() -> None:
    with pytest.raises(ParameterError, match="'sometimes'"):
        PendingPlan(spec(("a",), values()), "sometimes", "", T0)


def test_each_row_is_rebuilt_with_the_version_that_governed_it() -> None:
    """Rows 0-9 under (a, c), rows 10-19 under (a): the wider plan's backup still
    holds c for rows 10-19 in the frame, but the governing (narrower) plan rebuilds them."""
    x = values(20)
    times = pd.date_range("2026-01-01", periods=20, freq="h")
    wide_map, narrow_map = fit_map(x, SENSORS, ("a", "c")), fit_map(x[5:], SENSORS, ("a",))
    frame = pd.DataFrame({"seq": np.arange(20), "event_time": times, "b0": x[:, 0], "b1": x[:, 2]})
    outputs = [f"s{SENSORS.index(s)}" for s in narrow_map.sensors]
    maps, ranges = [narrow_map, wide_map], [(10, None), (0, 9)]
    out = reconstruct_frame(frame, maps, {"a": "b0", "c": "b1"}, outputs, ranges)
    order = [f"s{i}" for i in range(4)]
    ref_wide = wide_map.apply(x[:10, [0, 2]])[:, [wide_map.sensors.index(s) for s in SENSORS]]
    ref_narrow = narrow_map.apply(x[10:, [0]])[:, [narrow_map.sensors.index(s) for s in SENSORS]]
    np.testing.assert_allclose(out[order].to_numpy(), np.vstack([ref_wide, ref_narrow]))
    assert out["map"].tolist() == [1] * 10 + [0] * 10
    # Without the ranges the newest whole map would rebuild every row: not the reference.
    plain = reconstruct_frame(frame, maps, {"a": "b0", "c": "b1"}, outputs)
    assert plain["map"].tolist() == [0] * 20


def test_the_status_board_keeps_shadow_tallies_per_version_and_overall() -> None:
    """Reference: NumPy counts of errors above eps over each version's windows and all."""
    from engine.live.status import StatusBoard

    rng = np.random.default_rng(5)
    errors = np.abs(rng.normal(0.0, 0.5, size=(30, 4)))
    board = StatusBoard(lambda: T0)
    board.record_shadow(errors[:12], SENSORS, ("b", "c"), 0.5, version=0)
    board.record_shadow(errors[12:], SENSORS, ("c", "d"), 0.5, version=1)
    status = board.snapshot()
    miss = errors > 0.5
    v0, v1 = miss[:12][:, [1, 2]], miss[12:][:, [2, 3]]
    assert (
        status.shadow_by_version[0]["misses"] == v0.sum()
        and status.shadow_by_version[0]["pairs"] == v0.size
    )
    assert status.shadow_by_version[1]["worst_rate"] == pytest.approx(v1.mean(axis=0).max())
    assert status.shadow_windows == 30  # overall: the second version reset nothing
    assert status.shadow_violation_rate == pytest.approx(
        (v0.sum() + v1.sum()) / (v0.size + v1.size)
    )
    assert status.shadow_violations["c"] == miss[:, 2].sum()


def _reporting(windows: int = 12) -> tuple[Any, Any]:
    """A bare ``BatchReporting`` (the live pipeline's mixin) with a board and a monitor of
    eps 0.5, and a batch's window advance that closed ``windows``, none holding a row
    recovery rebuilt."""
    from types import SimpleNamespace

    class Closed(SimpleNamespace):
        def __len__(self) -> int:
            return len(self.recovered)

    from engine.live.reporting import BatchReporting
    from engine.live.status import StatusBoard
    from engine.planning import ViolationMonitor

    reporting = BatchReporting()
    reporting.board = StatusBoard(lambda: T0)
    reporting.monitor = ViolationMonitor(SENSORS, 0.5, 0.05)
    reporting.stage, reporting._kinds, reporting._alerts = None, {}, 0
    reporting._alerting, reporting._history = {}, {}
    advance = SimpleNamespace(
        closed=Closed(recovered=np.zeros(windows, dtype=bool)),
        duplicates=0,
        stale=0,
        state=SimpleNamespace(buffered_rows=0),
    )
    return reporting, advance


def _shadow(errors: np.ndarray, version: int) -> tuple[np.ndarray, Any]:
    """What the pipeline hands ``_report``: windows' errors, every one read under
    ``version`` alone (``engine.live.shadow_rows``)."""
    from engine.live.shadow_rows import ShadowRows

    return errors, ShadowRows(np.zeros((0, errors.shape[1])), np.full(len(errors), version))


def test_a_batch_reports_its_shadow_errors_under_the_version_that_ran_it() -> None:
    """The pipeline hands the monitor and the board the batch's plan version, so a
    re-plan starts a fresh per-version tally (and alert state) in both. Fails if the
    version is dropped: every batch would count under version 0, and the old plan's
    misses would keep the new one alerting. Reference: NumPy counts of errors above eps."""
    s = spec(("a",), values())
    reporting, advance = _reporting()
    errors = np.abs(np.random.default_rng(6).normal(0.0, 0.5, size=(12, 4)))
    empty = pd.DataFrame()
    version = PlanVersion(3, "alert", "re-planned", s, T0, 40)
    reporting._report(empty, advance, empty, _shadow(errors, 3), BackupWritten(), version)
    misses = (errors > 0.5)[:, 1:]  # b, c and d are rebuilt from a
    assert reporting.monitor.versions() == [3]
    assert reporting.monitor.rates(3)["c"] == (int(misses[:, 1].sum()), 12)
    assert list(reporting.board.snapshot().shadow_by_version) == [3]
    assert reporting.board.snapshot().shadow_by_version[3]["misses"] == misses.sum()


def test_an_alert_is_marked_once_per_sensor_and_version() -> None:
    """The monitor alerts in every batch while a rate stays above delta (e.g. while a
    re-plan computes); the dashboard's timeline marks it once per sensor and version."""
    s = spec(("a",), values())
    reporting, advance = _reporting()
    errors = np.ones((12, 4))  # every rebuilt window misses eps 0.5
    empty = pd.DataFrame()
    counted = []
    for v in (3, 3, 3, 4, 4):
        version = PlanVersion(v, "alert", "re-planned", s, T0, 40)
        reporting._report(empty, advance, empty, _shadow(errors, v), BackupWritten(), version)
        assert reporting.monitor._alert() is not None  # alerting in every batch
        counted.append(reporting._alerts)
    kinds = [e.kind for e in reporting.board.history.events()]
    assert kinds == ["alert", "alert"]  # once under version 3, once under 4
    assert counted == [1, 1, 1, 2, 2]
