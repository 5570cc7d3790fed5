"""The DuckDB backup store: idempotent batches, atomic transactions, clear errors; the
backup rows are a Parquet dataset read with DuckDB, only for committed batches."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import read_backup as production_read_backup
from engine.errors import EngineError, StoreError
from engine.live.records import BatchWrite
from engine.live.store import RECOVERY_BATCH, BackupStore
from tests.helpers import write_backup_batch


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


def spark_writes(store: BackupStore, run: int, batch_id: int, rows: pd.DataFrame) -> BatchWrite:
    """What the pipeline does before the store transaction: write the batch's Parquet
    directory (with ``_SUCCESS``); returns the store write that records it."""
    nbytes = write_backup_batch(store.batch_uri(run, batch_id), rows)
    return BatchWrite(run=run, batch_id=batch_id, backup_rows=len(rows), backup_bytes=nbytes)


def test_a_batch_is_written_once_even_when_replayed(store: BackupStore) -> None:
    write = spark_writes(store, 0, 0, backup_rows(range(4)))
    write = replace(write, results=result_rows(0))
    assert store.commit_batch(write) is True
    assert store.commit_batch(write) is False  # the replay is skipped
    assert len(store.read_table("backup")) == 8
    assert len(store.read_results()) == 2
    assert store.is_committed(0, 0) and not store.is_committed(1, 0)


def test_same_batch_id_in_a_new_run_is_a_new_batch(store: BackupStore) -> None:
    store.commit_batch(spark_writes(store, 0, 0, backup_rows(range(2))))
    store.commit_batch(spark_writes(store, 1, 0, backup_rows(range(2, 3))))
    assert store.next_run() == 2
    assert store.committed_batches(0) == [0] and store.committed_batches(1) == [0]
    backup = store.read_table("backup")
    keys = set(zip(backup["run"], backup["batch_id"], strict=True))
    assert len(backup) == 6 and sorted(keys) == [(0, 0), (1, 0)]


def test_a_crash_between_the_parquet_write_and_the_commit_neither_duplicates_nor_loses(
    store: BackupStore,
) -> None:
    write = spark_writes(store, 0, 3, backup_rows(range(5)))
    write = replace(write, results=result_rows(1), max_seq=4, state=b"snapshot")

    def crash() -> None:
        raise RuntimeError("power cut after the rows were inserted")

    with pytest.raises(RuntimeError, match="power cut"):
        store.commit_batch(write, before_commit=crash)
    # the batch's directory is complete (_SUCCESS) but the store has no marker: not read
    assert (Path(store.batch_uri(0, 3)) / "_SUCCESS").exists()
    assert store.read_table("backup").empty and store.read_results().empty
    assert store.size().backup_bytes == 0
    assert not store.is_committed(0, 3) and store.load_state(0) is None
    assert store.horizon() == -1
    # the replay overwrites the directory, then commits everything exactly once
    replay = spark_writes(store, 0, 3, backup_rows(range(5)))
    assert store.commit_batch(replace(write, backup_bytes=replay.backup_bytes)) is True
    backup = store.read_table("backup")
    assert len(backup) == 10 and not backup.duplicated(["seq", "sensor"]).any()
    assert store.load_state(0) == b"snapshot"
    assert store.horizon() == 4 and store.last_window() == 1


def test_a_committed_batch_without_its_success_marker_is_an_error_not_a_gap(
    store: BackupStore,
) -> None:
    store.commit_batch(spark_writes(store, 0, 0, backup_rows(range(3))))
    (Path(store.batch_uri(0, 0)) / "_SUCCESS").unlink()  # e.g. an overwrite cut short
    with pytest.raises(StoreError, match=r"batch 0 of run 0 .* no _SUCCESS"):
        store.read_backup(0, 10)
    with pytest.raises(StoreError, match="_SUCCESS"):
        store.size()


def test_size_counts_the_parquet_files_of_committed_batches(store: BackupStore) -> None:
    write = spark_writes(store, 0, 0, backup_rows(range(30)))
    store.commit_batch(write)
    store.commit_batch(BatchWrite(run=0, batch_id=1))  # a 'none'-mode batch: no directory
    spark_writes(store, 0, 2, backup_rows(range(30, 40)))  # an orphan: never committed
    size = store.size()
    files = sorted(Path(store.batch_uri(0, 0)).rglob("*.parquet"))
    assert len(files) == 2  # 30 hours span two days: two date partitions
    assert (size.backup_rows, size.backup_bytes) == (60, sum(f.stat().st_size for f in files))
    assert size.backup_bytes == write.backup_bytes and size.file_bytes > 0


def test_read_backup_filters_range_and_sensors(store: BackupStore) -> None:
    store.commit_batch(spark_writes(store, 0, 0, backup_rows(range(10))))
    table = store.read_backup(2, 4, ["bb"])
    assert table.column_names == ["seq", "event_time", "sensor", "value"]
    frame = table.to_pandas()
    assert frame["seq"].tolist() == [2, 3, 4] and set(frame["sensor"]) == {"bb"}
    assert frame["value"].tolist() == [3.0, 4.5, 6.0]
    assert frame["event_time"].tolist() == list(pd.to_datetime([2, 3, 4], unit="h"))
    assert store.read_backup(2, 4).num_rows == 6


def test_the_production_reader_reads_the_same_backup_without_spark(store: BackupStore) -> None:
    store.commit_batch(spark_writes(store, 0, 0, backup_rows(range(0, 30))))
    store.commit_batch(spark_writes(store, 1, 0, backup_rows(range(30, 50))))
    ours = store.read_table("backup").sort_values(["seq", "sensor"], ignore_index=True)
    theirs = production_read_backup(store.backup_uri)  # engine recover --backup DIR reads so
    assert theirs.columns.tolist() == ["event_time", "sensor", "value", "plan_version"]
    theirs = theirs.sort_values(["event_time", "sensor"], ignore_index=True)
    pd.testing.assert_frame_equal(
        theirs[["event_time", "sensor", "value"]], ours[["event_time", "sensor", "value"]]
    )


def test_the_backup_location_is_recorded_in_the_store(tmp_path: Path) -> None:
    elsewhere = tmp_path / "mnt" / "shared backup"
    with BackupStore(tmp_path / "s.duckdb", backup=elsewhere) as store:
        assert store.backup_uri == str(elsewhere)
        store.commit_batch(spark_writes(store, 0, 0, backup_rows(range(2))))
    assert (elsewhere / "run=0" / "batch_id=0" / "_SUCCESS").exists()
    with BackupStore(tmp_path / "s.duckdb") as reopened:  # a new process: no location given
        assert len(reopened.read_table("backup")) == 4
    with pytest.raises(StoreError, match="backs up to"):
        BackupStore(tmp_path / "s.duckdb", backup=tmp_path / "other")
    with BackupStore(tmp_path / "t.duckdb", backup="s3a://bucket/backup") as remote:
        assert remote.batch_uri(2, 5) == "s3a://bucket/backup/run=2/batch_id=5"
        with pytest.raises(StoreError, match="local or mounted"):
            remote.read_backup(0, 1)


def test_a_store_from_before_the_parquet_backup_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE backup (run INTEGER, seq BIGINT, value DOUBLE)")
        con.execute("INSERT INTO backup VALUES (0, 0, 1.0)")
    with pytest.raises(StoreError, match="archive this run"):
        BackupStore(path)


def test_state_keeps_only_the_latest_snapshot_per_run(store: BackupStore) -> None:
    store.commit_batch(BatchWrite(run=0, batch_id=0, state=b"one"))
    store.commit_batch(BatchWrite(run=0, batch_id=1, state=b"two"))
    assert store.load_state(0) == b"two"
    store.delete_state(0)
    assert store.load_state(0) is None


def test_a_seed_snapshot_that_fails_to_write_leaves_the_one_before(store: BackupStore) -> None:
    """The old snapshot goes in the transaction the new one comes in: a failed write (here
    a batch id DuckDB cannot store) leaves the run's last state, not none."""
    store.save_state(0, -1, b"seed")
    with pytest.raises(StoreError, match="cannot write the window state of run 0"):
        store.save_state(0, "not a batch id", b"lost")  # type: ignore[arg-type]
    assert store.load_state(0) == b"seed"


