"""The live shadow check of a crash plan measures the crash contract: each closed window's
fraction of m-row losses that miss (against a direct reference), tallied as real counts,
watched by a crash-contract monitor and worded so on the Live page's status line."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from engine.errors import ParameterError
from engine.live.batch import (
    ClosedWindows,
    WindowAdvance,
    WindowState,
    advance_windows,
    shadow_errors,
)
from engine.live.records import BackupWritten
from engine.live.reporting import BatchReporting, crash_shadow_misses
from engine.live.shadow_rows import rows_under_versions
from engine.live.spec import PipelineOptions, StreamSpec
from engine.live.status import FeedProgress, PipelineStatus, StatusBoard
from engine.live.versions import PlanVersion
from engine.model.linear import LinearMap
from engine.planning.monitor import ViolationMonitor
from engine.query import WindowQuery

SENSORS = ("a", "b", "c")


def _spec(aggregate: str, exposure: int | None, kept: tuple[str, ...] = ()) -> StreamSpec:
    """b and c rebuilt from a: b = a + 2 (its rebuild runs 2 high of a truth equal to a),
    c = a (exact while the truth is a)."""
    lm = LinearMap(SENSORS, ("a",), ("b", "c"), np.array([2.0, 0.0]), np.array([[1.0], [1.0]]),
                   np.array([0.1, 0.1]))  # fmt: skip
    query = WindowQuery(1.0, 0.05, 6, aggregate=aggregate, exposure=exposure)
    return StreamSpec(SENSORS, ("a",), lm, query, kept_sensors=kept)


def _closed(block: np.ndarray, window: int, recovered: list[bool]) -> ClosedWindows:
    count = len(recovered)
    t = np.arange(block.shape[0]).astype("datetime64[s]").astype("datetime64[ns]")
    return ClosedWindows(np.arange(count), t[::window][:count], t[window - 1 :: window][:count],
                         np.zeros((count, block.shape[1])), np.array(recovered), block)  # fmt: skip


def _reference(block: np.ndarray, rebuilt: np.ndarray, window: int, m: int, agg) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = []
    for k in range(block.shape[0] // window):
        t = block[k * window : (k + 1) * window]
        r = rebuilt[k * window : (k + 1) * window]
        fractions = np.zeros(block.shape[1])
        for d in range(1 - m, window):
            lost = t.copy()
            lo, hi = max(d, 0), min(d + m, window)
            lost[lo:hi] = r[lo:hi]
            fractions += np.abs(agg(lost, axis=0) - agg(t, axis=0)) > 1.0
        out.append(fractions / (window + m - 1))
    return np.array(out)


def test_crash_shadow_misses_are_each_windows_fraction_of_m_row_losses() -> None:
    rng = np.random.default_rng(3)
    a = np.cumsum(rng.normal(0, 1, 24))
    block = np.column_stack([a, a + rng.normal(0, 0.3, 24), a])
    got = crash_shadow_misses(_closed(block, 6, [False, False, True, False]), _spec("avg", 4))
    rebuilt = np.column_stack([a, a + 2.0, a])
    want = _reference(block, rebuilt, 6, 4, np.mean)
    want[2] = np.nan  # a window holding recovered rows is not measured
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert np.nanmax(got[:, 1]) > 0  # b rebuilt 2 high: 3 or 4 lost rows put its avg off


def test_a_kept_sensor_is_scored_by_its_kept_readings() -> None:
    a = np.sin(np.arange(24) / 3.0)
    block = np.column_stack([a, a, a])  # b's rebuild is 2 high: overshoots every max
    spec = _spec("max", 2, kept=("b",))
    got = crash_shadow_misses(_closed(block, 6, [False] * 4), spec)
    assert np.all(got[:, 1] == 0.0)  # left out, a smooth series' max is kept within eps
    rebuilt = crash_shadow_misses(_closed(block, 6, [False] * 4), _spec("max", 2))
    assert np.all(rebuilt[:, 1] > 0.5)


def test_the_board_tallies_fractions_and_says_the_contract() -> None:
    board = StatusBoard()
    misses = np.array([[0.0, 0.25, 0.0], [0.0, 0.5, np.nan], [0.0, np.nan, 0.0]])
    board.record_misses(misses, SENSORS, ("b", "c"), version=1, contract="crash")
    s = board.snapshot()
    assert s.shadow_contract == "crash"
    assert s.shadow_violations == {"b": pytest.approx(0.75), "c": 0.0}
    mine = s.shadow_by_version[1]
    assert mine["worst_sensor"] == "b" and mine["worst_windows"] == 2
    assert mine["worst_rate"] == pytest.approx(0.375)
    assert s.shadow_violation_rate == pytest.approx(0.75 / 4)


def test_the_status_line_words_a_crash_plans_guarantee_in_its_terms() -> None:
    from ui.dashboard import status_level

    tally = {0: {"worst_rate": 0.02, "worst_sensor": "b", "worst_misses": 2.4,
                 "worst_windows": 120, "rebuilt_sensors": 2, "windows": 120}}  # fmt: skip
    feed = FeedProgress(readings=600, total_readings=10_000)
    s = PipelineStatus(state="running", input_rows=600, feed=feed, plan_version=0,
                       shadow_by_version=tally, shadow_contract="crash")  # fmt: skip
    fine = status_level(s, [], 1.0, delta=0.05)
    assert fine.name == "OK"
    assert "2.0 % of the failures touching its 120 shadow windows" in fine.reason
    tally[0] |= {"worst_rate": 0.3, "worst_misses": 36.0}
    broken = status_level(s, [], 1.0, delta=0.05)
    assert broken.name == "failing" and "30.0 % of the failures" in broken.reason


def test_a_crash_contract_monitor_alerts_on_m_row_losses_not_whole_windows() -> None:
    monitor = ViolationMonitor(SENSORS, 1.0, 0.05, contract="crash")
    rare = np.tile([0.0, 0.01, 0.0], (200, 1))
    assert monitor.observe_misses(rare, ("b", "c")) is None
    often = np.tile([0.0, 0.5, 0.0], (100, 1))
    alert = monitor.observe_misses(often, ("b", "c"))
    assert alert is not None and alert.sensors == ("b",)
    with pytest.raises(ParameterError):
        monitor.observe(np.ones((3, 3)), ("b", "c"))


def test_a_crash_plans_replanning_monitor_watches_the_crash_contract(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from engine.data import load_history
    from engine.planning import BacktestSettings, PlanParameters, make_plan
    from engine.planning.replan import ReplanningMonitor
    from tests.unit.test_replan import DRIFT

    history = load_history(DRIFT)
    query = WindowQuery(1.0, 0.05, 10, exposure=2)
    plan = make_plan(history.rows(0, 1000), PlanParameters(query, history=600),
                     backtest=BacktestSettings(history=400))  # fmt: skip
    applied = []
    mon = ReplanningMonitor(plan, lambda: history.rows(0, 1000),
                            lambda p, k, r: applied.append(k), run=lambda job: job())  # fmt: skip
    assert mon.monitor.contract == "crash"
    targets = [s for s in plan.sensors if s not in plan.backup_sensors]
    n = len(plan.sensors)
    assert mon.observe_misses(np.zeros((50, n)), targets, 0) is None
    assert applied == []


class _Recorder:
    """A monitor that records which contract's input it was given."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.windows: list[int] = []

    def observe(self, errors, reconstructed, version=0):  # type: ignore[no-untyped-def]
        self.calls.append("range")
        self.windows.append(len(errors))

    def observe_misses(self, misses, reconstructed, version=0):  # type: ignore[no-untyped-def]
        self.calls.append("crash")


