"""Failure and recovery on Spark, checked against pure-Python references."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.errors import ConfigError, EngineError, ParameterError, PipelineError
from engine.live.backup_writer import write_batch
from engine.live.manager import PipelineManager
from engine.live.records import BatchWrite
from engine.live.recovery import LostRange, recover_lost_range
from engine.live.recovery_report import RecoveryReport, score_recovery
from engine.live.simulation import run_simulation
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.live.versions import PlanVersion
from engine.stream.session import SparkSettings, get_spark
from engine.windows import window_aggregates

pytestmark = pytest.mark.spark

OPTIONS = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0)
LOCAL = SparkSettings(master="local[2]", shuffle_partitions=2)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def per_window(values: np.ndarray, ids: np.ndarray, spec: StreamSpec) -> np.ndarray:
    """Reference: each window aggregated on its own rows with engine.model.linear."""
    w, step = spec.window, spec.slide
    rows = [window_aggregates(values[j * step : j * step + w], w, w, spec.aggregate) for j in ids]
    return np.vstack(rows)


def results_by_window(
    store: BackupStore, spec: StreamSpec, kind: str | None = None
) -> pd.DataFrame:
    res = store.read_results(kind)
    assert not res.duplicated(["window_id", "sensor"]).any()
    return res.pivot(index="window_id", columns="sensor", values="value")[list(spec.sensors)]


def backup_frame(history: Any, sensors: tuple[str, ...], rows: slice | None = None) -> pd.DataFrame:
    """The backup writer's rows (``seq``, ``event_time``, ``sensor``, ``value``) of
    ``sensors`` over ``rows`` of ``history`` (``seq`` = row)."""
    idx = [history.sensors.index(s) for s in sensors]
    rows = slice(None) if rows is None else rows
    seqs = np.arange(len(history.times))[rows]
    return pd.DataFrame(
        {
            "seq": np.repeat(seqs, len(sensors)),
            "event_time": np.repeat(history.times[rows], len(sensors)),
            "sensor": np.tile(sensors, len(seqs)),
            "value": history.values[rows][:, idx].reshape(-1),
        }
    )


def commit_backup(
    store: BackupStore,
    history: Any,
    sensors: tuple[str, ...],
    drop: tuple[int, str] | None = None,
    rows: slice | None = None,
    batch_id: int = 0,
) -> None:
    frame = backup_frame(history, sensors, rows)
    seqs = frame["seq"].unique()
    if drop is not None:
        frame = frame[~((frame["seq"] == drop[0]) & (frame["sensor"] == drop[1]))]
    # as the live pipeline does: Spark writes the batch's Parquet, then the store commits it
    spark = get_spark(LOCAL)
    nbytes = write_batch(spark.createDataFrame(frame), store.batch_uri(0, batch_id), sensors, 0)
    store.commit_batch(
        BatchWrite(
            run=0,
            batch_id=batch_id,
            backup_rows=len(frame),
            backup_bytes=nbytes,
            max_seq=int(seqs[-1]),
        )
    )


@pytest.mark.parametrize(("aggregate", "window", "slide"), [("avg", 8, 4), ("max", 6, 6)])
def test_recovery_job_equals_the_reference(
    spark: Any,
    history: Any,
    spec_factory: Any,
    tmp_path: Path,
    aggregate: str,
    window: int,
    slide: int,
) -> None:
    spec = spec_factory(aggregate=aggregate, window=window, slide=slide)
    b_idx = [spec.sensors.index(s) for s in spec.backup_sensors]
    rebuilt = spec.linear_map.apply(
        history.values[:, [spec.sensors.index(s) for s in spec.linear_map.backup]]
    )
    with BackupStore(tmp_path / "store.duckdb") as store:
        commit_backup(store, history, spec.backup_sensors)
        lost = LostRange(first_window=2, first_row=2 * slide, last_row=61)
        outcome = recover_lost_range(spark, store, spec, "approx", lost, run=0)
        inside = lost.inside_windows(window, slide)
        assert outcome.window_ids.tolist() == inside.tolist() and inside.size >= 8
        assert outcome.rows_read == lost.rows * len(spec.backup_sensors)
        got = results_by_window(store, spec, "recovered")
        assert got.index.tolist() == inside.tolist()
        expected = per_window(rebuilt, inside, spec)
        np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-12, atol=1e-12)
        # backed-up sensors come straight from the backup: exactly the truth
        truth = per_window(history.values, inside, spec)
        np.testing.assert_array_equal(got.to_numpy()[:, b_idx], truth[:, b_idx])
        seed = outcome.seed
        assert seed.next_window == inside[-1] + 1 and seed.damaged_until == 61
        assert seed.start == seed.next_window * slide and seed.filled.all()
        np.testing.assert_allclose(seed.values, rebuilt[seed.start : 62], rtol=1e-12)


def test_a_machine_loss_keeps_the_readings_a_full_batch_backed_up(
    spark: Any, history: Any, spec_factory: Any, tmp_path: Path
) -> None:
    """Rows 0-47 backed up the plan's set, rows 48-95 every sensor (a batch over the
    exposure, or after a recovery): the windows of the full batch are the truth itself,
    not rebuilt from the set."""
    spec = spec_factory(window=8, slide=4)
    rebuilt = spec.linear_map.apply(
        history.values[:, [spec.sensors.index(s) for s in spec.linear_map.backup]]
    )
    with BackupStore(tmp_path / "store.duckdb") as store:
        commit_backup(store, history, spec.backup_sensors, rows=slice(0, 48))
        commit_backup(store, history, spec.sensors, rows=slice(48, 96), batch_id=1)
        lost = LostRange(first_window=0, first_row=0, last_row=95)
        outcome = recover_lost_range(spark, store, spec, "approx", lost, run=0)
        got = results_by_window(store, spec, "recovered")
        early, late = got.index[got.index * 4 + 8 <= 48], got.index[got.index * 4 >= 48]
        assert len(early) >= 8 and len(late) >= 8
        np.testing.assert_allclose(
            got.loc[early].to_numpy(), per_window(rebuilt, early.to_numpy(), spec), rtol=1e-12
        )
        truth = per_window(history.values, late.to_numpy(), spec)
        np.testing.assert_allclose(got.loc[late].to_numpy(), truth, rtol=1e-12, atol=1e-12)
        assert not np.allclose(per_window(rebuilt, late.to_numpy(), spec), truth)
        # the report scores as rebuilt only the pairs with a rebuilt reading
        b_idx = [spec.sensors.index(s) for s in spec.backup_sensors]
        assert outcome.stored is not None and outcome.stored[48:].all()
        assert outcome.stored[:48].sum() == 48 * len(b_idx)
        report = score_recovery(store, spec, "approx", lost, history.values,
                                spark_version="test", seconds=1.0, rows_read=0,
                                input_rows=96, cells=outcome.stored)  # fmt: skip
        rebuilt_pairs = report.rebuilt_pairs()
        ids = np.asarray(report.window_ids)
        targets = [i for i in range(len(spec.sensors)) if i not in b_idx]
        held = ids * 4 >= 48  # every reading of these windows was stored
        assert not rebuilt_pairs[held].any()
        assert rebuilt_pairs[np.ix_(~held, targets)].all()
        errors = np.abs(got.loc[ids].to_numpy() - per_window(history.values, ids, spec))
        expected_rate = (errors[np.ix_(~held, targets)] > spec.eps).mean()
        assert report.violation_rate == pytest.approx(expected_rate)
        assert expected_rate > (errors[:, targets] > spec.eps).mean()  # held pairs diluted it


def test_recovery_across_a_live_replan_uses_each_rows_own_plan(
    spark: Any, history: Any, spec_factory: Any, tmp_path: Path
) -> None:
    """Rows 0-31 were backed up under the first plan, rows 32-63 under a widened one.

    Every window of the range is recovered, each row rebuilt with the plan it
    was written under (the pure-Python reference), not lost for lacking the
    sensor the re-plan added.
    """
    first = spec_factory()
    added = next(s for s in history.sensors if s not in first.backup_sensors)
    widened = spec_factory(backup=(*first.backup_sensors, added))
    with BackupStore(tmp_path / "store.duckdb") as store:
        commit_backup(store, history, first.backup_sensors, rows=slice(0, 32))
        commit_backup(store, history, widened.backup_sensors, rows=slice(32, 96), batch_id=1)
        lost = LostRange(first_window=0, first_row=0, last_row=63)
        versions = [
            PlanVersion(0, "initial", "", first, T0, 0, 31),
            PlanVersion(1, "alert", "", widened, T0, 32),
        ]
        outcome = recover_lost_range(spark, store, widened, "approx", lost, 0, versions)
        assert outcome.rows_by_version == {0: 32, 1: 32}
        inside = lost.inside_windows(widened.window, widened.slide)
        assert outcome.window_ids.tolist() == inside.tolist()

        def rebuilt(spec: StreamSpec, rows: slice) -> np.ndarray:
            cols = [history.sensors.index(s) for s in spec.linear_map.backup]
            out = spec.linear_map.apply(history.values[rows][:, cols])
            return out[:, [spec.linear_map.sensors.index(s) for s in history.sensors]]

        reference = np.vstack([rebuilt(first, slice(0, 32)), rebuilt(widened, slice(32, 96))])
        got = results_by_window(store, widened, "recovered")
        expected = per_window(reference, inside, widened)
        np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-12, atol=1e-12)


def test_a_row_missing_from_the_backup_loses_only_its_windows(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    with BackupStore(tmp_path / "store.duckdb") as store:
        commit_backup(store, history, spec.backup_sensors, drop=(30, spec.backup_sensors[0]))
        lost = LostRange(first_window=0, first_row=0, last_row=59)
        outcome = recover_lost_range(spark, store, spec, "approx", lost, run=0)
        inside = set(lost.inside_windows(spec.window, spec.slide).tolist())
        assert set(outcome.window_ids.tolist()) == inside - {6, 7}  # windows holding row 30


def lost_reference(history: Any, spec: StreamSpec, report: RecoveryReport, mode: str) -> np.ndarray:
    """What recovery must give: lost rows rebuilt from the backup, later rows live."""
    first, last = report.lost_rows
    values = history.values.copy()
    if mode == "approx":
        cols = [spec.sensors.index(s) for s in spec.linear_map.backup]
        values[first : last + 1] = spec.linear_map.apply(history.values[first : last + 1][:, cols])
    return per_window(values, np.asarray(report.window_ids), spec)


@pytest.mark.parametrize("mode", ["approx", "full"])
def test_simulation_recovers_every_lost_window(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path, mode: str
) -> None:
    paths = PipelinePaths(tmp_path)
    report = run_simulation(
        history, spec, mode, 0.5, paths, LOCAL, rows_per_file=5, options=OPTIONS
    )
    assert report.windows_lost >= 2 and report.windows_recovered == report.windows_lost
    assert report.windows_pending == 0 and report.input_rows == history.values.size
    errors = np.asarray(report.errors)
    assert errors.shape == (report.windows_recovered, len(spec.sensors))
    b_idx = [spec.sensors.index(s) for s in spec.backup_sensors]
    assert np.all(errors[:, b_idx] == 0.0)  # backed-up sensors are exactly the truth
    with BackupStore(paths.store_file) as store:
        everything = results_by_window(store, spec)
        recovered = results_by_window(store, spec, "recovered")
        backup = store.read_table("backup")
    n_windows = len(window_aggregates(history.values, spec.window, spec.slide, "avg"))
    assert everything.index.tolist() == list(range(n_windows))  # nothing lost, nothing twice
    np.testing.assert_allclose(
        recovered.loc[list(report.window_ids)].to_numpy(),
        lost_reference(history, spec, report, mode),
        rtol=1e-12,
    )
    live = everything.drop(index=list(report.window_ids))
    np.testing.assert_allclose(live.to_numpy(), per_window(history.values, live.index, spec))
    assert not backup.duplicated(["seq", "sensor"]).any()
    stored = 6 if mode == "full" else 2
    assert len(backup) == history.values.shape[0] * stored
    if mode == "full":
        assert report.max_abs_error == 0.0 and report.violation_rate == 0.0
    else:
        assert report.max_abs_error > 0 and report.backup_sensors == spec.backup_sensors
    assert report.backup_rows == (report.lost_rows[1] - report.lost_rows[0] + 1) * stored
    assert RecoveryReport.__dataclass_fields__.keys() <= report.to_dict().keys()


def test_a_simulated_failure_strikes_inside_an_open_window(
    spark: Any, history: Any, spec_factory: Any, tmp_path: Path
) -> None:
    """A crash just after a batch that ended on the edge of tumbling windows loses
    nothing: the operator's Simulate failure pressed then showed no recovery at all (two
    CI runs of the browser journey). The batch that would lose nothing is let through and
    the failure strikes at the next one, which starts inside an open window."""
    spec = spec_factory(window=4, slide=4)
    short = type(history)(history.times[:8], history.values[:8], history.sensors)
    manager = PipelineManager(LOCAL)
    paths = PipelinePaths(tmp_path)
    one = PipelineOptions(max_files_per_trigger=1, trigger_seconds=0.0)  # a row a batch
    try:
        manager.start(short, spec, "approx", paths, rows_per_file=1, options=one, stop_row=4)
        manager.drain(120)
        assert manager.rows_seen() == 4 and manager.status().windows_emitted == 1
        manager._pipeline.request_failure()  # failing now would lose nothing: rows 0-3 are out
        manager.feed_rest()
        status = manager.simulate_failure(grace_seconds=120)
        assert status.state == "failed"
        report = manager.recover()
        # row 4's batch was let through (it opened window 1), row 5's failed
        assert report.windows_lost == 1 and report.lost_rows == (4, 4)
        restore = manager.status().last_restore  # the latest restore, as the Live page says
        assert manager.status().restores == 1 and restore is not None
        assert (restore.kind, restore.run, restore.resumed_at_row) == ("recovery", 0, 5)
        assert (restore.lost_first_row, restore.lost_last_row, restore.windows) == (4, 4, 1)
        manager.drain(120)
        final = manager.report()
        assert final.windows_recovered == 1 and final.window_ids == (1,)
        assert manager.status().windows_emitted >= 2  # the counters went on after it
        # and count what a Resume's new process reads back: the recovered window too
        with BackupStore(paths.store_file) as store:
            assert manager.status().windows_emitted == store.totals()["windows"]
    finally:
        manager.close()


def test_a_failure_after_the_feed_has_ended_does_not_wait_for_a_batch(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    """Once every landed file is processed no batch can come: the query is stopped at
    once. It waited the whole grace (15 s in the app) holding the manager's lock, and
    the Live page's reruns waited with it."""
    manager = PipelineManager(LOCAL)
    paths = PipelinePaths(tmp_path)
    try:
        manager.start(history, spec, "approx", paths, rows_per_file=4, options=OPTIONS, stop_row=42)
        manager.drain(120)
        t0 = time.monotonic()
        status = manager.simulate_failure(grace_seconds=300)
        waited = time.monotonic() - t0
        assert status.state == "failed" and waited < 60, waited
        report = manager.recover()
        # windows 0-8 closed (8 rows, slide 4); 9 (rows 36-43) and 10 (40-47) were open
        assert report.lost_rows == (36, 41) and report.windows_lost == 2
    finally:
        manager.close()


