"""A (window, sensor) pair whose every reading recovery returns as read is not measured
by the live shadow check (``ShadowRows.exact``, ``ShadowRows.mask_exact``).

A batch over a crash plan's exposure, or after a recovery, backs up every sensor
(``engine.live.exposure``); recovery returns those readings as read. Scored "as read",
the windows they fill whole counted as rebuilt pairs with zero error and diluted every
shadow rate, while the recovery report (its ``exact`` pairs) and the online controller
(``shadow_feedback``'s ``rebuilt``) leave them out. Reference: the controller's own rule
and a naive loop over the windows.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from engine.live.batch import WindowState, advance_windows, shadow_errors
from engine.live.reporting import crash_shadow_misses
from engine.live.shadow_rows import rows_under_versions
from engine.live.spec import StreamSpec
from engine.live.status import StatusBoard
from engine.live.versions import PlanVersion
from engine.planning.feedback import _rebuilt_in_window
from engine.query import WindowQuery
from tests.helpers import fit_map

SENSORS = ("a", "b", "c")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def readings(rows: int, seed: int = 5) -> np.ndarray:
    """(rows, 3): b and c follow a loosely, so their rebuilt windows miss often."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(rows, 1))
    return np.hstack([base, base + 3.0 * rng.normal(size=(rows, 2))])


def long_rows(x: np.ndarray) -> pd.DataFrame:
    t0 = np.datetime64("2024-01-01T00:00", "ns")
    rows = [(r, t0 + np.timedelta64(r, "h"), s, float(x[r, j]))
            for r in range(len(x)) for j, s in enumerate(SENSORS)]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["seq", "event_time", "sensor", "value"])
    frame["arrival_time"] = frame["event_time"]
    return frame


def make_spec(x: np.ndarray, query: WindowQuery) -> StreamSpec:
    return StreamSpec(SENSORS, ("a",), fit_map(x, SENSORS, ("a",)), query)


def closed_windows(x: np.ndarray, spec: StreamSpec, stored_rows: np.ndarray) -> object:
    """The windows one batch of every row closes; ``stored_rows`` (rows,) bool: the rows
    a batch backed up whole (every sensor)."""
    frame = long_rows(x)
    stored = np.repeat(stored_rows, len(SENSORS))
    params = spec.window_params
    state = WindowState.empty(len(SENSORS), 0, params.slide)
    return advance_windows(state, frame, params, stored=stored).closed


def test_windows_a_full_batch_stored_whole_are_not_counted_by_the_board() -> None:
    """Every reading stored: those windows are never rebuilt, so nothing is measured (scored
    as read, the worst sensor would read 0 misses of 100 windows, rate 0)."""
    x = readings(400)
    spec = make_spec(x, WindowQuery(0.1, 0.05, 4, aggregate="avg"))
    v = PlanVersion.initial(spec, T0)
    figures = []
    for every in (False, True):
        closed = closed_windows(x, spec, np.full(len(x), every))
        rows = rows_under_versions(closed, {0: v}, crash=False)
        errors = shadow_errors(closed, spec.window_params, spec.linear_map, rows.rebuilt)
        board = StatusBoard(lambda: T0)
        board.record_shadow(rows.mask_exact(errors), SENSORS, ("b", "c"), spec.eps_vector, 0)
        figures.append(board.snapshot())
    read, stored = figures
    assert read.shadow_worst is not None and read.shadow_worst[2] == 100  # b, c rebuilt
    assert read.shadow_worst_rate is not None and read.shadow_worst_rate > 0.5
    assert stored.shadow_worst is None and stored.shadow_worst_rate is None
    assert stored.shadow_violation_rate is None and stored.shadow_by_version[0]["pairs"] == 0
    assert stored.shadow_windows == 100  # the windows closed, none measured


