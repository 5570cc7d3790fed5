"""Batch module, the hybrid processor, metrics and the disorder experiment.

Batch module (``ResultLedger``): every window result starts as a *provisional*
row (version 0) computed from the tuples that arrived in time. Late tuples are
recorded; once the recorded late tuples span more than ``Gamma`` seconds of
event time, a batch recomputes every affected (window, sensor) and appends a
*correction* row with the next version. The recomputation merges the late
tuples into a mergeable partial aggregate kept per (window, sensor) (count,
sum, max, min of everything received so far), which is exactly the aggregate
of all tuples received for that window: the same result a recomputation from
the full received history gives (``window_truth`` is that reference and the
tests compare the two). The partials are a few numbers per window, not raw
input, and they exist for *every* sensor, so a late tuple of a sensor that is
not backed up still corrects the live result.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine.delays import DelayModel, parse_delays
from engine.disorder import (
    DisorderConfig,
    Item,
    KSlackBuffer,
    LateItem,
    Zone,
    parse_item,
    parse_late_item,
)
from engine.errors import ParameterError

# (window, start_s, end_s, sensor, value, kind, version, final, emitted_at_s)
ResultRow = tuple[int, float, float, str, float, str, int, bool, float]


def parse_row(x: Any) -> ResultRow:
    """A ``ResultRow`` back from its JSON list form."""
    return (
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


METHODS: dict[str, str] = {
    "ours": "adaptive",
    "mp_kslack": "mp_kslack",
    "fixed_watermark": "fixed",
    "no_buffer": "none",
}


class ResultLedger:
    """Provisional results, late-tuple batches, corrections and finalisation."""

    def __init__(self, config: DisorderConfig) -> None:
        self.config = config
        self.partials: dict[tuple[int, str], list[float]] = {}  # count, total, high, low
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
        count, total, high, low = self.partials[key]
        agg, n = self.config.aggregate, self.config.window
        if agg == "avg":
            return total / count
        if agg == "sum":
            return total if final or count >= n else total * n / count
        return high if agg == "max" else low

    def _emit(self, key: tuple[int, str], kind: str, final: bool, now: float) -> None:
        version = self.versions.get(key, -1) + 1
        self.versions[key] = version
        start, end = self._span(key[0])
        self.rows.append(
            (key[0], start, end, key[1], self.value(key, final), kind, version, final, now)
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
            self.partials[key] = [float(len(vals)), float(sum(vals)), max(vals), min(vals)]
            self._register(index, sensor)
            self._emit(key, "provisional", False, now)

    def add_late(self, item: LateItem, now: float) -> None:
        """Record a late tuple; run a batch once the recorded ones span more than Gamma."""
        self.pending.append(item)
        self._lo, self._hi = min(self._lo, item[0]), max(self._hi, item[0])
        if self._hi - self._lo > self.config.gamma:
            self.run_batch(now)

    def run_batch(self, now: float) -> None:
        """Merge every pending late tuple into its windows and emit corrections."""
        if not self.pending:
            return
        touched: dict[tuple[int, str], None] = {}
        for _ts, _, first, last_late, sensor, value, _, _ in self.pending:
            for j in range(first, last_late + 1):
                key = (j, sensor)
                p = self.partials.get(key)
                if p is None:
                    self.partials[key] = [1.0, value, value, value]
                    self._register(j, sensor)
                else:
                    p[0], p[1], p[2], p[3] = (
                        p[0] + 1,
                        p[1] + value,
                        max(p[2], value),
                        min(p[3], value),
                    )
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
        led._lo = min((p[0] for p in led.pending), default=math.inf)
        led._hi = max((p[0] for p in led.pending), default=-math.inf)
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
        ledger["pending"] = [p for p in ledger["pending"] if keep(p[4])]
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


def window_truth(
    times_s: np.ndarray, sensors: np.ndarray, values: np.ndarray, config: DisorderConfig
) -> pd.DataFrame:
    """Aggregate of every (window, sensor) over all tuples: the in-order truth.

    Also the batch recomputation from a complete history. Parameters are (N,)
    arrays of event times (s), sensor names and values. Returns one row per
    (window, sensor) with columns ``window, sensor, count, value``.
    """
    t = np.asarray(times_s, dtype=float)
    rel = t - config.origin_s
    hi = np.floor(rel / config.step_s).astype(np.int64)
    lo = np.floor((rel - config.width_s) / config.step_s).astype(np.int64) + 1
    parts = []
    for offset in range(int(np.max(hi - lo, initial=0)) + 1):
        keep = hi - offset >= lo
        parts.append(
            pd.DataFrame(
                {
                    "window": hi[keep] - offset,
                    "sensor": np.asarray(sensors)[keep],
                    "v": np.asarray(values, dtype=float)[keep],
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True)
    agg = {"avg": "mean", "sum": "sum", "max": "max", "min": "min"}[config.aggregate]
    out = frame.groupby(["window", "sensor"], sort=True)["v"].agg(["count", agg]).reset_index()
    return out.rename(columns={agg: "value"})


@dataclass(frozen=True)
class MethodReport:
    """Metrics of one method on the replayed stream (times in seconds)."""

    avg_latency_s: float
    avg_k_s: float
    max_k_s: float
    provisional_accuracy: float
    final_accuracy: float
    final_exact: float
    corrections: int
    batch_runs: int
    reopened_final: int
    late_tuples: int
    late_ratio: float
    mean_coverage: float
    k_over_time: list[tuple[float, float]]
    cumulative_accuracy: list[tuple[float, float]]
    alpha_over_time: list[tuple[float, float]]

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for name in ("k_over_time", "cumulative_accuracy", "alpha_over_time"):
            d[name] = [[round(a, 3), round(b, 6)] for a, b in d[name]]
        return d


@dataclass(frozen=True)
class DisorderReport:
    """Ours and the baselines on the same delays; ``to_dict`` is the CLI's JSON."""

    parameters: dict[str, Any]
    stream: dict[str, float]
    lambda_thr: float
    methods: dict[str, MethodReport]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"parameters": dict(self.parameters), **self.stream}
        out["lambda_thr"] = self.lambda_thr
        out.update({name: m.to_dict() for name, m in self.methods.items()})
        return out


