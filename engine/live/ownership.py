"""Who owns a pipeline directory, and what to do with an earlier run's files.

One process at a time may run a pipeline in a directory: ``DirectoryLock``
holds an exclusive ``flock`` on ``<root>/lacuna.lock`` and writes its PID, host
and start time into it, so a refused second owner is told who holds it. The
kernel drops the ``flock`` when its process dies, so a lock left by a crashed
process on this host is taken over; a lock naming another host is never taken
over (its process cannot be checked from here), the operator removes it.

``Leftovers`` are an earlier run's store, checkpoint, landed input and Parquet
backup. They are never deleted implicitly: the caller resumes them, archives
them (moved to ``<root>/archive/<timestamp>/``; a backup outside ``root``, e.g.
on a shared mount, is renamed beside itself instead, so it stays there) or
deletes them on an explicit request. A backup URI that is not local cannot be
listed from here: archiving or deleting it is refused (the operator does it).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Literal

from engine.backup.runs import local_root
from engine.errors import ParameterError, PipelineError, StoreError
from engine.live.pipeline import RUN_FILE
from engine.live.spec import PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.stream.source import spark_committed_batches

LOCK_NAME = "lacuna.lock"
RUN_SPEC = "lacuna_run_spec.json"  # what a run streams with: a resume must match it
ARCHIVE_DIR = "archive"
LEFTOVER_ACTIONS = ("refuse", "resume", "archive", "delete")
LeftoverAction = Literal["refuse", "resume", "archive", "delete"]


@dataclass(frozen=True)
class Owner:
    """What a lock file says about the process holding it."""

    pid: int
    host: str
    started_at: str

    def describe(self) -> str:
        return f"process {self.pid} on host {self.host!r} (started {self.started_at})"


class DirectoryLock:
    """An exclusive, advisory lock on a pipeline directory (see the module doc)."""

    def __init__(self, root: Path, now: Callable[[], datetime]) -> None:
        self.path = Path(root) / LOCK_NAME
        self._now = now
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        """Take the lock, or raise ``PipelineError`` naming the process that holds it."""
        if self._file is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a+")  # noqa: SIM115 (held until release)
        except OSError as err:
            raise PipelineError(f"cannot create the lock {str(self.path)!r}: {err}") from err
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = read_owner(self.path)
            handle.close()
            who = owner.describe() if owner else "another process"
            raise PipelineError(
                f"pipeline directory {str(self.path.parent)!r} is in use by {who}; "
                "end that process (an app keeps its directory until it exits) "
                "or use another directory"
            ) from None
        previous = read_owner(self.path)
        if previous is not None and previous.host != socket.gethostname():
            handle.close()
            raise PipelineError(
                f"pipeline directory {str(self.path.parent)!r} is locked by "
                f"{previous.describe()}, which cannot be checked from this host; if that "
                f"process is gone, delete {str(self.path)!r} and start again"
            )
        me = Owner(os.getpid(), socket.gethostname(), self._now().isoformat())
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(me.__dict__))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        """Give the lock up (idempotent); the file is cleared, not removed."""
        handle, self._file = self._file, None
        if handle is None:
            return
        try:
            handle.seek(0)
            handle.truncate()
        finally:
            handle.close()  # closing drops the flock


def read_owner(path: Path) -> Owner | None:
    """The owner a lock file names (None if empty or unreadable)."""
    try:
        data = json.loads(Path(path).read_text() or "null")
        return Owner(int(data["pid"]), str(data["host"]), str(data["started_at"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


@dataclass(frozen=True)
class Leftovers:
    """What an earlier run left in a pipeline directory."""

    store: bool
    checkpoint: bool  # a non-empty checkpoint directory
    landed_files: int
    run_marker: bool = False  # the checkpoint names its run (``RUN_FILE``)
    backup: bool = False  # a non-empty local Parquet backup directory

    @property
    def any(self) -> bool:
        return self.store or self.checkpoint or self.landed_files > 0 or self.backup

    @property
    def resumable(self) -> bool:
        """A store and a checkpoint naming its run: the streaming query can continue it."""
        return self.run_marker and self.store


def find_leftovers(paths: PipelinePaths) -> Leftovers:
    ck, landing = paths.checkpoint_dir, paths.landing_dir
    return Leftovers(
        store=paths.store_file.exists(),
        checkpoint=ck.is_dir() and any(ck.iterdir()),
        landed_files=sum(1 for _ in landing.glob("*.parquet")) if landing.is_dir() else 0,
        run_marker=(ck / RUN_FILE).exists(),
        backup=(b := _local_backup(paths)) is not None and b.is_dir() and any(b.iterdir()),
    )


def _local_backup(paths: PipelinePaths) -> Path | None:
    """The backup directory when it is local (None for another URI scheme)."""
    try:
        return local_root(paths.backup_uri)
    except StoreError:
        return None


def _backup_part(paths: PipelinePaths, verb: str) -> Path | None:
    """The earlier run's local backup directory to ``verb`` (None if there is none)."""
    backup = _local_backup(paths)
    if backup is None:
        raise PipelineError(
            f"cannot {verb} the backup at {paths.backup_uri!r} from here (not a local or "
            "mounted path); do it with that storage's tools, or use a new backup location"
        )
    return backup if backup.exists() else None


