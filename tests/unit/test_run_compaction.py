"""Compaction of the live pipeline's Parquet backup: the store reads the same rows before
and after, each exactly once, through every crash point of a compaction; the bytes fall
to what the rows need; the newest batches stay as Spark wrote them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import read_backup as production_read_backup
from engine.backup.run_compaction import compact_run
from engine.backup.runs import compactions, local_root
from engine.errors import StoreError
from engine.live.records import BatchWrite
from engine.live.store import BackupStore
from tests.helpers import write_backup_batch

SENSORS = ("a", "bb", "c")


def rows_of(batch: int, per_batch: int = 3) -> pd.DataFrame:
    """``per_batch`` readings of every sensor, ten minutes apart: the run spans days, and a
    batch can too."""
    seq = np.repeat(np.arange(batch * per_batch, (batch + 1) * per_batch), len(SENSORS))
    return pd.DataFrame(
        {
            "seq": seq,
            "event_time": pd.to_datetime(seq * 10, unit="m"),
            "sensor": np.tile(SENSORS, per_batch),
            "value": seq * 1.5 + np.tile(np.arange(len(SENSORS)), per_batch),
        }
    )


@pytest.fixture
def store(tmp_path: Path) -> BackupStore:
    s = BackupStore(tmp_path / "store.duckdb")
    yield s
    s.close()


def commit(store: BackupStore, run: int, batches: range, empty: tuple[int, ...] = ()) -> None:
    """Spark's write and the store's commit of each batch (none of rows for ``empty``)."""
    for b in batches:
        if b in empty:
            store.commit_batch(BatchWrite(run=run, batch_id=b))
            continue
        rows = rows_of(b)
        nbytes = write_backup_batch(store.batch_uri(run, b), rows)
        store.commit_batch(
            BatchWrite(run=run, batch_id=b, backup_rows=len(rows), backup_bytes=nbytes)
        )


def everything(store: BackupStore) -> pd.DataFrame:
    return store.read_table("backup").sort_values(["run", "seq", "sensor"], ignore_index=True)


def run_dir(store: BackupStore, run: int = 0) -> Path:
    return local_root(store.backup_uri) / f"run={run}"


def test_compaction_keeps_every_row_once_and_shrinks_the_backup(store: BackupStore) -> None:
    commit(store, 0, range(40), empty=(5, 17))
    before, size_before = everything(store), store.size()
    done = store.compact(0, keep=1, least=32)
    assert done is not None and (done.first, done.last) == (0, 38)
    assert done.batches == 37 and done.rows == 37 * 3 * len(SENSORS)
    after = everything(store)
    pd.testing.assert_frame_equal(after, before)
    # the superseded directories are gone; the newest batch is as Spark wrote it
    names = sorted(d.name for d in run_dir(store).iterdir())
    assert names == ["batch_id=0-38", "batch_id=39"]
    size = store.size()
    assert size.backup_rows == size_before.backup_rows
    assert size.backup_bytes < size_before.backup_bytes / 4  # 2 files (two dates), not 38
    newest = sum(f.stat().st_size for f in Path(store.batch_uri(0, 39)).rglob("*.parquet"))
    assert done.bytes_before == size_before.backup_bytes - newest
    assert done.bytes_after == size.backup_bytes - newest
    # a range read (what recovery does) finds the rows in the compaction and beyond it
    window = store.read_backup(100, 119, sensors=["bb"]).to_pandas()
    assert window["seq"].tolist() == list(range(100, 120))
    assert (window["sensor"] == "bb").all()


def test_nothing_happens_below_the_threshold_or_within_keep(store: BackupStore) -> None:
    commit(store, 0, range(10))
    assert store.compact(0, keep=1, least=10) is None  # 9 eligible: one short
    assert store.compact(0, keep=0, least=10) is not None
    assert store.compact(0, keep=0, least=1) is None  # nothing plain is left


def test_compactions_are_merged_once_enough_exist(store: BackupStore) -> None:
    for step in range(4):
        commit(store, 0, range(3 * step, 3 * step + 3))
        done = store.compact(0, keep=0, least=3)
        assert done is not None and (done.first, done.last) == (3 * step, 3 * step + 2)
    spans = [(a, b) for a, b, _ in compactions(run_dir(store))]
    assert sorted(spans) == [(0, 2), (3, 5), (6, 8), (9, 11)]
    before = everything(store)
    merged = store.compact(0, keep=0, least=3)  # no plain batch left: four narrow ones merge
    assert merged is not None and (merged.first, merged.last, merged.batches) == (0, 11, 12)
    assert [d.name for d in run_dir(store).iterdir()] == ["batch_id=0-11"]
    pd.testing.assert_frame_equal(everything(store), before)
    assert store.compact(0, keep=0, least=3) is None  # one compaction: nothing to merge


def test_a_crash_before_the_marker_leaves_the_batches_as_they_were(
    store: BackupStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit(store, 0, range(6))
    before, size = everything(store), store.size()
    import engine.backup.run_compaction as rc

    def power_cut(path: Path, data: bytes) -> None:
        if path.name == "_SUCCESS":
            raise OSError("power cut before the marker")
        real(path, data)

    real = rc.replace_file
    monkeypatch.setattr(rc, "replace_file", power_cut)
    with pytest.raises(OSError, match="power cut"):
        store.compact(0, keep=1, least=2)
    assert (run_dir(store) / "batch_id=0-4").is_dir()  # written, never marked
    pd.testing.assert_frame_equal(everything(store), before)
    assert store.size().backup_bytes == size.backup_bytes
    monkeypatch.undo()
    assert store.compact(0, keep=1, least=2) is not None  # replaces the leftover
    pd.testing.assert_frame_equal(everything(store), before)


def test_a_crash_after_the_marker_hides_the_superseded_batches(store: BackupStore) -> None:
    commit(store, 0, range(6))
    before = everything(store)
    keepsake = run_dir(store).parent / "copies"
    shutil.copytree(run_dir(store), keepsake)
    store.compact(0, keep=1, least=2)
    for d in keepsake.iterdir():  # the deletions never happened
        if not (run_dir(store) / d.name).exists():
            shutil.copytree(d, run_dir(store) / d.name)
    assert len(list(run_dir(store).iterdir())) == 7
    pd.testing.assert_frame_equal(everything(store), before)  # each row once
    commit(store, 0, range(6, 9))
    store.compact(0, keep=1, least=2)  # the next compaction deletes the leftovers
    names = sorted(d.name for d in run_dir(store).iterdir())
    assert names == ["batch_id=0-4", "batch_id=5-7", "batch_id=8"]
    assert len(everything(store)) == 9 * 3 * len(SENSORS)


def test_a_merge_cut_short_in_its_deletions_is_finished_not_redone(store: BackupStore) -> None:
    """A merge of 0-1, 2-3 and 4-5 into 0-5 marked, then the process died having deleted
    only 0-1: the next compaction must not take 2-3 and 4-5 for compactions to merge
    again (into 0-5, the marked one it would replace); it deletes them."""
    for first in (0, 2, 4):
        commit(store, 0, range(first, first + 2))
        store.compact(0, keep=0, least=2)
    before = everything(store)
    leftovers = run_dir(store).parent / "leftovers"
    for name in ("batch_id=2-3", "batch_id=4-5"):
        shutil.copytree(run_dir(store) / name, leftovers / name)
    assert store.compact(0, keep=0, least=3) is not None  # the merge into 0-5
    for d in leftovers.iterdir():
        shutil.copytree(d, run_dir(store) / d.name)
    assert store.compact(0, keep=0, least=2) is None  # nothing to fold: 0-5 holds it all
    assert [d.name for d in run_dir(store).iterdir()] == ["batch_id=0-5"]
    pd.testing.assert_frame_equal(everything(store), before)
    with pytest.raises(StoreError, match="compacted already"):
        compact_run(local_root(store.backup_uri), 0, list(range(6)))
    pd.testing.assert_frame_equal(everything(store), before)


def test_a_replayed_batch_inside_a_compaction_is_not_read_twice(store: BackupStore) -> None:
    commit(store, 0, range(5))
    before = everything(store)
    store.compact(0, keep=1, least=2)
    write_backup_batch(store.batch_uri(0, 2), rows_of(2))  # Spark replays batch 2's write
    pd.testing.assert_frame_equal(everything(store), before)


def test_runs_are_compacted_apart_and_an_uncommitted_batch_is_never_taken(
    store: BackupStore,
) -> None:
    commit(store, 0, range(4))
    commit(store, 1, range(4))
    write_backup_batch(store.batch_uri(1, 4), rows_of(4))  # in flight: written, not committed
    before = everything(store)
    done = store.compact(1, keep=0, least=2)
    assert done is not None and (done.run, done.first, done.last) == (1, 0, 3)
    pd.testing.assert_frame_equal(everything(store), before)
    assert (run_dir(store, 1) / "batch_id=4").is_dir()
    assert len(list(run_dir(store, 0).iterdir())) == 4


def test_a_committed_batch_whose_files_are_gone_stops_the_compaction(store: BackupStore) -> None:
    commit(store, 0, range(4))
    shutil.rmtree(Path(store.batch_uri(0, 1)))
    with pytest.raises(StoreError, match=r"batch 1 of run 0 .* no _SUCCESS"):
        store.compact(0, keep=0, least=2)
    assert compactions(run_dir(store)) == []
    assert (run_dir(store) / "batch_id=0").is_dir()


def test_the_production_reader_reads_a_compacted_run(store: BackupStore) -> None:
    commit(store, 0, range(6))
    commit(store, 1, range(3))
    root = local_root(store.backup_uri)
    before = [production_read_backup(d) for d in (run_dir(store), root)]
    compact_run(root, 0, list(range(5)))
    after = [production_read_backup(d) for d in (run_dir(store), root)]  # recover --backup
    for was, now in zip(before, after, strict=True):
        assert len(now) == len(was) > 0
        pd.testing.assert_frame_equal(now.reset_index(drop=True), was.reset_index(drop=True))


def test_a_compaction_folds_in_one_it_spans_and_refuses_to_hide_a_batch_not_given(
    store: BackupStore,
) -> None:
    commit(store, 0, range(7))
    root = local_root(store.backup_uri)
    before = everything(store)
    compact_run(root, 0, [2, 3, 4])
    with pytest.raises(StoreError, match="would hide batch 1, which was not given"):
        compact_run(root, 0, [0, 5, 6])
    done = compact_run(root, 0, [0, 1, 5, 6])  # 2-4 lies inside: folded in, files and all
    assert (done.first, done.last) == (0, 6)
    assert [d.name for d in run_dir(store).iterdir()] == ["batch_id=0-6"]
    pd.testing.assert_frame_equal(everything(store), before)


def test_a_compacted_backup_costs_about_its_share_of_the_readings(tmp_path: Path) -> None:
    """The long layout repeats each reading's time and index: in Spark's small files that
    repeat is paid per sensor backed up, so a third of the sensors cost well over a third
    of the bytes. Compacted, a backup of a third of the sensors is within 5 points of a
    third of the full backup's bytes."""
    rng = np.random.default_rng(7)
    sensors = tuple(f"s{i:02d}" for i in range(12))
    steps = 600
    seq = np.repeat(np.arange(steps), len(sensors))
    full_rows = pd.DataFrame(
        {
            "seq": seq,
            "event_time": pd.to_datetime(seq, unit="m"),
            "sensor": np.tile(sensors, steps),
            "value": 20 + 5 * rng.standard_normal(len(seq)),
        }
    )
    sizes = {}
    for name, keep in (("full", sensors), ("third", sensors[:4])):
        with BackupStore(tmp_path / name / "store.duckdb") as s:
            rows = full_rows[full_rows["sensor"].isin(keep)]
            for b in range(40):
                part = rows[(rows["seq"] >= 15 * b) & (rows["seq"] < 15 * (b + 1))]
                nbytes = write_backup_batch(s.batch_uri(0, b), part)
                s.commit_batch(
                    BatchWrite(run=0, batch_id=b, backup_rows=len(part), backup_bytes=nbytes)
                )
            written = s.size().backup_bytes
            assert s.compact(0, keep=0, least=2) is not None
            sizes[name] = (written, s.size().backup_bytes)
            assert len(s.read_table("backup")) == len(rows)
    written, at_rest = (sizes["third"][i] / sizes["full"][i] for i in (0, 1))
    assert at_rest <= 1 / 3 + 0.05 < written
