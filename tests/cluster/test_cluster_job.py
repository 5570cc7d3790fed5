"""End to end on a real standalone cluster: stream, kill the job, resume, stop, recover.

The job runs as an operator runs it (``python -m engine run --master spark://...``)
in its own process. It is killed with SIGKILL after its first results (the
failure), more files land, it is started again on the same checkpoint and stopped
with SIGTERM once everything is processed (must exit 0). The backup must then
hold every backup reading exactly once and the results every window once, both
equal to a pure-Python reference, and ``recover`` must rebuild a range from it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import read_backup
from engine.export import load_config
from tests.cluster.standalone import StandaloneCluster
from tests.production_reference import (
    BACKUP,
    feed,
    read_results,
    reference_results,
    sample_rows,
    write_config,
)

pytestmark = [pytest.mark.spark, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]


def _start_job(tmp: Path, cluster: StandaloneCluster, name: str) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "engine",
        "run",
        "--config",
        str(tmp / "plan.json"),
        "--source",
        str(tmp / "landing"),
        "--backup",
        (tmp / "backup").as_uri(),
        "--checkpoint",
        str(tmp / "checkpoint"),
        "--master",
        cluster.url,
        "--trigger",
        "1",
        "--no-replan",
    ]  # fmt: skip  (one map: the reference's)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    # Files, not pipes: Spark's logs would fill a pipe nobody reads and block the job.
    out, err = open(tmp / f"{name}.out", "w"), open(tmp / f"{name}.err", "w")  # noqa: SIM115
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err, text=True)


def _tail(tmp: Path, name: str) -> str:
    return (tmp / f"{name}.err").read_text(errors="replace")[-3000:]


def _wait(
    what: str, ready: Callable[[], bool], proc: subprocess.Popen[str], tmp: Path, name: str
) -> None:
    deadline = time.monotonic() + 300.0
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            pytest.fail(f"job exited ({proc.returncode}) before {what}:\n{_tail(tmp, name)}")
        time.sleep(1.0)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}:\n{_tail(tmp, name)}")


def _results_rows(tmp: Path) -> int:
    try:
        return len(read_results(tmp / "backup"))
    except Exception:  # no results yet (DuckDB: no files match)
        return 0


def test_stream_kill_resume_stop_and_recover_on_a_cluster(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    rows = sample_rows(96)
    write_config(tmp_path / "plan.json", rows)
    lm = load_config(tmp_path / "plan.json").linear_map()
    reference = reference_results(rows, lm, 8 * 3600.0, 4 * 3600.0, "avg", 1.0)
    feed(rows, tmp_path / "landing", rows_per_file=12, stop=48)

    first = _start_job(tmp_path, cluster, "first")
    _wait("first results", lambda: _results_rows(tmp_path) > 0, first, tmp_path, "first")
    first.send_signal(signal.SIGKILL)  # the failure: no clean shutdown
    first.wait(timeout=60)

    feed(rows, tmp_path / "landing", rows_per_file=12, start=48)
    second = _start_job(tmp_path, cluster, "second")
    done = lambda: _results_rows(tmp_path) >= len(reference)  # noqa: E731
    _wait("all windows", done, second, tmp_path, "second")
    second.send_signal(signal.SIGTERM)
    second.wait(timeout=120)
    out, err = (tmp_path / "second.out").read_text(), _tail(tmp_path, "second")
    assert second.returncode == 0, err
    assert json.loads(out)["stopped_by"] == "signal"
    logged = (tmp_path / "second.err").read_text().splitlines()
    assert any(json.loads(line)["event"] == "shadow" for line in logged if line[:1] == "{")

    backup = read_backup(tmp_path / "backup")
    assert len(backup) == 96 * len(BACKUP)  # exactly once across the kill
    assert not backup.duplicated(["event_time", "sensor"]).any()
    got = read_results(tmp_path / "backup")
    keys = ["start_s", "end_s", "sensor"]
    assert not got.duplicated(keys).any()
    merged = reference.merge(got, on=keys, suffixes=("_ref", ""), validate="one_to_one")
    assert len(merged) == len(reference)
    np.testing.assert_allclose(merged["rebuilt"], merged["rebuilt_ref"], rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(merged["miss"], merged["miss_ref"])

    out_file = tmp_path / "range.csv"
    start, end = pd.Timestamp(rows.times[10]).isoformat(), pd.Timestamp(rows.times[70]).isoformat()
    rec = subprocess.run(
        [sys.executable, "-m", "engine", "recover", "--config", str(tmp_path / "plan.json"),
         "--backup", (tmp_path / "backup").as_uri(), "--from", start, "--to", end,
         "--out", str(out_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stderr
    rebuilt = pd.read_csv(out_file)
    expected = lm.apply(rows.values[10:70][:, [rows.sensors.index(b) for b in lm.backup]])
    np.testing.assert_allclose(rebuilt[list(lm.sensors)].to_numpy(), expected, rtol=1e-9)
