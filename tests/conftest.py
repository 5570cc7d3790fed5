"""How the whole run is split across workers (``scripts/test.sh``: ``pytest -n 2 --dist
loadgroup``).

Tests that share a process-wide resource stay on one worker: each Spark module's tests
(so a worker starts one local Spark session, and only when it runs Spark tests), the
browser tests (one app server and one Chromium) and the standalone cluster. The slowest
groups are handed out first, so that the quick tests fill the gaps at the end instead
of a long group starting last.

Every JVM the tests start (the workers' local Spark drivers, ``engine run`` and the app
server's pipelines in subprocesses, the standalone cluster's master and worker) runs
with the JIT's first tier only (``-XX:TieredStopAtLevel=1``). They live for seconds to
minutes, where the optimising compiler's work does not pay back on two cores: three
Spark modules took 105 s with the first tier only against 154 s with the default, four
others 178 s against 214 s. The product's own JVMs keep the JVM's defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Handed out in this order, before every ungrouped test: the groups that take minutes.
FIRST = ("cluster", "browser", "spark")
TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1"
# Read by spark-submit (every Spark driver) and by spark-class for the cluster daemons;
# inherited by the workers and every subprocess.
for _var in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    if TEST_JVM_OPTS not in os.environ.get(_var, ""):
        os.environ[_var] = f"{os.environ.get(_var, '')} {TEST_JVM_OPTS}".strip()


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
