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
  ``(eps_thr, delta)`` (``CoverageTarget``, ``engine.disorder.target``): by the
  seed's random-sample theory (``required_coverage``, ``target_model="srs"``)
  or, by default, empirically under the loss pattern K-slack really has, the
  newest readings of a window missing (``required_coverage_tail``), which
  random-sample theory underestimates badly on autocorrelated sensors.
* a window closes (its provisional result is computed) once ``t_max - K`` has
  passed its end; at that moment every buffered tuple of it is released, in
  timestamp order, so the released stream never goes back in time.
* three zones for an arriving tuple, exactly at window boundaries: ``BUFFER``
  (``ts > t_max - K``), ``CURRENT`` (``ts <= t_max - K`` but its window has not
  closed yet: the seed's "window being computed", which lies in
  ``[t_max - K - |W|, t_max - K]``), ``LATE`` (a window containing it already
  closed). Late tuples are recorded for the batch module
  (``engine.disorder.ledger``), which corrects the affected results.
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
from dataclasses import dataclass
from enum import Enum
from typing import Any

from engine.disorder.config import DisorderConfig
from engine.disorder.items import (
    BufferOutput,
    ClosedWindow,
    Item,
    LateItem,
    parse_item,
)
from engine.disorder.target import CoverageTarget


class Zone(str, Enum):
    """Where an arriving tuple goes."""

    BUFFER = "buffer"
    CURRENT = "current"
    LATE = "late"


@dataclass
class PDController:
    """The seed's law ``alpha += kp * err + kd * (err - err_prev)``, ``err = target - coverage``.

    Implemented in position form with anti-windup. Summed over updates the
    seed's (velocity-form) law reads ``alpha_i = alpha_0 + kp * sum(err) +
    kd * err_i`` (``err_0 = 0``: the controller starts at rest), so we keep
    ``integral = alpha_0 + kp * sum(err)``, clamped to ``[0, alpha_max]``, and
    output ``alpha = clamp(integral + kd * err)``. While ``alpha`` stays inside
    ``[0, alpha_max]`` every step is exactly the seed's ``kp * err + kd * (err -
    err_prev)``. At a clamp the two differ, and the velocity form is the one
    that misbehaves: clamping its output discards the clipped part of one
    derivative kick but not of the opposite kick, so ``alpha`` ratchets away
    from the bound it touched. Near ``alpha = 0`` that holds ``K`` (and the
    latency) up for no accuracy benefit (``bench/bench_disorder.py``).
    """

    kp: float
    kd: float
    alpha: float
    alpha_max: float
    integral: float | None = None  # None until the first update: starts at ``alpha``

    def update(self, target: float, coverage: float) -> float:
        """Feed one window's coverage; return the new ``alpha``."""
        err = target - coverage
        start = self.alpha if self.integral is None else self.integral
        self.integral = self._clamp(start + self.kp * err)
        self.alpha = self._clamp(self.integral + self.kd * err)
        return self.alpha

    def _clamp(self, a: float) -> float:
        return min(self.alpha_max, max(0.0, a))

    def snapshot(self) -> dict[str, float | None]:
        return {"alpha": self.alpha, "integral": self.integral}

    def resume(self, state: dict[str, Any]) -> None:
        """Continue from ``snapshot()``, or from the velocity form's ``alpha`` and ``prev_err``."""
        self.alpha, self.integral = float(state["alpha"]), state.get("integral")
        if self.integral is None and state.get("prev_err") is not None:
            # Velocity form: alpha = integral + kd * prev_err in position terms.
            self.integral = self._clamp(self.alpha - self.kd * float(state["prev_err"]))


def settled_values(readings: dict[str, list[list[float]]]) -> dict[str, list[float]]:
    """Each sensor's readings of a measured window in time order, for the coverage target.

    ``readings`` maps a sensor to ``[position, value]`` pairs: its in-time readings
    at the window's close and the late ones that arrived while its coverage was
    measured, in any order (a late reading of a sliding window's neighbour can
    reach a still-open window after newer ones). A position seen twice keeps its
    first reading; sensors with none are left out. So the target learns from
    every window, not only from those complete when they closed: with a small
    ``K`` few are, and a target starved of windows would stop updating.
    """
    out: dict[str, list[float]] = {}
    for sensor, pairs in readings.items():
        by_position: dict[int, float] = {}
        for pos, value in pairs:
            by_position.setdefault(int(pos), value)
        if by_position:
            out[sensor] = [by_position[k] for k in sorted(by_position)]
    return out


