"""The engine installs alone (``pip install .``), as a production machine that runs an
exported config installs it, and its commands work from there, outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "beijing_aq_sample.csv"


def _run(args: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a wheel built and installed, two commands in fresh interpreters
def test_the_engine_wheel_runs_plan_and_recover_outside_the_checkout(tmp_path: Path) -> None:
    # build from a copy: a build in place leaves build/ and *.egg-info in the checkout
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "engine", src / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("lacuna-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "engine/export/schema/backup_config.v3.json" in names  # configs are checked with it
    assert "engine/stream/log4j2.properties" in names
    assert not [n for n in names if n.split("/")[0] in ("ui", "pages", "tests", "bench")]

    site = tmp_path / "site"
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    work = tmp_path / "work"
    work.mkdir()
    where = _run([sys.executable, "-c", "import engine; print(engine.__file__)"], work, site)
    assert Path(where.stdout.strip()).is_relative_to(site)  # not the checkout's
    plan = _run(
        [sys.executable, "-m", "engine", "plan", "--data", str(SAMPLE), "--sensors", "*_TEMP",
         "--eps", "1.0", "--delta", "0.05", "--window", "24", "--agg", "avg",
         "--out", "plan.json"],
        work, site,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    recover = _run(
        [str(site / "bin" / "lacuna"), "recover", "--config", "plan.json", "--backup",
         str(SAMPLE), "--out", "all.csv"],
        work, site,
    )  # fmt: skip
    assert recover.returncode == 0, recover.stderr
    header = (work / "all.csv").read_text().splitlines()[0]
    assert "Aotizhongxin_TEMP" in header