def test_mode_none_loses_the_windows_and_says_so(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    paths = PipelinePaths(tmp_path)
    report = run_simulation(
        history, spec, "none", 0.5, paths, LOCAL, rows_per_file=5, options=OPTIONS
    )
    d = report.to_dict()
    assert d["windows_lost"] >= 2 and d["windows_recovered"] == 0 and d["backup_rows"] == 0
    assert d["max_abs_error"] is None and "none" in d["note"] and "lost" in d["note"]
    first, last = report.lost_rows
    lost_ids = set(range(first // spec.slide, last // spec.slide + 1))
    with BackupStore(paths.store_file) as store:
        got = results_by_window(store, spec)
        assert store.read_table("backup").empty
    assert lost_ids.isdisjoint(got.index) and len(lost_ids) == d["windows_lost"]
    assert got.index.max() == (len(history.times) - spec.window) // spec.slide  # the live tail
    np.testing.assert_allclose(got.to_numpy(), per_window(history.values, got.index, spec))


def test_manager_refuses_a_second_start_and_recovers_a_flagged_failure(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    manager = PipelineManager(LOCAL)
    paths = PipelinePaths(tmp_path)
    slow = PipelineOptions(max_files_per_trigger=1, trigger_seconds=0.0)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            manager.start(history, spec, "full", paths, rows_per_file=4, options=slow)
        except EngineError as err:
            errors.append(err)

    try:
        threads = [threading.Thread(target=start) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(errors) == 1 and isinstance(errors[0], PipelineError)
        assert "already" in str(errors[0])
        with pytest.raises(PipelineError, match="nothing to recover"):
            manager.recover()
        status = manager.simulate_failure()
        assert status.state == "failed" and not paths.checkpoint_dir.exists()
        with pytest.raises(PipelineError, match="no pipeline is running"):
            manager.simulate_failure()
        report = manager.recover()
        assert manager.status().state == "running" and report.mode == "full"
        manager.drain(120)
        final = manager.report()
        assert final.windows_recovered == final.windows_lost and final.max_abs_error in (0.0, None)
        assert manager.status().feed.done and manager.status().input_rows >= history.values.size
    finally:
        manager.close()
    assert manager.stop().state == "stopped"  # idempotent


def test_bad_inputs_give_clear_engine_errors(
    spark: Any, history: Any, spec_factory: Any, tmp_path: Path
) -> None:
    spec = spec_factory()
    narrow = type(history)(history.times, history.values[:, :4], history.sensors[:4])
    with pytest.raises(ConfigError, match=r"Changping_PM2\.5"):
        run_simulation(narrow, spec, "approx", 0.5, PipelinePaths(tmp_path / "a"), LOCAL)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PipelineError, match="file"):
        run_simulation(history, spec, "approx", 0.5, PipelinePaths(blocker / "root"), LOCAL)
    with pytest.raises(ParameterError, match="fail_at"):
        run_simulation(history, spec, "approx", 1.5, PipelinePaths(tmp_path / "b"), LOCAL)
    with pytest.raises(ParameterError, match="mode"):
        run_simulation(history, spec, "most", 0.5, PipelinePaths(tmp_path / "c"), LOCAL)
