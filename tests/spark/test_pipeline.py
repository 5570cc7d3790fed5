"""The live Spark pipeline against a pure-Python reference on the same data."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from engine.backup.dataset import read_backup as production_read_backup
from engine.live.failure import consumed_files
from engine.live.feeder import Feeder, FeedOptions
from engine.live.pipeline import LivePipeline
from engine.live.spec import Fault, PipelineOptions, PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.windows import window_aggregates, window_errors
from tests.production_reference import write_config

pytestmark = pytest.mark.spark

ONCE = PipelineOptions(max_files_per_trigger=3, available_now=True)
# 24 files, 2 per batch: 12 batches, past Spark's source-log compaction after batch 9.
ONCE_SMALL_BATCHES = PipelineOptions(max_files_per_trigger=2, available_now=True)


def feed(history: Any, paths: PipelinePaths, rows: slice | None = None) -> None:
    rows = rows or slice(0, len(history.times))
    options = FeedOptions(rows_per_file=4, start_row=rows.start, stop_row=rows.stop)
    Feeder(history, history.sensors, paths.landing_dir, paths.truth_dir, options).run()


def run_once(
    spark: Any,
    spec: StreamSpec,
    mode: str,
    paths: PipelinePaths,
    store: BackupStore,
    options: PipelineOptions = ONCE,
    **kwargs: Any,
) -> LivePipeline:
    """Start a query that processes what has landed, wait for it, stop it."""
    pipeline = LivePipeline(spark, spec, mode, paths, store, options=options, **kwargs).start()
    try:
        pipeline.await_termination(120)
    finally:
        pipeline.stop()
    return pipeline


def wide_results(store: BackupStore, sensors: tuple[str, ...]) -> pd.DataFrame:
    res = store.read_results()
    assert not res.duplicated(["window_id", "sensor"]).any()
    return res.pivot(index="window_id", columns="sensor", values="value")[list(sensors)]


def test_live_windows_backup_and_shadow_equal_the_reference(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    paths = PipelinePaths(tmp_path).ensure()
    feed(history, paths)
    backup_sensors = spec.backup_sensors
    with BackupStore(paths.store_file) as store:
        pipeline = run_once(spark, spec, "approx", paths, store, ONCE_SMALL_BATCHES)
        landed = sorted(paths.landing_dir.glob("*.parquet"))
        assert consumed_files(pipeline.source, paths.checkpoint_dir, store, pipeline.run) == landed
        compacted = [p.name for p in (paths.checkpoint_dir / "sources" / "0").iterdir()]
        assert "9.compact" in compacted
        expected = window_aggregates(history.values, spec.window, spec.slide, spec.aggregate)
        got = wide_results(store, spec.sensors)
        assert got.index.tolist() == list(range(len(expected)))
        np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-12)
        assert set(store.read_results()["kind"]) == {"live"}

        backup = store.read_table("backup")
        assert set(backup["sensor"]) == set(backup_sensors)
        assert not backup.duplicated(["seq", "sensor"]).any()
        pivot = backup.pivot(index="seq", columns="sensor", values="value")[list(backup_sensors)]
        idx = [spec.sensors.index(s) for s in backup_sensors]
        np.testing.assert_array_equal(pivot.to_numpy(), history.values[:, idx])
        # Spark wrote it: one directory per batch, committed, partitioned by day, UTC micros
        root = Path(store.backup_uri)
        assert sorted(d.name for d in (root / "run=0").iterdir()) == sorted(
            f"batch_id={b}" for b in range(12)
        )
        assert all((root / "run=0" / f"batch_id={b}" / "_SUCCESS").exists() for b in range(12))
        files = sorted(root.rglob("*.parquet"))
        assert {f.parent.name for f in files} == {
            f"date={d}" for d in pd.DatetimeIndex(history.times).strftime("%Y-%m-%d")
        }
        schema = pq.read_schema(files[0])
        assert str(schema.field("event_time").type) == "timestamp[us, tz=UTC]"
        times = pd.DatetimeIndex(history.times).tz_localize(None)
        np.testing.assert_array_equal(
            backup.sort_values("seq")["event_time"].to_numpy()[:: len(backup_sensors)],
            times.to_numpy(),
        )
        assert set(backup["plan_version"]) == {pipeline.version.id}
        # the production reader (recover --backup DIR) reads the same rows, without Spark
        theirs = production_read_backup(root)
        assert len(theirs) == len(backup) and set(theirs["sensor"]) == set(backup_sensors)
        status = pipeline.board.snapshot()
        assert status.input_rows == history.values.size and status.batches == 12
        assert status.backup_rows == len(backup) == 96 * 2
        assert status.backup_bytes == store.size().backup_bytes
        assert status.windows_emitted == len(expected)
        rebuilt = spec.linear_map.apply(history.values[:, idx])
        errors = window_errors(history.values, rebuilt, spec.window, spec.slide, "avg")
        misses = {
            s: int((errors[:, i] > spec.eps).sum())
            for i, s in enumerate(spec.sensors)
            if s not in backup_sensors
        }
        assert status.shadow_violations == misses and status.shadow_windows == len(expected)
        points = pipeline.board.history.points()  # one dashboard point per micro-batch
        assert [p.batch_id for p in points] == list(range(12))
        assert sum(p.input_rows for p in points) == status.input_rows
        assert sum(p.backup_rows for p in points) == status.backup_rows
        assert sum(p.windows for p in points) == status.windows_emitted
        assert points[-1].shadow_pooled == status.shadow_violation_rate
        assert all(p.duration_ms is not None and p.duration_ms > 0 for p in points)
        assert store.read_table("plan_log")["reason"].str.contains("start").all()
    recover_with_the_cli(history, spec, Path(store.backup_uri), tmp_path)


def recover_with_the_cli(history: Any, spec: StreamSpec, backup: Path, tmp: Path) -> None:
    """``python -m engine recover`` (DuckDB, no Spark, another process) rebuilds rows
    30-53 of the live run's Parquet backup as the plan's map does on the truth."""
    config = tmp / "plan.json"
    write_config(config, history, backup=spec.backup_sensors, lm=spec.linear_map)
    start, end = pd.Timestamp(history.times[30]), pd.Timestamp(history.times[54])
    out = tmp / "rebuilt.parquet"
    command = [sys.executable, "-m", "engine", "recover", "--config", str(config),
               "--backup", str(backup), "--from", start.isoformat(), "--to", end.isoformat(),
               "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 24
    rebuilt = pd.read_parquet(out)
    lm = spec.linear_map
    expected = lm.apply(history.values[30:54][:, [history.sensors.index(b) for b in lm.backup]])
    np.testing.assert_allclose(rebuilt[list(lm.sensors)].to_numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize(("mode", "stored"), [("full", 6), ("none", 0)])
def test_backup_modes_store_all_or_nothing(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path, mode: str, stored: int
) -> None:
    paths = PipelinePaths(tmp_path).ensure()
    feed(history, paths, slice(0, 40))
    with BackupStore(paths.store_file) as store:
        run_once(spark, spec, mode, paths, store)
        assert len(store.read_table("backup")) == 40 * stored
        assert len(store.read_results()) == 9 * len(spec.sensors)  # windows 0..8 of 40 rows


def test_an_injected_monitor_sees_the_shadow_errors_and_alerts(
    spark: Any, history: Any, spec_factory: Any, tmp_path: Path
) -> None:
    from engine.planning import ViolationMonitor

    spec = spec_factory(eps=0.05)  # far tighter than the rebuilt sensors can meet
    monitor = ViolationMonitor(spec.sensors, spec.eps, spec.delta, min_windows=5)
    paths = PipelinePaths(tmp_path).ensure()
    feed(history, paths, slice(0, 48))
    with BackupStore(paths.store_file) as store:
        pipeline = run_once(spark, spec, "approx", paths, store, monitor=monitor)
    status = pipeline.board.snapshot()
    counted = {s: v for s, (v, w) in monitor.rates().items() if w}
    assert counted == status.shadow_violations and set(counted) == set(spec.linear_map.targets)
    assert status.last_alert is not None and "live violation rate" in status.last_alert
    assert status.shadow_worst_rate is not None and status.shadow_worst_rate > spec.delta


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_a_crash_inside_a_batch_neither_duplicates_nor_loses_backup_rows(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path, point: str
) -> None:
    paths = PipelinePaths(tmp_path).ensure()
    feed(history, paths)
    with BackupStore(paths.store_file) as store:
        crashed = run_once(spark, spec, "full", paths, store, fault=Fault(2, point))  # type: ignore[arg-type]
        assert crashed.query.exception() is not None
        assert store.committed_batches(0) == ([0, 1] if point == "before_commit" else [0, 1, 2])
        # Spark had written batch 2's directory (with _SUCCESS) before the store's transaction
        batch2 = Path(store.batch_uri(0, 2))
        assert (batch2 / "_SUCCESS").exists()
        first_files = {f.name for f in batch2.rglob("*.parquet")}
        # an orphan (no store marker) is not read; a committed batch is (3 files of 4 rows)
        seen = store.read_table("backup")["seq"]
        assert seen.max() == 12 * len(store.committed_batches(0)) - 1
        resumed = run_once(spark, spec, "full", paths, store)
        assert resumed.run == crashed.run == 0  # same checkpoint, same run: Spark replays batch 2
        replayed = {f.name for f in batch2.rglob("*.parquet")}
        if point == "before_commit":  # the replay overwrote the orphan (new part files)
            assert replayed and not replayed & first_files
        else:  # committed: the replay is skipped, the directory untouched
            assert replayed == first_files
        backup = store.read_table("backup")
        assert len(backup) == history.values.size
        assert not backup.duplicated(["seq", "sensor"]).any()
        expected = window_aggregates(history.values, spec.window, spec.slide, spec.aggregate)
        np.testing.assert_allclose(wide_results(store, spec.sensors).to_numpy(), expected)
        assert len(consumed_files(resumed.source, paths.checkpoint_dir, store, 0)) == 24


def test_a_new_plan_takes_effect_at_the_next_batch(
    spark: Any, spec: StreamSpec, spec_factory: Any, tmp_path: Path, history: Any
) -> None:
    paths = PipelinePaths(tmp_path).ensure()
    wider = spec_factory(backup=(*spec.backup_sensors, "Changping_PM2.5"))
    options = PipelineOptions(max_files_per_trigger=5, trigger_seconds=0.0)
    with BackupStore(paths.store_file) as store:
        pipeline = LivePipeline(spark, spec, "approx", paths, store, options=options).start()
        try:
            feed(history, paths, slice(0, 48))
            pipeline.process_all_available()
            pipeline.set_spec(wider, "live violation rate above delta")
            feed(history, paths, slice(48, 96))
            pipeline.process_all_available()
            status = _wait_for_metrics(pipeline)
        finally:
            pipeline.stop()
        backup = store.read_table("backup")
        added = backup[backup["sensor"] == "Changping_PM2.5"]["seq"]
        assert added.min() == 48 and added.max() == 95 and len(added) == 48
        log = store.read_table("plan_log")
        assert log["reason"].tolist()[-1] == "live violation rate above delta"
        assert status.plan_changes == 1
        assert status.processed_rows_per_second > 0 and status.batch_duration_ms > 0
        assert status.trigger_seconds == 0.0  # the query's own, for the page's comparisons
        assert status.profile["batches"] >= 2 and status.profile["to_pandas"] > 0
        with pytest.raises(Exception, match="window"):
            pipeline.set_spec(spec_factory(window=12), "bad")


def _wait_for_metrics(pipeline: LivePipeline, timeout: float = 10.0) -> Any:
    """Listener events arrive asynchronously; wait for the first progress report."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = pipeline.board.snapshot()
        if status.batch_duration_ms > 0:
            return status
        time.sleep(0.1)
    return pipeline.board.snapshot()


