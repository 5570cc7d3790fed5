"""Disorder benchmark: our adaptive K-slack against MP-K-slack, a fixed watermark and no buffer.

Replays the 12 ``*_PM2.5`` sensors of the Beijing multi-site data (hourly; NaN
filled by linear interpolation in time) with real arrival delays resampled
from the UMTS out-of-order event log (``server_receive_ms - event_time_ms``),
scaled by ``--scale`` (default 250000: the log's 0.1 s median becomes ~7 h, its
5.5 s maximum ~16 days) so that, against hourly readings and day-long
windows, most tuples arrive out of order and without a buffer ~17 % of them
miss their window. Every method sees the same tuples in the same order.

Scenarios (one run): daily tumbling windows over 2000 rows; the same with a
6-hour slide (the seed's window/slide shape); tumbling over a year (8760 rows)
and over the whole data set (35,064 rows, four years) to show the controller
after its start-up. Each also reports three labelled
ablations of ours: the seed's random-sample target (``target_model=srs``),
``kd=0``, and both together. The first scenario also sweeps a fixed watermark's ``K``: a fixed
``K`` has no quality control, so whether it meets ``(eps_thr, delta)`` and at
what latency depends on a constant chosen in advance.

Usage::

    .venv/bin/python bench/bench_disorder.py [--scale 250000] [--eps-thr 10] \
        [--delta 0.05] [--window 24] [--agg avg] [--seed 0] [--quick] [--series]

Prints one JSON object. Reads ``../shared/datasets`` (benchmarks only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import datasets_dir  # noqa: E402
from engine.data.history import history_from_frame  # noqa: E402
from engine.disorder.buffer import DisorderConfig  # noqa: E402
from engine.disorder.delays import parse_delays  # noqa: E402
from engine.disorder.experiment import (  # noqa: E402
    METHODS,
    evaluate,
    make_replay_stream,
    on_common_windows,
    run_disorder_experiment,
    window_truth,
)
from engine.query import WindowQuery  # noqa: E402

DATASETS = datasets_dir()
BEIJING = DATASETS / "beijing_multisite_aq" / "wide.csv"
UMTS = DATASETS / "ooo_events_umts" / "events.csv"
SERIES = ("k_over_time", "cumulative_accuracy", "alpha_over_time")
SCENARIOS = (
    ("tumbling_2000_rows", 2000, None),
    ("sliding_6h_2000_rows", 2000, 6),
    ("tumbling_8760_rows", 8760, None),
    ("tumbling_all_35064_rows", 35064, None),
)
SUMMARY = ("avg_latency_s", "avg_k_s", "provisional_accuracy", "final_accuracy", "corrections")


def load_pm25(rows: int):  # type: ignore[no-untyped-def]
    frame = pd.read_csv(BEIJING, nrows=rows)
    columns = [c for c in frame.columns if c.endswith("_PM2.5")]
    data = frame[["timestamp", *columns]].rename(columns={"timestamp": "time"})
    return history_from_frame(data, source="beijing_multisite_aq/wide.csv (PM2.5)")


def side_runs(history, slide: int | None, args: argparse.Namespace, sweep: bool) -> dict:  # type: ignore[no-untyped-def]
    """Ablations of ours and the fixed-watermark sweep, on the experiment's exact stream."""
    stream = make_replay_stream(
        history, parse_delays(args.delays), np.random.default_rng(args.seed)
    )
    query = WindowQuery(args.eps_thr, args.delta, args.window, slide=slide, aggregate=args.agg)
    base = DisorderConfig(query, interval_s=stream.interval_s, origin_s=float(stream.times.min()))
    truth = window_truth(stream.times, stream.sensors, stream.values, base)
    out: dict = {}
    ablations = (
        ("ours_srs_target", {"target_model": "srs"}),
        ("ours_kd_0", {"kd": 0.0}),
        ("ours_srs_target_kd_0", {"target_model": "srs", "kd": 0.0}),
    )
    mp_report, mp_proc, mp_rows, _ = evaluate(
        replace(base, policy=METHODS["mp_kslack"]), stream, truth
    )
    for name, changes in ablations:
        report, proc, rows, _ = evaluate(replace(base, **changes), stream, truth)
        # its latency and MP-K-slack's over the same windows (those neither left open)
        both = on_common_windows(
            {name: (report, proc, rows), "mp_kslack": (mp_report, mp_proc, mp_rows)}, truth
        )
        out[name] = {key: getattr(both[name], key) for key in SUMMARY}
        out[name]["latency_ratio_to_mp_kslack"] = (
            both[name].avg_latency_s / both["mp_kslack"].avg_latency_s
        )
    if sweep:
        out["fixed_watermark_sweep"] = []
        for factor in (0.25, 0.5, 1.0, 2.0, 4.0):
            config = replace(base, policy="fixed", fixed_k_s=factor * base.width_s)
            report, *_ = evaluate(config, stream, truth)
            out["fixed_watermark_sweep"].append(
                {
                    "k_windows": factor,
                    "avg_latency_s": report.avg_latency_s,
                    "provisional_accuracy": report.provisional_accuracy,
                    "meets_target": report.provisional_accuracy >= 1 - args.delta,
                }
            )
    return out


def run_scenario(rows: int, slide: int | None, args: argparse.Namespace, sweep: bool) -> dict:
    history = load_pm25(rows)
    start = time.perf_counter()
    report = run_disorder_experiment(
        history, args.delays, eps_thr=args.eps_thr, delta=args.delta, window=args.window,
        aggregate=args.agg, slide=slide, rng=np.random.default_rng(args.seed),
    )  # fmt: skip
    seconds = time.perf_counter() - start
    d = report.to_dict()
    if not args.series:
        for name in METHODS:
            for key in SERIES:
                d[name].pop(key)
    ours, mp = d["ours"], d["mp_kslack"]
    return {
        "data": f"{history.report.source}: {len(history.sensors)} sensors x {rows} rows",
        "seconds_four_methods": round(seconds, 3),
        "targets": {
            "ours_provisional_accuracy_at_least_1_minus_delta": ours["provisional_accuracy"]
            >= 1 - args.delta,
            "latency_ratio_ours_over_mp_kslack": ours["avg_latency_s"] / mp["avg_latency_s"],
            "latency_ratio_at_most_0.5": ours["avg_latency_s"] <= 0.5 * mp["avg_latency_s"],
            "k_ratio_ours_over_mp_kslack": ours["avg_k_s"] / mp["avg_k_s"],
            "final_accuracy_100_percent": all(d[m]["final_accuracy"] == 1.0 for m in METHODS),
        },
        **d,
        **side_runs(history, slide, args, sweep),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=250_000.0)
    parser.add_argument("--eps-thr", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--window", type=int, default=24)
    parser.add_argument("--agg", default="avg")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="first scenario only")
    parser.add_argument("--series", action="store_true", help="include the chart series")
    args = parser.parse_args()
    args.delays = f"file:{UMTS},scale={args.scale:g}"
    scenarios = SCENARIOS[:1] if args.quick else SCENARIOS
    result = {
        "benchmark": "disorder",
        "delay_source": f"UMTS event log, receive - event time, resampled x{args.scale:g}",
        "quality_target": {"eps_thr": args.eps_thr, "delta": args.delta, "aggregate": args.agg},
        **{
            name: run_scenario(rows, slide, args, sweep=i == 0)
            for i, (name, rows, slide) in enumerate(scenarios)
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
