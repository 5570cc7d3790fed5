"""Per-sensor eps on Spark: the live shadow check and recovery scoring count each
sensor's misses against its own eps (pure-Python references on the same data)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.live.simulation import run_simulation
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.stream.session import SparkSettings
from engine.windows import window_errors
from tests.spark.test_pipeline import ONCE, feed, run_once

pytestmark = pytest.mark.spark

OPTIONS = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0)
LOCAL = SparkSettings(master="local[2]", shuffle_partitions=2)


def per_unit(spec: StreamSpec, history: Any) -> tuple[StreamSpec, np.ndarray]:
    """degC sensors at eps 0.5, PM2.5 at eps 15: a miss in one unit is not one in the other."""
    eps = np.array([0.5 if s.endswith("_TEMP") else 15.0 for s in spec.sensors])
    pairs = tuple(zip(spec.sensors, eps.tolist(), strict=True))
    return replace(spec, query=replace(spec.query, eps_by_sensor=pairs)), eps


def test_shadow_misses_count_against_each_sensors_eps(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    spec, eps = per_unit(spec, history)
    paths = PipelinePaths(tmp_path).ensure()
    feed(history, paths)
    with BackupStore(paths.store_file) as store:
        pipeline = run_once(spark, spec, "approx", paths, store, ONCE)
    idx = [spec.sensors.index(s) for s in spec.linear_map.backup]
    rebuilt = spec.linear_map.apply(history.values[:, idx])
    errors = window_errors(history.values, rebuilt, spec.window, spec.slide, "avg")
    want = {
        s: int((errors[:, i] > eps[i]).sum())
        for i, s in enumerate(spec.sensors)
        if s in spec.linear_map.targets
    }
    single = {s: int((errors[:, spec.sensors.index(s)] > spec.eps).sum()) for s in want}
    assert want != single  # the per-sensor eps changes the counts on this data
    assert pipeline.board.snapshot().shadow_violations == want


def test_recovery_report_scores_each_sensor_against_its_eps(
    history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    spec, eps = per_unit(spec, history)
    report = run_simulation(
        history,
        spec,
        "approx",
        0.5,
        PipelinePaths(tmp_path),
        LOCAL,
        rows_per_file=5,
        options=OPTIONS,
    )
    errors = np.asarray(report.errors)
    assert report.eps_by_sensor == tuple(eps.tolist())
    want = (errors > eps).mean(axis=0)
    np.testing.assert_allclose([report.violation_rates[s] for s in spec.sensors], want)
    rebuilt = [spec.sensors.index(s) for s in spec.linear_map.targets]
    assert report.violation_rate == pytest.approx((errors[:, rebuilt] > eps[rebuilt]).mean())
    assert report.eps_for("Dongsi_PM2.5") == 15.0 and report.eps_for("Changping_TEMP") == 0.5
