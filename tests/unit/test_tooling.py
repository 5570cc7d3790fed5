"""House rules that CI enforces: lint, format and types (pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy", "engine"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-engine"],
)
def test_tooling_is_clean(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_engine_never_imports_streamlit_or_starts_spark() -> None:
    code = (
        "import sys, engine, engine.planning, engine.cli,"
        " engine.live.manager, engine.live.replanning;"
        "assert 'streamlit' not in sys.modules, 'engine imported streamlit';"
        "assert 'pyspark' not in sys.modules, 'engine imported pyspark at import time'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
