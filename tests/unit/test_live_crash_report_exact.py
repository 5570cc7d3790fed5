"""The recovery report of a crash whose lost rows the backup held whole, and of a crash
that lost nothing.

A batch that backed up every sensor (mode ``full``; in ``approx``, a batch over the
exposure or after a recovery; a plan backing up every sensor) comes back exactly: its
windows are stored as ``live`` (no row was rebuilt), but the report read ``recovered``
results only, and said "0 recovered", the closed windows lost for good and the open ones
pending forever. A crash once no batch could come lost no row, yet its report counted
the open window as lost, pending forever, under the crash contract.

No Spark: the manager's restart is a stand-in, and the restarted query's batch is
``advance_windows`` committed to the store as the live query would.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engine.live.batch import WindowState, advance_windows, results_frame
from engine.live.crash import recover_crash
from engine.live.failure import CrashedBatch
from engine.live.manager import PipelineManager
from engine.live.operator_state import pack_state
from engine.live.records import BatchWrite
from engine.live.recovery_report import score_recovery
from engine.live.run_config import RunConfig
from engine.live.spec import PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.query import WindowQuery
from tests.helpers import fit_map, write_backup_batch
from tests.unit.test_crash_in_flight import history, readings

SENSORS = ("a", "b", "c", "d")
W = 4  # tumbling windows of 4 rows


def make_spec(x: np.ndarray, backup: tuple[str, ...] = ("a",)) -> StreamSpec:
    """avg over tumbling windows of ``W`` rows, the crash contract with exposure 2."""
    query = WindowQuery(5.0, 0.05, W, aggregate="avg", exposure=2)
    return StreamSpec(SENSORS, backup, fit_map(x, SENSORS, backup), query)


def commit_first_batch(store: BackupStore, x: np.ndarray, spec: StreamSpec, mode: str) -> None:
    """Batch 0 of run 0: rows 0-5 taken in (window 0 closed, live), its backup written."""
    adv = advance_windows(WindowState.empty(len(SENSORS), 0, W), readings(x, range(6)),
                          spec.window_params)  # fmt: skip
    backup = readings(x, range(6), spec.stored_sensors(mode))
    nbytes = write_backup_batch(store.batch_uri(0, 0), backup)
    store.commit_batch(BatchWrite(run=0, batch_id=0, backup_rows=len(backup),
                                  backup_bytes=nbytes, results=results_frame(adv.closed, SENSORS),
                                  state=pack_state(adv.state, None), max_seq=5))  # fmt: skip


def crashed_batch(store: BackupStore, x: np.ndarray, sensors: tuple[str, ...]) -> CrashedBatch:
    """Batch 1 (rows 6-8) dies after writing its backup of ``sensors``."""
    rows = readings(x, range(6, 9), sensors)
    nbytes = write_backup_batch(store.batch_uri(0, 1), rows)
    return CrashedBatch(0, 1, 6, 8, len(rows), nbytes, readings=3 * len(SENSORS))


class FakeRestart:
    """Stands in for the restarted ``LivePipeline`` (no Spark); keeps the seed."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec, self.seed = spec, None

    def make(self, version: Any, seed: Any = None, resume_row: Any = None) -> FakeRestart:
        self.seed = seed
        return self

    def start(self) -> FakeRestart:
        return self

    def stop(self) -> None:
        pass


def crashed_manager(
    tmp_path: Path, x: np.ndarray, spec: StreamSpec, mode: str
) -> tuple[PipelineManager, FakeRestart]:
    """A manager in the state a crash left it: run 0 committed batch 0, and the crash
    (``simulate_failure``) is what the caller puts in ``manager._crash``."""
    paths = PipelinePaths(tmp_path)
    paths.ensure()
    manager = PipelineManager()
    manager._store = BackupStore(paths.store_file, None, paths.backup_uri)
    manager._config = RunConfig(spec, mode, paths)
    manager._truth, manager._spark = x, SimpleNamespace(version="none")
    restart = FakeRestart(spec)
    manager._new_pipeline = restart.make  # type: ignore[method-assign]
    manager._failed_run = 0
    manager.board.update(state="failed")
    commit_first_batch(manager._store, x, spec, mode)
    return manager, restart


