"""Gaussian model of the sensors: mergeable moments, repaired covariance, conditionals.

Shapes: ``T`` readings, ``n`` sensors, ``m`` observed (backed-up) sensors, ``k = n - m``
reconstructed sensors. The conditional variance of sensor ``Y`` given the observed set
``O`` is ``Sigma_YY - Sigma_YO Sigma_OO^{-1} Sigma_OY``; it does not depend on the
observed values, so a plan can be judged before the stream starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from engine.errors import DataError, NotFittedError, ParameterError
from engine.model.blas import blas_threads
from engine.model.linear import LinearMap
from engine.model.repair import (
    CONSTANT_REL,
    RAW_SUMS_REL,
    LazyRepair,
    constant_by_variance,
    constant_sensors,
)


@dataclass(frozen=True, eq=False)
class MomentStats:
    """Mergeable first and second moments of sensor readings (Chan et al.).

    Attributes
    ----------
    count : number of readings ``T``.
    mean : (n,) mean of each sensor.
    m2 : (n, n) sum of centred outer products ``sum_t (x_t - mean)(x_t - mean)^T``.
    rounding : the fraction of a sensor's squared mean below which its variance is
        rounding (``engine.model.repair``): centred moments' floor, or raw sums' wider one.
    """

    count: int
    mean: np.ndarray
    m2: np.ndarray
    rounding: float = CONSTANT_REL

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int | np.integer):
            raise ParameterError(f"count must be an integer, got {self.count!r}")
        if self.count < 0:
            raise ParameterError(f"count must be >= 0, got {self.count!r}")
        n = np.shape(self.mean)[0] if np.ndim(self.mean) == 1 else -1
        if n < 0 or np.shape(self.m2) != (n, n):
            raise ParameterError(
                f"mean must be (n,) and m2 (n, n), got {np.shape(self.mean)} and "
                f"{np.shape(self.m2)}"
            )

    @property
    def n_sensors(self) -> int:
        """Number of sensors ``n``."""
        return int(self.mean.shape[0])

    @classmethod
    def from_array(cls, x: np.ndarray) -> MomentStats:
        """Moments of ``x`` (T, n): two-pass, so no cancellation."""
        a = _as_readings(x)
        count = a.shape[0]
        if count == 0:
            return cls(0, np.zeros(a.shape[1]), np.zeros((a.shape[1], a.shape[1])))
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused by _finite
            mean = a.mean(axis=0)
            centred = a - mean
            with blas_threads(float(count) * a.shape[1] ** 2):
                m2 = centred.T @ centred
        return _finite(cls(count, mean, m2))

    @classmethod
    def from_sums(cls, count: int, s1: np.ndarray, s2: np.ndarray) -> MomentStats:
        """Moments from raw sums, as one Spark aggregation pass produces them.

        Parameters
        ----------
        count : number of readings ``T``.
        s1 : (n,) ``sum_t x_t``.
        s2 : (n, n) ``sum_t x_t x_t^T``.
        """
        v1 = np.asarray(s1, dtype=float)
        v2 = np.asarray(s2, dtype=float)
        if v1.ndim != 1 or v2.shape != (v1.shape[0], v1.shape[0]):
            raise ParameterError(f"s1 must be (n,) and s2 (n, n), got {v1.shape} and {v2.shape}")
        if not (np.all(np.isfinite(v1)) and np.all(np.isfinite(v2))):
            raise DataError("moment sums contain non-finite values")
        if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
            raise ParameterError(f"count must be an integer >= 0, got {count!r}")
        if count == 0:
            return cls(0, np.zeros_like(v1), np.zeros_like(v2))
        mean = v1 / count
        m2 = v2 - count * np.outer(mean, mean)  # cancels: the raw sums' rounding floor
        return cls(int(count), mean, (m2 + m2.T) / 2.0, RAW_SUMS_REL)

    def merge(self, other: MomentStats) -> MomentStats:
        """Moments of the union of both samples (Chan's parallel formula)."""
        if other.n_sensors != self.n_sensors:
            raise ParameterError(
                f"cannot merge statistics of {self.n_sensors} and {other.n_sensors} sensors"
            )
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / count)
        m2 = self.m2 + other.m2 + np.outer(delta, delta) * (self.count * other.count / count)
        return MomentStats(count, mean, m2, max(self.rounding, other.rounding))

    def covariance(self, ddof: int = 1) -> np.ndarray:
        """Sample covariance (n, n) with ``count - ddof`` in the denominator."""
        if self.count - ddof <= 0:
            raise ParameterError(
                f"covariance needs more than {ddof} reading(s), got count={self.count!r}"
            )
        return self.m2 / (self.count - ddof)