def test_recovery_results_are_idempotent_too(store: BackupStore) -> None:
    write = BatchWrite(run=0, batch_id=RECOVERY_BATCH, results=result_rows(5))
    assert store.commit_batch(write) and not store.commit_batch(write)
    assert store.committed_batches(0) == []  # recovery is not a stream batch
    assert store.last_window() == 5


def test_the_last_window_counts_reading_indexed_results_only(store: BackupStore) -> None:
    """A disorder stage's final results are windows of event time: after a gap in the
    data their ids run ahead, and a lost range judged from them would start late."""
    staged = result_rows(9).assign(kind="final")
    store.commit_batch(BatchWrite(run=0, batch_id=0, results=pd.concat([result_rows(3), staged])))
    assert store.last_window() == 3
    store.commit_batch(
        BatchWrite(run=0, batch_id=RECOVERY_BATCH, results=result_rows(4).assign(kind="recovered"))
    )
    assert store.last_window() == 4


def test_the_windows_total_counts_every_window_with_a_result_as_the_counter_does(
    store: BackupStore,
) -> None:
    """A resumed run's counter starts from ``totals``: the windows a stream batch closed
    (live, or holding recovered rows), a machine loss's recovered ones, each once; a
    disorder stage's final results are not windows of their own."""
    store.commit_batch(BatchWrite(run=0, batch_id=0, results=result_rows(0)))
    recovered = result_rows(1).assign(kind="recovered")
    store.commit_batch(BatchWrite(run=0, batch_id=RECOVERY_BATCH, results=recovered))
    closed = pd.concat([result_rows(2).assign(kind="recovered"), result_rows(3)])
    staged = result_rows(3).assign(kind="final")
    store.commit_batch(BatchWrite(run=1, batch_id=0, results=pd.concat([closed, staged])))
    assert store.totals()["windows"] == 4


def test_plan_log_and_late_rows(store: BackupStore) -> None:
    store.log_plan("start", ["a"])
    late = backup_rows(range(1)).assign(arrival_time=pd.Timestamp("2020-01-01"))
    store.commit_batch(BatchWrite(run=0, batch_id=0, late=late))
    log = store.read_table("plan_log")
    assert log["reason"].tolist() == ["start"] and log["backup_sensors"].tolist() == ['["a"]']
    assert len(store.read_table("late")) == 2


def test_concurrent_writers_never_duplicate(store: BackupStore) -> None:
    done = [spark_writes(store, 0, b, backup_rows(range(b, b + 1))) for b in range(5)]
    writes = [done[i % 5] for i in range(20)]
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
        first.commit_batch(spark_writes(first, 0, 0, backup_rows(range(2))))
        with BackupStore(path) as second:
            assert second.is_committed(0, 0)
            assert not second.commit_batch(BatchWrite(run=0, batch_id=0))
    with BackupStore(path) as reopened:
        assert reopened.size().backup_rows == 4