def check_action(action: str) -> None:
    if action not in LEFTOVER_ACTIONS:
        raise ParameterError(
            f"leftovers must be one of {', '.join(LEFTOVER_ACTIONS)}, got {action!r}"
        )


def _run_parts(paths: PipelinePaths) -> list[Path]:
    wal = paths.store_file.with_name(paths.store_file.name + ".wal")
    parts = [paths.store_file, wal, paths.checkpoint_dir, paths.landing_dir, paths.truth_dir]
    parts.append(paths.root / RUN_SPEC)
    return [p for p in parts if p.exists()]


def archive_leftovers(paths: PipelinePaths, now: Callable[[], datetime]) -> Path:
    """Move the earlier run's files to ``<root>/archive/<UTC timestamp>/``; return it."""
    stamp = now().strftime("%Y%m%dT%H%M%S%fZ")
    target = paths.root / ARCHIVE_DIR / stamp
    n = 0
    while target.exists():
        n += 1
        target = paths.root / ARCHIVE_DIR / f"{stamp}-{n}"
    try:
        backup = _backup_part(paths, "archive")
        target.mkdir(parents=True)
        for part in _run_parts(paths):
            shutil.move(str(part), str(target / part.name))
        if backup is not None and backup.is_relative_to(paths.root):
            shutil.move(str(backup), str(target / "backup"))
        elif backup is not None:  # elsewhere (a shared mount): it stays there, renamed
            shutil.move(str(backup), str(backup.with_name(f"{backup.name}.archive-{target.name}")))
    except OSError as err:
        raise PipelineError(
            f"cannot archive the earlier run of {str(paths.root)!r} to {str(target)!r}: {err}"
        ) from err
    return target


def delete_leftovers(paths: PipelinePaths) -> None:
    """Delete the earlier run's store, checkpoint and input (explicit request only)."""
    try:
        backup = _backup_part(paths, "delete")
        for part in [*_run_parts(paths), *([backup] if backup is not None else [])]:
            shutil.rmtree(part) if part.is_dir() else part.unlink()
    except OSError as err:
        raise PipelineError(f"cannot clear {str(paths.root)!r}: {err}") from err


def prepare_directory(paths: PipelinePaths, action: str, now: Callable[[], datetime]) -> int:
    """Deal with an earlier run's files as ``action`` says; the first history row to feed.

    Called with the directory lock held, so no live process owns these files.
    """
    found = find_leftovers(paths)
    if not found.any:
        return 0
    if action == "refuse":
        raise PipelineError(
            f"{str(paths.root)!r} holds an earlier run that no process owns (store: "
            f"{found.store}, checkpoint: {found.checkpoint}, {found.landed_files} landed "
            f"file(s), backup: {found.backup}): resume it (leftovers='resume'), archive "
            "it (leftovers='archive') or delete it (leftovers='delete')"
        )
    if action == "archive":
        archive_leftovers(paths, now)
        return 0
    if action == "delete":
        delete_leftovers(paths)
        return 0
    if not found.resumable:
        raise PipelineError(
            f"the earlier run in {str(paths.root)!r} has no checkpoint and store to resume "
            f"(store: {found.store}, checkpoint: {found.checkpoint}); archive it instead"
        )
    return next_feed_row(paths.landing_dir)


