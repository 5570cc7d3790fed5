"""Helpers shared by the AppTest modules."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"
PAGES = ("data", "tune", "graph", "plan", "live", "disorder", "export", "production")


def texts(at: AppTest) -> str:
    """Every alert, caption, markdown and subheader of a run, as one string."""
    parts = [e.value for kind in ("error", "warning", "info", "success") for e in at.get(kind)]
    parts += [e.value for e in at.caption] + [e.value for e in at.markdown]
    parts += [e.value for e in at.subheader] + [e.value for e in at.title]
    return "\n".join(str(p) for p in parts)


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def settle(at: AppTest, timeout: float = 300.0) -> AppTest:
    """Let the page's background jobs (backtests, what-ifs, recovery) finish and rerun
    the page until no job is left running: what the polling fragment does in a browser."""
    from ui.jobs import get_runner

    runner = get_runner()
    for _ in range(6):
        assert runner.wait_all(timeout), "a background job did not finish in time"
        at.run()
        if not runner.running():
            break
    return at