class KSlackBuffer:
    """K-slack buffer with zones, window closing and (for ``adaptive``) PD-controlled ``K``.

    Feed tuples in arrival order with ``push``; collect results with ``drain``;
    ``flush`` at the end of the stream releases and closes everything. The windows it
    closes (``flushed_windows``) close at the last arrival's clock, not when their ``K``
    let them: their latency says how long the stream went on, not the policy's.
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
        self._open_pos: dict[int, dict[str, list[int]]] = {}  # each value's position in its window
        self._pending: deque[list[float]] = deque()  # [index, end_s, n_in_time, K at close]
        self._pooled = [0, 0]  # in-time and late tuples of measured windows since the last update
        self._late_counts: dict[int, int] = {}
        # Closed windows being measured: [position, value] of in-time and late readings.
        self._settling: dict[int, dict[str, list[list[float]]]] = {}
        self._out = BufferOutput()
        self.k_sum = 0.0
        self.n_pushed = 0
        self.k_series: list[tuple[float, float]] = []
        self.coverage_series: list[tuple[float, float, float, float]] = []
        self.flushed_windows: list[int] = []  # closed by ``flush``, in window order

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

    def _position(self, ts: float, j: int) -> int:
        """Index of the reading at event time ``ts`` within window ``j``."""
        return round((ts - self.window_span(j)[0]) / self.config.interval_s)

    def _add_open(self, j: int, sensor: str, ts: float, value: float) -> None:
        self._open.setdefault(j, {}).setdefault(sensor, []).append(value)
        self._open_pos.setdefault(j, {}).setdefault(sensor, []).append(self._position(ts, j))

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
        item = Item(ts, self._seq, first, sensor, value, arrival, tag)
        self._seq += 1
        if self._next_close is not None and first < self._next_close:
            last_late = min(self._last_window(ts), self._next_close - 1)
            self._out.late.append(
                LateItem(ts, item.seq, first, last_late, sensor, value, arrival, tag)
            )
            for j in range(first, last_late + 1):
                if j in self._late_counts:
                    self._late_counts[j] += 1
                if j in self._settling:
                    self._settling[j].setdefault(sensor, []).append([self._position(ts, j), value])
            # Sliding windows: the still-open windows that contain it are in time for it.
            for j in range(last_late + 1, self._last_window(ts) + 1):
                self._add_open(j, sensor, ts, value)
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
        last = [self._last_window(it.ts) for it in self._heap] + list(self._open)
        if last:
            closed_before = len(self._out.closed)
            self._close_through(max(last))
            self.flushed_windows.extend(w.index for w in self._out.closed[closed_before:])
        self._settle(final=True)

    def drain(self) -> BufferOutput:
        """Released tuples, late tuples and closed windows since the last call."""
        out, self._out = self._out, BufferOutput()
        return out

    def _close_through(self, j_end: int) -> None:
        if not self._heap and not self._open:
            return
        if self._next_close is None:
            self._next_close = self._heap[0].first_window if self._heap else min(self._open)
        if j_end < self._next_close:
            return
        while self._heap and self._heap[0].first_window <= j_end:
            item = heapq.heappop(self._heap)
            self._out.released.append(item)
            for j in range(item.first_window, self._last_window(item.ts) + 1):
                self._add_open(j, item.sensor, item.ts, item.value)
        big_k = self.current_k()
        for j in sorted(i for i in self._open if i <= j_end):
            values = self._open.pop(j)
            positions = self._open_pos.pop(j, {})
            start, end = self.window_span(j)
            self._out.closed.append(ClosedWindow(j, start, end, values, self.now, big_k))
            self._settling[j] = {
                s: [[p, v] for p, v in zip(positions.get(s, range(len(vals))), vals, strict=False)]
                for s, vals in values.items()
            }
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
            self.target.observe(settled_values(self._settling.pop(int(j), {})))
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
            "pd": self.pd.snapshot(),
            "target": self.target.snapshot(),
            "heap": [list(it) for it in self._heap if keep(it.sensor)],
            "seq": self._seq,
            "next_close": self._next_close,
            "open": {
                str(j): {s: list(v) for s, v in w.items() if keep(s)} for j, w in self._open.items()
            },
            "pending": [list(p) for p in self._pending],
            "late_counts": {str(j): n for j, n in self._late_counts.items()},
            "open_pos": {
                str(j): {s: list(v) for s, v in w.items() if keep(s)}
                for j, w in self._open_pos.items()
            },
            "settling": {
                str(j): {s: [list(x) for x in v] for s, v in w.items() if keep(s)}
                for j, w in self._settling.items()
            },
            "pooled": list(self._pooled),
            "k_sum": self.k_sum,
            "n_pushed": self.n_pushed,
            "k_series": [list(p) for p in self.k_series],
            "coverage_series": [
                [None if math.isnan(x) else x for x in p] for p in self.coverage_series
            ],
            "flushed_windows": list(self.flushed_windows),
        }

    @classmethod
    def restore(cls, state: dict[str, Any]) -> KSlackBuffer:
        """Rebuild a buffer from ``snapshot()``; it continues exactly where that left off."""
        buf = cls(DisorderConfig.from_dict(state["config"]))
        buf.t_max, buf.k, buf.now = state["t_max"], float(state["k"]), float(state["now"])
        buf.pd.resume(state["pd"])
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
        # Snapshots from before settled targets lack these: positions in arrival order,
        # windows being measured without readings (the target skips them).
        buf._open_pos = {
            int(j): {s: [int(x) for x in v] for s, v in w.items()}
            for j, w in state.get("open_pos", {}).items()
        }
        buf._settling = {
            int(j): {s: [[int(p), float(x)] for p, x in v] for s, v in w.items()}
            for j, w in state.get("settling", {}).items()
        }
        buf.k_sum, buf.n_pushed = float(state["k_sum"]), int(state["n_pushed"])
        buf.k_series = [(float(t), float(k)) for t, k in state["k_series"]]
        buf.coverage_series = [
            (float(t), float(c), math.nan if g is None else float(g), float(a))
            for t, c, g, a in state["coverage_series"]
        ]
        # a snapshot without the key was taken before any flush: none
        buf.flushed_windows = [int(j) for j in state.get("flushed_windows", [])]
        return buf
