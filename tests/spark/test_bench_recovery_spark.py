"""The recovery benchmark end to end on the shipped small sample: the production job
and a plain file sink write the two backups, then a day and a week are recovered."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bench.bench_recovery import _split, build_case, time_case
from engine.data import load_history
from tests.helpers import SMALL_SAMPLE
from tests.production_reference import Rows

pytestmark = pytest.mark.spark


def test_both_backups_are_written_and_a_day_and_a_week_recovered(spark: Any, tmp_path: Path):
    h = load_history(SMALL_SAMPLE)
    train_rows = 240
    z = (h.values - h.values[:train_rows].mean(axis=0)) / h.values[:train_rows].std(axis=0)
    train, stream = _split(Rows(h.times[:480], z[:480], h.sensors), train_rows)
    args = argparse.Namespace(eps=0.25, window=24, repeats=1, offset_days=1)
    case = build_case(spark, "small", train, stream, args, tmp_path)
    assert case["backup_sensors"] >= 1
    assert all(case["checks"].values()), case["checks"]
    assert case["full_rows"] == 240 * 12
    out = time_case("small", stream, args, tmp_path)
    for label in ("1_day", "1_week"):
        checks = out[label]["checks"]
        assert checks["rows"] == {"1_day": 24, "1_week": 168}[label]
        assert checks["backup_sensors_exact"] and checks["baselines_agree_exactly"]
        assert out[label]["files_touched"]["lacuna"] == out[label]["files_touched"]["full"] >= 1
        assert out[label]["files_bytes"]["lacuna"] < out[label]["files_bytes"]["full"]
    assert "skipped" in out["12_weeks"]
