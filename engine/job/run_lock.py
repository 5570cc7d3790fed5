"""One run per checkpoint: an exclusive lock held for the run's lifetime.

Two runs started at the same instant on one empty checkpoint both pass every check
Spark makes before its first commit and race to write the same batch's backup and
offsets; the loser then died in whatever write it lost (a Parquet task commit, the
offsets log) with a message no pattern can foresee. A local checkpoint (a plain path
or ``file:`` URI) is locked before Spark starts (``fcntl.flock``: released by the
kernel when the process dies, so a killed run never leaves it held), and the second
run is refused in one line. A remote checkpoint relies on Spark's own checks.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager

from engine.backup.dataset import local_path
from engine.errors import PipelineError
from engine.job.exposure import is_local
from engine.stream.query_errors import CONCURRENT_RUNS

__all__ = ["LOCK_NAME", "checkpoint_lock"]

LOCK_NAME = ".lacuna-run.lock"


@contextmanager
def checkpoint_lock(checkpoint: str, default_local: bool = True) -> Iterator[None]:
    """Hold the checkpoint's run lock while inside (``PipelineError`` if another run has
    it); a checkpoint off the local disk (``is_local``) is left to Spark's own refusal."""
    if not is_local(checkpoint, default_local):
        yield
        return
    root = local_path(checkpoint)
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / LOCK_NAME, "a+")  # noqa: SIM115 (held until the run ends)
    except OSError as err:
        raise PipelineError(f"cannot lock the checkpoint {checkpoint!r}: {err}") from err
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise PipelineError(CONCURRENT_RUNS) from None
    try:
        yield
    finally:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()
