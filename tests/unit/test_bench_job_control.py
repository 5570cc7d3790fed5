"""The job-control benchmark times real steering: windows applied, every figure present."""

from __future__ import annotations

import numpy as np

from bench.bench_job_control import bench_size


def test_the_benchmark_steers_every_closed_window_and_times_both() -> None:
    got = bench_size(24, 240, np.random.default_rng(1))
    assert got["windows"] == 240 // 60 - 1  # the last window is still open at the end
    assert got["steer_ms_closing_median"] > 0 and got["crash_check_ms_median"] > 0
    assert got["snapshot_bytes"] > 1000 and got["backup_first"] < 24
