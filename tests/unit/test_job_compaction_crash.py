"""A production job's compaction cut short at any point, then run again, keeps every backup
row, shadow result and metrics line once; two compactions at once are refused.

The backup is the job's layout written by PyArrow (``bench.bench_compaction``);
``tests/spark/test_compaction.py`` compacts a real job's output.
"""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

import pandas as pd
import pytest

import engine.job.compaction as compaction
from bench.bench_compaction import write_backup
from engine.backup.dataset import read_backup
from engine.errors import StoreError
from engine.job.status import read_job_status

BATCHES = 8


class Killed(BaseException):
    """The process dies here (not an error any code would catch)."""


def record(backup: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """What the readers see: the backup rows, the live rates, one metrics row per batch."""
    status = read_job_status(backup)
    rates = status.rates.sort_values(["plan_version", "sensor"]).reset_index(drop=True)
    rows = read_backup(backup).sort_values(["event_time", "sensor"]).reset_index(drop=True)
    return rows, rates, status.batches.reset_index(drop=True)


def same(got: tuple[pd.DataFrame, ...], want: tuple[pd.DataFrame, ...]) -> None:
    for g, w in zip(got, want, strict=True):
        pd.testing.assert_frame_equal(g, w)


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    root = tmp_path / "backup"
    write_backup(root, BATCHES)
    return root


MARKS = 3  # a compaction's markers: the backup's (the commit point), results', metrics'


@pytest.mark.parametrize("dies_at", [*range(1, MARKS + 1), "deleting"])
def test_a_compaction_killed_at_any_step_loses_nothing_when_run_again(
    backup: Path, dies_at: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = record(backup)
    marks: list[Path] = []
    real_mark = compaction._mark

    def mark(folder: Path, listed: bool = False) -> None:
        if len(marks) + 1 == dies_at:
            raise Killed(folder)
        marks.append(folder)
        real_mark(folder, listed)

    def deleting(root: Path) -> int:
        raise Killed(root)

    monkeypatch.setattr(compaction, "_mark", mark)
    if dies_at == "deleting":
        monkeypatch.setattr(compaction, "_remove_superseded", deleting)
    with pytest.raises(Killed):
        compaction.compact(backup, keep=5)  # folds 0-2
    monkeypatch.undo()
    same(record(backup), want)  # readable as it is, each row once

    compaction.compact(backup, keep=2)  # finishes or replaces the one cut short, folds on
    same(record(backup), want)
    for kind in ("", "_lacuna/results", "_lacuna/metrics"):
        names = sorted(d.name for d in (backup / kind).iterdir() if d.name.startswith("batch"))
        plain = [n for n in names if "-" not in n]
        assert plain == ["batch_id=6", "batch_id=7"], (kind, names)  # the rest folded
        assert all((backup / kind / n / "_SUCCESS").exists() for n in names if "-" in n)


@pytest.mark.parametrize(("keep", "span"), [(5, (0, 2)), (2, (0, 5))])
def test_a_compaction_over_committed_results_keeps_them(
    backup: Path, keep: int, span: tuple[int, int]
) -> None:
    """Results and metrics committed for batches whose backup compaction is not (what an
    earlier version's order could leave): the next compaction, of the same batches or
    more, keeps their rows."""
    want = record(backup)
    spare = backup.parent / "spare"
    shutil.copytree(backup, spare)
    compaction.compact(backup, keep=5)  # 0-2 in all three kinds, the batches deleted
    (backup / "batch_id=0-2" / "_SUCCESS").unlink()
    for b in range(3):
        shutil.copytree(spare / f"batch_id={b}", backup / f"batch_id={b}")
    same(record(backup), want)
    report = compaction.compact(backup, keep=keep)
    assert (report.first, report.last) == span
    same(record(backup), want)


def test_a_second_compaction_at_once_is_refused_in_one_line(backup: Path) -> None:
    want = record(backup)
    with open(backup / "_lacuna" / "compact.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(StoreError, match=r"another compaction of .* is running") as err:
            compaction.compact(backup, keep=2)
    assert "\n" not in str(err.value)
    same(record(backup), want)
    assert compaction.compact(backup, keep=2).batch_dirs == BATCHES - 2  # the lock is free


def test_the_directories_a_crashed_compaction_left_are_counted_when_removed(
    backup: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after its commit point, before deleting what it folded: the next compact
    deletes batches 0-2's backup, results and metrics (9 directories) and said 0."""

    real, calls = compaction._remove_superseded, []

    def deleting(root: Path) -> int:  # the start's finish runs; the fold's delete dies
        calls.append(root)
        if len(calls) == 2:
            raise Killed(root)
        return real(root)

    monkeypatch.setattr(compaction, "_remove_superseded", deleting)
    with pytest.raises(Killed):
        compaction.compact(backup, keep=5)  # folds 0-2, deletes nothing
    monkeypatch.undo()
    assert (backup / "batch_id=0").is_dir() and (backup / "batch_id=0-2").is_dir()
    report = compaction.compact(backup, keep=5)  # nothing new to fold: only the finish
    assert report.batch_dirs == 0 and report.removed_dirs == 3 * 3
    assert not (backup / "batch_id=0").exists()
