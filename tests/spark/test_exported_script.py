"""The exported PySpark script runs unchanged and ``recover`` reads what it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.export import load_config
from engine.export.snippets import ProductionPaths
from tests.production_reference import feed, land_long, sample_rows, write_config

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def test_exported_script_runs_unchanged_and_recover_reads_its_backup(
    spark: Any, tmp_path: Path
) -> None:
    rows = sample_rows(48)
    landing, backup = tmp_path / "landing", tmp_path / "backup dir"  # a space, as users do
    feed(rows, landing, rows_per_file=12)
    # a reading of a backed-up sensor without a time: the script leaves it out, as the
    # job does (recover refuses a backup holding one)
    config = write_config(tmp_path / "plan.json", rows)
    stray = pd.DataFrame({"event_time": [pd.NaT], "sensor": [config["backup_sensors"][0]],
                          "value": [1.0]})  # fmt: skip
    land_long(stray, landing / "stray.parquet")
    paths = ProductionPaths(
        config=str(tmp_path / "plan.json"),
        source=str(landing),
        backup="file://" + str(backup),  # Hadoop reads a file: URI's path literally
        checkpoint=(tmp_path / "checkpoints").as_uri(),
    )
    # write_config exported the snippets with default paths; re-export with the user's
    from engine.export import production_snippets

    script = production_snippets(tuple(config["backup_sensors"]), 4 * 3600.0, paths=paths)
    job = tmp_path / "lacuna_backup.py"
    job.write_text(script["spark_filter"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no Lacuna import needed
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run(
        [sys.executable, str(job), "--available-now"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (backup / "_spark_metadata").is_dir()

    out = tmp_path / "all.csv"
    cli = subprocess.run(
        [sys.executable, "-m", "engine", "recover", "--config", paths.config,
         "--backup", str(backup), "--out", str(out)],  # the whole backup, stray row too
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    report = json.loads(cli.stdout)
    assert report["rows"] == 48 and report["backup_readings"] == 48 * 2
    lm = load_config(paths.config).linear_map()
    rebuilt = pd.read_csv(out)
    expected = lm.apply(rows.values[:, [rows.sensors.index(b) for b in lm.backup]])
    np.testing.assert_allclose(rebuilt[list(lm.sensors)].to_numpy(), expected, rtol=1e-9)
