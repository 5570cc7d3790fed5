"""A production job's backup that lost part of a committed batch, or is not a backup at all:
every reader (``recover``, ``status``, ``compact``) refuses in one line naming the batch and
its dates, or, asked to, rebuilds around the gap and says so. Never a silent partial answer.

The backup is the job's layout written by PyArrow (``bench.bench_compaction``), files and
metrics lines as the job writes them; ``test_hostile_job`` runs the real job.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from bench.bench_compaction import write_backup
from engine.job import compact
from tests.hostile.conftest import one_line_error, write_job_backup

BATCHES = 6


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    return write_job_backup(tmp_path, BATCHES)


def _recover(run_cli, backup: Path, *extra: str) -> tuple[int, str, str]:
    out = backup.parent / "rebuilt.csv"
    return run_cli("recover", "--config", backup.parent / "plan.json", "--backup", backup,
                   "--out", out, *extra)  # fmt: skip


def _part(backup: Path, batch: int) -> Path:
    return next((backup / f"batch_id={batch}").rglob("part-*.parquet"))


def _whole(run_cli, backup: Path) -> int:
    code, out, err = _recover(run_cli, backup)
    assert code == 0, err
    return json.loads(out)["backup_readings"]


DAMAGE = {
    "marker": lambda b: (b / "batch_id=2" / "_SUCCESS").unlink(),
    "newest_marker": lambda b: (b / f"batch_id={BATCHES - 1}" / "_SUCCESS").unlink(),
    "part_file": lambda b: _part(b, 3).unlink(),
    "truncated": lambda b: _part(b, 3).write_bytes(_part(b, 3).read_bytes()[:100]),
    "whole_batch": lambda b: shutil.rmtree(b / "batch_id=1"),
}
SAID = {
    "marker": "batch_id=2 has no _SUCCESS",
    "newest_marker": f"batch_id={BATCHES - 1} has no _SUCCESS, although the job recorded",
    "part_file": "batch_id=3 lacks its file date=",
    "truncated": "batch_id=3 has date=",
    "whole_batch": "batch_id=1 is gone, although the job recorded writing it",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_every_reader_refuses_a_committed_batch_that_is_not_whole(
    run_cli, backup: Path, damage: str
) -> None:
    whole = _whole(run_cli, backup)
    DAMAGE[damage](backup)
    day = "2016-09-0"  # the sample's first days
    for argv in (("status", "--backup", backup), ("compact", "--backup", backup, "--keep", "1")):
        line = one_line_error(*run_cli(*argv)[::2])
        assert SAID[damage] in line and day in line and "--allow-incomplete" in line
    code, _, err = _recover(run_cli, backup)
    line = one_line_error(code, err)
    assert SAID[damage] in line and f"readings of {day}" in line
    code, out, err = _recover(run_cli, backup, "--allow-incomplete")  # around it, said
    assert code == 0 and SAID[damage] in err and "rebuilt around it" in err
    assert json.loads(out)["backup_readings"] < whole


def test_a_garbage_or_empty_part_file_is_named(run_cli, backup: Path) -> None:
    for content in (b"", b"not parquet at all", b"PAR1" + b"\0" * 64):
        part = _part(backup, 4)
        part.write_bytes(content)
        _drop_file_lists(backup)  # as a job before file lists wrote it: caught on reading
        line = one_line_error(*_recover(run_cli, backup)[::2])
        assert str(part) in line and "not a readable Parquet file" in line


def test_a_landing_directory_is_not_a_backup(run_cli, tmp_path: Path, backup: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    pd.DataFrame(
        {"event_time": pd.date_range("2024-01-01", periods=3, freq="min", tz="UTC"),
         "sensor": "s000", "value": 1.0}
    ).to_parquet(landing / "part-0.parquet", coerce_timestamps="us")  # fmt: skip
    code, _, err = run_cli("recover", "--config", tmp_path / "plan.json", "--backup", landing,
                           "--out", tmp_path / "o.csv")  # fmt: skip
    line = one_line_error(code, err)
    assert "is not a job backup" in line and "plan_version" in line and "landing file" in line


def test_the_backup_is_one_dataset_to_duckdbs_first_query(tmp_path: Path) -> None:
    """``read_parquet('<backup>/**/*.parquet', hive_partitioning=true)`` reads the backup
    rows alone, before and after compaction; the results beside it are ``.pq``."""
    backup = tmp_path / "backup"
    write_backup(backup, BATCHES)  # with results, as the job writes them
    query = (
        f"SELECT count(*), count(DISTINCT batch_id) FROM "
        f"read_parquet('{backup}/**/*.parquet', hive_partitioning = true)"
    )
    rows, batches = duckdb.sql(query).fetchone()
    assert (rows, batches) == (20 * BATCHES, BATCHES)
    compact(backup, keep=2)
    assert duckdb.sql(query).fetchone()[0] == 20 * BATCHES


def test_an_earlier_versions_results_are_read_and_renamed_by_compact(
    run_cli, tmp_path: Path
) -> None:
    from engine.job.compaction import rename_old_results

    backup = tmp_path / "backup"
    write_backup(backup, BATCHES)
    before = json.loads(run_cli("status", "--backup", backup)[1])["summary"]
    for f in (backup / "_lacuna" / "results").rglob("*.pq"):
        f.rename(f.with_suffix(".parquet"))  # the layout an earlier version wrote
    glob = f"SELECT count(*) FROM read_parquet('{backup}/**/*.parquet', hive_partitioning=1)"
    with pytest.raises(duckdb.Error, match="Hive partition mismatch"):
        duckdb.sql(glob).fetchone()
    assert json.loads(run_cli("status", "--backup", backup)[1])["summary"] == before
    assert rename_old_results(backup) == BATCHES
    assert duckdb.sql(glob).fetchone()[0] == 20 * BATCHES
    assert json.loads(run_cli("status", "--backup", backup)[1])["summary"] == before


def _drop_file_lists(backup: Path) -> None:
    for f in (backup / "_lacuna" / "metrics").rglob("part-*.json"):
        line = json.loads(f.read_text())
        line.pop("backup_files", None)
        f.write_text(json.dumps(line) + "\n")


def _rewrite(part: Path, change) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.parquet as pq

    pq.write_table(change(pq.ParquetFile(part).read()), part)
    _drop_file_lists(part.parents[2])  # no recorded size: a writer other than the job's


def test_a_later_file_without_a_column_is_named_not_read_as_missing(run_cli, backup: Path) -> None:
    """The dataset takes its schema from the first file: a later one without ``value``
    (not the job's: the job records its files' sizes) was read as nulls, and recovery
    dropped its readings as missing with exit 0."""
    part = _part(backup, 4)
    _rewrite(part, lambda t: t.rename_columns(["reading" if c == "value" else c
                                               for c in t.column_names]))  # fmt: skip
    line = one_line_error(*_recover(run_cli, backup)[::2])
    assert "is not a job backup" in line and "batch_id=4" in line and "value" in line


def test_a_reading_without_a_plan_version_is_named(run_cli, backup: Path) -> None:
    import pyarrow as pa

    part = _part(backup, 2)
    nulls = pa.nulls(1, pa.int32())
    _rewrite(part, lambda t: t.set_column(t.schema.get_field_index("plan_version"), "plan_version",
                                          pa.concat_arrays([nulls] * t.num_rows)))  # fmt: skip
    line = one_line_error(*_recover(run_cli, backup)[::2])
    assert "without a plan_version" in line and "batch_id=2" in line


def test_a_gap_outside_the_range_is_said_to_miss_nothing(run_cli, backup: Path) -> None:
    """Batch 2 (readings of 2016-09-02) lost its marker; a rebuild from 2016-09-03 reads
    around it and says that nothing in its range is missing, not that its steps are."""
    DAMAGE["marker"](backup)
    code, _, err = _recover(run_cli, backup, "--from", "2016-09-03T00:00", "--allow-incomplete")
    assert code == 0 and "batch_id=2 has no _SUCCESS" in err
    assert "outside the range rebuilt" in err and "its time steps are missing" not in err
    code, _, err = _recover(run_cli, backup, "--from", "2016-09-02T00:00", "--allow-incomplete")
    assert code == 0 and "its time steps are missing" in err
