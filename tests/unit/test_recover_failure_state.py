"""A recovery that fails leaves the live pipeline failed, said, with Recover offered again:
it was left "recovering", with no error shown and Recover disabled. No Spark: the crash
recovery fails on the store before any query would start."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.data import load_history
from engine.errors import EngineError
from engine.live.failure import CrashedBatch
from engine.live.manager import PipelineManager
from engine.live.run_config import RunConfig
from engine.live.spec import PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.query import WindowQuery
from tests.helpers import SMALL_SAMPLE, SMALL_SENSORS, fit_map

BACKUP = ("Dongsi_TEMP", "Aotizhongxin_PM2.5")


def _crashed(tmp_path: Path, crash: CrashedBatch) -> PipelineManager:
    """A manager in the state a crash of ``crash`` left it (no Spark: the store only)."""
    values = load_history(SMALL_SAMPLE).select(SMALL_SENSORS).values[:56]
    query = WindowQuery(1.0, 0.05, 8, slide=4, exposure=3)
    spec = StreamSpec(SMALL_SENSORS, BACKUP, fit_map(values, SMALL_SENSORS, BACKUP), query)
    paths = PipelinePaths(tmp_path)
    paths.ensure()
    manager = PipelineManager()
    manager._store = BackupStore(paths.store_file, None, paths.backup_uri)
    manager._config = RunConfig(spec, "approx", paths)
    manager._failed_run, manager._crash = 0, crash
    manager.board.update(state="failed")
    return manager


def test_a_failed_recovery_is_said_and_can_be_tried_again(tmp_path: Path) -> None:
    # as a crash left it, with the crashed batch's backup gone before Recover was pressed
    manager = _crashed(tmp_path, CrashedBatch(0, 7, 30, 32, 6))
    try:
        with pytest.raises(EngineError):
            manager.recover()
        status = manager.status()
        assert status.state == "failed"  # the Live page offers Recover in this state
        assert status.last_error is not None and status.last_error.startswith("recovery failed:")
        assert status.input_rows == 0  # the crashed batch's rows are counted once, on success
        with pytest.raises(EngineError):  # still there to recover, not "nothing to recover"
            manager.recover()
        assert manager.status().state == "failed"
    finally:
        manager.close()


def test_a_retried_recovery_counts_the_crashed_batch_once(tmp_path: Path) -> None:
    """The crash recovery committed the batch and counted it, then the restart failed;
    Recover again counted it twice (its rows and its micro-batch)."""
    manager = _crashed(tmp_path, CrashedBatch(0, 7, 30, 32, 0, readings=3))

    def no_restart(*_: object, **__: object) -> None:
        raise EngineError("the restarted query could not start")

    manager._new_pipeline = no_restart  # type: ignore[method-assign]
    try:
        for _ in range(2):
            with pytest.raises(EngineError, match="could not start"):
                manager.recover()
            status = manager.status()
            assert status.state == "failed" and (status.input_rows, status.batches) == (0, 0)
    finally:
        manager.close()
