"""When an operator's simulated failure strikes: inside an open window, within a bound."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from engine.live.failure import LET_THROUGH, FailureTrigger
from engine.live.records import RESULT_COLUMNS, BatchWrite
from engine.live.spec import StreamSpec
from engine.live.store import BackupStore
from engine.query import WindowQuery
from tests.helpers import fit_map

SENSORS = ("a", "b", "c")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def tumbling_spec() -> StreamSpec:
    x = np.random.default_rng(0).normal(size=(40, 3)).cumsum(axis=0)
    return StreamSpec(
        SENSORS,
        ("a",),
        fit_map(x, SENSORS, ("a",)),
        WindowQuery(0.5, 0.05, 4, slide=4, aggregate="avg"),
    )


def window_rows(window: int) -> pd.DataFrame:
    start = pd.Timestamp("2026-01-01") + pd.Timedelta(hours=4 * window)
    rows = [
        (window, start, start + pd.Timedelta(hours=3), s, 1.0, "live", 0, True) for s in SENSORS
    ]
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def commit(store: BackupStore, batch_id: int, max_seq: int, closed: list[int]) -> None:
    results = pd.concat([window_rows(j) for j in closed]) if closed else None
    store.commit_batch(BatchWrite(run=0, batch_id=batch_id, max_seq=max_seq, results=results))


def test_a_requested_failure_waits_for_an_open_window_but_not_forever(tmp_path: Path) -> None:
    """No Spark is needed to decide: the store says what a crash now would lose."""
    with BackupStore(tmp_path / "store.duckdb", lambda: T0) as store:
        trigger = FailureTrigger(store, tumbling_spec().slide)
        assert not trigger.strikes()  # nothing requested
        commit(store, 0, 3, [0])  # rows 0-3: window 0 closed, nothing open
        trigger.request()
        assert not trigger.strikes()  # a crash now would lose nothing: let it through
        commit(store, 1, 5, [])  # rows 4-5 of window 1: open
        assert trigger.strikes()

    with BackupStore(tmp_path / "edges.duckdb", lambda: T0) as store:
        trigger = FailureTrigger(store, tumbling_spec().slide)
        trigger.request()
        decisions = []
        for b in range(LET_THROUGH + 1):  # every batch a whole window: always on an edge
            commit(store, b, 4 * b + 3, [b])
            decisions.append(trigger.strikes())
        assert decisions == [False] * LET_THROUGH + [True]