def next_feed_row(landing: Path) -> int:
    """The history row after the last one landed (0 if nothing landed).

    Reads only the Parquet footers' statistics of ``seq``.
    """
    import pyarrow.parquet as pq

    last = -1
    for f in landing.glob("*.parquet") if landing.is_dir() else ():
        try:
            meta = pq.read_metadata(f)
            col = meta.schema.to_arrow_schema().get_field_index("seq")
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(col).statistics
                if stats is None or not stats.has_min_max:
                    raise PipelineError(f"landed file {str(f)!r} has no statistics for seq")
                last = max(last, int(stats.max))
        except (OSError, ValueError) as err:
            raise PipelineError(f"landed file {str(f)!r} cannot be read: {err}") from err
    return last + 1


def reconcile(store: BackupStore, checkpoint: Path) -> int:
    """Check that the store holds every batch Spark's checkpoint committed; return the run.

    A batch Spark committed has consumed its input for good: if the store lacks
    its marker (a truncated or corrupt WAL, a store from elsewhere), its backup
    rows are gone and resuming would hide the gap. Raises ``PipelineError``
    naming the missing batches.
    """
    run_file = checkpoint / RUN_FILE
    try:
        run = int(json.loads(run_file.read_text())["run"])
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise PipelineError(
            f"checkpoint run marker {str(run_file)!r} is unreadable: {err}"
        ) from err
    committed = spark_committed_batches(checkpoint)
    missing = sorted(committed - set(store.committed_batches(run)))
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        raise PipelineError(
            f"the backup store {str(store.path)!r} lacks {len(missing)} batch(es) of run {run} "
            f"that Spark's checkpoint committed: {shown}; their backup rows are lost (truncated "
            "or corrupt store?). Archive this run and start a new one; do not resume it"
        )
    try:
        local_root(store.backup_uri)
    except StoreError:
        return run  # a backup Spark reaches but this process cannot list: not checked here
    try:
        store.size()  # every committed batch with rows has its _SUCCESS (or StoreError)
    except StoreError as err:
        raise PipelineError(
            f"{err}. Archive this run and start a new one; do not resume it"
        ) from err
    return run


def run_identity(spec: StreamSpec, mode: str) -> dict[str, object]:
    """What a resumed run must share with the run it continues: its sensors, windows and
    mode, and the query its stored plan versions were made for (each sensor's eps,
    delta, horizon, exposure). A resume goes on under the stored backup set and map
    (``engine.live.versions.read_versions``), so with another query the plan of record,
    its contract and the figures shown would describe a plan that is not running. The eps
    is each sensor's, however it was written (one eps, or one per unit group)."""
    q = spec.query
    eps = q.eps_vector(tuple(spec.sensors))
    return {
        "sensors": list(spec.sensors),
        "window": spec.window,
        "slide": spec.slide,
        "aggregate": spec.aggregate,
        "eps": {s: float(e) for s, e in zip(spec.sensors, eps, strict=True)},
        "delta": q.delta,
        "horizon": q.horizon,
        "exposure": q.exposure,
        "mode": mode,
    }


def record_run(paths: PipelinePaths, identity: dict[str, object]) -> None:
    try:
        (paths.root / RUN_SPEC).write_text(json.dumps(identity))
    except OSError as err:
        raise PipelineError(f"cannot write {str(paths.root / RUN_SPEC)!r}: {err}") from err


def check_same_run(paths: PipelinePaths, identity: dict[str, object]) -> None:
    """``PipelineError`` unless the earlier run streamed the same sensors, windows, query
    and mode (``run_identity``), naming each value that differs, then and now."""
    path = paths.root / RUN_SPEC
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise PipelineError(
            f"cannot tell what the earlier run in {str(paths.root)!r} streamed ({err}); "
            "archive it instead of resuming"
        ) from err
    changed = sorted(k for k in identity if k not in earlier or earlier[k] != identity[k])
    unrecorded = [k for k in changed if k not in earlier]
    if unrecorded:  # a run spec of an earlier version of Lacuna: its query is not known
        raise PipelineError(
            f"the earlier run in {str(paths.root)!r} did not record its "
            f"{', '.join(unrecorded)}: which plan it ran is not known, so it cannot be "
            "resumed; archive it and start afresh"
        )
    if changed:
        had = ", ".join(f"{k}={earlier[k]!r}" for k in changed)
        asked = ", ".join(f"{k}={identity[k]!r}" for k in changed)
        raise PipelineError(
            f"the earlier run in {str(paths.root)!r} streamed another {', '.join(changed)} "
            f"(it had {had}) than this start ({asked}): resume it with the same plan, "
            "query and mode (set those values back), or archive it and start afresh"
        )