def finish_open_windows(
    store: BackupStore, x: np.ndarray, spec: StreamSpec, mode: str, seed: WindowState
) -> np.ndarray:
    """The restarted query's first batch (run 1: rows 9-15), committed; the ids closed."""
    repair = spec.recovery_map(mode)
    adv = advance_windows(seed, readings(x, range(9, 16)), spec.window_params, repair)
    store.commit_batch(BatchWrite(run=1, batch_id=0, results=results_frame(adv.closed, SENSORS),
                                  max_seq=15))  # fmt: skip
    return adv.closed.ids


@pytest.mark.parametrize(
    ("mode", "backup", "crashed_stored"),
    [
        ("full", ("a",), SENSORS),  # mode full: every batch stores every sensor
        ("approx", ("a",), SENSORS),  # a batch over the exposure, or after a recovery
        ("approx", SENSORS, SENSORS),  # an approx plan that backs up every sensor
    ],
)
def test_a_crash_the_backup_held_whole_reports_every_lost_window_recovered_exactly(
    tmp_path: Path, mode: str, backup: tuple[str, ...], crashed_stored: tuple[str, ...]
) -> None:
    """Rows 6-8 lost: window 1 (rows 4-7) is closed by the recovery, window 2 (rows 8-11)
    by the restarted query. Both are recovered, exact; none pending, none given up."""
    x = history()
    spec = make_spec(x, backup)
    manager, restart = crashed_manager(tmp_path, x, spec, mode)
    try:
        manager._crash = crashed_batch(manager._require_store(), x, crashed_stored)
        first = manager.recover()
        assert (first.windows_lost, first.windows_recovered) == (2, 1)
        assert (first.windows_pending, first.windows_unrecoverable) == (1, 0)
        assert restart.seed is not None
        store = manager._require_store()
        assert finish_open_windows(store, x, spec, mode, restart.seed).tolist() == [2, 3]
        report = manager.report()
        assert report.window_ids == (1, 2)
        assert (report.windows_lost, report.windows_recovered) == (2, 2)
        assert (report.windows_pending, report.windows_unrecoverable) == (0, 0)
        assert report.max_abs_error == 0.0 and report.violation_rate == 0.0
        assert "not (yet) recovered" not in report.note and "cannot be rebuilt" not in report.note
        # nothing was rebuilt: stored as live (the shadow check takes their rows as read)
        assert set(store.read_results()["kind"]) == {"live"}
    finally:
        manager.close()


def test_the_report_scores_the_windows_a_full_crashed_batch_closed(tmp_path: Path) -> None:
    """``score_recovery`` on the store the crash recovery left (approx plan, the crashed
    batch over the exposure): window 1 recovered, not lost."""
    x = history()
    spec = make_spec(x)
    with BackupStore(tmp_path / "s.duckdb") as store:
        commit_first_batch(store, x, spec, "approx")
        out = recover_crash(store, spec, "approx", crashed_batch(store, x, SENSORS))
        report = score_recovery(store, spec, "approx", out.lost, x, spark_version="-",
                                seconds=0.0, rows_read=out.rows_read, input_rows=0,
                                stored=out.stored)  # fmt: skip
    assert out.stored == SENSORS and out.window_ids.tolist() == [1]
    assert report.window_ids == (1,) and report.windows_recovered == 1
    assert report.violation_rate == 0.0


def test_a_crash_that_took_no_batch_reports_no_window_lost(tmp_path: Path) -> None:
    """The feed had ended: ``simulate_failure`` stopped the query between batches and
    stood in ``CrashedBatch(run, -1, horizon + 1, horizon, 0)``. No row was lost: no
    window is lost or pending, and no contract is claimed."""
    x = history()
    spec = make_spec(x)
    manager, restart = crashed_manager(tmp_path, x, spec, "approx")
    try:
        horizon = manager._require_store().horizon()
        manager._crash = CrashedBatch(0, -1, horizon + 1, horizon, 0)
        report = manager.recover()
        assert report.lost_rows == (6, 5)
        assert (report.windows_lost, report.windows_recovered) == (0, 0)
        assert (report.windows_pending, report.windows_unrecoverable) == (0, 0)
        assert "no row lost" in report.note and "contract covers" not in report.note
        assert "no window was lost" in report.note
        assert restart.seed is not None and restart.seed.next_window == 1  # window 1 open
    finally:
        manager.close()
