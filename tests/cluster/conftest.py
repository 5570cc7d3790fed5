"""A real standalone Spark cluster (master + one small worker, separate JVMs) per test module.

Without Java the cluster tests skip locally but fail in CI. A cluster that
cannot start is a test failure that shows the JVMs' log tails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.standalone import ClusterError, StandaloneCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    from engine.stream.session import java_problem

    problem = java_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"cluster tests cannot be skipped in CI: {problem}")
        pytest.skip(problem)
    work: Path = tmp_path_factory.mktemp("standalone")
    try:
        running = StandaloneCluster(work, workers=1, worker_cores=1, worker_memory="1g").start()
    except ClusterError as err:
        pytest.fail(str(err))
    try:
        yield running
    finally:
        running.stop()
