"""The compaction benchmark's backup reads the same before and after compacting."""

from __future__ import annotations

from pathlib import Path

from bench.bench_compaction import readers, write_backup
from engine.job.compaction import compact


def test_the_benchmark_backup_reads_the_same_after_compaction(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    write_backup(root, 25)
    before = readers(root, 25)
    assert before["batches_seen"] == 25 and before["rows_all"] == 25 * 20
    assert compact(root, keep=5).batch_dirs == 20
    after = readers(root, 25)
    same = ("_s", "_bytes")
    assert {k: v for k, v in after.items() if not k.endswith(same)} == {
        k: v for k, v in before.items() if not k.endswith(same)
    }
    assert after["backup_bytes"] < before["backup_bytes"] / 2  # 20 small files folded in one
