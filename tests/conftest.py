"""How the whole run is split across workers (``scripts/test.sh``: ``pytest -n 2 --dist
loadgroup``).

Tests that share a process-wide resource stay on one worker: each Spark module's tests
(so a worker starts one local Spark session, and only when it runs Spark tests), the
browser tests (one app server and one Chromium) and the standalone cluster. The slowest
groups are handed out first, so that the quick tests fill the gaps at the end instead
of a long group starting last.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Handed out in this order, before every ungrouped test: the groups that take minutes.
FIRST = ("cluster", "browser", "spark")


def xdist_group(item: pytest.Item) -> str | None:
    """The group an item runs in, or None for a test that can run on any worker."""
    suite = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
    if suite == "cluster":
        return "cluster"
    if suite == "e2e":
        return "browser"
    if item.get_closest_marker("spark") or "spark" in getattr(item, "fixturenames", ()):
        return f"spark-{item.path.stem}"
    return None


def _rank(item: pytest.Item) -> int:
    group = xdist_group(item) or ""
    return next((i for i, name in enumerate(FIRST) if group.startswith(name)), len(FIRST))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's order is the order work is handed out
        items.sort(key=_rank)