@pytest.mark.parametrize(("window", "slide"), [(4, 4), (6, 2), (5, 3)])
def test_exact_pairs_are_the_controllers_backed_up_windows(window: int, slide: int) -> None:
    """Stretches of stored rows (full batches) cut windows anywhere: a window is exact for
    a sensor only when every one of its rows is backed up, by the plan (a) or stored.
    The tallies count each rebuilt sensor's other windows, and their misses only."""
    x = readings(120)
    query = WindowQuery(0.1, 0.05, window, slide=slide, aggregate="avg")
    spec = make_spec(x, query)
    stored_rows = np.zeros(len(x), dtype=bool)
    for first, last in ((10, 31), (40, 41), (70, 90)):
        stored_rows[first:last] = True
    closed = closed_windows(x, spec, stored_rows)
    rows = rows_under_versions(closed, {0: PlanVersion.initial(spec, T0)}, crash=False)
    backed = np.tile(stored_rows[:, None], (1, 3)) | np.array([True, False, False])
    count = len(closed.ids)  # type: ignore[attr-defined]
    naive = np.array([[backed[k * slide : k * slide + window, j].all() for j in range(3)]
                      for k in range(count)])  # fmt: skip
    np.testing.assert_array_equal(rows.exact, naive)
    np.testing.assert_array_equal(
        rows.exact, ~_rebuilt_in_window(backed[: rows.rebuilt.shape[0]], count, window, slide)
    )
    assert naive[:, 1].any() and not naive[:, 1].all()  # some exact windows, not every one
    errors = shadow_errors(closed, spec.window_params, spec.linear_map, rows.rebuilt)
    board = StatusBoard(lambda: T0)
    board.record_shadow(rows.mask_exact(errors), SENSORS, ("b", "c"), spec.eps_vector, 0)
    tally = board.snapshot().shadow_by_version[0]
    measured = ~naive[:, 1:]
    assert tally["pairs"] == measured.sum()
    assert tally["misses"] == ((errors[:, 1:] > 0.1) & measured).sum()
    assert tally["per_sensor"]["b"] == (((errors[:, 1] > 0.1) & measured[:, 0]).sum(),
                                        measured[:, 0].sum())  # fmt: skip


def test_a_crash_plans_misses_leave_exact_pairs_out_too() -> None:
    """Under the crash contract each window counts the share of its m-row losses that
    missed: a window stored whole loses nothing rebuilt, and is not counted either."""
    x = readings(200)
    spec = make_spec(x, WindowQuery(0.1, 0.05, 8, aggregate="avg", exposure=2))
    stored_rows = np.zeros(len(x), dtype=bool)
    stored_rows[:100] = True
    closed = closed_windows(x, spec, stored_rows)
    rows = rows_under_versions(closed, {0: PlanVersion.initial(spec, T0)}, crash=True)
    misses = rows.mask_exact(crash_shadow_misses(closed, spec, rows.rebuilt))  # type: ignore[arg-type]
    board = StatusBoard(lambda: T0)
    board.record_misses(misses, SENSORS, ("b", "c"), 0, "crash")
    snap = board.snapshot()
    assert rows.exact is not None and rows.exact[:12, 1:].all() and not rows.exact[13:, 1:].any()
    assert snap.shadow_worst is not None and snap.shadow_worst[2] == 25 - 12
    assert snap.shadow_worst_rate == pytest.approx(max(
        np.nanmean(misses[:, 1]), np.nanmean(misses[:, 2])))  # fmt: skip


def test_no_closed_window_has_no_exact_pair() -> None:
    x = readings(3)
    spec = make_spec(readings(40), WindowQuery(0.1, 0.05, 4, aggregate="avg"))
    closed = closed_windows(x, spec, np.ones(3, dtype=bool))
    rows = rows_under_versions(closed, {0: PlanVersion.initial(spec, T0)}, crash=False)
    assert rows.exact is not None and rows.exact.shape == (0, 3)
    assert rows.mask_exact(np.zeros((0, 3))).shape == (0, 3)


def test_a_batch_reports_no_exact_pair_to_the_board_or_the_monitor() -> None:
    """The pipeline's own path: ``BatchReporting._report`` hands the board and the monitor
    the batch's errors; the windows a full batch stored whole count in neither."""
    from types import SimpleNamespace

    from engine.live.records import BackupWritten
    from engine.live.reporting import BatchReporting
    from engine.planning import ViolationMonitor

    x = readings(400)
    spec = make_spec(x, WindowQuery(0.1, 0.05, 4, aggregate="avg"))
    version = PlanVersion.initial(spec, T0)
    stored_rows = np.zeros(len(x), dtype=bool)
    stored_rows[:200] = True
    closed = closed_windows(x, spec, stored_rows)
    rows = rows_under_versions(closed, {0: version}, crash=False)
    errors = shadow_errors(closed, spec.window_params, spec.linear_map, rows.rebuilt)
    reporting = BatchReporting()
    reporting.board = StatusBoard(lambda: T0)
    reporting.monitor = ViolationMonitor(SENSORS, 0.1, 0.05)
    reporting.options = SimpleNamespace(shadow=True)  # type: ignore[assignment]
    reporting.stage, reporting._kinds, reporting._alerts = None, {}, 0
    reporting._alerting, reporting._history = {}, {0: version}
    advance = SimpleNamespace(closed=closed, duplicates=0, stale=0, late=pd.DataFrame(),
                              state=SimpleNamespace(buffered_rows=0))  # fmt: skip
    empty = pd.DataFrame()
    reporting._report(empty, advance, empty, (errors, rows), BackupWritten(), version)  # type: ignore[arg-type]
    assert reporting.board.snapshot().shadow_by_version[0]["pairs"] == 2 * 50
    assert reporting.monitor.rates(0)["b"][1] == 50
