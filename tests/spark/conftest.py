"""One SparkSession for the whole Spark test run, and small shared data.

Without Java the Spark tests skip locally, but fail when ``CI`` is set: a
skipped Spark test in CI is a defect, not a pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from engine.live.spec import StreamSpec
from engine.query import WindowQuery
from tests.helpers import SMALL_BACKUP, SMALL_SAMPLE, SMALL_SENSORS, fit_map

SAMPLE, SENSORS, BACKUP = SMALL_SAMPLE, SMALL_SENSORS, SMALL_BACKUP


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from engine.stream.session import SparkSettings, get_spark, java_problem

    problem = java_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"Spark tests cannot be skipped in CI: {problem}")
        pytest.skip(problem)
    session = get_spark(SparkSettings(master="local[2]", shuffle_partitions=2))
    yield session
    session.stop()


@dataclass(frozen=True)
class History:
    """Stands in for ``engine.data.history.SensorHistory`` (times, values, sensors)."""

    times: np.ndarray
    values: np.ndarray
    sensors: tuple[str, ...]


@pytest.fixture(scope="session")
def history() -> History:
    """96 hourly rows of six Beijing sensors (sample data, gaps interpolated)."""
    from engine.data import load_history

    full = load_history(SAMPLE)
    values = full.select(SENSORS).values[:96]
    return History(full.times[:96], values, SENSORS)


def make_spec(
    history: History,
    backup: tuple[str, ...] = BACKUP,
    window: int = 8,
    slide: int = 4,
    aggregate: str = "avg",
    eps: float = 1.0,
) -> StreamSpec:
    return StreamSpec(
        history.sensors,
        backup,
        fit_map(history.values, history.sensors, backup),
        WindowQuery(eps, 0.05, window, slide=slide, aggregate=aggregate),
    )


@pytest.fixture
def spec(history: History) -> StreamSpec:
    """Tumbling-free: window 8, slide 4, avg, two backed-up sensors."""
    return make_spec(history)


@pytest.fixture
def spec_factory(history: History) -> Callable[..., StreamSpec]:
    """``spec_factory(backup=..., window=..., slide=..., aggregate=..., eps=...)``."""
    return lambda **kwargs: make_spec(history, **kwargs)
