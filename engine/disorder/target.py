"""The target coverage ``lambda_thr`` of the K-slack buffer from ``(eps_thr, delta)``.

``lambda_thr`` is the share of a window's readings that must be in time for
its provisional result to miss by more than ``eps_thr`` in at most ``delta``
of windows. Two models of which readings are missing at a window's close:
the seed's random sample (``required_coverage``, ``target_model="srs"``) and,
by default, the newest readings of the window (``prefix_miss_length``,
``required_coverage_tail``), which is what K-slack really loses.
``CoverageTarget`` keeps the recent per-sensor statistics both need.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.aggregates import get_aggregate


def required_coverage(
    aggregate: str, stats: np.ndarray, window: int, eps: float, delta: float
) -> float:
    """Smallest in-time fraction ``lambda = n / N`` meeting ``(eps, delta)`` on average.

    The in-time tuples of a window are treated as a simple random sample without
    replacement of ``n`` of its ``N = window`` readings (per sensor); the late
    ones are the rest. For each recent window ``h`` (``stats``, (H,)) the
    probability that the provisional aggregate misses by more than ``eps`` is:

    * ``avg``: the sample mean has standard error
      ``se = sqrt((1 - n/N) * S2_h / n)`` (``S2_h`` the window's variance with
      ``N - 1`` in the denominator, estimated by the in-time sample variance;
      equal to ``sigma / sqrt(n) * sqrt((N - n) / (N - 1))``). With the normal
      approximation, ``P = 2 * (1 - Phi(eps / se))``. ``P <= delta`` is the
      textbook condition ``z_{1-delta/2} * se <= eps``, i.e.
      ``n >= S2 / (eps^2 / z^2 + S2 / N)``.
    * ``sum``: the estimate is ``N * mean``, so its error is ``N`` times the
      mean's: the ``avg`` rule with ``eps / N``.
    * ``max`` (``min``): the provisional value (the in-time maximum) is within
      ``eps`` iff the sample holds one of the ``M_h`` readings within ``eps`` of
      the window's maximum. Missing all of them has the hypergeometric
      probability ``P = C(N - M_h, n) / C(N, n)``. This is exact under the
      sampling model and needs no distribution assumption; with ``M_h = 1``
      (a single spike) it is ``1 - n/N``, so ``lambda = 1 - delta``.

    ``n`` is the smallest value whose *mean* ``P`` over the recent windows is at
    most ``delta``: the expected fraction of windows that miss is then at most
    ``delta``, which is what provisional accuracy measures. With one window (or
    equal ``S2_h``) this is exactly the per-window rule above.

    Parameters
    ----------
    aggregate : ``avg``, ``sum``, ``max`` or ``min``.
    stats : (H,) per-window ``S2_h`` (avg, sum) or ``M_h`` (max, min; >= 1).
    window : ``N``, readings per sensor in a window.

    Returns
    -------
    ``lambda`` in ``(0, 1]``.
    """
    big_n = window
    n = np.arange(1, big_n + 1, dtype=float)[None, :]
    h = np.asarray(stats, dtype=float)[:, None]
    p = get_aggregate(aggregate).sample_miss_probability(h, n, big_n, eps)
    meets = np.flatnonzero(p.mean(axis=0) <= delta)
    return float(meets[0] + 1) / big_n if meets.size else 1.0


def prefix_miss_length(values: Sequence[float] | np.ndarray, aggregate: str, eps: float) -> int:
    """Largest ``n`` whose first-``n`` provisional result misses by more than ``eps`` (0: none).

    ``values`` (N,) are one sensor's complete window in time order. The
    provisional result from the first ``n`` readings is their mean (``avg``),
    ``N`` times their mean (``sum``), their maximum or minimum.
    """
    err = get_aggregate(aggregate).prefix_errors(np.asarray(values, dtype=float))
    miss = np.flatnonzero(err > eps)
    return int(miss[-1]) + 1 if miss.size else 0


def required_coverage_tail(lengths: np.ndarray, window: int, delta: float) -> float:
    """Smallest ``n / N`` such that at most ``delta`` of recent windows miss with their first ``n``.

    ``lengths`` (H,) are ``prefix_miss_length`` of recent complete windows: a
    window misses with its first ``n`` readings only if ``n <= length`` (a
    conservative reading, as a prefix error need not shrink monotonically).
    """
    n = np.arange(1, window + 1)
    share = (np.asarray(lengths, dtype=float)[:, None] >= n[None, :]).mean(axis=0)
    return float(np.flatnonzero(share <= delta)[0] + 1) / window


class CoverageTarget:
    """Running per-sensor window statistics and the target coverage ``lambda_thr``.

    Two models of *which* tuples of a window are missing when it closes:

    * ``srs`` (the seed's sampling argument): a simple random sample of the
      window is missing. ``observe`` keeps each sensor's window variance
      (avg/sum, >= 2 values) or the count ``M`` of readings within ``eps`` of
      the extreme, scaled from the in-time sample to the window
      (``floor(c / n * N)``, at least 1); see ``required_coverage``.
    * ``tail`` (default): the *newest* readings are missing, which is what a
      K-slack buffer loses (a reading early in the window had longer to
      arrive). With autocorrelated sensors this is much worse than random
      loss: on Beijing PM2.5 (daily windows, eps 10) losing 6 random readings
      of 24 misses 6 % of windows, losing the last 6 misses 40 %. The target
      is empirical: from each recent complete window (with the late readings that
      arrived while its coverage was measured; ``disorder.settled_values``),
      the longest prefix whose provisional result still misses
      (``prefix_miss_length``); ``lambda_thr`` is the smallest prefix share
      that at most ``delta`` of them miss with. It needs no distribution
      assumption, but it assumes recent windows resemble the coming ones.

    ``lambda_thr`` is the largest per-sensor requirement: the buffer serves
    the hardest sensor.
    """

    def __init__(
        self,
        aggregate: str,
        window: int,
        eps: float,
        delta: float,
        history: int,
        model: str = "tail",
    ) -> None:
        self.aggregate, self.window, self.eps, self.delta = aggregate, window, eps, delta
        self.history, self.model = history, model
        self.stats: dict[str, deque[float]] = {}
        self._cached: float | None = None
        self._dirty = False

    def _statistic(self, x: np.ndarray) -> float | None:
        if x.size == 0:
            return None
        if self.model == "tail":
            return (
                float(prefix_miss_length(x, self.aggregate, self.eps))
                if x.size == self.window
                else None
            )
        return get_aggregate(self.aggregate).sample_statistic(x, self.eps, self.window)

    def observe(self, values: dict[str, list[float]]) -> None:
        """Take the in-time values (time order) of each sensor of a closed window."""
        for sensor, vals in values.items():
            stat = self._statistic(np.asarray(vals, dtype=float))
            if stat is not None:
                self.stats.setdefault(sensor, deque(maxlen=self.history)).append(stat)
                self._dirty = True

    def lambda_thr(self) -> float | None:
        """Target coverage, or ``None`` before any window was observed."""
        if self._dirty:
            self._cached = max(self._required(np.array(h)) for h in self.stats.values())
            self._dirty = False
        return self._cached

    def _required(self, stats: np.ndarray) -> float:
        if self.model == "tail":
            return required_coverage_tail(stats, self.window, self.delta)
        return required_coverage(self.aggregate, stats, self.window, self.eps, self.delta)

    def snapshot(self) -> dict[str, Any]:
        return {
            "aggregate": self.aggregate, "window": self.window, "eps": self.eps,
            "delta": self.delta, "history": self.history, "model": self.model,
            "stats": {s: list(h) for s, h in self.stats.items()},
        }  # fmt: skip

    @classmethod
    def restore(cls, state: dict[str, Any]) -> CoverageTarget:
        t = cls(
            state["aggregate"], int(state["window"]), float(state["eps"]),
            float(state["delta"]), int(state["history"]), state["model"],
        )  # fmt: skip
        t.stats = {
            s: deque((float(x) for x in h), maxlen=t.history) for s, h in state["stats"].items()
        }
        t._dirty = bool(t.stats)
        return t
