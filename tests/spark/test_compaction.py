"""Compaction of the production job's micro-batch directories, on a real job's output:
readers see the same rows, rates and metrics before and after, a crash at any step
leaves a readable backup, and the job resumes and compacts again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.backup.dataset import read_backup
from engine.errors import DataError, ParameterError, PipelineError
from engine.job.compaction import compact
from engine.job.status import read_job_status
from tests.production_reference import (
    BACKUP,
    feed,
    landed_sample,
    long_readings,
    run_landed,
)

pytestmark = pytest.mark.spark


def _batch_dirs(folder: Path) -> list[str]:
    return sorted(d.name for d in folder.iterdir() if d.name.startswith("batch_id="))


def _snapshot(backup: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    status = read_job_status(backup)
    rates = status.rates.sort_values(["plan_version", "sensor"]).reset_index(drop=True)
    return read_backup(backup), rates, status.batches


def test_compaction_keeps_every_reading_rate_and_metric_and_the_job_goes_on(
    spark: Any, tmp_path: Path
) -> None:
    rows = landed_sample(tmp_path, 96, rows_per_file=6, stop=60)  # 10 micro-batches
    run_landed(spark, tmp_path, tmp_path / "plan.json", max_files_per_trigger=1, replan=False)
    backup = tmp_path / "backup"
    before = _snapshot(backup)
    assert len(_batch_dirs(backup)) == 10

    report = compact(backup, keep=3)

    assert (report.first, report.last, report.batch_dirs) == (0, 6, 7)
    assert report.rows == 7 * 6 * len(BACKUP) and report.removed_dirs > 7
    assert _batch_dirs(backup) == ["batch_id=0-6", "batch_id=7", "batch_id=8", "batch_id=9"]
    assert _batch_dirs(backup / "_lacuna" / "metrics")[0] == "batch_id=0-6"
    after = _snapshot(backup)
    pd.testing.assert_frame_equal(after[0], before[0])  # every backup row, once
    pd.testing.assert_frame_equal(after[1], before[1])  # live rates over the same windows
    pd.testing.assert_frame_equal(after[2], before[2])  # one metrics line per batch
    assert spark.read.parquet(str(backup)).count() == len(before[0])  # Spark reads it too

    # the job resumes from its checkpoint beside the compacted batches, then compacts again
    feed(rows, tmp_path / "landing", rows_per_file=6, start=60)
    run_landed(spark, tmp_path, tmp_path / "plan.json", max_files_per_trigger=1, replan=False)
    again = compact(backup, keep=1)
    assert (again.first, again.last) == (7, 14)
    got = read_backup(backup)
    truth = long_readings(rows)
    assert len(got) == (truth["sensor"].isin(BACKUP)).sum()
    assert not got.duplicated(["event_time", "sensor"]).any()
    assert _batch_dirs(backup) == ["batch_id=0-6", "batch_id=15", "batch_id=7-14"]
    assert compact(backup, keep=1).batch_dirs == 0  # nothing old enough: a no-op


def test_a_crash_at_any_step_of_a_compaction_leaves_each_row_readable_once(
    spark: Any, tmp_path: Path
) -> None:
    landed_sample(tmp_path, 48, rows_per_file=12)
    run_landed(spark, tmp_path, tmp_path / "plan.json", max_files_per_trigger=1, replan=False)
    backup = tmp_path / "backup"
    want, rates, batches = _snapshot(backup)
    spare = tmp_path / "spare"
    shutil.copytree(backup, spare)

    compact(backup, keep=1)  # batches 0-2 folded, superseded ones deleted
    # crash after the marker, before the deletes: the old directories come back
    for name in ("batch_id=0", "batch_id=1", "batch_id=2"):
        shutil.copytree(spare / name, backup / name)
    assert _snapshot(backup)[0].equals(want)  # hidden by the compaction, not read twice
    # crash before the marker: the compacted directory is not committed yet
    os.remove(backup / "batch_id=0-2" / "_SUCCESS")
    for kind in ("results", "metrics"):
        os.remove(backup / "_lacuna" / kind / "batch_id=0-2" / "_SUCCESS")
        for name in _batch_dirs(spare / "_lacuna" / kind):
            if not (backup / "_lacuna" / kind / name).exists():
                shutil.copytree(spare / "_lacuna" / kind / name, backup / "_lacuna" / kind / name)
    now = _snapshot(backup)
    assert now[0].equals(want) and now[1].equals(rates) and now[2].equals(batches)
    report = compact(backup, keep=1)  # the next compaction finishes the job
    assert (report.first, report.last) == (0, 2)
    assert _batch_dirs(backup) == ["batch_id=0-2", "batch_id=3"]
    assert _snapshot(backup)[0].equals(want)


def test_compaction_refuses_to_hide_a_batch_without_its_marker(spark: Any, tmp_path: Path) -> None:
    """A batch among committed ones whose ``_SUCCESS`` is gone (damage, or a copy that
    missed it): a compaction over its range would hide its rows for good. Refused, and
    nothing is touched."""
    landed_sample(tmp_path, 48, rows_per_file=12)
    run_landed(spark, tmp_path, tmp_path / "plan.json", max_files_per_trigger=1, replan=False)
    backup = tmp_path / "backup"
    want = read_backup(backup)
    marker = backup / "batch_id=1" / "_SUCCESS"
    os.remove(marker)
    dirs = _batch_dirs(backup)
    with pytest.raises(DataError, match="batch_id=1 has no _SUCCESS, although the job recorded"):
        compact(backup, keep=1)
    assert _batch_dirs(backup) == dirs
    marker.touch()  # checked and restored: the compaction goes ahead, every row kept
    assert (compact(backup, keep=1).first, len(read_backup(backup))) == (0, len(want))


def test_compaction_refuses_what_is_not_a_jobs_backup(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no production job's backup"):
        compact(tmp_path)
    with pytest.raises(ParameterError, match="--keep must be at least 1"):
        compact(tmp_path, keep=0)


def test_a_new_checkpoint_over_a_backup_with_batches_is_refused(spark: Any, tmp_path: Path) -> None:
    """It would number its batches from 0 again and overwrite the backup's (or, after a
    compaction, write batches the compaction hides)."""
    landed_sample(tmp_path, 24, rows_per_file=12)
    run_landed(spark, tmp_path, tmp_path / "plan.json", replan=False)
    shutil.rmtree(tmp_path / "checkpoint")
    with pytest.raises(PipelineError, match="holds the micro-batches of another checkpoint"):
        run_landed(spark, tmp_path, tmp_path / "plan.json", replan=False)


def test_a_checkpoint_behind_its_backup_is_refused(spark: Any, tmp_path: Path) -> None:
    """A checkpoint restored from an older copy while the backup went on would number its
    next batches as ones the backup holds: written over them, or beside a compaction
    that hides them. Refused in one line; the checkpoint that wrote the backup resumes."""
    rows = landed_sample(tmp_path, 48, rows_per_file=12, stop=24)  # batches 0 and 1
    run_landed(spark, tmp_path, tmp_path / "plan.json", max_files_per_trigger=1, replan=False)
    old = tmp_path / "old_checkpoint"
    shutil.copytree(tmp_path / "checkpoint", old)
    feed(rows, tmp_path / "landing", rows_per_file=12, start=24)  # batches 2 and 3
    run_landed(spark, tmp_path, tmp_path / "plan.json", max_files_per_trigger=1, replan=False)
    want = read_backup(tmp_path / "backup")
    newest = tmp_path / "newest_checkpoint"
    shutil.move(tmp_path / "checkpoint", newest)
    shutil.copytree(old, tmp_path / "checkpoint")
    with pytest.raises(PipelineError, match="committed micro-batches up to 1, but backup") as e:
        run_landed(spark, tmp_path, tmp_path / "plan.json", replan=False)
    assert "\n" not in str(e.value)
    pd.testing.assert_frame_equal(read_backup(tmp_path / "backup"), want)  # untouched
    shutil.rmtree(tmp_path / "checkpoint")
    shutil.move(newest, tmp_path / "checkpoint")
    run_landed(spark, tmp_path, tmp_path / "plan.json", replan=False)  # resumes
