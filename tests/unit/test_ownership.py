"""One owner per pipeline directory; an earlier run is never deleted implicitly;
the store is reconciled with Spark's commit log before a run is resumed.

No JVM: every refusal here happens before Spark is started. A real second
process holds the lock, and a real process is SIGKILLed with a DuckDB WAL open.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.errors import ParameterError, PipelineError
from engine.live.manager import PipelineManager
from engine.live.ownership import (
    LOCK_NAME,
    DirectoryLock,
    archive_leftovers,
    delete_leftovers,
    find_leftovers,
    read_owner,
    record_run,
    run_identity,
)
from engine.live.pipeline import RUN_FILE
from engine.live.simulation import run_simulation
from engine.live.spec import PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.query import WindowQuery
from tests.helpers import fit_map
from tests.unit.test_stream_batch import SENSORS, make_history

ROOT = Path(__file__).resolve().parents[2]


def now() -> datetime:
    return datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def make_spec() -> StreamSpec:
    h = make_history(40)
    return StreamSpec(
        SENSORS,
        ("a",),
        fit_map(h.values, SENSORS, ("a",)),
        WindowQuery(0.5, 0.05, 4, slide=2, aggregate="avg"),
    )


def python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        **kwargs,  # type: ignore[call-overload]
    )


@pytest.fixture
def other_owner(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock of ``tmp_path`` until it is killed."""
    proc = python(
        f"""
        import sys, time
        from datetime import UTC, datetime
        from pathlib import Path
        from engine.live.ownership import DirectoryLock
        lock = DirectoryLock(Path({str(tmp_path)!r}), lambda: datetime.now(UTC))
        lock.acquire()
        print("locked", flush=True)
        time.sleep(120)
        """
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    yield proc
    proc.kill()
    proc.wait()


def crashed_run(paths: PipelinePaths) -> bytes:
    """An earlier run's files as a crash leaves them; returns the store's bytes."""
    paths.ensure()
    with BackupStore(paths.store_file) as store:
        store.log_plan("run 0: start", ("a",))
    (paths.checkpoint_dir / "commits").mkdir(parents=True)
    (paths.checkpoint_dir / RUN_FILE).write_text(json.dumps({"run": 0}))
    (paths.landing_dir / "part-0000000000-00000000.parquet").write_bytes(b"PAR1")
    (Path(paths.backup_uri) / "run=0" / "batch_id=0").mkdir(parents=True)
    (Path(paths.backup_uri) / "run=0" / "batch_id=0" / "_SUCCESS").write_bytes(b"")
    return paths.store_file.read_bytes()


def test_a_second_process_is_refused_by_name_before_anything_is_touched(
    tmp_path: Path, other_owner: subprocess.Popen[str]
) -> None:
    paths = PipelinePaths(tmp_path)
    before = crashed_run(paths)
    h, spec = make_history(40), make_spec()
    for attempt in (
        lambda: PipelineManager().start(h, spec, "approx", paths, reset=True),
        lambda: run_simulation(h, spec, "approx", 0.5, paths),  # simulate --workdir
    ):
        with pytest.raises(PipelineError) as err:
            attempt()
        assert f"process {other_owner.pid} on host {socket.gethostname()!r}" in str(err.value)
        assert "in use" in str(err.value)
    assert paths.store_file.read_bytes() == before
    assert (paths.checkpoint_dir / RUN_FILE).exists() and find_leftovers(paths).landed_files == 1


def test_two_owners_in_one_process_are_refused_too(tmp_path: Path) -> None:
    first = DirectoryLock(tmp_path, now)
    first.acquire()
    with pytest.raises(PipelineError, match=f"process {os.getpid()} "):
        DirectoryLock(tmp_path, now).acquire()
    first.release()
    second = DirectoryLock(tmp_path, now)
    second.acquire()  # free again once released
    assert second.held
    second.release()


def test_a_lock_of_a_dead_process_on_this_host_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    stale = {"pid": pid, "host": socket.gethostname(), "started_at": "2026-01-01T00:00:00"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(stale))
    lock = DirectoryLock(tmp_path, now)
    lock.acquire()
    owner = read_owner(tmp_path / LOCK_NAME)
    assert owner is not None and owner.pid == os.getpid() and owner.started_at == now().isoformat()
    lock.release()


def test_a_lock_naming_another_host_is_never_taken_over(tmp_path: Path) -> None:
    other = {"pid": 1, "host": "elsewhere.example", "started_at": "2026-01-01T00:00:00"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(other))
    with pytest.raises(PipelineError, match=r"process 1 on host 'elsewhere.example'.*delete"):
        DirectoryLock(tmp_path, now).acquire()
    assert read_owner(tmp_path / LOCK_NAME) is not None  # left for the operator


def test_a_crashed_run_is_kept_until_resumed_archived_or_deleted_on_request(
    tmp_path: Path,
) -> None:
    paths = PipelinePaths(tmp_path)
    before = crashed_run(paths)
    manager = PipelineManager(now=now)
    with pytest.raises(PipelineError, match=r"earlier run.*resume.*archive.*delete"):
        manager.start(make_history(40), make_spec(), "approx", paths)  # what Start did
    assert paths.store_file.read_bytes() == before
    with pytest.raises(ParameterError, match="got 'wipe'"):
        manager.start(make_history(40), make_spec(), "approx", paths, leftovers="wipe")
    manager.close()  # the refused start left the directory unlocked
    DirectoryLock(tmp_path, now).acquire()
    target = archive_leftovers(paths, now)
    assert target == tmp_path / "archive" / "20261123T120000000000Z"
    assert (target / "store.duckdb").read_bytes() == before
    assert (target / "checkpoint" / RUN_FILE).exists()
    assert (target / "landing" / "part-0000000000-00000000.parquet").exists()
    assert (target / "backup" / "run=0" / "batch_id=0" / "_SUCCESS").exists()
    assert not find_leftovers(paths).any
    assert archive_leftovers(paths, now).name == "20261123T120000000000Z-1"  # never clobbers


def test_a_backup_on_a_shared_mount_is_archived_in_place_and_deleted_on_request(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "mnt" / "backup"
    paths = PipelinePaths(tmp_path / "home", backup=shared)
    (shared / "run=0" / "batch_id=0").mkdir(parents=True)
    found = find_leftovers(paths)
    assert found.backup and found.any and not found.store  # a backup alone is a leftover
    target = archive_leftovers(paths, now)
    assert not shared.exists() and not (target / "backup").exists()
    assert (tmp_path / "mnt" / f"backup.archive-{target.name}" / "run=0").is_dir()
    (shared / "run=0").mkdir(parents=True)
    delete_leftovers(paths)
    assert not shared.exists() and not find_leftovers(paths).any
    remote = PipelinePaths(tmp_path / "r", backup="s3a://bucket/backup")
    assert not find_leftovers(remote).backup  # cannot be listed from here
    with pytest.raises(PipelineError, match="cannot archive the backup at 's3a://bucket/backup'"):
        archive_leftovers(remote, now)


def killed_store(paths: PipelinePaths, batches: int) -> Path:
    """A real process commits ``batches`` batches of run 0, then is SIGKILLed (WAL kept)."""
    paths.ensure()
    proc = python(
        f"""
        import os, signal
        import pandas as pd
        from engine.live.store import BackupStore
        from engine.live.records import BatchWrite
        from tests.helpers import write_backup_batch
        store = BackupStore({str(paths.store_file)!r})
        store._con.execute("CHECKPOINT")
        for b in range({batches}):
            rows = pd.DataFrame({{"seq": [b], "event_time": [pd.Timestamp("2024-01-01")],
                                  "sensor": ["a"], "value": [1.0]}})
            n = write_backup_batch(store.batch_uri(0, b), rows)
            store.commit_batch(BatchWrite(run=0, batch_id=b, backup_rows=1, backup_bytes=n,
                                          max_seq=b))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert proc.wait() == -signal.SIGKILL
    wal = paths.store_file.with_name(paths.store_file.name + ".wal")
    assert wal.stat().st_size > 0
    # Spark's commit log for the same batches, as the killed query left it.
    commits = paths.checkpoint_dir / "commits"
    commits.mkdir(parents=True)
    for b in range(batches):
        (commits / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (paths.checkpoint_dir / RUN_FILE).write_text(json.dumps({"run": 0}))
    record_run(paths, run_identity(make_spec(), "full"))
    return wal


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_wal_is_a_named_gap_not_an_empty_store(tmp_path: Path, damage: str) -> None:
    paths = PipelinePaths(tmp_path)
    wal = killed_store(paths, 10)
    data = wal.read_bytes()
    wal.write_bytes(data[: len(data) // 2] if damage == "truncate" else os.urandom(len(data)))
    manager = PipelineManager(now=now)
    with pytest.raises(PipelineError) as err:
        manager.start(make_history(40), make_spec(), "full", paths, leftovers="resume")
    message = str(err.value)
    assert "lacks" in message and "run 0" in message and "Archive" in message
    with BackupStore(paths.store_file) as store:
        kept = set(store.committed_batches(0))
    missing = sorted(set(range(10)) - kept)
    assert missing and message.count(",") >= len(missing) - 1
    assert ": " + ", ".join(map(str, missing)) + ";" in message
    DirectoryLock(tmp_path, now).acquire()  # the refused resume released the directory


def test_an_intact_wal_after_a_kill_reconciles(tmp_path: Path) -> None:
    from engine.live.ownership import reconcile

    paths = PipelinePaths(tmp_path)
    killed_store(paths, 6)
    with BackupStore(paths.store_file) as store:
        assert reconcile(store, paths.checkpoint_dir) == 0
        assert store.committed_batches(0) == list(range(6))
        assert len(store.read_table("backup")) == 6


def test_a_resume_is_refused_when_a_committed_batch_lost_its_parquet_backup(
    tmp_path: Path,
) -> None:
    from engine.live.ownership import reconcile

    paths = PipelinePaths(tmp_path)
    killed_store(paths, 4)
    (Path(paths.backup_uri) / "run=0" / "batch_id=2" / "_SUCCESS").unlink()
    with (
        BackupStore(paths.store_file) as store,
        pytest.raises(PipelineError, match=r"batch 2 of run 0 .*_SUCCESS.*do not resume"),
    ):
        reconcile(store, paths.checkpoint_dir)


def test_a_run_is_resumed_only_with_its_own_sensors_windows_and_mode(tmp_path: Path) -> None:
    paths = PipelinePaths(tmp_path)
    killed_store(paths, 3)
    manager = PipelineManager(now=now)
    with pytest.raises(PipelineError, match=r"another mode \(it had mode='full'\)"):
        manager.start(make_history(40), make_spec(), "approx", paths, leftovers="resume")
    (paths.root / "lacuna_run_spec.json").unlink()
    with pytest.raises(PipelineError, match="cannot tell what the earlier run"):
        manager.start(make_history(40), make_spec(), "full", paths, leftovers="resume")


def test_a_checkpoint_without_its_run_marker_is_a_leftover_but_not_resumable(
    tmp_path: Path,
) -> None:
    paths = PipelinePaths(tmp_path)
    (paths.checkpoint_dir / "commits").mkdir(parents=True)
    (paths.checkpoint_dir / "metadata").write_text("{}")
    found = find_leftovers(paths)
    assert found.any and found.checkpoint and not found.resumable
    manager = PipelineManager(now=now)
    with pytest.raises(PipelineError, match="earlier run"):
        manager.start(make_history(40), make_spec(), "full", paths)
    with pytest.raises(PipelineError, match="no checkpoint and store to resume"):
        manager.start(make_history(40), make_spec(), "full", paths, leftovers="resume")
    assert (paths.checkpoint_dir / "metadata").exists()
