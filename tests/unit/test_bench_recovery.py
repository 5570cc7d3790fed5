"""The recovery benchmark's core on tiny data, so it cannot rot (no Spark: the two
backup datasets are written here with pyarrow in the job's long, date-partitioned layout)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.bench_recovery import block_gaussian
from bench.recovery_core import compare_range, range_files, write_dataset
from engine.backup.dataset import TimeRange
from engine.export import load_config
from tests.production_reference import Rows, long_readings, sample_rows, write_config


@pytest.fixture
def backups(tmp_path: Path):
    rows = sample_rows(96)  # 4 days, hourly
    config_path = tmp_path / "plan.json"
    write_config(config_path, rows)
    config = load_config(config_path)
    long = long_readings(rows)
    write_dataset(long, tmp_path / "full")
    write_dataset(long[long["sensor"].isin(config.backup_sensors)], tmp_path / "backup")
    day = pd.Timestamp(rows.times[0]).ceil("D").tz_localize("UTC").to_pydatetime()
    return config_path, config, tmp_path, day


def run(backups, t1: datetime, t2: datetime) -> dict:
    config_path, config, root, _ = backups
    work = root / f"work_{t1:%d}_{t2:%d}"
    work.mkdir()
    return compare_range(config_path, config, root / "backup", root / "full", t1, t2, 1, work)


def test_one_day_recovered_reads_only_its_partition_and_backup_sensors_exact(backups):
    day = backups[3]
    out = run(backups, day, day + timedelta(days=1))
    checks = out["checks"]
    assert checks["rows"] == 24
    assert checks["same_time_steps"] and checks["backup_sensors_exact"]
    assert checks["baselines_agree_exactly"] and checks["baseline_complete"]
    assert checks["rebuilt_sensors"] == len(backups[1].sensors) - len(backups[1].backup_sensors)
    assert 0 < checks["rebuilt_rmse"] <= checks["rebuilt_rmse_worst_sensor"]
    assert out["files_touched"] == {"lacuna": 1, "full": 1}
    assert 0 < out["files_bytes"]["lacuna"] < out["files_bytes"]["full"]
    assert set(out["seconds_median"]) == {"lacuna", "full_duckdb", "full_pandas"}


def test_a_changed_backup_reading_is_caught(backups):
    root, day = backups[2], backups[3]
    folder = root / "backup" / f"date={day:%Y-%m-%d}"
    table = pq.ParquetFile(folder / "part-00000.parquet").read().to_pandas()
    table.loc[0, "value"] += 1e-9
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), folder / "part-00000.parquet")
    out = run(backups, day, day + timedelta(days=1))
    assert not out["checks"]["backup_sensors_exact"]
    assert out["checks"]["baselines_agree_exactly"]  # the full backup is untouched


def test_range_files_keeps_only_the_partitions_of_the_range(backups):
    root, day = backups[2], backups[3]
    files = range_files(root / "full", TimeRange(day, day + timedelta(days=2)))
    assert sorted(f.parent.name for f in files) == [
        f"date={d:%Y-%m-%d}" for d in (day, day + timedelta(days=1))
    ]


def test_block_gaussian_has_the_base_correlation_inside_blocks_and_none_across():
    rng = np.random.default_rng(1)
    corr = np.array([[1.0, 0.8, 0.3], [0.8, 1.0, -0.2], [0.3, -0.2, 1.0]])
    values = rng.multivariate_normal(np.zeros(3), corr, size=20_000)
    times = np.datetime64("2024-01-01T00:00") + np.arange(20_000) * np.timedelta64(1, "h")
    out = block_gaussian(Rows(times, values, ("a", "b", "c")), blocks=3, seed=2)
    assert out.values.shape == (20_000, 9)
    assert len(set(out.sensors)) == 9 and out.sensors[3] == "b1_a"
    assert (out.times == times).all()
    got = np.corrcoef(out.values.T)
    base = np.corrcoef(values.T)
    for k in range(3):
        block = got[3 * k : 3 * k + 3, 3 * k : 3 * k + 3]
        assert np.abs(block - base).max() < 0.05
    assert np.abs(got[:3, 3:]).max() < 0.05
    # no two sensors share readings
    assert not np.isclose(out.values[:, 0], out.values[:, 3]).all()
