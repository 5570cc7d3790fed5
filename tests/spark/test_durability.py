"""Faults on the real pipeline: a dead feeder shows, a stopped run resumes exactly,
and the simulated failure strikes the same rows whatever the batching."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.errors import PipelineError
from engine.live.manager import PipelineManager
from engine.live.simulation import run_simulation
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.stream.session import SparkSettings
from engine.windows import window_aggregates

pytestmark = pytest.mark.spark

LOCAL = SparkSettings(master="local[2]", shuffle_partitions=2)
FAST = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0)


def test_a_dead_feeder_shows_as_an_error_within_seconds(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    manager = PipelineManager(LOCAL)
    paths = PipelinePaths(tmp_path)
    try:
        # One history hour every 0.2 s: the feed would last about 20 s.
        manager.start(history, spec, "full", paths, speed=18000.0, rows_per_file=1, options=FAST)
        while manager.status().feed.files < 2:
            time.sleep(0.05)
        shutil.rmtree(paths.landing_dir / ".tmp")  # the feeder's next file cannot be staged
        deadline = time.monotonic() + 5.0
        while manager.status().state != "error" and time.monotonic() < deadline:
            time.sleep(0.1)
        status = manager.status()
        assert status.state == "error", status
        assert status.last_error is not None and "the feeder failed" in status.last_error
        assert not status.feed.done
    finally:
        manager.close()


def test_a_stopped_run_resumes_from_its_checkpoint_without_loss_or_duplicates(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    paths = PipelinePaths(tmp_path)
    first = PipelineManager(LOCAL)
    try:
        first.start(history, spec, "full", paths, rows_per_file=5, options=FAST, stop_row=50)
        first.drain(120)
    finally:
        first.close()  # as a crash leaves it: store, checkpoint, landed input; no owner
    second = PipelineManager(LOCAL)
    try:
        with pytest.raises(PipelineError, match="earlier run"):
            second.start(history, spec, "full", paths, options=FAST)
        second.start(history, spec, "full", paths, rows_per_file=5, options=FAST,
                     leftovers="resume")  # fmt: skip
        second.drain(120)
        status = second.status()
        assert status.run == 0  # the same run, continued
        n = len(spec.sensors)
        # the feed and the counters count from the history's first row, not the resume's
        assert status.feed.total_readings == status.feed.readings == 96 * n
        assert status.input_rows == 96 * n
        with BackupStore(paths.store_file) as store:
            totals = store.totals()
        assert status.batches == totals["batches"] and status.backup_rows == 96 * n
        assert status.windows_emitted == totals["windows"] > 0
        assert status.restores == 1 and status.last_restore is not None
        assert status.last_restore.kind == "resume" and status.last_restore.resumed_at_row == 50
    finally:
        second.close()
    with BackupStore(paths.store_file) as store:
        backup = store.read_table("backup")
        results = store.read_results()
    assert len(backup) == history.values.size and not backup.duplicated(["seq", "sensor"]).any()
    assert not results.duplicated(["window_id", "sensor"]).any()
    wide = results.pivot(index="window_id", columns="sensor", values="value")[list(spec.sensors)]
    expected = window_aggregates(history.values, spec.window, spec.slide, spec.aggregate)
    np.testing.assert_allclose(wide.to_numpy(), expected)


def test_a_backup_on_a_shared_mount_outlives_the_drivers_disk(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    """The simulated failure keeps the backup; then the whole work directory (store,
    checkpoint, landing) is lost, and the shared Parquet backup alone rebuilds every
    row without Spark, as the plan's map does on the truth."""
    from engine.backup.dataset import read_backup
    from engine.export.recover import recover_dataset
    from tests.production_reference import write_config

    shared = tmp_path / "mnt" / "backup"
    paths = PipelinePaths(tmp_path / "driver", backup=shared)
    report = run_simulation(history, spec, "approx", 0.5, paths, LOCAL, rows_per_file=5,
                            options=FAST)  # fmt: skip
    assert report.windows_lost >= 2 and report.windows_recovered == report.windows_lost
    # a machine loss takes the window state: every open window rebuilt, the range contract
    assert report.failure == "machine" and report.contract == "range"
    assert "range contract covers it" in report.note
    with BackupStore(paths.store_file) as store:
        assert store.backup_uri == str(shared)
        runs = sorted(store.read_table("backup")["run"].unique().tolist())
    assert runs == [0, 1]  # the failed run's backup and the restarted run's
    shutil.rmtree(paths.root)  # the driver's disk is gone
    long = read_backup(shared)
    assert not long.duplicated(["event_time", "sensor"]).any()
    assert len(long) == len(history.times) * len(spec.backup_sensors)
    config = tmp_path / "plan.json"
    write_config(config, history, backup=spec.backup_sensors, lm=spec.linear_map)
    result = recover_dataset(config, shared, tmp_path / "rebuilt.parquet")
    assert result.rows == len(history.times)
    rebuilt = pd.read_parquet(tmp_path / "rebuilt.parquet")
    lm = spec.linear_map
    expected = lm.apply(history.values[:, [history.sensors.index(b) for b in lm.backup]])
    np.testing.assert_allclose(rebuilt[list(lm.sensors)].to_numpy(), expected, rtol=1e-12)


def test_the_failure_strikes_the_same_rows_inside_a_window_whatever_the_batching(
    spark: Any, history: Any, spec_factory: Any, tmp_path: Path
) -> None:
    # Tumbling windows of 6 and a failure at half of 96 rows: row 48 is a window
    # boundary, where a failure between batches would lose nothing.
    spec = spec_factory(window=6, slide=6)
    seen = set()
    for i, (rows_per_file, files) in enumerate([(6, 1), (5, 10)]):
        options = PipelineOptions(max_files_per_trigger=files, trigger_seconds=0.0)
        report = run_simulation(
            history, spec, "none", 0.5, PipelinePaths(tmp_path / str(i)), LOCAL,
            rows_per_file=rows_per_file, options=options,
        )  # fmt: skip
        seen.add((report.lost_rows, report.windows_lost))
    assert seen == {((48, 50), 1)}


def test_simulate_removes_its_temp_dir_on_sigterm_without_py4j_noise(tmp_path: Path) -> None:
    from engine.stream.session import java_problem

    if java_problem():
        pytest.skip(str(java_problem()))
    root = Path(__file__).resolve().parents[2]
    sensors = "Aotizhongxin_TEMP,Changping_TEMP,Dongsi_TEMP,Aotizhongxin_PM2.5"
    command = [sys.executable, "-m", "engine", "simulate", "--data",
               str(root / "sample_data" / "beijing_aq_small.csv"), "--sensors", sensors,
               "--eps", "1", "--delta", "0.1", "--window", "24", "--rows", "300"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        # Wait until the pipeline writes: Spark and its py4j gateway are up.
        while not list(tmp_path.glob("lacuna-sim-*/landing/*.parquet")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in err
    assert "Traceback" not in err and "py4j" not in err, err
    assert not list(tmp_path.glob("lacuna-sim-*"))
