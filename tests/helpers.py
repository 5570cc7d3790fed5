"""Small helpers shared by the unit and Spark tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.model import LinearMap


def fit_map(values: np.ndarray, sensors: tuple[str, ...], backup: tuple[str, ...]) -> LinearMap:
    """Least-squares reconstruction of the other sensors from ``backup``.

    A stand-in for ``GaussianModel.linear_map`` so stream tests do not depend on
    the model: the intercept and coefficients of an ordinary regression, and
    the residual variance as the conditional variance.
    """
    b_idx = [sensors.index(s) for s in backup]
    targets = tuple(s for s in sensors if s not in backup)
    t_idx = [sensors.index(s) for s in targets]
    design = np.column_stack([np.ones(len(values)), values[:, b_idx]])
    sol, *_ = np.linalg.lstsq(design, values[:, t_idx], rcond=None)
    resid = values[:, t_idx] - design @ sol
    return LinearMap(sensors, backup, targets, sol[0], sol[1:].T, resid.var(axis=0))


# The small sample's six sensors and a two-sensor backup set, shared by the Spark
# fixtures and the production job's reference.
SMALL_SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "beijing_aq_small.csv"
SMALL_SENSORS = (
    "Aotizhongxin_TEMP",
    "Changping_TEMP",
    "Dongsi_TEMP",
    "Aotizhongxin_PM2.5",
    "Changping_PM2.5",
    "Dongsi_PM2.5",
)
SMALL_BACKUP = ("Dongsi_TEMP", "Aotizhongxin_PM2.5")
