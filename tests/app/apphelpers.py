"""Helpers shared by the AppTest modules."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"
PAGES = ("data", "tune", "graph", "plan", "live", "disorder", "export")


def texts(at: AppTest) -> str:
    """Every alert, caption, markdown and subheader of a run, as one string."""
    parts = [e.value for kind in ("error", "warning", "info", "success") for e in at.get(kind)]
    parts += [e.value for e in at.caption] + [e.value for e in at.markdown]
    parts += [e.value for e in at.subheader] + [e.value for e in at.title]
    return "\n".join(str(p) for p in parts)


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)