class GaussianModel:
    """Multivariate Gaussian ``N(mean_, cov_)`` of the sensors, sklearn-style.

    Parameters
    ----------
    ridge : value added to the diagonal of the covariance. ``None`` (default) adds
        a ridge only when the covariance is near-singular, sized relative to its
        mean variance.

    Attributes (after ``fit``)
    --------------------------
    mean_ : (n,) mean.
    cov_ : (n, n) repaired covariance: symmetric, constant sensors have zero rows,
        the rest is positive definite.
    sensors_ : sensor names.
    ridge_ : value added to the diagonal of the non-constant sensors (0.0 if none).
    repair_note_ : "" or one sentence describing what was repaired.
    n_samples_ : number of readings fitted.
    constant_ : (n,) True for the constant sensors.

    The repair (``engine.model.repair``: its positive-definiteness check factorises the
    whole covariance, 3.3e11 flops at 10,000 sensors) runs the first time ``cov_``,
    ``ridge_``, ``repair_note_`` or a conditional that depends on them is read, once:
    a plan that backs up every sensor reads none of them.
    """

    def __init__(self, ridge: float | None = None) -> None:
        if ridge is not None and (
            isinstance(ridge, bool) or not np.isfinite(ridge) or float(ridge) < 0
        ):
            raise ParameterError(f"ridge must be a finite number >= 0 or None, got {ridge!r}")
        self.ridge = None if ridge is None else float(ridge)

    def fit(
        self, x: np.ndarray, sensors: Sequence[str] | None = None, *, defer: bool = False
    ) -> GaussianModel:
        """Fit on readings ``x`` (T, n), T >= 2. Returns ``self``.

        ``defer``: compute the covariance (the Gram product, rows x sensors^2: 1.1e12
        flops at 10,000 sensors) on the first read of anything that depends on it, from
        ``x``, which must then stay unchanged. The mean, the constant sensors and the
        checks are done now, on the same values: a plan that rebuilds no informative
        sensor reads none of it.
        """
        if not defer:
            return self._fit(MomentStats.from_array(x), sensors, owned=True)
        a = _as_readings(x)
        _check_size(*a.shape)
        names = self._names(sensors, a.shape[1])
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            mean = a.mean(axis=0)
            variance = _column_sums_of_squares(a, mean) / (a.shape[0] - 1)
        # Finite sums of squares bound every centred cross product (Cauchy-Schwarz):
        # the deferred covariance is finite too.
        _check_finite(mean, variance)
        self.mean_, self.sensors_, self.n_samples_ = mean, names, int(a.shape[0])
        self.constant_ = constant_by_variance(variance, mean)

        def covariance() -> np.ndarray:
            stats = MomentStats.from_array(a)
            cov = np.divide(stats.m2, stats.count - 1, out=stats.m2)
            cov.flat[:: cov.shape[0] + 1] = variance  # the diagonal the constants came from
            return cov

        self._repair = LazyRepair(covariance, self.mean_, names, self.ridge)
        return self

    def fit_stats(self, stats: MomentStats, sensors: Sequence[str] | None = None) -> GaussianModel:
        """Fit from (merged) moment statistics. Returns ``self``."""
        return self._fit(stats, sensors, owned=False)

    def _fit(self, stats: MomentStats, sensors: Sequence[str] | None, owned: bool) -> GaussianModel:
        """``owned``: ``stats`` is this call's own, so its ``m2`` may become the covariance."""
        _check_size(stats.count, stats.n_sensors)
        if not owned:  # ``from_array`` checked its own (a pass over n x n values)
            _finite(stats)
        names = self._names(sensors, stats.n_sensors)
        if owned:  # the same values as ``stats.covariance(ddof=1)``, without a copy
            cov = np.divide(stats.m2, stats.count - 1, out=stats.m2)
        else:
            cov = stats.covariance(ddof=1)
        self.mean_ = stats.mean.copy()
        self.sensors_ = names
        self.n_samples_ = int(stats.count)
        self.constant_ = constant_sensors(cov, stats.mean, stats.rounding)
        self._repair = LazyRepair(cov, self.mean_, names, self.ridge, stats.rounding)
        return self

    @staticmethod
    def _names(sensors: Sequence[str] | None, n: int) -> tuple[str, ...]:
        names = tuple(f"s{i}" for i in range(n)) if sensors is None else tuple(sensors)
        if len(names) != n or len(set(names)) != n:
            raise ParameterError(
                f"need {n} distinct sensor names, got {len(names)} ({len(set(names))} distinct)"
            )
        return names

    @property
    def cov_(self) -> np.ndarray:
        self._check_fitted()
        return self._repair.get()[0]

    @property
    def ridge_(self) -> float:
        self._check_fitted()
        return self._repair.get()[1]

    @property
    def repair_note_(self) -> str:
        self._check_fitted()
        return self._repair.get()[2]

    def conditional_variance(self, observed: Sequence[int]) -> np.ndarray:
        """``var_{i|O}`` for every sensor: (n,), 0 at the observed sensors."""
        self._check_fitted()
        n = self.mean_.shape[0]
        obs = _check_observed(observed, n)
        # Only the unobserved columns: the observed ones are 0 by definition, and solving
        # for them too cost O(n m^2) for nothing. With every sensor observed or constant
        # (its repaired variance is 0) the answer is known without the covariance.
        rest = np.setdiff1d(np.arange(n), obs)
        if self.constant_[rest].all():  # every sensor observed, or known exactly
            return np.zeros(n)
        informative = [j for j in obs if not self.constant_[j]]
        var = np.diag(self.cov_).copy()
        if informative:
            factor = np.linalg.cholesky(self.cov_[np.ix_(informative, informative)])
            cross = self.cov_[informative][:, rest]
            proj = scipy.linalg.solve_triangular(factor, cross, lower=True)
            var[rest] -= np.einsum("ij,ij->j", proj, proj)
        if not np.all(np.isfinite(var)):
            raise DataError(
                "conditional variances are not finite (the covariance is too large for "
                "float64); rescale the data"
            )
        var = np.maximum(var, 0.0)
        var[obs] = 0.0
        return var

    def linear_map(self, observed: Sequence[int]) -> LinearMap:
        """Conditional-mean reconstruction of the unobserved sensors.

        ``coef = Sigma_YO Sigma_OO^{-1}`` (k, m) and ``intercept = mu_Y - coef mu_O`` (k,),
        with ``O`` in the given order. Constant observed sensors get coefficient 0.
        """
        self._check_fitted()
        n = self.mean_.shape[0]
        obs = _check_observed(observed, n)
        chosen = set(obs)
        targets = [i for i in range(n) if i not in chosen]
        informative = [pos for pos, j in enumerate(obs) if not self.constant_[j]]
        coef = np.zeros((len(targets), len(obs)))
        # A constant target's covariance row is zero (the repair), so its coefficients
        # are: with no other target the answer is known without the covariance.
        if informative and not self.constant_[targets].all():
            cols = [obs[p] for p in informative]
            factor = scipy.linalg.cho_factor(self.cov_[np.ix_(cols, cols)], lower=True)
            cross = self.cov_[np.ix_(cols, targets)]
            coef[:, informative] = scipy.linalg.cho_solve(factor, cross).T
        intercept = self.mean_[targets] - coef @ self.mean_[obs]
        return LinearMap(
            sensors=self.sensors_,
            backup=tuple(self.sensors_[j] for j in obs),
            targets=tuple(self.sensors_[i] for i in targets),
            intercept=intercept,
            coef=coef,
            conditional_variance=self.conditional_variance(obs)[targets],
        )

    def rescaled(self, factors: np.ndarray) -> GaussianModel:
        """The model of the readings with sensor ``i`` multiplied by ``factors[i]`` > 0.

        ``mean`` scales by ``f``, ``cov`` by ``f f^T``: exactly what fitting the scaled
        readings gives when no ridge was needed (a ridge is sized on the mean variance,
        which per-sensor scaling changes, so a repaired model rescales its repair too).
        """
        self._check_fitted()
        f = _check_factors(factors, self.mean_.shape[0])
        out = GaussianModel(self.ridge)
        out.mean_ = self.mean_ * f
        out.sensors_ = self.sensors_
        out.n_samples_ = self.n_samples_
        out.constant_ = self.constant_.copy()
        out._repair = LazyRepair.scaled(self._repair, f)  # the ridge and note as here
        return out

    def _check_fitted(self) -> None:
        if not hasattr(self, "mean_"):
            raise NotFittedError("this GaussianModel is not fitted yet; call fit() first")


