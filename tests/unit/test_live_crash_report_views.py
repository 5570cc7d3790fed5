"""What the Live page reads while a control call runs, and the dashboard's backup timing.

``report`` took the manager's lock, which ``simulate_failure`` holds until the query
dies (up to its 15 s grace) and ``recover`` through its Spark job: the page froze. The
history summary called the backup write plus the store's commit "store commit".
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from engine.errors import PipelineError
from engine.live import BatchPoint, PipelineEvent
from engine.live.failure import CrashedBatch
from tests.unit.test_live_crash_report_exact import crashed_manager, history, make_spec


def test_the_report_does_not_wait_for_a_control_call_holding_the_lock(tmp_path: Path) -> None:
    """While another thread holds the lock, ``report`` returns the report last scored of
    the same recovery at once; for a new recovery, or a control call before any report,
    it has none to give yet and says the pipeline is busy."""
    x = history()
    spec = make_spec(x)
    manager, _ = crashed_manager(tmp_path, x, spec, "approx")
    holding, done = threading.Event(), threading.Event()

    def control_call() -> None:  # as simulate_failure: holds the lock while it waits
        with manager._lock:
            holding.set()
            done.wait(30)

    try:
        horizon = manager._require_store().horizon()
        manager._crash = CrashedBatch(0, -1, horizon + 1, horizon, 0)
        scored = manager.recover()
        holder = threading.Thread(target=control_call, daemon=True)
        holder.start()
        assert holding.wait(10)
        got: list[object] = []
        reader = threading.Thread(target=lambda: got.append(manager.report()), daemon=True)
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "report() waited for the control call's lock"
        assert got[0] is scored
        assert manager._recovery is not None
        manager._recovery = replace(manager._recovery, seconds=1.0)  # a new recovery's
        with pytest.raises(PipelineError, match="busy with a control call"):
            manager.report()
    finally:
        done.set()
        manager.close()


def test_the_history_summary_says_the_backup_write_is_in_its_commit_time() -> None:
    """``store_ms`` runs from before the Parquet backup write to after the store's commit
    (``LivePipeline``): the row must say so, not "store commit"."""
    from ui import dashboard

    points = [
        BatchPoint(
            at=f"2026-11-26T06:00:0{i}+00:00",
            run=0,
            batch_id=i,
            input_rows=10,
            backup_rows=40,
            backup_bytes=640,
            store_ms=12.0 + i,
        )
        for i in range(3)
    ]
    events: list[PipelineEvent] = []
    table = dashboard.history_summary(points, events).set_index("")
    assert "store commit (ms)" not in table.index
    assert table.loc["backup write + store commit (ms)", "count"] == 3
