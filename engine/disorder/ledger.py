"""Batch module (``ResultLedger``) and the hybrid processor (``DisorderProcessor``).

Batch module (``ResultLedger``): every window result starts as a *provisional*
row (version 0) computed from the tuples that arrived in time. Late tuples are
recorded; once the recorded late tuples span more than ``Gamma`` seconds of
event time, a batch recomputes every affected (window, sensor) and appends a
*correction* row with the next version. The recomputation merges the late
tuples into the aggregate's mergeable partial state kept per (window, sensor)
(``Aggregate.partial``/``merge``: the count and the aggregate's fields over
everything received so far), which is exactly the aggregate
of all tuples received for that window: the same result a recomputation from
the full received history gives (``engine.disorder.experiment.window_truth`` is
that reference and the tests compare the two). The partials are a few
numbers per window, not raw input, and they exist for *every* sensor, so a
late tuple of a sensor that is not backed up still corrects the live result.

A window is *final* once ``t_max - k`` has passed its end (``k`` = the largest
lateness seen): any further tuple of it would be later than every tuple seen
so far. Pending late tuples are applied first, then a ``final`` row (next
version, same value) marks it. A tuple that breaks that assumption still
corrects the window (``final`` stays true) and is counted in ``reopened``.
At the end of the stream everything pending is applied and every window is
final, so the final results equal the in-order truth.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, NamedTuple

from engine.aggregates import get_aggregate
from engine.disorder.buffer import KSlackBuffer, Zone
from engine.disorder.config import DisorderConfig
from engine.disorder.items import Item, LateItem, parse_item, parse_late_item


class ResultRow(NamedTuple):
    """One versioned window result: provisional, correction or final."""

    window: int
    start_s: float
    end_s: float
    sensor: str
    value: float
    kind: str
    version: int
    final: bool
    emitted_at_s: float


def parse_row(x: Any) -> ResultRow:
    """A ``ResultRow`` back from its JSON list form."""
    return ResultRow(
        int(x[0]),
        float(x[1]),
        float(x[2]),
        str(x[3]),
        float(x[4]),
        str(x[5]),
        int(x[6]),
        bool(x[7]),
        float(x[8]),
    )


class ResultLedger:
    """Provisional results, late-tuple batches, corrections and finalisation."""

    def __init__(self, config: DisorderConfig) -> None:
        self.config = config
        self._aggregate = get_aggregate(config.aggregate)
        self._fields = tuple(f.name for f in self._aggregate.state_fields)
        # (window, sensor) -> the partial state's values, in ``state_fields`` order
        self.partials: dict[tuple[int, str], list[float]] = {}
        self.versions: dict[tuple[int, str], int] = {}
        self.by_window: dict[int, list[str]] = {}
        self.final: set[int] = set()
        self.unfinal: list[tuple[float, int]] = []  # heap of (end_s, window)
        self.pending: list[LateItem] = []
        self._lo, self._hi = math.inf, -math.inf  # event-time span of the pending ones
        self.rows: list[ResultRow] = []
        self.n_corrections = self.n_batches = self.n_reopened = 0

    def _span(self, j: int) -> tuple[float, float]:
        start = self.config.origin_s + j * self.config.step_s
        return start, start + self.config.width_s

    def value(self, key: tuple[int, str], final: bool) -> float:
        """Aggregate of a (window, sensor) partial; ``sum`` is scaled up while incomplete."""
        state = dict(zip(self._fields, self.partials[key], strict=True))
        return float(self._aggregate.finish(state, None if final else self.config.window))

    def _partial(self, values: list[float]) -> list[float]:
        state = [f.empty for f in self._aggregate.state_fields]
        for value in values:
            state = self._merged(state, value)
        return state

    def _merged(self, old: list[float], value: float) -> list[float]:
        fields = self._aggregate.state_fields
        return [f.add(o, float(value)) for f, o in zip(fields, old, strict=True)]

    def _emit(self, key: tuple[int, str], kind: str, final: bool, now: float) -> None:
        version = self.versions.get(key, -1) + 1
        self.versions[key] = version
        start, end = self._span(key[0])
        self.rows.append(
            ResultRow(key[0], start, end, key[1], self.value(key, final), kind, version, final, now)
        )

    def _register(self, j: int, sensor: str) -> None:
        if j not in self.by_window:
            self.by_window[j] = []
            if j not in self.final:
                heapq.heappush(self.unfinal, (self._span(j)[1], j))
        self.by_window[j].append(sensor)

    def add_closed(self, index: int, values: dict[str, list[float]], now: float) -> None:
        """Provisional rows for a window closed by the stream module."""
        for sensor, vals in values.items():
            key = (index, sensor)
            self.partials[key] = self._partial(vals)
            self._register(index, sensor)
            self._emit(key, "provisional", False, now)

    def add_late(self, item: LateItem, now: float) -> None:
        """Record a late tuple; run a batch once the recorded ones span more than Gamma."""
        self.pending.append(item)
        self._lo, self._hi = min(self._lo, item.ts), max(self._hi, item.ts)
        if self._hi - self._lo > self.config.gamma:
            self.run_batch(now)

    def run_batch(self, now: float) -> None:
        """Merge every pending late tuple into its windows and emit corrections."""
        if not self.pending:
            return
        touched: dict[tuple[int, str], None] = {}
        for late in self.pending:
            sensor, value = late.sensor, late.value
            for j in range(late.first_window, late.last_closed + 1):
                key = (j, sensor)
                p = self.partials.get(key)
                if p is None:
                    self.partials[key] = self._partial([value])
                    self._register(j, sensor)
                else:
                    self.partials[key] = self._merged(p, value)
                touched[key] = None
        for key in touched:
            is_final = key[0] in self.final
            self.n_reopened += int(is_final)
            self._emit(key, "correction", is_final, now)
        self.n_corrections += len(touched)
        self.n_batches += 1
        self.pending.clear()
        self._lo, self._hi = math.inf, -math.inf

    def finalize(self, t_max: float, k: float, now: float) -> None:
        """Mark final every window whose end is at or before ``t_max - k``."""
        while self.unfinal and self.unfinal[0][0] <= t_max - k:
            end, j = heapq.heappop(self.unfinal)
            if self._lo < end:
                self.run_batch(now)
            self.final.add(j)
            for sensor in self.by_window[j]:
                self._emit((j, sensor), "final", True, now)

    def end_of_stream(self, now: float) -> None:
        """Apply everything pending and mark every window final."""
        self.run_batch(now)
        self.finalize(math.inf, 0.0, now)

    def snapshot(self) -> dict[str, Any]:
        return {
            "partials": [[j, s, *p] for (j, s), p in self.partials.items()],
            "versions": [[j, s, v] for (j, s), v in self.versions.items()],
            "by_window": {str(j): list(s) for j, s in self.by_window.items()},
            "final": sorted(self.final),
            "unfinal": [list(x) for x in self.unfinal],
            "pending": [list(x) for x in self.pending],
            "rows": [list(r) for r in self.rows],
            "counters": [self.n_corrections, self.n_batches, self.n_reopened],
        }

    @classmethod
    def restore(cls, config: DisorderConfig, state: dict[str, Any]) -> ResultLedger:
        led = cls(config)
        led.partials = {(int(j), s): [float(x) for x in p] for j, s, *p in state["partials"]}
        led.versions = {(int(j), s): int(v) for j, s, v in state["versions"]}
        led.by_window = {int(j): list(s) for j, s in state["by_window"].items()}
        led.final = {int(j) for j in state["final"]}
        led.unfinal = [(float(e), int(j)) for e, j in state["unfinal"]]
        heapq.heapify(led.unfinal)
        led.pending = [parse_late_item(x) for x in state["pending"]]
        led._lo = min((p.ts for p in led.pending), default=math.inf)
        led._hi = max((p.ts for p in led.pending), default=-math.inf)
        led.rows = [parse_row(x) for x in state["rows"]]
        led.n_corrections, led.n_batches, led.n_reopened = (int(c) for c in state["counters"])
        return led


class DisorderProcessor:
    """The hybrid model on one stream: K-slack buffer (stream) + ledger (batch).

    The pure-Python reference that the Spark stage wraps. Feed tuples in
    arrival order with ``push``; ``drain`` returns what was released, what was
    late and the result rows since the last call.
    """

    def __init__(self, config: DisorderConfig) -> None:
        self.buffer = KSlackBuffer(config)
        self.ledger = ResultLedger(config)
        self.released: list[Item] = []
        self.late: list[LateItem] = []

    def push(self, ts: float, sensor: str, value: float, arrival: float, tag: int = -1) -> Zone:
        zone = self.buffer.push(ts, sensor, value, arrival, tag)
        self._route()
        return zone

    def flush(self) -> None:
        """End of stream: close every window, apply every correction."""
        self.buffer.flush()
        self._route()
        self.ledger.end_of_stream(self.buffer.now)

    def _route(self) -> None:
        out = self.buffer.drain()
        now = self.buffer.now
        self.released.extend(out.released)
        for window in out.closed:
            self.ledger.add_closed(window.index, window.values, window.closed_at)
        for item in out.late:
            self.late.append(item)
            self.ledger.add_late(item, now)
        if self.buffer.t_max is not None:
            self.ledger.finalize(self.buffer.t_max, self.buffer.k, now)

    def drain(self) -> tuple[list[Item], list[LateItem], list[ResultRow]]:
        out = (self.released, self.late, self.ledger.rows)
        self.released, self.late, self.ledger.rows = [], [], []
        return out

    def snapshot(self, keep_sensors: set[str] | None = None) -> dict[str, Any]:
        """JSON-serialisable state; ``keep_sensors`` keeps only those sensors' raw readings."""
        keep = (lambda s: True) if keep_sensors is None else (lambda s: s in keep_sensors)
        ledger = self.ledger.snapshot()
        ledger["pending"] = [p for p in ledger["pending"] if keep(p[4])]  # JSON lists: sensor
        return {
            "buffer": self.buffer.snapshot(keep_sensors),
            "ledger": ledger,
            "released": [list(x) for x in self.released if keep(x[3])],
            "late": [list(x) for x in self.late if keep(x[4])],
        }

    @classmethod
    def restore(cls, state: dict[str, Any]) -> DisorderProcessor:
        buffer = KSlackBuffer.restore(state["buffer"])
        proc = cls(buffer.config)
        proc.buffer = buffer
        proc.ledger = ResultLedger.restore(buffer.config, state["ledger"])
        proc.released = [parse_item(x) for x in state["released"]]
        proc.late = [parse_late_item(x) for x in state["late"]]
        return proc
