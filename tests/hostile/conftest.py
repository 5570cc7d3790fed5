"""The hostile suite: every failure mode in docs/FAILURE_MODES.md, run as an operator would
meet it. In-process where the CLI's logic is tested (``run_cli``), a real subprocess
where the process boundary matters, Spark only where the item is about Spark (the one
session of ``tests/spark``, skipped without Java locally and failing in CI)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.cli import main
from tests.spark.conftest import spark  # noqa: F401  (the one shared SparkSession)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run_cli(*argv) -> (exit code, stdout, stderr)`` through ``engine.cli.main``."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def one_line_error(code: int, err: str) -> str:
    """The refusal's line: exit 2, one ``error:`` line on stderr, never a traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    assert lines and lines[-1].startswith("error: "), err
    assert sum(ln.startswith("error: ") for ln in lines) == 1, err
    return lines[-1]


def write_job_backup(tmp: Path, batches: int = 6, rows_per_batch: int = 16) -> Path:
    """The production job's backup of the small sample's first rows, as the job lays it
    out (``batch_id=N/date=D/part-*.parquet`` + ``_SUCCESS``, a metrics line per batch
    listing its files, the plan book), written by PyArrow: ``tmp/backup``, with the job's
    ``--config`` at ``tmp/plan.json``. ``tests/hostile/test_hostile_job`` runs the job."""
    import json

    from engine.backup import manifest
    from engine.export import load_config
    from engine.export.plan_book import JobPlan, plan_file
    from tests.helpers import write_backup_batch
    from tests.production_reference import long_readings, sample_rows, write_config

    rows = sample_rows(batches * rows_per_batch)
    write_config(tmp / "plan.json", rows)
    config = load_config(tmp / "plan.json")
    root = tmp / "backup"
    plans = root / "_lacuna" / "plans"
    plans.mkdir(parents=True)
    (plans / plan_file(1)).write_bytes(JobPlan(1, 0, "initial", "test", config).to_bytes())
    readings = long_readings(rows)
    readings = readings[readings["sensor"].isin(config.backup_sensors)].reset_index(drop=True)
    readings["seq"] = readings.index
    per_batch = rows_per_batch * len(config.backup_sensors)
    for b in range(batches):
        folder = root / f"batch_id={b}"
        write_backup_batch(str(folder), readings.iloc[b * per_batch : (b + 1) * per_batch], 1)
        metrics = root / "_lacuna" / "metrics" / f"batch_id={b}"
        metrics.mkdir(parents=True)
        line = {"event": "shadow", "batch_id": b, "plan_version": 1, "readings": per_batch,
                "windows": 0, "rebuilt_pairs": 0, "misses": 0, "seconds": 0.1,
                "last_window_end": None, "backup_files": manifest(folder)}  # fmt: skip
        (metrics / "part-00000.json").write_text(json.dumps(line) + "\n")
    return root
