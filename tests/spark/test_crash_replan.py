"""A crash in the micro-batch where a queued re-plan takes effect: the rows it lost were
written under the new version, and after the recovery the store, the report and the
backup say so alike. The report credited them to the new version while the version
table, which the new version never reached, gave them to the old one (and a later
machine-loss recovery would have rebuilt them with the old map)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from engine.data import load_history
from engine.live.launch import start_live
from engine.live.manager import PipelineManager
from engine.live.simulation import failure_row
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.query import WindowQuery
from engine.stream.session import SparkSettings
from tests.helpers import SMALL_SAMPLE, SMALL_SENSORS, fit_map

pytestmark = pytest.mark.spark

ROWS = 56
LOCAL = SparkSettings(master="local[2]", shuffle_partitions=2)


class _History:
    def __init__(self, times: Any, values: Any, sensors: tuple[str, ...]) -> None:
        self.times, self.values, self.sensors = times, values, sensors


def _spec(history: _History, backup: tuple[str, ...]) -> StreamSpec:
    lm = fit_map(history.values, history.sensors, backup)
    return StreamSpec(history.sensors, backup, lm, WindowQuery(1.0, 0.05, 8, slide=4, exposure=3))


def test_the_version_a_crashed_batch_started_is_the_lost_rows_version_everywhere(
    spark: Any, tmp_path: Path
) -> None:
    full = load_history(SMALL_SAMPLE)
    history = _History(full.times[:ROWS], full.select(SMALL_SENSORS).values[:ROWS], SMALL_SENSORS)
    first = _spec(history, ("Dongsi_TEMP", "Aotizhongxin_PM2.5"))
    queued = _spec(history, ("Aotizhongxin_TEMP", "Dongsi_TEMP", "Aotizhongxin_PM2.5"))
    paths = PipelinePaths(tmp_path)
    manager = PipelineManager(LOCAL)
    try:
        options = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0)
        stop = failure_row(ROWS, first, 0.5)
        start_live(manager, history, first, "approx", paths, options=options,
                   leftovers="archive", stop_row=stop)  # fmt: skip
        manager.drain(300)
        manager.set_spec(queued, "a re-plan queued just before the crash", kind="manual")
        manager.arm_failure("crash")
        manager.feed_rest()
        manager.simulate_failure(grace_seconds=300, kind="crash")
        manager.recover()
        manager.drain(300)
        report = manager.report().to_dict()
    finally:
        manager.close()
    lo, hi = report["lost_rows"]
    assert report["rows_by_version"] == {"1": hi - lo + 1}
    versions = {v["id"]: v for v in report["plan_versions"]}
    assert sorted(versions) == [0, 1]  # the queued plan once, not again after the restart
    assert versions[1]["first_row"] == lo and versions[0]["last_row"] == lo - 1
    assert versions[1]["backup_sensors"] == list(queued.backup_sensors)
    tagged = duckdb.sql(
        f"SELECT DISTINCT plan_version FROM read_parquet('{tmp_path}/backup/**/*.parquet', "
        f"hive_partitioning = true) WHERE seq BETWEEN {lo} AND {hi}"
    ).fetchall()
    assert tagged == [(1,)]