class _Probe(BatchReporting):
    """``LivePipeline``'s reporting alone, on a status board."""

    def __init__(self, monitor: _Recorder, history: dict[int, PlanVersion]) -> None:
        self.board, self.monitor, self.options = StatusBoard(), monitor, PipelineOptions()
        self.stage, self._kinds, self._alerts = None, {}, 0
        self._alerting, self._full_reason, self._history = {}, None, history


def _shadow(closed: ClosedWindows, versions: dict[int, PlanVersion], in_force: PlanVersion):  # type: ignore[no-untyped-def]
    """What the pipeline's ``_advance`` hands ``_report``: errors and the rows behind them."""
    spec = in_force.spec
    crash = spec.query.exposure is not None
    rows = rows_under_versions(closed, versions, crash)
    errors = shadow_errors(
        closed, spec.window_params, spec.linear_map, None if crash else rows.rebuilt
    )
    return errors, rows


def _version(spec: StreamSpec, vid: int = 0, first_seq: int = 0) -> PlanVersion:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    return PlanVersion(vid, "initial" if vid == 0 else "manual", "", spec, when, first_seq)


@pytest.mark.parametrize(("exposure", "contract"), [(None, "range"), (4, "crash")])
def test_a_batch_is_shadow_checked_under_its_plans_contract(exposure, contract) -> None:  # type: ignore[no-untyped-def]
    a = np.cumsum(np.random.default_rng(4).normal(0, 1, 24))
    block = np.column_stack([a, a, a])
    version = _version(_spec("avg", exposure))
    closed = _closed(block, 6, [False] * 4)
    advance = WindowAdvance(WindowState.empty(3, 0, 6), closed, pd.DataFrame(), 0, 0)
    monitor = _Recorder()
    probe = _Probe(monitor, {0: version})
    probe._report(pd.DataFrame({"x": range(24)}), advance, pd.DataFrame(),
                  _shadow(closed, {0: version}, version), BackupWritten(), version)  # fmt: skip
    assert monitor.calls == [contract]
    status = probe.board.snapshot()
    assert status.shadow_contract == contract
    # b is rebuilt 2 high: every whole window misses its avg; only 3- or 4-row losses do
    rate = status.shadow_by_version[0]["worst_rate"]
    assert rate == 1.0 if contract == "range" else 0.0 < rate < 1.0


