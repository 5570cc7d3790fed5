"""House rules that a test enforces. Lint, format and types (pyproject.toml) are their own
steps of ``scripts/test.sh``, before pytest (tests/unit/test_setup.py checks the order)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_engine_never_imports_streamlit_or_starts_spark() -> None:
    code = (
        "import sys, engine, engine.planning, engine.cli,"
        " engine.live.manager, engine.live.replanning;"
        "assert 'streamlit' not in sys.modules, 'engine imported streamlit';"
        "assert 'pyspark' not in sys.modules, 'engine imported pyspark at import time'"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