def _first_batch_interrupted(
    spark: Any, spec: StreamSpec, paths: PipelinePaths, store: Any
) -> None:
    """A run whose first batch a stop interrupted while Spark wrote its offsets: the
    query and its run exist, nothing is logged, Spark's temporary offsets file is left."""
    run_once(spark, spec, "approx", paths, store)  # nothing has landed: no batch
    offsets = paths.checkpoint_dir / "offsets"
    assert not any(p.name.isdigit() for p in offsets.iterdir()) if offsets.is_dir() else True
    offsets.mkdir(exist_ok=True)
    (offsets / ".0.0c6e6bd6-9a0c-4d4e-a2be-1f2d3c4b5a69.tmp").write_bytes(b"")


def test_a_run_stopped_while_its_first_batch_was_logged_resumes(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    paths = PipelinePaths(tmp_path).ensure()
    with BackupStore(paths.store_file) as store:
        _first_batch_interrupted(spark, spec, paths, store)
        feed(history, paths)
        pipeline = run_once(spark, spec, "approx", paths, store)
        assert pipeline.board.snapshot().state != "error", pipeline.board.snapshot().last_error
        expected = window_aggregates(history.values, spec.window, spec.slide, spec.aggregate)
        np.testing.assert_allclose(wide_results(store, spec.sensors).to_numpy(), expected)
        assert not list((paths.checkpoint_dir / "offsets").glob(".*.tmp"))


def test_a_query_that_dies_as_it_starts_shows_as_an_error(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path, monkeypatch: Any
) -> None:
    # Without the repair Spark refuses the checkpoint at once: the board says so, in the
    # one line of Spark's reason, rather than stay "running" with no batch ever after.
    monkeypatch.setattr("engine.live.pipeline.clear_interrupted_first_batch", lambda *a: [])
    paths = PipelinePaths(tmp_path).ensure()
    with BackupStore(paths.store_file) as store:
        _first_batch_interrupted(spark, spec, paths, store)
        feed(history, paths)
        pipeline = LivePipeline(spark, spec, "approx", paths, store, options=ONCE).start()
        try:
            assert pipeline.await_termination(60)
            deadline = time.monotonic() + 5
            while pipeline.board.snapshot().state == "running" and time.monotonic() < deadline:
                time.sleep(0.05)
            snap = pipeline.board.snapshot()
        finally:
            pipeline.stop()
        assert snap.state == "error", snap
        assert "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY" in (snap.last_error or "")
