"""Shared unit-test fixtures: the shipped sample files and a CSV writer."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_data"


@pytest.fixture
def sample_csv() -> Path:
    """The main shipped sample: 36 Beijing sensors, 120 days hourly, with real gaps."""
    return SAMPLE_DIR / "beijing_aq_sample.csv"


@pytest.fixture
def tmp_csv(tmp_path: Path) -> Callable[..., Path]:
    """``tmp_csv(text_or_frame, name="data.csv") -> Path`` writes a file in ``tmp_path``.

    Text is dedented and its leading newline dropped; a DataFrame is written without index.
    """

    def write(content: str | pd.DataFrame, name: str = "data.csv") -> Path:
        path = tmp_path / name
        if isinstance(content, pd.DataFrame):
            content.to_csv(path, index=False)
        else:
            path.write_text(textwrap.dedent(content).lstrip("\n"))
        return path

    return write
