"""Disorder handling inside the live pipeline: K-slack stage, late tuples, versioned results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.disorder import DisorderStage
from engine.live.feeder import Feeder, FeedOptions
from engine.live.manager import PipelineManager
from engine.live.pipeline import LivePipeline
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.stream.session import SparkSettings
from engine.windows import window_aggregates

pytestmark = pytest.mark.spark


def replay_through_stage(
    spark: Any,
    history: Any,
    spec: StreamSpec,
    paths: PipelinePaths,
    seed: int,
    rows_per_file: int,
    files_per_trigger: int,
) -> tuple[LivePipeline, int, int]:
    """Land ``history`` with exponential arrival delays of about two readings (plenty
    of tuples out of order), stream it through the K-slack stage to the end, and flush
    the stage twice: the pipeline, the windows the first flush closed, and the second's."""
    interval = float(np.median(np.diff(history.times).astype("timedelta64[s]").astype(float)))
    delays = np.random.default_rng(seed).exponential(2.0 * interval, size=history.values.shape)
    paths.ensure()
    feed = FeedOptions(rows_per_file=rows_per_file, delays=delays)
    Feeder(history, history.sensors, paths.landing_dir, paths.truth_dir, feed).run()
    stage = DisorderStage.for_history(history.times, spec.query, backup_sensors=spec.backup_sensors)
    options = PipelineOptions(max_files_per_trigger=files_per_trigger, available_now=True)
    with BackupStore(paths.store_file) as store:
        pipeline = LivePipeline(spark, spec, "approx", paths, store, stage=stage, options=options)
        pipeline.start()
        try:
            pipeline.await_termination(180)
        finally:
            pipeline.stop()
        closed = pipeline.finish_stage()  # end of feed: flush the K-slack buffer
        return pipeline, closed, pipeline.finish_stage()


