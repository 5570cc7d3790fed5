"""Stream module for out-of-order sensor streams: an adaptive K-slack buffer.

Time is event time in seconds (float, e.g. seconds since the epoch). Windows are
counted in readings like everywhere else in Lacuna: ``window`` readings wide,
``slide`` readings apart, one reading every ``interval_s`` seconds, window ``j``
covering event times ``[origin + j*step, origin + j*step + width)``.

The buffer (seed: Yang, Xu, Lv, Li, "hybrid processing model"):

* ``t_max`` is the largest event time seen; the *lateness* of an arriving tuple
  is ``t_max - ts`` (0 when it is the newest); ``k`` is the largest lateness
  seen. A tuple whose lateness is at most ``K`` is never late, so ``K = k``
  (MP-K-slack) loses nothing it has seen before.
* ``K = alpha * k``; ``alpha`` is set by a PD controller on window coverage
  (``PDController``) against the target coverage ``lambda_thr`` derived from
  ``(eps_thr, delta)`` (``CoverageTarget``): by the seed's random-sample theory
  (``required_coverage``, ``target_model="srs"``) or, by default, empirically
  under the loss pattern K-slack really has, the newest readings of a window
  missing (``required_coverage_tail``), which random-sample theory
  underestimates badly on autocorrelated sensors.
* a window closes (its provisional result is computed) once ``t_max - K`` has
  passed its end; at that moment every buffered tuple of it is released, in
  timestamp order, so the released stream never goes back in time.
* three zones for an arriving tuple, exactly at window boundaries: ``BUFFER``
  (``ts > t_max - K``), ``CURRENT`` (``ts <= t_max - K`` but its window has not
  closed yet: the seed's "window being computed", which lies in
  ``[t_max - K - |W|, t_max - K]``), ``LATE`` (a window containing it already
  closed). Late tuples are recorded for the batch module
  (``engine.disorder_eval``), which corrects the affected results.
* the coverage of a window is ``n_in_time / (n_in_time + n_late)``, with the
  late tuples counted for a settling period after it closed (the seed: "late
  tuples that arrive within a period after the window closed"). The
  controller is updated in window order (optionally with the pooled coverage
  of several windows, ``control_tuples``, to damp the noise of small windows).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

import numpy as np
from scipy.special import gammaln, ndtr

from engine.errors import ParameterError

POLICIES: tuple[str, ...] = ("adaptive", "mp_kslack", "fixed", "none")
_AGGREGATES = ("avg", "sum", "max", "min")


class Zone(str, Enum):
    """Where an arriving tuple goes."""

    BUFFER = "buffer"
    CURRENT = "current"
    LATE = "late"


def _finite(name: str, value: Any, *, low: float | None = None, strict: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if strict else value >= low
    if not ok:
        bound = "" if low is None else f" {'>' if strict else '>='} {low:g}"
        raise ParameterError(f"{name} must be a finite number{bound}, got {value!r}")


@dataclass(frozen=True)
class DisorderConfig:
    """Parameters of the disorder handling (validated on construction).

    Attributes
    ----------
    window, slide : window width and slide in readings (``slide=None``: tumbling).
    interval_s : sampling interval in seconds (one reading per sensor per interval).
    origin_s : event time (s) at which window 0 starts; windows are aligned to it.
    aggregate : ``avg``, ``sum``, ``max`` or ``min``.
    eps_thr, delta : quality target: ``P(|provisional - exact| > eps_thr) <= delta``.
    policy : ``adaptive`` (ours), ``mp_kslack``, ``fixed`` (a fixed watermark) or ``none``.
    kp, kd : PD gains (seed: 0.2 and 4).
    alpha0, alpha_max : initial ``alpha`` and its upper clamp (lower clamp 0).
    fixed_k_s : ``K`` in seconds for the ``fixed`` policy.
    gamma_s : batch trigger, seconds of event time spanned by recorded late tuples
        (``None``: one window width; the seed's 5 s is ten of its windows).
    target_history : recent windows per sensor used to estimate ``lambda_thr``.
    target_model : ``tail`` (the newest readings of a window are the late ones)
        or ``srs`` (a simple random sample is late; the seed's argument); see
        ``CoverageTarget``.
    settle_s : a window's coverage is measured once ``t_max`` has passed its
        end by ``K`` (at its close) plus ``settle_s`` (``None``: one window width).
    control_tuples : the controller is updated with the pooled coverage of
        consecutive measured windows once they hold at least this many tuples
        (1, the default: every window, as in the seed; pooling damps the noise
        of small windows' coverage).
    """

    window: int
    slide: int | None = None
    interval_s: float = 1.0
    origin_s: float = 0.0
    aggregate: str = "avg"
    eps_thr: float = 1.0
    delta: float = 0.05
    policy: str = "adaptive"
    kp: float = 0.2
    kd: float = 4.0
    alpha0: float = 1.0
    alpha_max: float = 1.0
    fixed_k_s: float = 0.0
    gamma_s: float | None = None
    target_history: int = 50
    target_model: str = "tail"
    settle_s: float | None = None
    control_tuples: int = 1

    def __post_init__(self) -> None:
        for name in ("window", "target_history", "control_tuples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        s = self.slide
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 1):
            raise ParameterError(f"slide must be an integer >= 1, got {s!r}")
        if s is not None and s > self.window:
            raise ParameterError(f"slide must not exceed window ({self.window}), got {s!r}")
        if self.aggregate not in _AGGREGATES:
            raise ParameterError(
                f"aggregate must be one of avg, sum, max, min, got {self.aggregate!r}"
            )
        if self.target_model not in ("tail", "srs"):
            raise ParameterError(f"target_model must be tail or srs, got {self.target_model!r}")
        if self.policy not in POLICIES:
            raise ParameterError(
                f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}"
            )
        _finite("interval_s", self.interval_s, low=0.0, strict=True)
        _finite("origin_s", self.origin_s)
        _finite("eps_thr", self.eps_thr, low=0.0, strict=True)
        _finite("delta", self.delta, low=0.0, strict=True)
        if self.delta >= 1:
            raise ParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        for name in ("kp", "kd", "alpha0", "fixed_k_s"):
            _finite(name, getattr(self, name), low=0.0)
        _finite("alpha_max", self.alpha_max, low=0.0, strict=True)
        if self.alpha0 > self.alpha_max:
            raise ParameterError(f"alpha0 must not exceed alpha_max, got {self.alpha0!r}")
        for name in ("gamma_s", "settle_s"):
            if getattr(self, name) is not None:
                _finite(name, getattr(self, name), low=0.0)

    @property
    def width_s(self) -> float:
        """Window width in seconds."""
        return self.window * self.interval_s

    @property
    def step_s(self) -> float:
        """Window slide in seconds."""
        return (self.slide or self.window) * self.interval_s

    @property
    def gamma(self) -> float:
        """Batch trigger span in seconds."""
        return self.width_s if self.gamma_s is None else self.gamma_s

    @property
    def settle(self) -> float:
        """Seconds of event time after a window's close before its coverage is measured."""
        return self.width_s if self.settle_s is None else self.settle_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DisorderConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ParameterError(f"unknown disorder config key(s): {', '.join(unknown)}")
        return cls(**data)


@dataclass
class PDController:
    """``alpha += kp * err + kd * (err - err_prev)``, ``err = target - coverage``.

    ``alpha`` is clamped to ``[0, alpha_max]``. The first update has no
    derivative term (there is no previous error).
    """

    kp: float
    kd: float
    alpha: float
    alpha_max: float
    prev_err: float | None = None

    def update(self, target: float, coverage: float) -> float:
        """Feed one window's coverage; return the new ``alpha``."""
        err = target - coverage
        derivative = 0.0 if self.prev_err is None else err - self.prev_err
        self.alpha = min(
            self.alpha_max, max(0.0, self.alpha + self.kp * err + self.kd * derivative)
        )
        self.prev_err = err
        return self.alpha


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
    if aggregate in ("avg", "sum"):
        e = eps / big_n if aggregate == "sum" else eps
        se = np.sqrt(np.maximum(0.0, 1.0 - n / big_n) * h / n)
        with np.errstate(divide="ignore"):
            p = np.where(se > 0, 2.0 * ndtr(-e / np.where(se > 0, se, 1.0)), 0.0)
    else:
        m = np.clip(h, 1, big_n)
        rest = big_n - m - n  # readings neither in the sample nor near the extreme
        ok = rest >= 0
        r = np.where(ok, rest, 0.0)
        log_p = (
            gammaln(big_n - m + 1) - gammaln(r + 1) - gammaln(big_n + 1) + gammaln(big_n - n + 1)
        )
        p = np.where(ok, np.exp(log_p), 0.0)
    meets = np.flatnonzero(p.mean(axis=0) <= delta)
    return float(meets[0] + 1) / big_n if meets.size else 1.0


def prefix_miss_length(values: Sequence[float] | np.ndarray, aggregate: str, eps: float) -> int:
    """Largest ``n`` whose first-``n`` provisional result misses by more than ``eps`` (0: none).

    ``values`` (N,) are one sensor's complete window in time order. The
    provisional result from the first ``n`` readings is their mean (``avg``),
    ``N`` times their mean (``sum``), their maximum or minimum.
    """
    x = np.asarray(values, dtype=float)
    if aggregate in ("avg", "sum"):
        prefix = np.cumsum(x) / np.arange(1, x.size + 1)
        err = np.abs(prefix - prefix[-1]) * (x.size if aggregate == "sum" else 1)
    elif aggregate == "max":
        err = x.max() - np.maximum.accumulate(x)
    else:
        err = np.minimum.accumulate(x) - x.min()
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
      is empirical: from each recent window that was complete at its close,
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
        if self.model == "tail":
            return (
                float(prefix_miss_length(x, self.aggregate, self.eps))
                if x.size == self.window
                else None
            )
        if self.aggregate in ("avg", "sum"):
            return float(x.var(ddof=1)) if x.size >= 2 else None
        signed = x if self.aggregate == "max" else -x
        close = np.count_nonzero(signed >= signed.max() - self.eps)
        return float(max(1, math.floor(close / x.size * self.window)))

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


@dataclass(frozen=True)
class ClosedWindow:
    """A window whose provisional result is due.

    Attributes
    ----------
    index : window number ``j``; start_s, end_s : its event-time span (s).
    values : sensor -> in-time values (in release order).
    closed_at : stream time (arrival clock, s) of the close.
    k_at_close : buffer size ``K`` (s) when it closed.
    """

    index: int
    start_s: float
    end_s: float
    values: dict[str, list[float]]
    closed_at: float
    k_at_close: float


# A buffered or released tuple: (event_time_s, seq, first_window, sensor, value, arrival_s, tag).
# ``seq`` numbers tuples in arrival order (ties in event time leave in arrival order);
# ``tag`` is an opaque integer carried through (the feeder's reading number).
Item = tuple[float, int, int, str, float, float, int]
# A late tuple: (event_time_s, seq, first_window, last_closed_window, sensor, value, arrival_s,
# tag); it is late for windows first..last_closed (those had closed when it arrived).
LateItem = tuple[float, int, int, int, str, float, float, int]


def parse_item(x: Sequence[Any]) -> Item:
    """An ``Item`` back from its JSON list form."""
    return (float(x[0]), int(x[1]), int(x[2]), str(x[3]), float(x[4]), float(x[5]), int(x[6]))


def parse_late_item(x: Sequence[Any]) -> LateItem:
    """A ``LateItem`` back from its JSON list form."""
    return (
        float(x[0]),
        int(x[1]),
        int(x[2]),
        int(x[3]),
        str(x[4]),
        float(x[5]),
        float(x[6]),
        int(x[7]),
    )


@dataclass
class BufferOutput:
    """What the buffer produced since the last ``drain``."""

    released: list[Item] = field(default_factory=list)
    late: list[LateItem] = field(default_factory=list)
    closed: list[ClosedWindow] = field(default_factory=list)


class KSlackBuffer:
    """K-slack buffer with zones, window closing and (for ``adaptive``) PD-controlled ``K``.

    Feed tuples in arrival order with ``push``; collect results with ``drain``;
    ``flush`` at the end of the stream releases and closes everything.
    """

    def __init__(self, config: DisorderConfig) -> None:
        self.config = config
        self.t_max: float | None = None
        self.k = 0.0
        self.now = 0.0
        self.pd = PDController(config.kp, config.kd, config.alpha0, config.alpha_max)
        self.target = CoverageTarget(
            config.aggregate,
            config.window,
            config.eps_thr,
            config.delta,
            config.target_history,
            config.target_model,
        )
        self._heap: list[Item] = []
        self._seq = 0
        self._next_close: int | None = None
        self._open: dict[int, dict[str, list[float]]] = {}
        self._pending: deque[list[float]] = deque()  # [index, end_s, n_in_time, K at close]
        self._pooled = [0, 0]  # in-time and late tuples of measured windows since the last update
        self._late_counts: dict[int, int] = {}
        self._out = BufferOutput()
        self.k_sum = 0.0
        self.n_pushed = 0
        self.k_series: list[tuple[float, float]] = []
        self.coverage_series: list[tuple[float, float, float, float]] = []

    # -- window arithmetic -------------------------------------------------
    def _first_window(self, ts: float) -> int:
        c = self.config
        return math.floor((ts - c.origin_s - c.width_s) / c.step_s) + 1

    def _last_window(self, ts: float) -> int:
        return math.floor((ts - self.config.origin_s) / self.config.step_s)

    def window_span(self, j: int) -> tuple[float, float]:
        """Event-time span ``[start, end)`` of window ``j`` in seconds."""
        start = self.config.origin_s + j * self.config.step_s
        return start, start + self.config.width_s

    def current_k(self) -> float:
        """The buffer size ``K`` in seconds under the configured policy."""
        policy = self.config.policy
        if policy == "adaptive":
            return self.pd.alpha * self.k
        if policy == "mp_kslack":
            return self.k
        if policy == "fixed":
            return self.config.fixed_k_s
        return 0.0

    # -- stream ------------------------------------------------------------
    def push(self, ts: float, sensor: str, value: float, arrival: float, tag: int = -1) -> Zone:
        """Accept one tuple (event time ``ts`` s, arrival clock ``arrival`` s)."""
        self.now = arrival
        if self.t_max is None:
            self.t_max = ts
        self.k = max(self.k, self.t_max - ts)
        self.t_max = max(self.t_max, ts)
        big_k = self.current_k()
        self.k_sum += big_k
        self.n_pushed += 1
        first = self._first_window(ts)
        item: Item = (ts, self._seq, first, sensor, value, arrival, tag)
        self._seq += 1
        if self._next_close is not None and first < self._next_close:
            last_late = min(self._last_window(ts), self._next_close - 1)
            self._out.late.append((ts, item[1], first, last_late, sensor, value, arrival, tag))
            for j in range(first, last_late + 1):
                if j in self._late_counts:
                    self._late_counts[j] += 1
            # Sliding windows: the still-open windows that contain it are in time for it.
            for j in range(last_late + 1, self._last_window(ts) + 1):
                self._open.setdefault(j, {}).setdefault(sensor, []).append(value)
            self._settle()
            return Zone.LATE
        zone = Zone.BUFFER if ts > self.t_max - big_k else Zone.CURRENT
        heapq.heappush(self._heap, item)
        wm = self.t_max - big_k
        self._close_through(
            math.floor((wm - self.config.origin_s - self.config.width_s) / self.config.step_s)
        )
        self._settle()
        return zone

    def flush(self) -> None:
        """End of stream: release every buffered tuple and close every window."""
        last = [self._last_window(it[0]) for it in self._heap] + list(self._open)
        if last:
            self._close_through(max(last))
        self._settle(final=True)

    def drain(self) -> BufferOutput:
        """Released tuples, late tuples and closed windows since the last call."""
        out, self._out = self._out, BufferOutput()
        return out

    def _close_through(self, j_end: int) -> None:
        if not self._heap and not self._open:
            return
        if self._next_close is None:
            self._next_close = self._heap[0][2] if self._heap else min(self._open)
        if j_end < self._next_close:
            return
        while self._heap and self._heap[0][2] <= j_end:
            item = heapq.heappop(self._heap)
            self._out.released.append(item)
            for j in range(item[2], self._last_window(item[0]) + 1):
                self._open.setdefault(j, {}).setdefault(item[3], []).append(item[4])
        big_k = self.current_k()
        for j in sorted(i for i in self._open if i <= j_end):
            values = self._open.pop(j)
            start, end = self.window_span(j)
            self._out.closed.append(ClosedWindow(j, start, end, values, self.now, big_k))
            self.target.observe(values)
            self._pending.append([j, end, sum(len(v) for v in values.values()), big_k])
            self._late_counts[j] = 0
        self._next_close = j_end + 1
        self.k_series.append((self.now, big_k))

    def _settle(self, final: bool = False) -> None:
        """Measure the coverage of windows closed at least ``settle`` ago; feed the PD.

        Waiting for the full ``k`` after a window's end would count every late
        tuple, but with heavy-tailed delays ``k`` spans many windows and the
        loop would oscillate; tuples later than ``K + settle`` are rare and the
        batch module corrects them anyway.
        """
        settle = self.config.settle
        t_max = math.inf if final or self.t_max is None else self.t_max
        while self._pending and t_max >= self._pending[0][1] + self._pending[0][3] + settle:
            j, _, n_in, _ = self._pending.popleft()
            n_late = self._late_counts.pop(int(j))
            self._pooled[0] += int(n_in)
            self._pooled[1] += n_late
            target = self.target.lambda_thr()
            pooled_in, pooled_late = self._pooled
            if final or pooled_in + pooled_late < self.config.control_tuples:
                continue
            self._pooled = [0, 0]
            coverage = pooled_in / (pooled_in + pooled_late)
            if self.config.policy == "adaptive" and target is not None:
                self.pd.update(target, coverage)
            self.coverage_series.append((self.now, coverage, target or math.nan, self.pd.alpha))

    # -- state -------------------------------------------------------------
    def snapshot(self, keep_sensors: set[str] | None = None) -> dict[str, Any]:
        """JSON-serialisable state. ``keep_sensors`` drops other sensors' raw readings."""
        keep = (lambda s: True) if keep_sensors is None else (lambda s: s in keep_sensors)
        return {
            "config": self.config.to_dict(),
            "t_max": self.t_max,
            "k": self.k,
            "now": self.now,
            "pd": {"alpha": self.pd.alpha, "prev_err": self.pd.prev_err},
            "target": self.target.snapshot(),
            "heap": [list(it) for it in self._heap if keep(it[3])],
            "seq": self._seq,
            "next_close": self._next_close,
            "open": {
                str(j): {s: list(v) for s, v in w.items() if keep(s)} for j, w in self._open.items()
            },
            "pending": [list(p) for p in self._pending],
            "late_counts": {str(j): n for j, n in self._late_counts.items()},
            "pooled": list(self._pooled),
            "k_sum": self.k_sum,
            "n_pushed": self.n_pushed,
            "k_series": [list(p) for p in self.k_series],
            "coverage_series": [
                [None if math.isnan(x) else x for x in p] for p in self.coverage_series
            ],
        }

    @classmethod
    def restore(cls, state: dict[str, Any]) -> KSlackBuffer:
        """Rebuild a buffer from ``snapshot()``; it continues exactly where that left off."""
        buf = cls(DisorderConfig.from_dict(state["config"]))
        buf.t_max, buf.k, buf.now = state["t_max"], float(state["k"]), float(state["now"])
        buf.pd.alpha, buf.pd.prev_err = float(state["pd"]["alpha"]), state["pd"]["prev_err"]
        buf.target = CoverageTarget.restore(state["target"])
        buf._heap = [parse_item(x) for x in state["heap"]]
        heapq.heapify(buf._heap)
        buf._seq, buf._next_close = int(state["seq"]), state["next_close"]
        buf._open = {
            int(j): {s: [float(x) for x in v] for s, v in w.items()}
            for j, w in state["open"].items()
        }
        buf._pending = deque(
            [int(j), float(e), int(n), float(k)] for j, e, n, k in state["pending"]
        )
        buf._pooled = [int(x) for x in state["pooled"]]
        buf._late_counts = {int(j): int(n) for j, n in state["late_counts"].items()}
        buf.k_sum, buf.n_pushed = float(state["k_sum"]), int(state["n_pushed"])
        buf.k_series = [(float(t), float(k)) for t, k in state["k_series"]]
        buf.coverage_series = [
            (float(t), float(c), math.nan if g is None else float(g), float(a))
            for t, c, g, a in state["coverage_series"]
        ]
        return buf