def _downsample(points: list[tuple[float, float]], limit: int = 200) -> list[tuple[float, float]]:
    if len(points) <= limit:
        return points
    idx = np.unique(np.linspace(0, len(points) - 1, limit).round().astype(int))
    return [points[i] for i in idx]


def cumulative_accuracy(
    rows: list[ResultRow], truth: dict[tuple[int, str], float], eps: float, t0: float
) -> list[tuple[float, float]]:
    """Accuracy over time: share of results of closed windows that are within ``eps``.

    A (window, sensor) of ``truth`` counts from the first output of its window
    (no value yet = wrong) and uses its latest version at each moment.
    """
    per_window: dict[int, int] = {}
    for j, _ in truth:
        per_window[j] = per_window.get(j, 0) + 1
    entered: set[int] = set()
    correct: dict[tuple[int, str], bool] = {}
    n_in = n_ok = 0
    series: list[tuple[float, float]] = []
    for j, _, _, sensor, value, _, _, _, at in rows:
        if j not in per_window:
            continue
        if j not in entered:
            entered.add(j)
            n_in += per_window[j]
        ok = abs(value - truth[(j, sensor)]) <= eps
        n_ok += int(ok) - int(correct.get((j, sensor), False))
        correct[(j, sensor)] = ok
        point = (at - t0, n_ok / n_in)
        if series and series[-1][0] == point[0]:
            series[-1] = point  # several results at one instant: keep the state after all
        else:
            series.append(point)
    return _downsample(series)


