"""engine.job.run_lock: one run per local checkpoint, refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import PipelineError
from engine.job.run_lock import LOCK_NAME, checkpoint_lock
from engine.stream.query_errors import CONCURRENT_RUNS


@pytest.mark.parametrize("as_uri", [False, True])
def test_a_second_run_on_a_held_checkpoint_is_refused_in_one_line(
    tmp_path: Path, as_uri: bool
) -> None:
    checkpoint = tmp_path / "ck"
    given = f"file://{checkpoint}" if as_uri else str(checkpoint)
    with checkpoint_lock(given):
        assert (checkpoint / LOCK_NAME).exists()
        with pytest.raises(PipelineError) as refused, checkpoint_lock(str(checkpoint)):
            pass
        assert str(refused.value) == CONCURRENT_RUNS
    with checkpoint_lock(given):  # released when the run ends
        pass


def test_a_remote_checkpoint_is_left_to_spark(tmp_path: Path) -> None:
    with checkpoint_lock("s3a://bucket/ck"), checkpoint_lock("s3a://bucket/ck"):
        pass


def test_a_plain_path_on_hdfs_is_left_to_spark(tmp_path: Path) -> None:
    """Where Hadoop's default file system is HDFS a plain checkpoint path is on HDFS: a
    lock on the local directory of that name would guard nothing."""
    checkpoint = tmp_path / "ck"
    with checkpoint_lock(str(checkpoint), default_local=False):
        assert not checkpoint.exists()
