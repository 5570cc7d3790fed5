"""Which files a micro-batch read (the landing directory source's view of the file source's
log, plain and compacted) and which lack a landing column (their Parquet footers)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.job.landed_files import lacking_columns
from engine.stream.readings import READING_SCHEMA
from engine.stream.source import LandingDirSource


def _log(path: Path, entries: list[tuple[str, int]]) -> None:
    lines = ["v1"] + [json.dumps({"path": p, "timestamp": 0, "batchId": b}) for p, b in entries]
    path.write_text("\n".join(lines) + "\n")


def test_a_batchs_files_come_from_its_log_entry_or_the_compaction_holding_it(
    tmp_path: Path,
) -> None:
    log = tmp_path / "ck" / "sources" / "0"
    log.mkdir(parents=True)
    _log(log / "8", [("file:///l/a.parquet", 8)])
    # Spark folds batches 0..9 into 9.compact (the plain files of 0..8 are then deleted)
    _log(log / "9.compact", [("file:///l/a.parquet", 8), ("file:///l/b.parquet", 9),
                             ("file:///l/c.parquet", 9)])  # fmt: skip
    source = LandingDirSource("s3a://bucket/landing", None, READING_SCHEMA)
    ck = str(tmp_path / "ck")
    assert source.consumed(ck, [8]) == [Path("/l/a.parquet")]
    assert source.consumed(ck, [9]) == [Path("/l/b.parquet"), Path("/l/c.parquet")]
    assert source.consumed(f"file://{ck}", [8, 9, 10]) == [Path(f"/l/{n}.parquet") for n in "abc"]
    assert source.consumed(ck, [10]) == []  # not logged (yet)
    assert source.consumed("s3a://bucket/ck", [8]) == []  # not checked off a local path


def test_only_files_that_lack_a_landing_column_are_named(tmp_path: Path) -> None:
    good = pa.table({"event_time": [1], "sensor": ["a"], "value": [1.0]})
    pq.write_table(good, tmp_path / "good.parquet")
    pq.write_table(good.rename_columns(["time", "sensor", "reading"]), tmp_path / "bad.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")  # Spark's to refuse, not ours
    files = [tmp_path / f"{n}.parquet" for n in ("good", "bad", "junk", "gone")]
    assert lacking_columns(files) == [(files[1], ["event_time", "value"])]
