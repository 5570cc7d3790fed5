"""Reading the job's backup dataset with DuckDB: exactly once, as named, pruned."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.backup.dataset import TimeRange, committed_files, read_backup
from engine.errors import DataError


def _part(root: Path, date: str, name: str, hours: list[int], value: float) -> Path:
    folder = root / f"date={date}"
    folder.mkdir(parents=True, exist_ok=True)
    times = pd.DatetimeIndex([f"{date}T{h:02d}:00:00" for h in hours]).tz_localize("UTC")
    table = pa.table(
        {
            "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "sensor": ["a"] * len(hours),
            "value": [value] * len(hours),
            "plan_version": pa.array([1] * len(hours), pa.int32()),
        }
    )
    path = folder / name
    pq.write_table(table, path)
    return path


def _log(root: Path, batch: str, files: list[Path], written_at: Path | None = None) -> None:
    meta = root / "_spark_metadata"
    meta.mkdir(exist_ok=True)
    base = written_at or root
    lines = ["v1"] + [
        json.dumps({"path": (base / f.relative_to(root)).as_uri(), "action": "add"}) for f in files
    ]
    (meta / batch).write_text("\n".join(lines) + "\n")


def test_only_files_in_sparks_log_are_read(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    kept = _part(root, "2020-01-01", "part-0.parquet", [0, 1], 1.0)
    orphan = _part(root, "2020-01-01", "part-1.parquet", [2], 9.0)  # failed attempt
    _log(root, "0", [kept])
    assert committed_files(root) == [kept]
    assert orphan.exists()
    assert read_backup(root)["value"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "text", ['v1\n{"path": "file:///x/y.parq', "v1\n[1, 2]\n", "v1\n{}\n", "v1\n\xff\n"]
)
def test_an_unreadable_spark_log_is_named(tmp_path: Path, text: str) -> None:
    """A truncated or garbled batch of Spark's file-sink log is named, not a traceback."""
    root = tmp_path / "backup"
    kept = _part(root, "2020-01-01", "part-0.parquet", [0, 1], 1.0)
    _log(root, "0", [kept])
    (root / "_spark_metadata" / "1").write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError, match=r"Spark's file-sink log .*_spark_metadata/1 is unreadable"):
        read_backup(root)


def test_job_batches_count_only_once_committed(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    done = _part(root / "batch_id=0", "2020-01-01", "part-0.parquet", [0, 1], 1.0)
    (root / "batch_id=0" / "_SUCCESS").touch()
    torn = _part(root / "batch_id=1", "2020-01-01", "part-0.parquet", [2, 3], 9.0)  # in flight
    assert committed_files(root) == [done]
    assert read_backup(root)["value"].tolist() == [1.0, 1.0]  # the newest: not committed yet
    later = _part(root / "batch_id=2", "2020-01-02", "part-0.parquet", [0], 2.0)
    (root / "batch_id=2" / "_SUCCESS").touch()
    assert committed_files(root) == [done, later]
    assert torn.exists()
    # batches commit in order: one without its marker before a committed one lost it
    with pytest.raises(DataError, match="batch_id=1 has no _SUCCESS, although later"):
        read_backup(root)
    kept = read_backup(root, allow_incomplete=True)  # around the gap, as asked
    assert kept["value"].tolist() == [1.0, 1.0, 2.0]
    day2 = TimeRange.parse("2020-01-02T00:00", None)
    assert read_backup(root, day2, allow_incomplete=True)["value"].tolist() == [2.0]


def test_compacted_log_and_moved_dataset(tmp_path: Path) -> None:
    root = tmp_path / "moved"
    a = _part(root, "2020-01-01", "a.parquet", [0], 1.0)
    b = _part(root, "2020-01-02", "b.parquet", [0], 2.0)
    c = _part(root, "2020-01-03", "c.parquet", [0], 3.0)
    elsewhere = Path("/somewhere/else/backup")  # where Spark wrote it before it was copied
    _log(root, "0", [c], elsewhere)  # superseded by the compaction below
    _log(root, "9.compact", [a, b], elsewhere)
    _log(root, "10", [c], elsewhere)
    assert committed_files(root) == [a, b, c]


def test_path_is_read_as_named_not_as_a_glob(tmp_path: Path) -> None:
    tricky = tmp_path / "site[1]*?"
    lookalike = tmp_path / "site1"  # what "site[1]" would match as a glob
    _part(tricky, "2020-01-01", "p.parquet", [0], 5.0)
    _part(lookalike, "2020-01-01", "p.parquet", [0], 7.0)
    assert read_backup(tricky)["value"].tolist() == [5.0]
    assert read_backup(tricky.as_uri())["value"].tolist() == [5.0]


def test_time_range_reads_only_its_partitions(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    for day, v in (("2020-01-01", 1.0), ("2020-01-02", 2.0), ("2020-01-03", 3.0)):
        _part(root, day, "p.parquet", [0, 12, 23], v)
    # a corrupt file in a partition outside the range proves it is never opened
    (root / "date=2020-01-03" / "p.parquet").write_bytes(b"not parquet")
    span = TimeRange.parse("2020-01-01T12:00", "2020-01-02T12:00")
    got = read_backup(root, span)
    assert got["value"].tolist() == [1.0, 1.0, 2.0]
    assert got["event_time"].iloc[0] == pd.Timestamp("2020-01-01T12:00")


def test_a_partition_that_is_not_a_date_is_read_not_a_crash(tmp_path: Path) -> None:
    """Spark puts rows whose partition value is null under Hive's default name."""
    root = tmp_path / "backup"
    _part(root, "2020-01-01", "p.parquet", [0, 12], 1.0)
    odd = root / "date=__HIVE_DEFAULT_PARTITION__"
    odd.mkdir()
    (root / "date=2020-01-01" / "p.parquet").rename(odd / "p.parquet")
    _part(root, "2020-01-02", "p.parquet", [0], 2.0)
    assert read_backup(root)["value"].tolist() == [1.0, 1.0, 2.0]
    span = TimeRange.parse("2020-01-02", None)
    assert read_backup(root, span)["value"].tolist() == [2.0]  # the rows' times decide
    assert span.keeps({"date": "__HIVE_DEFAULT_PARTITION__"})


def test_hour_partitions_prune_too() -> None:
    span = TimeRange.parse("2020-01-01T10:30", "2020-01-01T11:00")
    assert span.keeps({"date": "2020-01-01", "hour": "10"})
    assert not span.keeps({"date": "2020-01-01", "hour": "11"})
    assert not span.keeps({"date": "2020-01-01", "hour": "09"})
    assert span.keeps({"date": "2020-01-01"}) and not span.keeps({"date": "2020-01-02"})


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [("yesterday", None, "--from"), ("2020-01-02", "2020-01-01", "after")],
)
def test_bad_ranges_name_the_value(start: str, end: str | None, message: str) -> None:
    with pytest.raises(DataError, match=message):
        TimeRange.parse(start, end)


def test_remote_uri_is_a_clear_error() -> None:
    with pytest.raises(DataError, match="s3a"):
        read_backup("s3a://bucket/backup")
