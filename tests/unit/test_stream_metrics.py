"""The live pipeline's metrics history: bounded, patchable, computed from the board."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from engine.disorder import DisorderStage
from engine.errors import ParameterError
from engine.live.metrics import (
    BatchPoint,
    MetricsHistory,
    PipelineEvent,
    summarise,
    worst_sensors,
)
from engine.live.status import StatusBoard
from engine.query import WindowQuery

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def point(i: int, run: int = 0) -> BatchPoint:
    return BatchPoint(at=(T0 + timedelta(seconds=i)).isoformat(), run=run, batch_id=i, input_rows=i)


def test_history_keeps_only_the_last_capacity_points() -> None:
    h = MetricsHistory(capacity=5)
    for i in range(12):
        h.append(point(i))
    assert [p.batch_id for p in h.points()] == [7, 8, 9, 10, 11]
    assert h.dropped == 7 and h.last() == point(11)


def test_patch_changes_the_newest_point_of_that_run_and_batch() -> None:
    h = MetricsHistory(capacity=10)
    h.append(point(3, run=0))
    h.append(point(3, run=1))  # a restarted query counts batches from 0 again
    assert h.patch(1, 3, duration_ms=250.0)
    assert [p.duration_ms for p in h.points()] == [None, 250.0]
    assert not h.patch(2, 3, duration_ms=1.0)


def test_bad_capacity_and_event_kind_name_the_value() -> None:
    with pytest.raises(ParameterError, match="got 0"):
        MetricsHistory(capacity=0)
    with pytest.raises(ParameterError, match="'crash'"):
        PipelineEvent(at="x", kind="crash", text="")


def test_worst_sensors_and_summary() -> None:
    worst = worst_sensors({"a": 1, "b": 3, "c": 3}, {"a": 10, "b": 10, "c": 30, "d": 0}, k=2)
    assert worst == (("b", 0.3), ("a", 0.1))
    assert summarise([2, None, 4, 9]) == {"count": 3, "min": 2.0, "avg": 5.0, "max": 9.0}
    assert summarise([None]) == {"count": 0, "min": None, "avg": None, "max": None}


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t


def test_board_records_rate_backlog_and_shadow_per_batch() -> None:
    clock = Clock()
    board = StatusBoard(clock)
    landed = [0]
    board.watch_feed(lambda: landed[0])
    board.update(run=4)
    landed[0] = 300
    board.add(input_rows=100)
    first = board.record_batch(0, input_rows=100, backup_rows=20)
    assert first.rows_per_second is None and first.backlog == 200 and first.run == 4
    clock.t = T0 + timedelta(seconds=2)
    errors = np.array([[0.1, 2.0, 0.0], [0.2, 0.1, 3.0]])
    board.record_shadow(errors, ["s0", "s1", "s2"], ["s1", "s2"], eps=1.0)
    board.add(input_rows=50)
    second = board.record_batch(1, input_rows=50)
    assert second.rows_per_second == pytest.approx(25.0)  # 50 rows in 2 s
    assert second.backlog == 150
    assert second.shadow_pooled == pytest.approx(0.5)  # 2 misses in 4 (window, rebuilt) pairs
    assert second.shadow_worst == (("s1", 0.5), ("s2", 0.5))
    assert board.patch_batch(4, 1, duration_ms=900.0)
    assert board.history.points()[-1].duration_ms == 900.0
    event = board.mark("recovery", "rebuilt", seconds=1.5, rows=10)
    assert event.batch_id == 1 and event.run == 4 and board.history.events() == (event,)


def test_disorder_stage_reports_k_and_the_watermark_gap() -> None:
    times = np.array(["2026-01-01T00:00", "2026-01-01T01:00"], dtype="datetime64[ns]")
    stage = DisorderStage.for_history(times, WindowQuery(1.0, 0.05, 2))
    assert stage.metrics() == {"k_s": None, "watermark_gap_s": None}
    ts = pd.to_datetime(["2026-01-01T02:00", "2026-01-01T00:00"], utc=True)
    arrival = pd.to_datetime(["2026-01-01T02:00", "2026-01-01T03:00"], utc=True)
    batch = pd.DataFrame(
        {"seq": [0, 1], "event_time": ts, "arrival_time": arrival, "sensor": "a", "value": 1.0}
    )
    stage.process(batch)
    m = stage.metrics()
    buffer = stage.processor.buffer
    assert m["k_s"] == pytest.approx(buffer.current_k())
    assert m["k_s"] > 0  # a two-hour delay was seen; alpha starts at alpha0
    # arrival clock 03:00, t_max 02:00: gap = 1 h + K
    assert m["watermark_gap_s"] == pytest.approx(3600.0 + m["k_s"])