@pytest.mark.parametrize("exposure", [None, 4])
def test_a_window_holding_rows_recovery_rebuilt_is_not_measured(exposure) -> None:  # type: ignore[no-untyped-def]
    """A window open at a failure holds rows recovery rebuilt with the map: rebuilt again
    they match themselves, so the window would count as a hit whatever the truth was.
    Under either contract it is left out of the board and the monitor."""
    a = np.cumsum(np.random.default_rng(6).normal(0, 1, 24))
    block = np.column_stack([a, a, a])
    version = _version(_spec("avg", exposure))
    closed = _closed(block, 6, [False, False, True, False])
    advance = WindowAdvance(WindowState.empty(3, 0, 6), closed, pd.DataFrame(), 0, 0)
    probe = _Probe(_Recorder(), {0: version})
    probe._report(pd.DataFrame({"x": range(24)}), advance, pd.DataFrame(),
                  _shadow(closed, {0: version}, version), BackupWritten(), version)  # fmt: skip
    figures = probe.board.snapshot().shadow_by_version[0]
    assert figures["windows"] == 4  # closed
    assert figures["pairs"] == 3 * len(version.spec.linear_map.targets)  # measured


def test_each_row_is_rebuilt_under_its_own_version_and_each_window_counts_for_its_oldest() -> None:
    """Version 0 rebuilds b 2 high; version 1, from row 10, rebuilds it exactly. Windows of
    6 rows: 0-5 all version 0's (b misses), 6-11 holds rows 6-9 of version 0 (b's average
    4 x 2 / 6 off: a miss), 12-23 version 1's alone (exact). The two first count on version
    0's record, the rest on version 1's, and the monitor of version 1 sees only its own
    two. Rebuilt all under version 1 (the plan in force), no window would miss."""
    a = np.cumsum(np.random.default_rng(5).normal(0, 1, 24))
    block = np.column_stack([a, a, a])
    first = _spec("avg", None)
    exact = LinearMap(SENSORS, ("a",), ("b", "c"), np.zeros(2), np.ones((2, 1)), np.full(2, 0.1))
    second = StreamSpec(SENSORS, ("a",), exact, first.query)
    v0, v1 = _version(first), _version(second, 1, 10)
    closed = _closed(block, 6, [False] * 4)
    rows = rows_under_versions(closed, {0: v0, 1: v1}, crash=False)
    want = np.column_stack([a, np.where(np.arange(24) < 10, a + 2.0, a), a])
    np.testing.assert_allclose(rows.rebuilt, want)
    assert rows.versions.tolist() == [0, 0, 1, 1]
    monitor = _Recorder()
    probe = _Probe(monitor, {0: v0})
    advance = WindowAdvance(WindowState.empty(3, 0, 6), closed, pd.DataFrame(), 0, 0)
    probe._report(pd.DataFrame({"x": range(24)}), advance, pd.DataFrame(),
                  _shadow(closed, {0: v0, 1: v1}, v1), BackupWritten(), v1)  # fmt: skip
    by_version = probe.board.snapshot().shadow_by_version
    assert by_version[0]["windows"] == 2 and by_version[0]["worst_rate"] == 1.0
    assert by_version[1]["windows"] == 2 and by_version[1]["worst_rate"] == 0.0
    assert monitor.windows == [2]
    assert shadow_errors(closed, second.window_params, exact).max() < 1e-12  # the old way


