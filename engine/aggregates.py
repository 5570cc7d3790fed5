"""A window aggregate is one object: how to compute it, its mergeable partial state,
its model miss probability and variance target, and its coverage rules for out-of-order data.

Every layer asks an ``Aggregate`` instead of branching on its name, so a new
aggregate is one class here (registered in ``AGGREGATES``) plus its tests: the
config schema's enum, the CLI's help and the app's choices are read off the registry.
Windows are counted in readings: window ``w``, slide ``l``; window ``j`` covers
rows ``[j*l, j*l + w)``; only complete windows are produced.

Partial state (river-style): an aggregate names the numbers it keeps of a window's
readings (``fields``; the count ``n`` is always kept), each folded over readings
and merged between partials by a sum, a max or a min of a power of the value.
``partial`` folds a batch of readings, ``merge`` combines two partials, ``finish``
turns one into the aggregate. Pandas, NumPy and Spark all speak those three
reductions, so the production job's executors, its driver and the disorder
stage's ledger keep any aggregate's state without knowing which it is.

A failure under the crash contract loses a stretch of ``m`` consecutive rows (the
exposure). A window starting at row ``a`` is touched by the stretches starting at
``s = a + d`` for the ``w + m - 1`` offsets ``d = -(m - 1) .. w - 1``; it is exact
except its rows ``[a + max(d, 0), a + min(d + m, w))`` of the rebuilt sensors
(``exposure_errors``; the rows and maxima in ``engine.stretches``). Scoring every
offset of every window scores every (failure position, window touched) pair
exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engine.errors import ParameterError
from engine.partial_state import COUNT, Field, State
from engine.stretches import in_windows, kept_max, lost_rows, range_max


@dataclass(frozen=True)
class Aggregate:
    """Base of the aggregates; the subclasses fill in the maths.

    ``fields`` is the partial state besides the count; ``linear``: the aggregate of
    ``a + sum_j b_j x_j`` is ``a * A(ones) + sum_j b_j A(x_j)``, so a rebuilt sensor's
    aggregate follows from the backed-up sensors' aggregates (otherwise it is the
    aggregate of the rebuilt readings).
    """

    name: str
    fields: tuple[Field, ...]
    linear: bool = False

    @property
    def state_fields(self) -> tuple[Field, ...]:
        """Every field of the partial state: the count ``n``, then ``fields``."""
        return (COUNT, *self.fields)

    def partial(self, values: np.ndarray, axis: int = 0) -> State:
        """The partial state of the readings ``values`` along ``axis`` (NaN: no reading)."""
        x = np.asarray(values, dtype=float)
        return {f.name: f.fold(x, axis) for f in self.state_fields}

    def merge(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> State:
        """One partial state from two (element-wise for arrays or Series)."""
        return {f.name: f.merge(a[f.name], b[f.name]) for f in self.state_fields}

    def finish(self, state: Mapping[str, Any], window: int | None = None) -> Any:
        """The aggregate of a partial state (element-wise).

        ``window``: the window is still filling (a provisional result); an aggregate
        that grows with the readings (``sum``) is scaled up to ``window`` readings.
        None: the window is complete.
        """
        raise NotImplementedError

    def constant_state(self, n: Any) -> State:
        """The partial state of ``n`` readings that are all 1."""
        one = n * 0 + 1.0  # the shape of ``n``
        return {COUNT.name: n} | {f.name: n if f.reduce == "sum" else one for f in self.fields}

    @property
    def sign_blind(self) -> bool:
        """True when a window's ``|error|`` is the same for a residual and its negation."""
        raise NotImplementedError

    @property
    def kept_fill(self) -> float | None:
        """The rebuilt value that leaves a lost reading out of a window (max: -inf, min:
        +inf), so the window takes the extreme of its kept readings; None where a lost
        reading cannot be left out (avg and sum need every reading)."""
        return None

    def over_windows(self, x: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
        """(W, n) aggregates of the windows starting at rows ``starts`` of ``x`` (T, n)."""
        view = sliding_window_view(x, window, axis=0)[starts]
        return np.asarray(self.finish(self.partial(view, axis=-1)), dtype=float)

    def variance_target(self, eps: float, delta: float, window: int) -> float:
        """Largest per-reading conditional variance meeting ``(eps, delta)`` (seed's model)."""
        raise NotImplementedError

    def miss_probability(self, var: np.ndarray, eps: float, window: int) -> np.ndarray:
        """Model probability that the recovered window aggregate misses by more than ``eps``.

        ``var`` (any shape, >= 0) is the per-reading conditional variance; the seed's
        independence assumption. The inverse of ``variance_target``.
        """
        raise NotImplementedError

    def prefix_errors(self, x: np.ndarray) -> np.ndarray:
        """(N,) error of the result from the first ``n`` readings of a window ``x`` (N,)."""
        raise NotImplementedError

    def exposure_errors(
        self, truth: np.ndarray, rebuilt: np.ndarray, starts: np.ndarray, window: int, exposure: int
    ) -> np.ndarray:
        """(W, K, n) signed error, truth aggregate minus the aggregate with the lost rows rebuilt.

        ``truth`` and ``rebuilt`` are (T, n); window ``j`` starts at row ``starts[j]``
        and the failure at offset ``exposure_offsets(window, exposure)[k]`` from it
        (``K = window + exposure - 1``) replaces its rows ``lost_rows`` by ``rebuilt``.
        """
        raise NotImplementedError

    def exposure_scores(
        self,
        truth: np.ndarray,
        rebuilt: np.ndarray,
        starts: np.ndarray,
        window: int,
        exposure: int,
        eps: float,
    ) -> np.ndarray:
        """(W, K, n) >= 0 scores, linear in the scale of the rebuild's residual, that
        exceed ``eps`` wherever ``|exposure_errors|`` does.

        Calibration scales each sensor's residual ``truth - rebuilt`` by the ratio of
        standard deviations two backup sets give; a score proportional to that scale
        is what makes the ratio meaningful. For avg and sum it is the error itself.
        """
        return np.abs(self.exposure_errors(truth, rebuilt, starts, window, exposure))

    def exposure_scores_of(
        self,
        truth: np.ndarray,
        rebuilts: Sequence[np.ndarray],
        starts: np.ndarray,
        window: int,
        exposure: int,
        eps: float,
    ) -> list[np.ndarray]:
        """``exposure_scores`` of each of several rebuilds of the same ``truth``; an
        aggregate whose scores read the truth's windows on their own (max, min) reads
        them once for all."""
        return [self.exposure_scores(truth, r, starts, window, exposure, eps) for r in rebuilts]

    def sample_statistic(self, x: np.ndarray, eps: float, window: int) -> float | None:
        """A window's statistic for the random-sample coverage rule (None: too few readings)."""
        raise NotImplementedError

    def sample_miss_probability(
        self, stats: np.ndarray, n: np.ndarray, window: int, eps: float
    ) -> np.ndarray:
        """(H, N) probability that ``n`` random in-time readings of a window miss ``eps``.

        ``stats`` (H, 1) are ``sample_statistic`` of recent windows, ``n`` (1, N).
        """
        raise NotImplementedError


def _gaussian_tail(var: np.ndarray, eps: float, scale: float) -> np.ndarray:
    """P(|e| > eps) for a zero-mean Gaussian error of variance ``var * scale``."""
    from scipy.stats import norm  # here, not at import: the CLI's parser reads this module

    with np.errstate(divide="ignore"):
        ratio = eps / np.sqrt(var * scale)  # inf where var == 0
    return np.asarray(2.0 * norm.sf(ratio), dtype=float)


def z_value(delta: float) -> float:
    """``Phi^{-1}(1 - delta/2)``: the two-sided standard normal quantile."""
    from scipy.stats import norm

    # isf keeps full precision for tiny delta, where 1 - delta/2 rounds.
    return float(norm.isf(delta / 2.0))


@dataclass(frozen=True)
class _Linear(Aggregate):
    """``avg`` and ``sum``: linear in the readings, so errors add up."""

    scale_by_window: bool = False  # sum: the window total; avg: the mean

    @property
    def sign_blind(self) -> bool:
        return True

    def over_windows(self, x: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
        csum = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
        sums = csum[starts + window] - csum[starts]
        return sums if self.scale_by_window else sums / window

    def finish(self, state: Mapping[str, Any], window: int | None = None) -> Any:
        count, total = state["n"], state["agg"]
        with np.errstate(divide="ignore", invalid="ignore"):
            if not self.scale_by_window:
                return total / count
            if window is None:
                return total
            return np.where(count >= window, total, total * window / count)[()]

    def variance_target(self, eps: float, delta: float, window: int) -> float:
        v = (eps / z_value(delta)) ** 2
        # Window error variance is v/w for avg (mean of w errors), w v for sum.
        return v / window if self.scale_by_window else window * v

    def miss_probability(self, var: np.ndarray, eps: float, window: int) -> np.ndarray:
        return _gaussian_tail(var, eps, float(window) if self.scale_by_window else 1.0 / window)

    def prefix_errors(self, x: np.ndarray) -> np.ndarray:
        total = np.cumsum(x)
        prefix = total / np.arange(1, x.size + 1)
        if self.scale_by_window:  # the sum's estimate, N times the prefix mean, against the sum
            return np.asarray(np.abs(x.size * prefix - total[-1]), dtype=float)
        return np.asarray(np.abs(prefix - prefix[-1]), dtype=float)

    def exposure_errors(
        self, truth: np.ndarray, rebuilt: np.ndarray, starts: np.ndarray, window: int, exposure: int
    ) -> np.ndarray:
        # The window's error is its lost rows' residuals summed (avg: over w).
        lo, hi = lost_rows(starts, window, exposure)
        csum = np.vstack([np.zeros((1, truth.shape[1])), np.cumsum(truth - rebuilt, axis=0)])
        err = csum[hi] - csum[lo]
        return err if self.scale_by_window else err / window

    def sample_statistic(self, x: np.ndarray, eps: float, window: int) -> float | None:
        return float(x.var(ddof=1)) if x.size >= 2 else None

    def sample_miss_probability(
        self, stats: np.ndarray, n: np.ndarray, window: int, eps: float
    ) -> np.ndarray:
        # Simple random sample without replacement: se of the mean is
        # sqrt((1 - n/N) S2 / n); the sum's error is N times the mean's.
        from scipy.special import ndtr

        e = eps / window if self.scale_by_window else eps
        se = np.sqrt(np.maximum(0.0, 1.0 - n / window) * stats / n)
        with np.errstate(divide="ignore"):
            return np.where(se > 0, 2.0 * ndtr(-e / np.where(se > 0, se, 1.0)), 0.0)


@dataclass(frozen=True)
class _Extreme(Aggregate):
    """``max`` and ``min``: recovered within eps if every reading is (the seed's bound)."""

    sign: float = 1.0  # +1 max, -1 min

    @property
    def sign_blind(self) -> bool:
        # A rebuilt reading below the truth can only lower a max, one above it can only
        # raise it: which misses depends on the residual's sign.
        return False

    @property
    def kept_fill(self) -> float | None:
        return -self.sign * math.inf

    def over_windows(self, x: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
        view = sliding_window_view(x, window, axis=0)[starts]
        return view.max(axis=-1) if self.sign > 0 else view.min(axis=-1)

    def finish(self, state: Mapping[str, Any], window: int | None = None) -> Any:
        return state["agg"]

    def variance_target(self, eps: float, delta: float, window: int) -> float:
        # Per-reading miss probability q solves (1 - q)^w = 1 - delta; the quantile
        # Phi^{-1}((1 + (1-delta)^{1/w}) / 2) = Phi^{-1}(1 - q/2) is computed via isf(q/2).
        from scipy.stats import norm

        q = -math.expm1(math.log1p(-delta) / window)
        return float((eps / norm.isf(q / 2.0)) ** 2)

    def miss_probability(self, var: np.ndarray, eps: float, window: int) -> np.ndarray:
        tail = _gaussian_tail(var, eps, 1.0)
        with np.errstate(divide="ignore"):  # a tail of 1 (a sensor far beyond eps): log1p -> -inf
            return np.asarray(-np.expm1(window * np.log1p(-np.minimum(tail, 1.0))), dtype=float)

    def prefix_errors(self, x: np.ndarray) -> np.ndarray:
        s = self.sign * x
        return np.asarray(s.max() - np.maximum.accumulate(s), dtype=float)

    def exposure_errors(
        self, truth: np.ndarray, rebuilt: np.ndarray, starts: np.ndarray, window: int, exposure: int
    ) -> np.ndarray:
        # Worked on sign * x, so min is max of the negated readings. The recovered
        # extreme is the larger of the kept readings' (the window's prefix before the
        # lost rows and its suffix after them) and the lost rows' rebuilt one.
        t, r = self.sign * truth, self.sign * rebuilt
        lo, hi = lost_rows(starts, window, exposure)
        a = starts[:, None]
        whole = range_max(t, starts, starts + window, window)[:, None, :]
        kept = np.maximum(range_max(t, a, lo, window), range_max(t, hi, a + window, window))
        lost = range_max(r, lo, hi, min(window, exposure))
        return np.asarray(self.sign * (whole - np.maximum(kept, lost)), dtype=float)

    def exposure_scores(
        self,
        truth: np.ndarray,
        rebuilt: np.ndarray,
        starts: np.ndarray,
        window: int,
        exposure: int,
        eps: float,
    ) -> np.ndarray:
        return self.exposure_scores_of(truth, [rebuilt], starts, window, exposure, eps)[0]

    def exposure_scores_of(
        self,
        truth: np.ndarray,
        rebuilts: Sequence[np.ndarray],
        starts: np.ndarray,
        window: int,
        exposure: int,
        eps: float,
    ) -> list[np.ndarray]:
        # eps / lambda*, with lambda* the smallest scale of the residual rho = truth - rebuilt
        # (in sign * x) at which the window first misses. A lost reading with headroom
        # g = window extreme - reading overshoots once lambda (-rho) > g + eps; the window
        # undershoots once every kept reading lies eps below the extreme and every lost one
        # within eps of it has lambda rho > eps - g. Linear in the residual's scale, and
        # never below eps where the window misses (a far reading pulled back into the band
        # would end an undershoot; it is ignored, so the score errs high). The truth's
        # windows, headroom and kept extremes (40 % of the work) serve every rebuild.
        t = in_windows(self.sign * truth, starts, window)
        top = t.max(axis=1, keepdims=True)
        g = top - t  # (W, w, n) headroom of each reading below its window's extreme
        near = g < eps
        n_win, n = t.shape[0], t.shape[2]
        base = np.arange(n_win) * window
        lo, hi = lost_rows(base, window, exposure)
        longest = min(window, exposure)
        extreme_lost = top - kept_max(t, lo[0], hi[0]) > eps
        out = []
        for rebuilt in rebuilts:
            rho = in_windows(self.sign * (truth - rebuilt), starts, window)
            over = np.maximum(-rho, 0.0) * eps / (eps + g)
            under = np.where(
                near, np.maximum(rho, 0.0) * eps / np.where(near, eps - g, 1.0), np.inf
            )
            worst_over = range_max(over.reshape(-1, n), lo, hi, longest)
            worst_under = -range_max(-under.reshape(-1, n), lo, hi, longest)
            out.append(np.maximum(worst_over, np.where(extreme_lost, worst_under, 0.0)))
        return out

    def sample_statistic(self, x: np.ndarray, eps: float, window: int) -> float | None:
        # M: readings within eps of the extreme, scaled to a full window.
        s = self.sign * x
        close = np.count_nonzero(s >= s.max() - eps)
        return float(max(1, math.floor(close / x.size * window)))

    def sample_miss_probability(
        self, stats: np.ndarray, n: np.ndarray, window: int, eps: float
    ) -> np.ndarray:
        # Missing all M readings near the extreme: hypergeometric C(N-M, n) / C(N, n).
        from scipy.special import gammaln

        m = np.clip(stats, 1, window)
        rest = window - m - n  # readings neither in the sample nor near the extreme
        ok = rest >= 0
        r = np.where(ok, rest, 0.0)
        log_p = gammaln(window - m + 1) - gammaln(r + 1) - gammaln(window + 1)
        log_p = log_p + gammaln(window - n + 1)
        return np.where(ok, np.exp(log_p), 0.0)


TOTAL = (Field("agg", "sum"),)
AVG = _Linear("avg", TOTAL, linear=True, scale_by_window=False)
SUM = _Linear("sum", TOTAL, linear=True, scale_by_window=True)
MAX = _Extreme("max", (Field("agg", "max"),), sign=1.0)
MIN = _Extreme("min", (Field("agg", "min"),), sign=-1.0)
# The registry: every layer (schema, CLI, app, job, pipeline) reads its names from here.
AGGREGATES: dict[str, Aggregate] = {a.name: a for a in (AVG, SUM, MAX, MIN)}


def aggregate_names() -> tuple[str, ...]:
    """The registered aggregates' names, in registration order."""
    return tuple(AGGREGATES)


def get_aggregate(name: object) -> Aggregate:
    """The aggregate called ``name``; anything else is a ``ParameterError``."""
    if not isinstance(name, str) or name not in AGGREGATES:
        names = ", ".join(aggregate_names())
        raise ParameterError(f"aggregate must be one of {names}, got {name!r}")
    return AGGREGATES[name]


def leave_out(rebuilt: np.ndarray, kept: Any, aggregate: str) -> np.ndarray:
    """``rebuilt`` (T, n) with the columns ``kept`` (indices or an (n,) mask) set to the
    aggregate's ``kept_fill``: the readings a crash loses of those sensors are left out
    of their windows, each window taking the extreme of its kept readings. A copy."""
    out = np.array(rebuilt, dtype=float)
    cols = np.flatnonzero(kept) if np.asarray(kept).dtype == bool else np.asarray(kept, int)
    if cols.size == 0:
        return out
    fill = get_aggregate(aggregate).kept_fill
    if fill is None:
        raise ParameterError(f"a {aggregate} window needs every reading: none can be left out")
    out[:, cols] = fill
    return out
