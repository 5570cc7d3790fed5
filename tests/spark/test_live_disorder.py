"""Disorder handling inside the live pipeline: K-slack stage, late tuples, versioned results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.reconstruct import window_aggregates
from engine.store import BackupStore
from engine.stream.disorder_stage import DisorderStage
from engine.stream.feeder import Feeder, FeedOptions
from engine.stream.pipeline import LivePipeline
from engine.stream.spec import PipelineOptions, PipelinePaths, StreamSpec

pytestmark = pytest.mark.spark


def test_late_tuples_are_recorded_and_corrections_land_in_the_results(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    interval = float(np.median(np.diff(history.times).astype("timedelta64[s]").astype(float)))
    # Exponential delays of about two readings: plenty of tuples arrive out of order.
    delays = rng.exponential(2.0 * interval, size=history.values.shape)
    paths = PipelinePaths(tmp_path).ensure()
    options = FeedOptions(rows_per_file=4, delays=delays)
    Feeder(history, history.sensors, paths.landing_dir, paths.truth_dir, options).run()
    stage = DisorderStage.for_history(
        history.times, spec.window, spec.slide, spec.aggregate, eps_thr=spec.eps, delta=0.05,
        backup_sensors=spec.backup_sensors,
    )  # fmt: skip
    with BackupStore(paths.store_file) as store:
        pipeline = LivePipeline(
            spark, spec, "approx", paths, store, stage=stage,
            options=PipelineOptions(max_files_per_trigger=3, available_now=True),
        )  # fmt: skip
        pipeline.start()
        try:
            pipeline.await_termination(180)
        finally:
            pipeline.stop()
        late = store.read_table("late")
        results = store.read_results()
    assert len(late) > 0, "the injected delays produced no late tuple"
    kinds = set(results["kind"])
    assert {"live", "provisional"} <= kinds
    assert "correction" in kinds, kinds
    # Late readings still complete the reading-indexed live windows: once every
    # reading has arrived they equal the in-order truth exactly (eventually exact).
    truth = window_aggregates(history.values, spec.window, spec.slide, spec.aggregate)
    live = results[results["kind"] == "live"]
    # (the newest readings may still sit in the K-slack buffer when the feed ends)
    assert live["window_id"].nunique() >= truth.shape[0] - 4
    for row in live.itertuples():
        expected = truth[row.window_id, history.sensors.index(row.sensor)]
        assert row.value == pytest.approx(expected, rel=1e-9, abs=1e-9)
    # The stage's corrections carry increasing versions per (window, sensor).
    corrections = results[results["kind"] == "correction"]
    assert (corrections["version"] >= 1).all()