def summarise_method(
    proc: DisorderProcessor,
    rows: list[ResultRow],
    n_late: int,
    truth_frame: pd.DataFrame,
    eps: float,
    t0: float,
) -> MethodReport:
    """Latency, K, accuracy and correction figures of one finished replay."""
    complete = truth_frame[truth_frame["count"] == proc.buffer.config.window]
    truth = {
        (int(j), str(s)): float(v)
        for j, s, v in complete[["window", "sensor", "value"]].itertuples(index=False)
    }
    first: dict[tuple[int, str], float] = {}
    provisional: dict[tuple[int, str], float] = {}
    last: dict[tuple[int, str], float] = {}
    for j, _, end, sensor, value, kind, _, _, at in rows:
        key = (j, sensor)
        first.setdefault(key, at - end)
        if kind == "provisional":
            provisional[key] = value
        last[key] = value
    keys = list(truth)
    tol = 1e-9
    prov_ok = [key in provisional and abs(provisional[key] - truth[key]) <= eps for key in keys]
    final_ok = [key in last and abs(last[key] - truth[key]) <= eps for key in keys]
    exact = [
        key in last and math.isclose(last[key], truth[key], rel_tol=tol, abs_tol=tol)
        for key in keys
    ]
    buf = proc.buffer
    ks = [k for _, k in buf.k_series] or [0.0]
    coverage = [c for _, c, _, _ in buf.coverage_series]
    return MethodReport(
        avg_latency_s=float(np.mean([first[key] for key in keys if key in first]))
        if keys
        else math.nan,
        avg_k_s=buf.k_sum / max(buf.n_pushed, 1),
        max_k_s=float(max(ks)),
        provisional_accuracy=float(np.mean(prov_ok)) if keys else math.nan,
        final_accuracy=float(np.mean(final_ok)) if keys else math.nan,
        final_exact=float(np.mean(exact)) if keys else math.nan,
        corrections=proc.ledger.n_corrections,
        batch_runs=proc.ledger.n_batches,
        reopened_final=proc.ledger.n_reopened,
        late_tuples=n_late,
        late_ratio=n_late / max(buf.n_pushed, 1),
        mean_coverage=float(np.mean(coverage)) if coverage else math.nan,
        k_over_time=_downsample([(t - t0, k) for t, k in buf.k_series]),
        cumulative_accuracy=cumulative_accuracy(rows, truth, eps, t0),
        alpha_over_time=_downsample([(t - t0, a) for t, _, _, a in buf.coverage_series]),
    )


def replay(
    config: DisorderConfig,
    times_s: list[float],
    sensors: list[str],
    values: list[float],
    arrivals: list[float],
) -> tuple[DisorderProcessor, list[ResultRow], list[LateItem]]:
    """Run one method over tuples already in arrival order; returns rows and late tuples.

    A tuple's ``tag`` is its position in the arrival order.
    """
    proc = DisorderProcessor(config)
    rows: list[ResultRow] = []
    late: list[LateItem] = []
    for tag, (ts, sensor, value, arrival) in enumerate(
        zip(times_s, sensors, values, arrivals, strict=True)
    ):
        proc.push(ts, sensor, value, arrival, tag)
        _, new_late, new_rows = proc.drain()
        late.extend(new_late)
        rows.extend(new_rows)
    proc.flush()
    _, new_late, new_rows = proc.drain()
    return proc, rows + new_rows, late + new_late


def describe_stream(times_s: np.ndarray, arrivals: np.ndarray) -> dict[str, float]:
    """Disorder of a replayed stream (arrays in arrival order): late ratio and delays.

    ``late_ratio`` is the share of tuples that arrive after a tuple with a
    later event time (out of order); lateness is measured against that maximum.
    """
    t = np.asarray(times_s, dtype=float)
    seen = np.maximum.accumulate(t)
    lateness = np.concatenate([[0.0], np.maximum(0.0, seen[:-1] - t[1:])])
    delay = np.asarray(arrivals, dtype=float) - t
    return {
        "late_ratio": float(np.mean(lateness > 0)),
        "max_delay_s": float(delay.max()),
        "mean_delay_s": float(delay.mean()),
        "median_delay_s": float(np.median(delay)),
        "max_lateness_s": float(lateness.max()),
        "n_tuples": int(t.size),
    }


@dataclass(frozen=True, eq=False)
class ReplayStream:
    """A history flattened into tuples in arrival order: (N,) arrays and the interval (s)."""

    times: np.ndarray
    sensors: np.ndarray
    values: np.ndarray
    arrivals: np.ndarray
    interval_s: float

    def lists(self) -> tuple[list[float], list[str], list[float], list[float]]:
        return (
            self.times.tolist(),
            self.sensors.tolist(),
            self.values.tolist(),
            self.arrivals.tolist(),
        )