def test_late_tuples_are_recorded_and_corrections_land_in_the_results(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    paths = PipelinePaths(tmp_path)
    pipeline, closed_at_end, again = replay_through_stage(spark, history, spec, paths, 5, 4, 3)
    assert again == 0  # the end-of-feed flush is idempotent
    with BackupStore(paths.store_file) as store:
        late = store.read_table("late")
        results = store.read_results()
    assert len(late) > 0, "the injected delays produced no late tuple"
    points = pipeline.board.history.points()
    status = pipeline.board.snapshot()
    assert sum(p.late for p in points) == status.late_rows == len(late)
    assert status.k_s is not None and all(p.k_s is not None for p in points)
    assert sum(p.provisional for p in points) == status.provisional_results
    assert status.provisional_results == (results["kind"] == "provisional").sum()
    assert status.corrected_results == (results["kind"] == "correction").sum() > 0
    kinds = set(results["kind"])
    assert {"live", "provisional"} <= kinds
    assert "correction" in kinds, kinds
    # Late readings still complete the reading-indexed live windows: once every
    # reading has arrived they equal the in-order truth exactly (eventually exact).
    truth = window_aggregates(history.values, spec.window, spec.slide, spec.aggregate)
    live = results[results["kind"] == "live"]
    assert closed_at_end > 0  # the newest readings sat in the buffer until the flush
    assert live["window_id"].nunique() == truth.shape[0]
    for row in live.itertuples():
        expected = truth[row.window_id, history.sensors.index(row.sensor)]
        assert row.value == pytest.approx(expected, rel=1e-9, abs=1e-9)
    # The stage's corrections carry versions, and after the flush every window's
    # final result equals the in-order truth (eventually exact).
    corrections = results[results["kind"] == "correction"]
    assert (corrections["version"] >= 1).all()
    staged = results[results["kind"] != "live"].copy()
    staged["order"] = staged["batch_id"].where(staged["batch_id"] >= 0, 1 << 40)  # flush last
    staged = staged.sort_values(["version", "order"], kind="stable")
    final = staged.groupby(["window_id", "sensor"]).tail(1)  # the latest word on each
    assert final["final"].all()  # a final result reopened by a later reading is corrected
    assert set(final["window_id"]) >= set(range(truth.shape[0]))
    for row in final.itertuples():
        # (the stage also reports the partial window that starts before the first
        # reading, id -1, which the reading-indexed truth does not define)
        if 0 <= row.window_id < truth.shape[0]:
            expected = truth[row.window_id, history.sensors.index(row.sensor)]
            assert row.value == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_a_failure_after_a_gap_in_time_loses_no_window_and_leaves_no_wrong_result(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    """The stage's windows are aligned to event time, the pipeline's to readings, so
    after a day missing from the data their ids differ by a day's windows.

    * The lost range must start after the last reading-indexed window with a final
      result: judged from the stage's ids it began six windows late, and those
      windows got no result.
    * The stage must not report what it cannot know. A restarted stage saw none of
      the readings before the restart, and the feed's pause (``stop_row``) is not its
      end: both once gave windows around the failure "final" results computed from
      part of their readings (two different ones for the same window).
    """
    times = history.times.copy()
    times[48:] = times[48:] + np.timedelta64(1, "D")  # a day missing from the feed
    gapped = type(history)(times, history.values, history.sensors)

    def stage() -> DisorderStage:
        return DisorderStage.for_history(times, spec.query, backup_sensors=spec.backup_sensors)

    manager = PipelineManager(SparkSettings(master="local[2]", shuffle_partitions=2))
    paths = PipelinePaths(tmp_path)
    options = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0)
    try:
        # rows 0-81 processed: windows 0-18 (8 rows, slide 4) are closed, 19 and 20 open
        manager.start(
            gapped, spec, "approx", paths, rows_per_file=4, options=options,
            stage_factory=stage, stop_row=82,
        )  # fmt: skip
        manager.drain(120)
        manager.simulate_failure(grace_seconds=0.5)
        first = manager.recover()
        manager.feed_rest()
        manager.drain(120)
        final = manager.report()
    finally:
        manager.close()
    assert first.lost_rows[0] == 19 * spec.slide and first.windows_lost >= 1
    assert final.windows_recovered == final.windows_lost and final.windows_pending == 0
    with BackupStore(paths.store_file) as store:
        results = store.read_results()
    indexed = results[results["kind"].isin(["live", "recovered"])]
    n_windows = (len(times) - spec.window) // spec.slide + 1
    assert sorted(set(indexed["window_id"])) == list(range(n_windows))  # none lost
    assert not indexed.duplicated(["window_id", "sensor"]).any()  # none twice
    staged = results[~results["kind"].isin(["live", "recovered"])]
    finals = staged[staged["final"]]
    assert len(finals) > 0 and not finals.duplicated(["window_id", "sensor"]).any()
    stamps = times.astype("datetime64[ns]")
    for row in finals.itertuples():
        # the readings whose event time lies in the window (of the day missing: none)
        inside = (stamps >= np.datetime64(row.window_start, "ns")) & (
            stamps < np.datetime64(row.window_end, "ns")
        )
        readings = history.values[inside, history.sensors.index(row.sensor)]
        assert row.value == pytest.approx(readings.mean(), rel=1e-9, abs=1e-9), row
    assert finals["window_id"].nunique() >= n_windows - 6  # most windows are final


def test_windows_a_failure_leaves_without_a_whole_row_are_reported_unrecoverable(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    """With arrival delays the failure can strike when only some readings of the newest
    consumed row have arrived: recovery cannot rebuild it and skips the windows that need
    it (a known limitation, README). The report said "not (yet) recovered" and counted
    them neither as pending nor as lost for good; it now says they stay without a result."""
    interval = float(np.median(np.diff(history.times).astype("timedelta64[s]").astype(float)))
    delays = np.random.default_rng(5).exponential(2.0 * interval, size=history.values.shape)

    def stage() -> DisorderStage:
        return DisorderStage.for_history(
            history.times, spec.query, backup_sensors=spec.backup_sensors
        )

    options = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0, fail_after_readings=240)
    manager = PipelineManager(SparkSettings(master="local[2]", shuffle_partitions=2))
    paths = PipelinePaths(tmp_path)
    try:
        manager.start(history, spec, "approx", paths, rows_per_file=4, delays=delays,
                      options=options, stage_factory=stage)  # fmt: skip
        assert manager.wait_for_failure(240)
        manager.simulate_failure(grace_seconds=0.5)
        manager.recover()
        manager.drain(240)
        report = manager.report()
    finally:
        manager.close()
    with BackupStore(paths.store_file) as store:
        results = store.read_results()
    indexed = results[results["kind"].isin(["live", "recovered"])]
    n_windows = (len(history.times) - spec.window) // spec.slide + 1
    without = set(range(n_windows)) - set(indexed["window_id"])
    assert report.windows_unrecoverable == len(without) >= 1, (report, sorted(without))
    assert report.windows_pending == 0
    assert report.windows_recovered + len(without) == report.windows_lost
    assert (
        "cannot be rebuilt" in report.note and not indexed.duplicated(["window_id", "sensor"]).any()
    )


def test_simulate_with_disorder_runs_the_stage_through_failure_and_recovery(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simulate --disorder``: the CLI starts the run the way the app does (one launch
    path), so late readings go through the K-slack stage, its corrections and final
    results are stored, and recovery and the report work as without delays."""
    from engine.cli import main
    from engine.live.spec import PipelinePaths

    root = Path(__file__).resolve().parents[2]
    code = main(
        ["simulate", "--data", str(root / "sample_data" / "beijing_aq_small.csv"),
         "--sensors", "Aotizhongxin_TEMP,Changping_TEMP,Dongsi_TEMP,Aotizhongxin_PM2.5",
         "--eps", "1", "--delta", "0.1", "--window", "12", "--rows", "120",
         "--disorder", "exp:7200", "--seed", "3", "--workdir", str(tmp_path),
         "--master", "local[2]"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    report = __import__("json").loads(out)
    # the plan's warnings (one eps over degC and ug/m3) are said, and reported with its
    # verdicts, as ``plan`` says them
    plan = report["plan"]
    assert plan["contract"] == "range" and set(plan["verdicts"]) == {"crash", "range"}
    assert plan["verdict"] is None or isinstance(plan["verdict"], str)
    assert any(w.startswith("the sensors have 2 units") for w in plan["warnings"])
    assert "warning: the sensors have 2 units" in err
    assert report["promise"] is None  # a range plan: its own contract scores the loss
    disorder = report["disorder"]
    assert disorder["delays"].startswith("exp")
    assert disorder["late_readings"] > 0 and disorder["corrected_results"] > 0
    assert report["windows_lost"] > 0 and report["windows_pending"] == 0
    with BackupStore(PipelinePaths(tmp_path).store_file) as store:
        results = store.read_results()
        late = store.read_table("late")
    assert len(late) == disorder["late_readings"]
    kinds = set(results["kind"])
    assert {"live", "provisional", "correction", "final"} <= kinds, kinds
    staged = results[results["kind"].isin(["provisional", "correction", "final"])]
    finals = staged[staged["final"]].groupby(["window_id", "sensor"]).size()
    # every window the stage reported after the flush has a final result
    assert len(finals) == len(staged.groupby(["window_id", "sensor"]).size())


def test_the_end_of_a_replay_nobody_drains_is_flushed_once(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    """The Live page never calls ``drain``: at the end of its replay the K-slack stage
    kept its newest readings, and their windows never closed. ``finish_feed`` (the page
    calls it once the feed is done) processes what landed and flushes the stage, once."""
    import time

    from engine.live.pipeline import END_OF_FEED

    interval = float(np.median(np.diff(history.times).astype("timedelta64[s]").astype(float)))
    delays = np.random.default_rng(5).exponential(2.0 * interval, size=history.values.shape)

    def stage() -> DisorderStage:
        return DisorderStage.for_history(
            history.times, spec.query, backup_sensors=spec.backup_sensors
        )

    manager = PipelineManager(SparkSettings(master="local[2]", shuffle_partitions=2))
    paths = PipelinePaths(tmp_path)
    options = PipelineOptions(max_files_per_trigger=4, trigger_seconds=0.0)
    try:
        manager.start(history, spec, "approx", paths, rows_per_file=8, delays=delays,
                      options=options, stage_factory=stage)  # fmt: skip
        deadline = time.monotonic() + 180
        while not manager.status().feed.done and time.monotonic() < deadline:
            time.sleep(0.2)
        assert manager.status().feed.done
        assert manager.finish_feed()
        assert not manager.finish_feed()  # once a pipeline
        status = manager.status()
    finally:
        manager.close()
    with BackupStore(paths.store_file) as store:
        results = store.read_results()
    flushed = results[results["batch_id"] == END_OF_FEED]
    assert (flushed["kind"] == "final").any()  # the stage's results finalised at the end
    live = results[results["kind"] == "live"]
    n_windows = (len(history.times) - spec.window) // spec.slide + 1
    assert live["window_id"].nunique() == n_windows  # the held readings closed the last ones
    assert status.windows_emitted == n_windows
