"""The job's kept events read back newest first, one batch's in the order they happened."""

from __future__ import annotations

import json
from pathlib import Path

from engine.job.events import DurableLog
from engine.job.status import _events


class LocalWrites:
    """``DurableFiles.write`` on a local path (the only call ``DurableLog`` makes)."""

    def write(self, uri: str, data: bytes) -> None:
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        Path(uri).write_bytes(data)


def test_one_batchs_events_read_back_in_the_order_they_were_kept(tmp_path: Path) -> None:
    seen: list[dict] = []
    log = DurableLog(LocalWrites(), str(tmp_path), seen.append)  # type: ignore[arg-type]
    log({"event": "alert", "batch_id": 11})
    log({"event": "progress", "batch_id": 12})  # not notable: stdout only
    log({"event": "alert", "batch_id": 12})
    log({"event": "replan_started", "batch_id": 12})
    log({"event": "replan", "plan_version": 2, "first_batch": 13})  # kept under batch 12
    log({"event": "control", "plan_version": 3, "first_batch": 13})
    assert len(seen) == 6 and "logged_at" not in seen[1]
    order = [(e["event"], e.get("batch_id", e.get("first_batch"))) for e in _events(tmp_path)]
    assert order == [("control", 13), ("replan", 13), ("replan_started", 12), ("alert", 12),
                     ("alert", 11)]  # fmt: skip


def test_events_kept_before_their_time_was_recorded_read_by_name(tmp_path: Path) -> None:
    for name in ("000000000003-alert.json", "000000000003-replan.json", "000000000001-x.json"):
        (tmp_path / name).write_text(json.dumps({"event": name[13:-5]}))
    assert [e["event"] for e in _events(tmp_path)] == ["replan", "alert", "x"]


def test_readings_stamped_in_the_future_are_kept_as_an_event(tmp_path: Path) -> None:
    """They are backed up but left out of every window: ``status`` and the Production page
    must be able to say so, not only the run's stderr."""
    log = DurableLog(LocalWrites(), str(tmp_path), lambda _: None)  # type: ignore[arg-type]
    log({"event": "future_readings", "batch_id": 4, "future_readings": 3})
    assert [e["event"] for e in _events(tmp_path)] == ["future_readings"]
