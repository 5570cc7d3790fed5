"""A new aggregate is one class registered in ``AGGREGATES``.

This file adds one for its own tests only, the range (max - min) of a window, and
runs it through the production job's partials (merged across micro-batches, shadow
check of the rebuilt sensors) and the live pipeline's per-batch windows, each against
a brute-force reference; the config schema, the query and the CLI's help take it from
the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.aggregates import AGGREGATES, Aggregate
from engine.cli_parser import build_parser
from engine.export import load_schema
from engine.job.partials import (
    FIRST,
    STORED,
    WindowState,
    partial_columns,
    rebuild_window_partials,
    recovered_partials,
    shadow_results,
)
from engine.live.batch import WindowParams, advance_windows, shadow_errors
from engine.live.batch import WindowState as LiveState
from engine.partial_state import Field, grouped_partials
from engine.query import WindowQuery
from tests.helpers import fit_map
from tests.production_reference import BACKUP, long_readings, sample_rows

HOUR_US = 3_600_000_000


@dataclass(frozen=True)
class Range(Aggregate):
    """The spread of a window's readings: its max minus its min."""

    def finish(self, state: Mapping[str, Any], window: int | None = None) -> Any:
        return state["high"] - state["low"]


RANGE = Range("range", (Field("high", "max"), Field("low", "min")))


@pytest.fixture(autouse=True)
def _registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGGREGATES, RANGE.name, RANGE)


def spread(x: np.ndarray) -> np.ndarray:
    return x.max(axis=0) - x.min(axis=0)


def test_the_registry_is_what_every_layer_asks() -> None:
    query = WindowQuery(1.0, 0.05, 8, 4, "range")
    assert query.aggregate == "range"
    enum = load_schema()["properties"]["parameters"]["properties"]["aggregate"]["enum"]
    assert enum == ["avg", "sum", "max", "min", "range"]
    assert "avg, sum, max, min, range" in _plan_help()


def _plan_help() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["plan"].format_help()  # type: ignore[attr-defined]


def _job_partials(long: pd.DataFrame, lm: Any, window_h: int, slide_h: int) -> pd.DataFrame:
    """One batch's partials as the executors compute them: the readings' state per
    (window, sensor) and, the range not being linear, the rebuilt readings' state."""
    t = long["event_time"].to_numpy().astype("datetime64[us]").astype(np.int64)
    parts = []
    for j in range(-(-window_h // slide_h)):
        start = t - t % (slide_h * HOUR_US) - j * slide_h * HOUR_US
        keep = start + window_h * HOUR_US > t
        parts.append(long[keep].assign(window_start=start[keep]))
    w = pd.concat(parts, ignore_index=True)
    w["window_end"] = w["window_start"] + window_h * HOUR_US
    keys = ["window_start", "window_end", "sensor"]
    truth = grouped_partials(w, keys, "value", RANGE).assign(
        rebuilt_n=0, rebuilt_high=np.nan, rebuilt_low=np.nan
    )
    backups = w[w["sensor"].isin(lm.backup)]
    rebuilt = [rebuild_window_partials(g, lm, "range") for _, g in backups.groupby("window_start")]
    truth[STORED], truth[FIRST] = 0, 1
    parts = pd.concat([truth, *rebuilt], ignore_index=True)[partial_columns("range")]
    return recovered_partials(parts, lm.backup, lm, "range", 1)  # the driver's step


def test_the_job_merges_a_new_aggregates_partials_into_the_brute_force_windows() -> None:
    rows = sample_rows(48)
    lm = fit_map(rows.values, rows.sensors, BACKUP)
    long, n = long_readings(rows), len(rows.sensors)
    window_h, slide_h, eps = 8, 4, 0.5
    state, results = WindowState("range"), []
    for lo, hi in [(0, 5), (5, 6), (6, 23), (23, 41), (41, 48)]:
        batch = long.iloc[lo * n : hi * n]
        latest = int(batch["event_time"].max().value // 1000)
        closed = state.merge(_job_partials(batch, lm, window_h, slide_h), latest, 0)
        if len(closed):
            results.append(shadow_results(closed[closed["n"] > 0], "range", eps))
    got = pd.concat(results, ignore_index=True).set_index(["window_start", "sensor"])
    # brute force: every epoch-aligned window that closed, from the rows inside it
    rebuilt = lm.apply(rows.values[:, [rows.sensors.index(b) for b in lm.backup]])
    us = rows.times.astype("datetime64[us]").astype(np.int64)
    step, width, checked = slide_h * HOUR_US, window_h * HOUR_US, 0
    for k in range((us.min() - width) // step + 1, us.max() // step + 1):
        s_us = int(k * step)
        if s_us + width > us.max():  # not closed: the watermark is the latest reading
            continue
        inside = (us >= s_us) & (us < s_us + width)
        true, rec = spread(rows.values[inside]), spread(rebuilt[inside])
        for j, sensor in enumerate(rows.sensors):
            row = got.loc[(s_us, sensor)]
            assert row["n"] == inside.sum()
            assert row["value"] == pytest.approx(true[j], abs=1e-9)
            want = true[j] if sensor in lm.backup else rec[j]
            assert row["rebuilt"] == pytest.approx(want, rel=1e-7, abs=1e-7)
            assert row["miss"] == (abs(want - true[j]) > eps)
            checked += 1
    assert checked == len(got) > 0


def _feed(values: np.ndarray, sensors: tuple[str, ...]) -> pd.DataFrame:
    t, n = values.shape
    times = pd.date_range("2024-01-01", periods=t, freq="h").to_numpy()
    return pd.DataFrame(
        {
            "seq": np.repeat(np.arange(t), n),
            "event_time": np.repeat(times, n),
            "arrival_time": np.repeat(times, n),
            "sensor": np.tile(np.asarray(sensors, dtype=object), t),
            "value": values.reshape(-1),
        }
    )


def test_the_live_pipeline_windows_a_new_aggregate_as_brute_force_does() -> None:
    rows = sample_rows(61)
    lm = fit_map(rows.values, rows.sensors, BACKUP)
    params = WindowParams.of(rows.sensors, WindowQuery(1.0, 0.05, 6, 2, "range"))
    frame = _feed(rows.values, rows.sensors)
    rng = np.random.default_rng(3)
    cuts = np.sort(rng.choice(np.arange(1, len(frame)), size=8, replace=False))
    state = LiveState.empty(len(rows.sensors))
    ids, aggs, errors = [], [], []
    for piece in np.split(np.arange(len(frame)), cuts):
        advance = advance_windows(state, frame.iloc[rng.permutation(piece)], params)
        state = advance.state
        ids.append(advance.closed.ids)
        aggs.append(advance.closed.aggregates)
        errors.append(shadow_errors(advance.closed, params, lm))
    starts = np.arange(0, 61 - 6 + 1, 2)
    rebuilt = lm.apply(rows.values[:, [rows.sensors.index(b) for b in lm.backup]])
    want = np.array([spread(rows.values[s : s + 6]) for s in starts])
    want_errors = np.abs(np.array([spread(rebuilt[s : s + 6]) for s in starts]) - want)
    np.testing.assert_array_equal(np.concatenate(ids), np.arange(len(starts)))
    np.testing.assert_allclose(np.vstack(aggs), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.vstack(errors), want_errors, rtol=1e-9, atol=1e-9)