def _check_size(count: int, n: int) -> None:
    """``count`` readings of ``n`` sensors are enough to fit."""
    if count < 2:
        raise ParameterError(f"fitting needs at least 2 readings, got {count!r}")
    if n < 1:
        raise ParameterError("fitting needs at least one sensor, got 0")


def _column_sums_of_squares(a: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(n,) ``sum_t (a_ti - mean_i)^2``, two-pass, a block of rows at a time (no (T, n)
    copy)."""
    out = np.zeros(a.shape[1])
    for start in range(0, a.shape[0], 1024):
        block = a[start : start + 1024] - mean
        out += np.einsum("ij,ij->j", block, block)
    return out


def _finite(stats: MomentStats) -> MomentStats:
    """Overflowed moments would give a plan from infinities: refuse them instead."""
    _check_finite(stats.mean, stats.m2)
    return stats


def _check_finite(mean: np.ndarray, second: np.ndarray) -> None:
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(second))):
        raise DataError(
            "the readings' mean or covariance is not finite (the values are too large for "
            "float64 sums of squares); rescale the data"
        )


def _as_readings(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 2:
        raise ParameterError(f"readings must be a 2-D array (T, n), got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        bad = np.argwhere(~np.isfinite(a))[0]
        raise DataError(f"readings must be finite, got {a[bad[0], bad[1]]!r} at row {bad[0]}")
    return a


def _check_factors(factors: np.ndarray, n: int) -> np.ndarray:
    f = np.asarray(factors, dtype=float)
    if f.shape != (n,) or not np.all(np.isfinite(f)) or np.any(f <= 0):
        raise ParameterError(f"factors must be ({n},) finite and > 0, got {factors!r}")
    return f


def _check_observed(observed: Sequence[int], n: int) -> list[int]:
    obs = list(observed)
    for j in obs:
        if isinstance(j, bool) or not isinstance(j, int | np.integer) or not 0 <= j < n:
            raise ParameterError(f"observed sensors must be indices in [0, {n}), got {j!r}")
    if len(set(obs)) != len(obs):
        raise ParameterError(f"observed sensors must be distinct, got {obs!r}")
    return [int(j) for j in obs]
