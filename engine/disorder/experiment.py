"""The disorder experiment: replay a history out of order, run ours and the baselines.

``run_disorder_experiment`` draws one arrival delay per reading, replays the
same arrival order through the hybrid processor (``engine.disorder.ledger``)
under each policy of ``METHODS`` and summarises latency, ``K``, provisional
and final accuracy and corrections against ``window_truth``, the aggregate of
every window over all its tuples (the in-order truth, and the batch
recomputation from a complete history that the ledger must equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from engine.aggregates import get_aggregate
from engine.disorder.config import DisorderConfig
from engine.disorder.delays import DelayModel, parse_delays
from engine.disorder.items import LateItem
from engine.disorder.ledger import DisorderProcessor, ResultRow
from engine.errors import ParameterError
from engine.partial_state import grouped_partials
from engine.query import check_window_fits

# Called with ours' late tuples and result rows of a replay (see ``run_disorder_experiment``).
Recorder = Callable[[Sequence[LateItem], Sequence[ResultRow]], object]

# Tuples between two calls of a replay's progress (about half a second of replay).
STEP_TUPLES = 10_000

METHODS: dict[str, str] = {
    "ours": "adaptive",
    "mp_kslack": "mp_kslack",
    "fixed_watermark": "fixed",
    "no_buffer": "none",
}


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
    agg = get_aggregate(config.aggregate)
    state = grouped_partials(frame, ["window", "sensor"], "v", agg)
    return pd.DataFrame(
        {
            "window": state["window"],
            "sensor": state["sensor"],
            "count": state["n"],
            "value": agg.finish(state),
        }
    )


@dataclass(frozen=True)
class MethodReport:
    """Metrics of one method on the replayed stream (times in seconds).

    ``avg_latency_s`` is over the scored windows closed while the stream ran;
    ``flush_closed_windows`` counts the scored windows still open when it ended, closed
    at the last arrival's clock and left out of it (a straggler arriving days late would
    otherwise add days to their latency, and a stream that simply ends would take some
    off). NaN when every scored window was still open. Methods compared side by side
    (``run_disorder_experiment``, ``on_common_windows``) leave out the windows any of them
    left open, so each latency is over the same windows.
    """

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
    flush_closed_windows: int = 0

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
    first = first_latencies(rows)
    provisional: dict[tuple[int, str], float] = {}
    last: dict[tuple[int, str], float] = {}
    for j, _, _, sensor, value, kind, _, _, _ in rows:
        key = (j, sensor)
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
    flushed = set(buf.flushed_windows)
    return MethodReport(
        avg_latency_s=mean_latency(first, keys, flushed),
        flush_closed_windows=len({j for j, _ in keys if j in flushed}),
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


def first_latencies(rows: list[ResultRow]) -> dict[tuple[int, str], float]:
    """(window, sensor) -> seconds from the window's end to its first result."""
    first: dict[tuple[int, str], float] = {}
    for j, _, end, sensor, _, _, _, _, at in rows:
        first.setdefault((j, sensor), at - end)
    return first


def mean_latency(
    first: dict[tuple[int, str], float], keys: list[tuple[int, str]], left_out: set[int]
) -> float:
    """Mean first-result latency over the scored ``keys`` of windows not ``left_out``;
    NaN when none is left."""
    timed = [first[key] for key in keys if key in first and key[0] not in left_out]
    return float(np.mean(timed)) if timed else math.nan


def on_common_windows(
    runs: dict[str, tuple[MethodReport, DisorderProcessor, list[ResultRow]]],
    truth: pd.DataFrame,
) -> dict[str, MethodReport]:
    """Each method's report with its latency over the same windows as every other's: those
    no method left open when the stream ended. Each method leaves its own open windows
    out (``summarise_method``), and a method that holds windows longer leaves more:
    compared so, two latencies are means over different windows."""
    window = next(iter(runs.values()))[1].buffer.config.window
    complete = truth[truth["count"] == window]
    keys = [(int(j), str(s)) for j, s in complete[["window", "sensor"]].itertuples(index=False)]
    left_out = set().union(*(set(p.buffer.flushed_windows) for _, p, _ in runs.values()))
    n_left = len({j for j, _ in keys if j in left_out})
    return {
        name: replace(
            report,
            avg_latency_s=mean_latency(first_latencies(rows), keys, left_out),
            flush_closed_windows=n_left,
        )
        for name, (report, _, rows) in runs.items()
    }


