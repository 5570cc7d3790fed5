"""Model fitting on Spark equals the NumPy fit on the same data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.errors import ParameterError
from engine.model import GaussianModel, MomentStats
from engine.stream.fit import fit_model_on_spark, moment_stats_from_spark

pytestmark = pytest.mark.spark


def test_one_pass_moments_equal_numpy_on_the_sample(spark: Any, history: Any) -> None:
    frame = pd.DataFrame(history.values, columns=list(history.sensors))
    df = spark.createDataFrame(frame).repartition(3)  # several partitions to merge
    stats = moment_stats_from_spark(df, history.sensors)
    ref = MomentStats.from_array(history.values)
    assert stats.count == ref.count
    np.testing.assert_allclose(stats.mean, history.values.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats.covariance(), np.cov(history.values.T), rtol=1e-9, atol=1e-9)
    model = fit_model_on_spark(df, history.sensors)
    local = GaussianModel().fit(history.values, history.sensors)
    np.testing.assert_allclose(model.cov_, local.cov_, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        model.conditional_variance([0, 2]), local.conditional_variance([0, 2]), rtol=1e-9, atol=1e-9
    )


def test_unknown_sensor_columns_are_named(spark: Any, history: Any) -> None:
    df = spark.createDataFrame(pd.DataFrame(history.values, columns=list(history.sensors)))
    with pytest.raises(ParameterError, match="nope"):
        moment_stats_from_spark(df, [*history.sensors, "nope"])
