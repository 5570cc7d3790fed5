"""Fit the Gaussian model on Spark: one pass, partial moments per partition.

A history too large for one machine is never collected: every partition turns
its rows into ``MomentStats`` (count, mean, centred second moments: the
numerically stable form of ``sum x`` and ``sum x x^T``), and only those
``n + n^2`` numbers per partition reach the driver, where Chan's formula merges
them. The result equals ``MomentStats.from_array`` on the whole data.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import DataError, ParameterError
from engine.model.gaussian import GaussianModel, MomentStats


def partial_moments(
    frames: Iterator[pd.DataFrame], sensors: Sequence[str]
) -> Iterator[pd.DataFrame]:
    """``mapInPandas`` body: one row of serialised moments per partition."""
    stats: MomentStats | None = None
    for frame in frames:
        values = frame[list(sensors)].to_numpy(dtype=float)
        if not np.all(np.isfinite(values)):
            raise DataError("non-finite readings reached the model fit; fill or drop them first")
        part = MomentStats.from_array(values)
        stats = part if stats is None else stats.merge(part)
    if stats is not None and stats.count:
        yield pd.DataFrame(
            {
                "count": [stats.count],
                "mean": [stats.mean.tobytes()],
                "m2": [stats.m2.tobytes()],
            }
        )


def moment_stats_from_spark(df: Any, sensors: Sequence[str]) -> MomentStats:
    """Moments of the wide Spark DataFrame ``df`` over the ``sensors`` columns."""
    names = list(sensors)
    missing = [s for s in names if s not in df.columns]
    if missing:
        raise ParameterError(f"unknown sensor column(s): {', '.join(missing[:5])}")
    n = len(names)
    safe = [f"c{i}" for i in range(n)]
    rows = (
        # Sensor names such as "Dongsi_PM2.5" contain dots, which mapInPandas cannot
        # take as column names: select them (backticked) under positional aliases.
        df.select(*[df[f"`{name}`"].alias(alias) for name, alias in zip(names, safe, strict=True)])
        .mapInPandas(
            lambda frames: partial_moments(frames, safe),
            schema="count long, mean binary, m2 binary",
        )
        .collect()
    )
    total = MomentStats(0, np.zeros(n), np.zeros((n, n)))
    for row in rows:
        part = MomentStats(
            int(row["count"]),
            np.frombuffer(row["mean"], dtype=float).copy(),
            np.frombuffer(row["m2"], dtype=float).reshape(n, n).copy(),
        )
        total = part if total.count == 0 else total.merge(part)
    if total.count < 2:
        raise DataError(f"need at least 2 rows to fit a model, got {total.count}")
    return total


def fit_model_on_spark(df: Any, sensors: Sequence[str]) -> GaussianModel:
    """``GaussianModel`` fitted in one Spark pass over ``df``."""
    return GaussianModel().fit_stats(moment_stats_from_spark(df, sensors), list(sensors))
