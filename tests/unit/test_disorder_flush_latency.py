"""The disorder experiment's latency leaves out the windows the end-of-stream flush
closed: they close at the last arrival's clock, so a straggler arriving long after the
stream's end made the fixed watermark's average latency several times its K."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from engine.data import load_history
from engine.disorder import DisorderConfig, parse_delays
from engine.disorder.buffer import KSlackBuffer
from engine.disorder.experiment import (
    METHODS,
    evaluate,
    make_replay_stream,
    on_common_windows,
    run_disorder_experiment,
    window_truth,
)
from engine.query import WindowQuery

DRIFT = Path(__file__).resolve().parents[2] / "sample_data" / "synthetic_drift.csv"
K = 1800.0


def fixed_watermark(stream, k: float) -> DisorderConfig:
    origin = float(stream.times.min())
    query = WindowQuery(0.5, 0.05, 30)
    return DisorderConfig(
        query, interval_s=stream.interval_s, origin_s=origin, policy="fixed", fixed_k_s=k
    )


def test_a_straggler_after_the_stream_does_not_inflate_the_latency() -> None:
    """One reading in 2,000 arrives 200,000 s late; the fixed watermark of K = 1,800 s
    closes every window about K after its end while the stream runs, but the last
    windows wait for the straggler, at the flush (their latency in the average made it
    4,605 s)."""
    history = load_history(DRIFT).rows(0, 2000)
    delays = parse_delays("mix:0.9995,exp:120,const:200000")
    stream = make_replay_stream(history, delays, np.random.default_rng(0))
    config = fixed_watermark(stream, K)
    truth = window_truth(stream.times, stream.sensors, stream.values, config)
    report, proc, _, _ = evaluate(config, stream, truth)
    assert K <= report.avg_latency_s < K + 300
    assert report.flush_closed_windows >= 1
    assert set(proc.buffer.flushed_windows) <= set(truth["window"])
    assert report.to_dict()["flush_closed_windows"] == report.flush_closed_windows


def test_every_window_closed_at_the_flush_leaves_no_latency_to_report() -> None:
    history = load_history(DRIFT).rows(0, 300)
    stream = make_replay_stream(history, parse_delays("exp:60"), np.random.default_rng(1))
    config = fixed_watermark(stream, 10 * float(stream.times.max() - stream.times.min()))
    truth = window_truth(stream.times, stream.sensors, stream.values, config)
    report, _, _, _ = evaluate(config, stream, truth)
    assert math.isnan(report.avg_latency_s)
    assert report.flush_closed_windows == int(truth["window"][truth["count"] == 30].nunique())
    assert report.final_exact == 1.0  # the results are all there: only their timing is not


def test_the_flushed_windows_survive_a_snapshot() -> None:
    history = load_history(DRIFT).rows(0, 120)
    stream = make_replay_stream(history, parse_delays("exp:60"), np.random.default_rng(2))
    buffer = KSlackBuffer(fixed_watermark(stream, 1e6))
    for ts, sensor, value, arrival in zip(*stream.lists(), strict=True):
        buffer.push(ts, sensor, value, arrival)
    assert buffer.flushed_windows == []
    buffer.flush()
    assert buffer.flushed_windows == sorted(buffer.flushed_windows) != []
    snap = json.loads(json.dumps(buffer.snapshot()))
    assert KSlackBuffer.restore(snap).flushed_windows == buffer.flushed_windows
    del snap["flushed_windows"]  # a snapshot from before: none
    assert KSlackBuffer.restore(snap).flushed_windows == []


def test_methods_are_compared_on_the_same_windows() -> None:
    """Each method leaves out the windows it left open at the end, and MP-K-slack, which
    holds windows longer, leaves out more: their latencies were means over different
    windows. Side by side, every method's is over the windows none left open."""
    history = load_history(DRIFT).rows(0, 1500)
    delays = parse_delays("mix:0.99,exp:300,const:20000")
    report = run_disorder_experiment(history, delays, 0.5, 0.05, 30, rng=np.random.default_rng(3))
    counts = {m.flush_closed_windows for m in report.methods.values()}
    assert len(counts) == 1 and counts.pop() >= 1
    stream = make_replay_stream(history, delays, np.random.default_rng(3))
    config = fixed_watermark(stream, K)
    truth = window_truth(stream.times, stream.sensors, stream.values, config)
    runs = {}
    for name in ("ours", "mp_kslack"):
        one = replace(config, policy=METHODS[name], fixed_k_s=0.0)
        got, proc, rows, _ = evaluate(one, stream, truth)
        runs[name] = (got, proc, rows)
    own = {name: set(proc.buffer.flushed_windows) for name, (_, proc, _) in runs.items()}
    assert own["ours"] != own["mp_kslack"]  # each alone would be over other windows
    both = on_common_windows(runs, truth)
    assert both["ours"].flush_closed_windows == both["mp_kslack"].flush_closed_windows
    assert both["ours"].flush_closed_windows >= max(
        r.flush_closed_windows for r, _, _ in runs.values()
    )
    assert both["ours"].avg_latency_s == report.methods["ours"].avg_latency_s
