"""The shadow-monitored honesty protocol (``bench/honesty_live.py``) on tiny data, so it
cannot rot: the product's monitor alerts on a sensor that stops following the model, its
re-planner plans again, and every rebuilt window is scored, those before the alert too."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.bench_honesty import recover_from_config, tumbling
from bench.honesty_live import run_live_fold
from engine.data.history import history_from_frame
from engine.export import json_safe, plan_to_config
from engine.planning import make_plan
from engine.planning.parameters import PlanParameters
from engine.query import WindowQuery

H, S, W = 600, 200, 4  # history, horizon (50 windows) and window, in hourly rows


def recording(drift_from: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``a`` a random walk, ``b`` and ``c`` follow it closely; ``c`` leaves it at row
    ``drift_from`` (3 above, for good)."""
    rng = np.random.default_rng(7)
    a = np.cumsum(rng.normal(0, 1, H + S))
    b = a + rng.normal(0, 0.05, H + S)
    c = a + rng.normal(0, 0.05, H + S)
    c[drift_from:] += 3.0
    times = np.datetime64("2026-01-01T00:00") + np.arange(H + S) * np.timedelta64(1, "h")
    return times, np.column_stack([a, b, c]), ["a", "b", "c"]


def version_one(
    times: np.ndarray, values: np.ndarray, sensors: list[str], eps_c: float | None = None
) -> dict:
    """The CLI's plan on the first ``H`` rows, eps 1 (``eps_c``: ``c``'s own, as an eps
    per unit gives a sensor of another unit)."""
    frame = pd.DataFrame(values[:H], columns=sensors)
    frame.insert(0, "time", times[:H])
    own = () if eps_c is None else (("c", eps_c),)
    params = PlanParameters(WindowQuery(1.0, 0.05, W, horizon=S, eps_by_sensor=own))
    config = json_safe(plan_to_config(make_plan(history_from_frame(frame), params)))
    assert config["backup_sensors"] == ["a"], config["backup_sensors"]  # b and c rebuilt
    return config


def test_an_alert_replans_and_the_misses_before_it_are_scored() -> None:
    times, values, sensors = recording(drift_from=H)
    config = version_one(times, values, sensors)
    live = run_live_fold(config, times, values, sensors, H, S, W, "avg")
    # Applied alone for the horizon, the plan misses c's every window.
    alone, _ = recover_from_config(config, values[H:], sensors)
    assert np.all(np.abs(tumbling(alone, W, "avg") - tumbling(values[H:], W, "avg"))[:, 2] > 1)
    first = live["replans"][0]
    assert first["alerted"] == ["c"]
    assert first["window"] == 9  # the monitor's 10 windows, every one a miss
    misses, pairs = (
        dict(zip(sensors, live["misses"], strict=False)),
        dict(zip(sensors, live["pairs"], strict=False)),
    )
    assert misses["c"] >= 10  # the windows before the alert count
    assert misses["c"] < S // W  # and the re-plans stopped the misses before the end
    assert (misses["b"], pairs["b"]) == (0, S // W)  # b stays rebuilt, within eps
    assert pairs["a"] == 0
    assert 1.0 <= live["backup"] < 3.0  # mean backup size over the windows


def test_no_alert_no_replan_same_score_as_the_plan_alone() -> None:
    times, values, sensors = recording(drift_from=H + S)  # c never leaves
    config = version_one(times, values, sensors)
    live = run_live_fold(config, times, values, sensors, H, S, W, "avg")
    assert live["replans"] == [] and live["backup"] == 1.0
    alone, rebuilt = recover_from_config(config, values[H:], sensors)
    miss = np.abs(tumbling(alone, W, "avg") - tumbling(values[H:], W, "avg")) > 1.0
    assert list(live["misses"]) == list(np.where(rebuilt, miss.sum(axis=0), 0))
    assert list(live["pairs"]) == [0, S // W, S // W]


def test_each_sensor_is_scored_and_watched_against_its_own_eps() -> None:
    # c leaves the model by 3 for good, within its own eps of 5 (another unit's): no
    # window of c misses, so nothing alerts; scored against the common eps of 1, every
    # one of c's windows would miss and the monitor would re-plan.
    times, values, sensors = recording(drift_from=H)
    config = version_one(times, values, sensors, eps_c=5.0)
    live = run_live_fold(config, times, values, sensors, H, S, W, "avg")
    assert live["replans"] == []
    assert list(live["misses"]) == [0, 0, 0]
    assert list(live["pairs"]) == [0, S // W, S // W]