def test_the_version_table_names_each_versions_kept_sensors() -> None:
    from datetime import UTC, datetime

    from engine.live.versions import PlanVersion, changes

    spec = _spec("max", 2, kept=("b",))
    version = PlanVersion.initial(spec, datetime(2026, 1, 1, tzinfo=UTC))
    assert changes([version])[0]["kept_readings"] == ["b"]


def _feed(block: np.ndarray, rows: range) -> pd.DataFrame:
    """Rows ``rows`` of ``block`` as a micro-batch's long readings."""
    t = pd.Timestamp("2026-01-01") + pd.to_timedelta(np.asarray(rows), "s")
    seq = np.asarray(rows)
    frames = [
        pd.DataFrame({"seq": seq, "event_time": t, "arrival_time": t, "sensor": s}).assign(
            value=block[rows, j]
        )
        for j, s in enumerate(SENSORS)
    ]
    return pd.concat(frames, ignore_index=True)


def test_readings_a_full_batch_stored_are_scored_as_read() -> None:
    """A crash plan's batch over its exposure (or after a recovery) backs up every sensor:
    a loss of its rows is recovered exactly. The window state carries which readings such
    a batch stored (through the snapshot, and from a snapshot without them: none), the
    closed windows hand them to the shadow rows, and the crash check scores them as read.
    Rows 6-10 come in a full batch, and window 1 (rows 6-11) closes a batch later, after a
    snapshot: a loss touching it rebuilds row 11 alone at most (b's avg 2/6 off) and never
    misses; the others miss as the reference says. Without the record, window 1 would miss
    like the rest."""
    a = np.cumsum(np.random.default_rng(6).normal(0, 1, 24))
    block = np.column_stack([a, a, a])  # b rebuilt 2 high: a 3- or 4-row loss misses
    spec = _spec("avg", 4)
    params = spec.window_params
    state = WindowState.empty(3, 0, params.slide)
    closed = []
    for rows, full in ((range(0, 6), False), (range(6, 11), True), (range(11, 24), False)):
        batch = _feed(block, rows)
        advance = advance_windows(state, batch, params, stored=np.full(len(batch), full))
        state = WindowState.from_bytes(advance.state.to_bytes())  # as the store keeps it
        closed.append(advance.closed)
    assert [len(c) for c in closed] == [1, 0, 3]
    stored = np.concatenate([c.stored_cells for c in closed])
    assert stored[6:11].all() and stored.sum() == 15
    together = ClosedWindows(np.arange(4), *(np.concatenate([getattr(c, f) for c in closed])
                             for f in ("starts", "ends", "aggregates", "recovered", "block")),
                             stored)  # fmt: skip
    rows = rows_under_versions(together, {0: _version(spec)}, crash=True)
    got = crash_shadow_misses(together, spec, rows.rebuilt)
    rebuilt = np.column_stack([a, a + 2.0, a])
    rebuilt[6:11] = block[6:11]
    np.testing.assert_allclose(got, _reference(block, rebuilt, 6, 4, np.mean), atol=1e-12)
    assert got[1].max() == 0.0 and got[[0, 2, 3], 1].min() > 0
    with np.load(io.BytesIO(state.to_bytes())) as data:  # a snapshot written before
        old = {k: data[k] for k in data.files if k != "stored"}
    buf = io.BytesIO()
    np.savez(buf, **old)
    assert not WindowState.from_bytes(buf.getvalue()).stored_cells.any()
