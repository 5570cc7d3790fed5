"""The production job's crash-contract rule (``engine.job.exposure``): a micro-batch over
the plan's exposure backs up every sensor, and the start line states the exposure a
failure gets and which failure the checkpoint survives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.job.exposure import (
    CRASH,
    OVER_EXPOSURE,
    RANGE,
    batch_rows,
    check_batch,
    rows_per_trigger,
    run_exposure,
)

SENSORS = ("a", "b", "c", "d")
BACKUP = ("a",)


def _partials(times: dict[str, list[int]], window: int = 4) -> pd.DataFrame:
    """Partials as ``batch_partials`` makes them (tumbling windows of ``window`` rows):
    per (window, sensor) the readings it holds, from each sensor's reading rows."""
    rows = [
        (t // window * window, s) for s, ts in times.items() for t in ts
    ]  # each reading in its (latest) window
    frame = pd.DataFrame(rows, columns=["window_start", "sensor"])
    return frame.groupby(["window_start", "sensor"]).size().rename("readings").reset_index()


def _reference_rows(times: dict[str, list[int]]) -> int:
    """The rows a crash in the batch loses of one sensor, at most: its readings, counted."""
    return max((len(ts) for ts in times.values()), default=0)


@pytest.mark.parametrize("seed", range(5))
def test_batch_rows_counts_the_most_readings_one_sensor_has(seed: int) -> None:
    rng = np.random.default_rng(seed)
    times = {
        s: sorted(rng.choice(60, size=int(rng.integers(1, 40)), replace=False).tolist())
        for s in SENSORS
    }
    assert batch_rows(_partials(times)) == _reference_rows(times)


def test_batch_rows_skips_rebuilt_rows_and_an_empty_batch() -> None:
    partials = _partials({"a": [0, 1, 2], "b": [0, 1, 2]})
    rebuilt = pd.DataFrame({"window_start": [0], "sensor": ["b"], "readings": [np.nan]})
    assert batch_rows(pd.concat([partials, rebuilt], ignore_index=True)) == 3
    assert batch_rows(partials.iloc[:0]) == 0


def test_a_batch_over_the_exposure_backs_up_every_sensor() -> None:
    partials = _partials({s: list(range(7)) for s in SENSORS})
    found = check_batch(partials, 6, SENSORS, BACKUP)
    assert found.full and found.rows == 7
    assert set(found.added) | set(BACKUP) == set(SENSORS) and not set(found.added) & set(BACKUP)
    assert found.event is not None and found.event["event"] == OVER_EXPOSURE
    assert found.event["rows"] == 7 and found.event["exposure_rows"] == 6
    assert "every sensor backed up" in found.event["what"]


def test_a_batch_within_the_exposure_keeps_the_plans_set() -> None:
    partials = _partials({s: list(range(6)) for s in SENSORS})
    found = check_batch(partials, 6, SENSORS, BACKUP)  # exactly m rows: covered
    assert not found.full and found.added == () and found.rows == 6


def test_a_range_contract_plan_never_backs_up_more_than_its_set() -> None:
    partials = _partials({s: list(range(500)) for s in SENSORS})
    found = check_batch(partials, None, SENSORS, BACKUP)
    assert not found.full and found.added == () and found.rows == 500


def test_a_batch_whose_sensors_are_all_backed_up_adds_nothing() -> None:
    partials = _partials({s: list(range(9)) for s in SENSORS})
    found = check_batch(partials, 2, SENSORS, SENSORS)
    assert found.full and found.added == ()  # said all the same: the batch was over


@pytest.mark.parametrize(
    ("trigger_s", "dt", "rows"), [(1.0, 3600.0, 1), (60.0, 10.0, 6), (61.0, 10.0, 7), (30, 10, 3)]
)
def test_rows_per_trigger_is_the_trigger_at_the_datas_rate(trigger_s, dt, rows) -> None:
    assert rows_per_trigger(trigger_s, dt) == rows


def test_the_start_line_warns_once_when_a_trigger_carries_more_than_the_exposure() -> None:
    over = run_exposure(4, 10.0, 60.0, False, "/tmp/ckpt", "s3a://b/backup")
    assert over.contract == CRASH and over.exposure_rows == 4 and over.rows_per_trigger == 6
    assert over.warning is not None and "over 4 rows back up every sensor" in over.warning
    within = run_exposure(6, 10.0, 60.0, False, "/tmp/ckpt", "s3a://b/backup")
    assert within.warning is None


def test_a_catch_up_run_says_its_batches_take_what_landed() -> None:
    found = run_exposure(4, 10.0, 1.0, True, "file:///tmp/ckpt", "s3a://b/backup")
    assert found.rows_per_trigger is None
    assert found.warning is not None and "--available-now" in found.warning


@pytest.mark.parametrize("checkpoint", ["/var/lib/lacuna/ckpt", "file:///srv/ckpt", "C:/ckpt"])
def test_a_local_checkpoint_covers_a_process_crash_not_the_machines_loss(checkpoint) -> None:
    found = run_exposure(4, 10.0, 1.0, False, checkpoint, "s3a://b/backup")
    assert found.checkpoint_local
    assert "process crash" in found.durability and "lost machine" in found.durability
    assert "range contract" in found.durability


def test_a_remote_checkpoint_names_its_storage() -> None:
    found = run_exposure(4, 10.0, 1.0, False, "hdfs://nn/ckpt", "hdfs://nn/backup")
    assert not found.checkpoint_local and "hdfs" in found.durability


def test_a_range_contract_plan_states_no_exposure_and_no_warning() -> None:
    found = run_exposure(None, 10.0, 600.0, True, "/tmp/ckpt", "hdfs://nn/backup")
    assert found.contract == RANGE and found.exposure_rows is None and found.warning is None
    assert "whole windows" in found.durability


@pytest.mark.parametrize(
    ("checkpoint", "exposure"),
    [("/var/lib/lacuna/ckpt", 4), ("s3a://b/ckpt", 4), ("s3a://b/ckpt", None)],
)
def test_a_backup_on_a_local_disk_is_said_to_die_with_the_machine(checkpoint, exposure) -> None:  # type: ignore[no-untyped-def]
    """Both contracts rebuild from the backup: on a local disk it does not survive the
    machine, whatever the checkpoint does, and the start line must not promise a
    rebuild from it."""
    found = run_exposure(exposure, 10.0, 1.0, False, checkpoint, "/var/lib/lacuna/backup")
    assert found.backup_local
    assert "takes the backup with it" in found.durability
    assert "recover --from --to" not in found.durability


def test_a_plain_path_on_a_cluster_whose_default_file_system_is_hdfs_is_not_local() -> None:
    """Hadoop writes a path without a scheme to fs.defaultFS: on an HDFS cluster the
    checkpoint and backup are on HDFS, which the start line called a local disk that dies
    with the machine (the run lock was taken on a local directory too)."""
    on_disk = run_exposure(4, 10.0, 1.0, False, "/lacuna/ck", "/lacuna/backup")
    assert on_disk.checkpoint_local and on_disk.backup_local
    on_hdfs = run_exposure(4, 10.0, 1.0, False, "/lacuna/ck", "/lacuna/backup", False)
    assert not on_hdfs.checkpoint_local and not on_hdfs.backup_local
    assert "lost machine" not in on_hdfs.durability
    assert "the cluster's default file system (fs.defaultFS)" in on_hdfs.durability
    # a file: URI is the local disk whatever the default
    assert run_exposure(4, 10.0, 1.0, False, "file:///ck", "/b", False).checkpoint_local
    # a remote backup is rebuilt from a local or mounted copy: recover reads no s3a://
    remote = run_exposure(4, 10.0, 1.0, False, "/ck", "s3a://b/backup")
    assert "reads a local or mounted copy" in remote.durability
