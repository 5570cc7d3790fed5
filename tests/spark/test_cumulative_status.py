"""The live dashboard's counters go on across a Stop and Resume in the same process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.live.manager import PipelineManager
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.stream.session import SparkSettings

pytestmark = pytest.mark.spark

LOCAL = SparkSettings(master="local[2]", shuffle_partitions=2)
FAST = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0)


def test_stop_then_resume_keeps_every_counter_and_the_shadow_tallies(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    manager = PipelineManager(LOCAL)
    paths = PipelinePaths(tmp_path)
    n = len(spec.sensors)
    try:
        manager.start(history, spec, "approx", paths, rows_per_file=5, options=FAST, stop_row=40)
        manager.drain(120)
        manager.stop()
        before = manager.status()
        assert before.state == "stopped" and before.input_rows == 40 * n
        assert before.shadow_windows > 0 and before.shadow_worst_rate is not None
        manager.start(history, spec, "approx", paths, rows_per_file=5, options=FAST,
                      leftovers="resume")  # fmt: skip
        manager.drain(120)
        after = manager.status()
        assert after.input_rows == 96 * n  # 40 rows before the stop, 56 after
        assert after.batches > before.batches and after.backup_rows > before.backup_rows
        assert after.windows_emitted > before.windows_emitted
        assert after.shadow_windows > before.shadow_windows  # not restarted from 0
        assert after.feed.readings == after.feed.total_readings == 96 * n
        assert not after.feed.stopped
        assert after.restores == 1 and after.last_restore is not None
        assert after.last_restore.kind == "resume" and after.last_restore.resumed_at_row == 40
        kinds = [e.kind for e in manager.board.history.events()]
        assert kinds.count("resume") == 1
        points = manager.board.history.points()
        assert sum(p.input_rows for p in points) == 96 * n  # the series goes on too
    finally:
        manager.close()
