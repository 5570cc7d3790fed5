"""Rebuild missing sensors from backed-up ones (the conditional mean as a linear map).

Shapes: ``T`` readings, ``n`` sensors, ``m`` backed-up sensors, ``k = n - m``
reconstructed sensors, ``W`` windows. Windows are counted in readings: window
``w`` and slide ``l``; window ``j`` covers rows ``[j*l, j*l + w)``. Only complete
windows are produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import ParameterError


@dataclass(frozen=True, eq=False)
class LinearMap:
    """Conditional-mean reconstruction ``y = intercept + coef @ backup``.

    Attributes
    ----------
    sensors : all ``n`` sensor names, in output column order.
    backup : the ``m`` backed-up sensors, in input column order.
    targets : the ``k`` reconstructed sensors.
    intercept : (k,) float.
    coef : (k, m) float.
    conditional_variance : (k,) model variance of each reconstruction error.
    """

    sensors: tuple[str, ...]
    backup: tuple[str, ...]
    targets: tuple[str, ...]
    intercept: np.ndarray
    coef: np.ndarray
    conditional_variance: np.ndarray

    def __post_init__(self) -> None:
        k, m = len(self.targets), len(self.backup)
        if set(self.backup) & set(self.targets):
            raise ParameterError("a sensor cannot be both backed up and reconstructed")
        if sorted(self.backup + self.targets) != sorted(self.sensors):
            raise ParameterError("backup and reconstructed sensors must partition the sensors")
        if np.shape(self.coef) != (k, m) or np.shape(self.intercept) != (k,):
            raise ParameterError(
                f"reconstruction shapes do not match: coef {np.shape(self.coef)}, "
                f"intercept {np.shape(self.intercept)}, expected ({k}, {m}) and ({k},)"
            )

    def same_as(self, other: object) -> bool:
        """The same map by value: names, coefficients and variances equal (a map read back
        from its stored JSON, whose floats round-trip exactly, is the same as the one
        written)."""
        if self is other:
            return True
        if not isinstance(other, LinearMap):
            return False
        names = (self.sensors, self.backup, self.targets)
        arrays = ("intercept", "coef", "conditional_variance")
        return names == (other.sensors, other.backup, other.targets) and all(
            np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays
        )

    def apply(self, backup_values: np.ndarray) -> np.ndarray:
        """Rebuild all sensors.

        Parameters
        ----------
        backup_values : (T, m) readings of ``self.backup``, in that column order.

        Returns
        -------
        (T, n) readings in ``self.sensors`` order; backed-up columns are copied.
        """
        x = np.asarray(backup_values, dtype=float)
        if x.ndim != 2 or x.shape[1] != len(self.backup):
            raise ParameterError(
                f"expected backup values of shape (T, {len(self.backup)}), got {x.shape}"
            )
        out = np.empty((x.shape[0], len(self.sensors)))
        position = {name: i for i, name in enumerate(self.sensors)}
        backup_cols = [position[s] for s in self.backup]
        target_cols = [position[s] for s in self.targets]
        out[:, backup_cols] = x
        out[:, target_cols] = self.intercept + x @ self.coef.T
        return out

    def rebuild_columns(self, block: np.ndarray, sensors: Sequence[str]) -> np.ndarray:
        """``block`` (T, len(sensors)), columns in ``sensors`` order, with the targets'
        columns rebuilt from the backup columns; every other column as given (a copy)."""
        out = np.array(block, dtype=float)
        rebuilt = self.apply(out[:, column_indices(sensors, self.backup)])
        out[:, column_indices(sensors, self.targets)] = rebuilt[
            :, column_indices(self.sensors, self.targets)
        ]
        return out

    def rescaled(self, factors: np.ndarray) -> LinearMap:
        """The same reconstruction for readings with sensor ``i`` times ``factors[i]``.

        ``factors`` (n,) > 0 is in ``self.sensors`` order. If ``y = b + C x`` holds in
        the old units, then ``f_y y = f_y b + (f_y C / f_x) (f_x x)`` in the new ones.
        """
        f = np.asarray(factors, dtype=float)
        if f.shape != (len(self.sensors),) or not np.all(np.isfinite(f)) or np.any(f <= 0):
            raise ParameterError(
                f"factors must be ({len(self.sensors)},) finite and > 0, got {factors!r}"
            )
        scale = dict(zip(self.sensors, f, strict=True))
        fy = np.array([scale[s] for s in self.targets])
        fx = np.array([scale[s] for s in self.backup])
        return LinearMap(
            sensors=self.sensors,
            backup=self.backup,
            targets=self.targets,
            intercept=self.intercept * fy,
            coef=self.coef * fy[:, None] / fx[None, :] if fx.size else self.coef.copy(),
            conditional_variance=np.asarray(self.conditional_variance) * fy**2,
        )


def column_indices(sensors: Sequence[str], names: Sequence[str]) -> list[int]:
    """Positions of ``names`` in ``sensors``; an unknown name is a ``ParameterError``."""
    position = {s: i for i, s in enumerate(sensors)}
    missing = [s for s in names if s not in position]
    if missing:
        raise ParameterError(f"unknown sensor(s): {', '.join(map(repr, missing[:5]))}")
    return [position[s] for s in names]
