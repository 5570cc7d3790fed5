"""Online control on Spark: the real pipeline's shadow check steers the backup set.

A stream where one rebuilt sensor's relation to the others breaks midway: the
controller backs it up (a new plan version of kind ``control``, stored, governing
the rows after it). On the same stream without the break, every version stays
within 2 sensors of the first."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.data import SensorHistory, load_history
from engine.live.manager import PipelineManager
from engine.live.replanning import replanning_monitor
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.planning import BacktestSettings, BackupPlan, PlanParameters, make_plan
from engine.query import WindowQuery
from engine.stream.session import SparkSettings

pytestmark = pytest.mark.spark

DRIFT = Path(__file__).resolve().parents[2] / "sample_data" / "synthetic_drift.csv"
FIT, ROWS, BREAK = 1000, 800, 1300  # plan on rows 0-999, stream 1000-1799, break at 1300
WINDOW = 10
LOCAL = SparkSettings(master="local[2]", shuffle_partitions=2)
OPTIONS = PipelineOptions(max_files_per_trigger=8, trigger_seconds=0.0)


@pytest.fixture(scope="module")
def base() -> tuple[SensorHistory, BackupPlan]:
    """The plan's regime (rows 400-999) replayed after it: a stationary stream."""
    drift = load_history(DRIFT)
    values = np.vstack([drift.values[:FIT], drift.values[400:FIT], drift.values[400:600]])
    history = replace(drift.rows(0, FIT + ROWS), values=values)
    params = PlanParameters(WindowQuery(1.0, 0.05, WINDOW), history=600)
    plan = make_plan(history.rows(0, FIT), params, backtest=BacktestSettings(history=400))
    return history, plan


def _run(history: SensorHistory, plan: BackupPlan, root: Path) -> list[Any]:
    manager = PipelineManager(LOCAL)
    # no alerts and no schedule: the controller alone changes the set
    monitor = replanning_monitor(manager, history, plan, first_row=FIT)
    monitor.monitor.min_windows = 10**6
    try:
        manager.start(history.rows(FIT, FIT + ROWS), StreamSpec.from_plan(plan), "approx",
                      PipelinePaths(root), rows_per_file=7, options=OPTIONS, monitor=monitor,
                      reset=True)  # fmt: skip
        manager.drain(300)
        assert manager.status().last_error is None, manager.status().last_error
        return manager.versions()
    finally:
        manager.close()


def test_the_controller_backs_up_a_sensor_whose_relation_breaks(
    spark: Any, base: tuple[SensorHistory, BackupPlan], tmp_path: Path
) -> None:
    history, plan = base
    broken = next(s for s in plan.sensors if s not in plan.backup_sensors)
    values = history.values.copy()
    j = plan.sensors.index(broken)
    values[BREAK:, j] += 3.0 * np.sin(np.arange(values.shape[0] - BREAK) / 7.0)
    versions = _run(replace(history, values=values), plan, tmp_path)
    assert versions[0].reason == "initial" and broken not in versions[0].spec.backup_sensors
    added = next(v for v in versions if broken in v.spec.backup_sensors)
    assert added.reason == "control" and "backed up" in added.detail
    assert BREAK - FIT < added.first_seq < BREAK - FIT + 30 * WINDOW  # rows of the stream
    assert "control" in added.calibration  # the controller's snapshot is stored with it
    assert broken in versions[-1].spec.backup_sensors


def test_a_stationary_stream_keeps_its_versions_within_two_sensors_of_the_first(
    spark: Any, base: tuple[SensorHistory, BackupPlan], tmp_path: Path
) -> None:
    history, plan = base
    versions = _run(history, plan, tmp_path)
    first = set(versions[0].spec.backup_sensors)
    for v in versions:
        assert len(set(v.spec.backup_sensors) ^ first) <= 2, (v.id, v.spec.backup_sensors)
