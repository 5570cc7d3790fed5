"""The DuckDB backup store: idempotent batches, atomic transactions, clear errors."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.errors import EngineError, StoreError
from engine.store import RECOVERY_BATCH, BackupStore
from engine.store_records import BACKUP_ROW_FIXED_BYTES, BatchWrite, backup_bytes


def backup_rows(seqs: range, sensors: tuple[str, ...] = ("a", "bb")) -> pd.DataFrame:
    seq = np.repeat(np.arange(seqs.start, seqs.stop), len(sensors))
    return pd.DataFrame(
        {
            "seq": seq,
            "event_time": pd.to_datetime(seq, unit="h"),
            "sensor": np.tile(sensors, len(seqs)),
            "value": seq * 1.5,
        }
    )


def result_rows(window_id: int, sensors: tuple[str, ...] = ("a", "bb")) -> pd.DataFrame:
    n = len(sensors)
    return pd.DataFrame(
        {
            "window_id": [window_id] * n,
            "window_start": pd.to_datetime([window_id] * n, unit="h"),
            "window_end": pd.to_datetime([window_id + 1] * n, unit="h"),
            "sensor": list(sensors),
            "value": np.arange(n, dtype=float),
            "kind": ["live"] * n,
            "version": [1] * n,
            "final": [True] * n,
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> BackupStore:
    s = BackupStore(tmp_path / "store.duckdb")
    yield s
    s.close()


def test_a_batch_is_written_once_even_when_replayed(store: BackupStore) -> None:
    write = BatchWrite(run=0, batch_id=0, backup=backup_rows(range(4)), results=result_rows(0))
    assert store.commit_batch(write) is True
    assert store.commit_batch(write) is False  # the replay is skipped
    assert len(store.read_table("backup")) == 8
    assert len(store.read_results()) == 2
    assert store.is_committed(0, 0) and not store.is_committed(1, 0)


def test_same_batch_id_in_a_new_run_is_a_new_batch(store: BackupStore) -> None:
    store.commit_batch(BatchWrite(run=0, batch_id=0, backup=backup_rows(range(2))))
    store.commit_batch(BatchWrite(run=1, batch_id=0, backup=backup_rows(range(2, 3))))
    assert store.next_run() == 2
    assert store.committed_batches(0) == [0] and store.committed_batches(1) == [0]
    assert len(store.read_table("backup")) == 6


def test_a_failure_inside_the_transaction_leaves_nothing(store: BackupStore) -> None:
    write = BatchWrite(
        run=0,
        batch_id=3,
        backup=backup_rows(range(5)),
        results=result_rows(1),
        max_seq=4,
        state=b"snapshot",
    )

    def crash() -> None:
        raise RuntimeError("power cut after the rows were inserted")

    with pytest.raises(RuntimeError, match="power cut"):
        store.commit_batch(write, before_commit=crash)
    assert store.read_table("backup").empty and store.read_results().empty
    assert not store.is_committed(0, 3) and store.load_state(0) is None
    assert store.horizon() == -1
    # the replay after the crash writes everything exactly once
    assert store.commit_batch(write) is True
    assert len(store.read_table("backup")) == 10 and store.load_state(0) == b"snapshot"
    assert store.horizon() == 4 and store.last_window() == 1


def test_backup_bytes_count_the_row_format(store: BackupStore) -> None:
    rows = backup_rows(range(3))  # sensors "a" (1 byte) and "bb" (2 bytes)
    expected = 6 * BACKUP_ROW_FIXED_BYTES + 3 * 1 + 3 * 2
    assert backup_bytes(rows) == expected
    store.commit_batch(BatchWrite(run=0, batch_id=0, backup=rows))
    store.commit_batch(BatchWrite(run=0, batch_id=1, backup=None))  # a 'none'-mode batch
    size = store.size()
    assert (size.backup_rows, size.backup_bytes) == (6, expected)
    assert size.file_bytes > 0


def test_read_backup_filters_range_and_sensors(store: BackupStore) -> None:
    store.commit_batch(BatchWrite(run=0, batch_id=0, backup=backup_rows(range(10))))
    table = store.read_backup(2, 4, ["bb"])
    frame = table.to_pandas()
    assert frame["seq"].tolist() == [2, 3, 4] and set(frame["sensor"]) == {"bb"}
    assert frame["value"].tolist() == [3.0, 4.5, 6.0]
    assert store.read_backup(2, 4).num_rows == 6


def test_state_keeps_only_the_latest_snapshot_per_run(store: BackupStore) -> None:
    store.commit_batch(BatchWrite(run=0, batch_id=0, state=b"one"))
    store.commit_batch(BatchWrite(run=0, batch_id=1, state=b"two"))
    assert store.load_state(0) == b"two"
    store.delete_state(0)
    assert store.load_state(0) is None


def test_recovery_results_are_idempotent_too(store: BackupStore) -> None:
    write = BatchWrite(run=0, batch_id=RECOVERY_BATCH, results=result_rows(5))
    assert store.commit_batch(write) and not store.commit_batch(write)
    assert store.committed_batches(0) == []  # recovery is not a stream batch
    assert store.last_window() == 5


def test_plan_log_and_late_rows(store: BackupStore) -> None:
    store.log_plan("start", ["a"])
    late = backup_rows(range(1)).assign(arrival_time=pd.Timestamp("2020-01-01"))
    store.commit_batch(BatchWrite(run=0, batch_id=0, late=late))
    log = store.read_table("plan_log")
    assert log["reason"].tolist() == ["start"] and log["backup_sensors"].tolist() == ['["a"]']
    assert len(store.read_table("late")) == 2


def test_concurrent_writers_never_duplicate(store: BackupStore) -> None:
    writes = [
        BatchWrite(run=0, batch_id=i % 5, backup=backup_rows(range(i % 5, i % 5 + 1)))
        for i in range(20)
    ]
    outcomes: list[bool] = []
    threads = [
        threading.Thread(target=lambda w=w: outcomes.append(store.commit_batch(w))) for w in writes
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == 20  # no writer died on a conflict
    assert sum(outcomes) == 5
    assert len(store.read_table("backup")) == 10


def test_unwritable_path_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    target = blocker / "store.duckdb"
    with pytest.raises(StoreError, match="a_file") as info:
        BackupStore(target)
    assert isinstance(info.value, EngineError)
    assert str(target) in str(info.value)


def test_unknown_table_is_refused(store: BackupStore) -> None:
    with pytest.raises(StoreError, match="no table"):
        store.read_table("secrets; DROP TABLE backup")


def test_a_second_store_on_the_same_file_sees_the_data(tmp_path: Path) -> None:
    path = tmp_path / "shared.duckdb"
    with BackupStore(path) as first:
        first.commit_batch(BatchWrite(run=0, batch_id=0, backup=backup_rows(range(2))))
        with BackupStore(path) as second:
            assert second.is_committed(0, 0)
            assert not second.commit_batch(BatchWrite(run=0, batch_id=0))
    with BackupStore(path) as reopened:
        assert reopened.size().backup_rows == 4