def make_replay_stream(history: Any, delays: DelayModel, rng: np.random.Generator) -> ReplayStream:
    """Draw one delay per reading of a ``SensorHistory`` and order the tuples by arrival.

    Ties are broken by event time, then sensor name (the stage's order).
    """
    stamps = np.asarray(history.times).astype("datetime64[ns]").view(np.int64) / 1e9
    if stamps.size < 2:
        raise ParameterError(f"need at least 2 readings to replay, got {stamps.size}")
    n = len(history.sensors)
    times = np.repeat(stamps, n)
    sensors = np.tile(np.asarray(history.sensors, dtype=object), stamps.size)
    values = np.asarray(history.values, dtype=float).ravel()
    arrivals = times + delays.sample(times.size, rng)
    order = np.lexsort((sensors.astype(str), times, arrivals))
    interval = float(np.median(np.diff(stamps)))
    return ReplayStream(times[order], sensors[order], values[order], arrivals[order], interval)


def evaluate(
    config: DisorderConfig, stream: ReplayStream, truth: pd.DataFrame
) -> tuple[MethodReport, DisorderProcessor, list[ResultRow], list[LateItem]]:
    """Replay ``stream`` through one configuration and summarise it against ``truth``.

    Returns the report, the finished processor, its result rows and late tuples.
    """
    proc, rows, late = replay(config, *stream.lists())
    report = summarise_method(
        proc, rows, len(late), truth, config.eps_thr, float(stream.arrivals[0])
    )
    return report, proc, rows, late


def run_disorder_experiment(
    history: Any,
    delays: str | DelayModel,
    eps_thr: float,
    delta: float,
    window: int,
    aggregate: str = "avg",
    *,
    rng: np.random.Generator,
    slide: int | None = None,
    gamma: float | None = None,
    fixed_k_s: float | None = None,
    store_path: str | Path | None = None,
    **controller: Any,
) -> DisorderReport:
    """Replay a history out of order and run ours and the three baselines on it.

    Parameters
    ----------
    history : a ``SensorHistory`` (times (T,), values (T, n), sensors).
    delays : a delay spec (``engine.delays.parse_delays``) or a delay model.
    eps_thr, delta : quality target of the provisional results.
    window, slide : in readings (``slide=None``: tumbling).
    gamma : batch trigger in readings of event time (``None``: one window).
    fixed_k_s : the fixed watermark's ``K`` in seconds (``None``: one window width).
    store_path : if given, ours' late tuples and result rows are recorded in
        this DuckDB backup store (``late`` and ``results`` tables, one new run).
    controller : other ``DisorderConfig`` fields for ours (``kp``, ``kd``,
        ``alpha0``, ``alpha_max``, ``target_model``, ``control_tuples``, ...).
    rng : draws the delays.

    Every method sees the same tuples in the same arrival order.
    """
    model = parse_delays(delays) if isinstance(delays, str) else delays
    stream = make_replay_stream(history, model, rng)
    gamma_s = None if gamma is None else gamma * stream.interval_s
    base = DisorderConfig.from_dict(
        {
            "window": window, "slide": slide, "interval_s": stream.interval_s,
            "origin_s": float(stream.times.min()), "aggregate": aggregate, "eps_thr": eps_thr,
            "delta": delta, "gamma_s": gamma_s, **controller,
        }
    )  # fmt: skip
    fixed = base.width_s if fixed_k_s is None else fixed_k_s
    truth = window_truth(stream.times, stream.sensors, stream.values, base)
    methods: dict[str, MethodReport] = {}
    lambda_thr = math.nan
    for name, policy in METHODS.items():
        config = replace(base, policy=policy, fixed_k_s=fixed if policy == "fixed" else 0.0)
        methods[name], proc, rows, late = evaluate(config, stream, truth)
        if name == "ours":
            lambda_thr = proc.buffer.target.lambda_thr() or math.nan
            if store_path is not None:
                from engine.stream.disorder_stage import record_to_store

                record_to_store(store_path, late, rows)
    skip = ("policy", "origin_s", "fixed_k_s", "gamma_s")
    parameters = {k: v for k, v in base.to_dict().items() if k not in skip}
    parameters.update(
        delays=model.describe(),
        slide=base.slide or window,
        fixed_k_s=fixed,
        gamma_s=base.gamma,
        n_rows=int(np.asarray(history.times).size),
        n_sensors=len(history.sensors),
        evaluated_results=int((truth["count"] == window).sum()),
    )
    return DisorderReport(
        parameters, describe_stream(stream.times, stream.arrivals), lambda_thr, methods
    )