def replay(
    config: DisorderConfig,
    times_s: list[float],
    sensors: list[str],
    values: list[float],
    arrivals: list[float],
    step: Callable[[float], None] | None = None,
) -> tuple[DisorderProcessor, list[ResultRow], list[LateItem]]:
    """Run one method over tuples already in arrival order; returns rows and late tuples.

    A tuple's ``tag`` is its position in the arrival order. ``step`` is called with the
    share of tuples replayed every ``STEP_TUPLES`` (a caller's progress, which may raise
    to cancel).
    """
    proc = DisorderProcessor(config)
    rows: list[ResultRow] = []
    late: list[LateItem] = []
    n = len(times_s)
    for tag, (ts, sensor, value, arrival) in enumerate(
        zip(times_s, sensors, values, arrivals, strict=True)
    ):
        if step is not None and tag % STEP_TUPLES == 0:
            step(tag / max(n, 1))
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
    config: DisorderConfig,
    stream: ReplayStream,
    truth: pd.DataFrame,
    step: Callable[[float], None] | None = None,
) -> tuple[MethodReport, DisorderProcessor, list[ResultRow], list[LateItem]]:
    """Replay ``stream`` through one configuration and summarise it against ``truth``.

    Returns the report, the finished processor, its result rows and late tuples.
    """
    proc, rows, late = replay(config, *stream.lists(), step=step)
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
    record: Recorder | None = None,
    progress: Callable[[float, str], None] | None = None,
    **controller: Any,
) -> DisorderReport:
    """Replay a history out of order and run ours and the three baselines on it.

    Parameters
    ----------
    history : a ``SensorHistory`` (times (T,), values (T, n), sensors).
    delays : a delay spec (``engine.disorder.delays.parse_delays``) or a delay model.
    eps_thr, delta : quality target of the provisional results.
    window, slide : in readings (``slide=None``: tumbling).
    gamma : batch trigger in readings of event time (``None``: one window).
    fixed_k_s : the fixed watermark's ``K`` in seconds (``None``: one window width).
    record : if given, called with ours' late tuples and result rows (for example
        ``engine.live.offline.record_replay`` into a live store).
    progress : if given, called with the share done and a message every
        ``STEP_TUPLES`` tuples of each method's replay (it may raise to cancel).
    controller : other ``DisorderConfig`` fields for ours (``kp``, ``kd``,
        ``alpha0``, ``alpha_max``, ``target_model``, ``control_tuples``, ...).
    rng : draws the delays.

    Every method sees the same tuples in the same arrival order. A window longer than
    the history is refused, as ``plan`` refuses it: no result could be scored.
    """
    if isinstance(window, int) and not isinstance(window, bool):  # else DisorderConfig says
        check_window_fits(window, int(np.asarray(history.times).size))
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
    runs: dict[str, tuple[MethodReport, DisorderProcessor, list[ResultRow]]] = {}
    lambda_thr = math.nan
    for i, (name, policy) in enumerate(METHODS.items()):
        config = replace(base, policy=policy, fixed_k_s=fixed if policy == "fixed" else 0.0)

        def step(done: float, i: int = i, name: str = name) -> None:
            if progress is not None:
                progress((i + done) / len(METHODS), f"replaying with {name}")

        report, proc, rows, late = evaluate(config, stream, truth, step)
        runs[name] = (report, proc, rows)
        if name == "ours":
            lambda_thr = proc.buffer.target.lambda_thr() or math.nan
            if record is not None:
                record(late, rows)
    methods = on_common_windows(runs, truth)
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
