"""Mergeable window partials against the pure-Python reference, without a JVM.

The per-batch partials are built here with plain pandas (what ``batch_partials``
and ``rebuilt_partials`` compute on Spark; those are checked on Spark in
``tests/spark/test_production_job.py``); merging, closing, replaying and the
shadow check are the job's own code.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from engine.aggregates import get_aggregate
from engine.errors import PipelineError
from engine.job.partials import (
    COUNTS,
    FIRST,
    STORED,
    UNKNOWN,
    WindowState,
    collected_partials,
    partial_columns,
    rebuild_window_partials,
    recovered_partials,
    shadow_results,
)
from engine.partial_state import grouped_partials
from tests.helpers import fit_map
from tests.production_reference import (
    BACKUP,
    Rows,
    long_readings,
    recovered_readings,
    reference_results,
    sample_rows,
)

HOUR_US = 3_600_000_000


def _windowed(long: pd.DataFrame, window_h: int, slide_h: int) -> pd.DataFrame:
    t = long["event_time"].to_numpy().astype("datetime64[us]").astype(np.int64)
    parts = []
    for j in range(-(-window_h // slide_h)):
        start = t - t % (slide_h * HOUR_US) - j * slide_h * HOUR_US
        keep = start + window_h * HOUR_US > t
        parts.append(long[keep].assign(window_start=start[keep], t=t[keep]))
    out = pd.concat(parts, ignore_index=True)
    out["window_end"] = out["window_start"] + window_h * HOUR_US
    return out


def _partials(
    long: pd.DataFrame, lm, aggregate: str, window_h: int, slide_h: int, stored=None, version=1
):
    """One batch's partials as the executors compute them (``batch_partials`` and, for
    an aggregate that is not linear, ``rebuilt_partials``), then as the driver turns
    them into what a recovery returns (``recovered_partials``: ``stored`` exact, the
    plan's set unless given)."""
    w = _windowed(long, window_h, slide_h)
    columns = partial_columns(aggregate)
    agg = get_aggregate(aggregate)
    out = grouped_partials(w, ["window_start", "window_end", "sensor"], "value", agg)
    for name in columns[3:]:
        if name not in out:
            out[name] = 0 if name in COUNTS else np.nan
    if not agg.linear:
        backups = w[w["sensor"].isin(lm.backup)]
        rebuilt = [
            rebuild_window_partials(g, lm, aggregate) for _, g in backups.groupby("window_start")
        ]
        out = pd.concat([out[columns], *rebuilt], ignore_index=True)
    stored = lm.backup if stored is None else stored
    out = recovered_partials(out[columns], stored, lm, aggregate, version)
    return out, int(w["t"].max())


def _run(rows: Rows, aggregate: str, cuts: list[int], window_h=8, slide_h=4, eps=1.0):
    lm = fit_map(rows.values, rows.sensors, BACKUP)
    long = long_readings(rows)
    n = len(rows.sensors)
    state, results = WindowState(aggregate), []
    for lo, hi in zip([0, *cuts], [*cuts, len(rows.times)], strict=True):
        parts, latest = _partials(long.iloc[lo * n : hi * n], lm, aggregate, window_h, slide_h)
        closed = state.merge(parts, latest, 0)
        if len(closed):
            results.append(shadow_results(closed[closed["n"] > 0], aggregate, eps))
    got = pd.concat(results, ignore_index=True)
    got["start_s"] = got["window_start"] // 1_000_000
    want = reference_results(rows, lm, window_h * 3600.0, slide_h * 3600.0, aggregate, eps)
    return got, want


@pytest.mark.parametrize("aggregate", ["avg", "sum", "max", "min"])
def test_merged_partials_equal_the_reference_whatever_the_batches(aggregate: str) -> None:
    rows = sample_rows(60)
    got, want = _run(rows, aggregate, cuts=[5, 6, 23, 41])
    merged = want.merge(got, on=["start_s", "sensor"], suffixes=("_ref", ""), validate="1:1")
    assert len(merged) == len(want) == len(got)
    np.testing.assert_array_equal(merged["n"], merged["n_ref"])
    np.testing.assert_allclose(merged["value"], merged["value_ref"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(merged["rebuilt"], merged["rebuilt_ref"], rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(merged["miss"], merged["miss_ref"])


def _parts_at(hours: list[int], sensor: str = "a", value: float = 1.0) -> pd.DataFrame:
    starts = np.asarray(hours, dtype=np.int64) * HOUR_US
    return pd.DataFrame(
        {
            "window_start": starts,
            "window_end": starts + HOUR_US,
            "sensor": sensor,
            "n": 1,
            "agg": value,
            "rebuilt_n": 0,
            "rebuilt_agg": np.nan,
            STORED: 0,
            FIRST: 1,
        }
    )


def test_a_replayed_batch_from_its_snapshot_is_not_counted_twice() -> None:
    state = WindowState("sum")
    state.merge(_parts_at([0, 1]), HOUR_US, 0)  # closes hour 0, hour 1 stays open
    before = state.snapshot()
    once = WindowState.restore(before).merge(_parts_at([1, 2]), 2 * HOUR_US, 0)
    replayed = WindowState.restore(before).merge(_parts_at([1, 2]), 2 * HOUR_US, 0)
    assert once["n"].tolist() == replayed["n"].tolist() == [2]
    # what starting from the snapshot prevents: the replay merged into the state after it
    twice = WindowState.restore(before)
    assert twice.merge(_parts_at([1, 2]), HOUR_US + 1, 0).empty
    assert twice.merge(_parts_at([1, 2]), 2 * HOUR_US, 0)["n"].tolist() == [3]


def test_late_partials_of_closed_windows_are_dropped_and_state_round_trips() -> None:
    state = WindowState("max")
    closed = state.merge(_parts_at([0, 1, 2]), 2 * HOUR_US, 0)
    assert closed["window_start"].tolist() == [0, HOUR_US]
    late = state.merge(_parts_at([0], value=99.0), 2 * HOUR_US, 0)
    assert late.empty and state.open["window_start"].tolist() == [2 * HOUR_US]
    state.extra = {"monitor": [3, {"a": [1, 12]}]}
    back = WindowState.restore(state.snapshot())
    assert (back.batch_id, back.watermark_us, back.max_event_us) == (-1, 2 * HOUR_US, 2 * HOUR_US)
    pd.testing.assert_frame_equal(back.open, state.open)
    assert back.extra == {"monitor": [3, {"a": [1, 12]}]}
    with pytest.raises(PipelineError, match="unreadable"):
        WindowState.restore(b"not arrow")


def test_a_window_missing_a_backup_sensor_is_not_rebuilt() -> None:
    rows = sample_rows(16)
    lm = fit_map(rows.values, rows.sensors, BACKUP)
    long = long_readings(rows)
    long = long[~((long["sensor"] == lm.backup[0]) & (long.index < 4 * len(rows.sensors)))]
    parts, latest = _partials(long, lm, "avg", 4, 4)
    closed = WindowState("avg").merge(parts, latest, 0)
    out = shadow_results(closed, "avg", 1.0)
    first = out[out["window_start"] == out["window_start"].min()]
    assert first.loc[~first["backed_up"], "rebuilt"].isna().all()
    assert not first["miss"].any()
    assert out.loc[~out["backed_up"], "rebuilt"].notna().any()


def test_each_sensor_is_judged_by_its_own_eps() -> None:
    """A plan with per-unit eps: the job's miss is |error| > that sensor's eps, not the first."""
    rows = sample_rows(16)
    lm = fit_map(rows.values, rows.sensors, BACKUP)
    parts, latest = _partials(long_readings(rows), lm, "avg", 4, 4)
    closed = WindowState("avg").merge(parts, latest, 0)
    one = shadow_results(closed, "avg", 1e9)
    size = one.loc[~one["backed_up"]].groupby("sensor")["error"].apply(lambda e: e.abs().min())
    worst = str(size.idxmax())
    assert size[worst] > 0
    tight = {s: (size[worst] / 2 if s == worst else 1e9) for s in rows.sensors}
    per = shadow_results(closed, "avg", tight)
    assert per.loc[per["sensor"] == worst, "miss"].all()
    assert not per.loc[per["sensor"] != worst, "miss"].any()
    assert not one["miss"].any()
    pd.testing.assert_series_equal(per["error"], one["error"])


def test_collected_partials_drop_null_keys_and_count_their_readings() -> None:
    """What the executors send: a null window (no time) or a null sensor is dropped
    and its readings counted; max/min's rebuilt rows come with null counts."""
    table = pa.table(
        {
            "window_start": pa.array([0, None, 0, HOUR_US, 0], pa.int64()),
            "sensor": pa.array(["a", "a", None, "b", "b"]),
            "n": pa.array([3, 0, 0, 2, 0], pa.int64()),
            "missing": pa.array([1, 2, 0, 0, None], pa.int64()),
            "agg": [3.0, None, 1.0, 4.0, None],
            "max_event_us": pa.array([10, None, 5, HOUR_US + 7, None], pa.int64()),
            "readings": pa.array([4, 2, 5, 2, None], pa.int64()),
            "rebuilt_agg": [None, None, None, None, 9.0],
            "rebuilt_n": pa.array([None, None, None, None, 3], pa.int64()),
        }
    )
    frame, unusable = collected_partials(table, HOUR_US, "max")
    assert unusable == 2 + 5
    assert frame["sensor"].tolist() == ["a", "b", "b"]
    assert frame["window_end"].tolist() == [HOUR_US, 2 * HOUR_US, HOUR_US]
    assert frame["rebuilt_n"].tolist() == [0, 0, 3]
    assert frame["missing"].tolist() == [1, 0, 0]
    assert frame["readings"].sum() == 6
    assert frame[["n", "rebuilt_n", "missing", "readings"]].dtypes.eq(np.int64).all()

    avg, none = collected_partials(table.drop(["rebuilt_agg", "rebuilt_n"]), HOUR_US, "avg")
    assert none == 7 and avg["rebuilt_agg"].isna().all() and (avg["rebuilt_n"] == 0).all()


def test_a_checkpoint_written_with_the_earlier_state_names_is_read() -> None:
    """The open windows' state before each field had its own column: ``rebuilt``."""
    import io

    import pyarrow.ipc as ipc

    old = _parts_at([0, 1]).drop(columns=[STORED, FIRST]).rename(columns={"rebuilt_agg": "rebuilt"})
    meta = {"aggregate": "max", "batch_id": 3, "max_event_us": 5, "watermark_us": 0}
    table = pa.Table.from_pandas(old, preserve_index=False)
    table = table.replace_schema_metadata({"lacuna_state": __import__("json").dumps(meta)})
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    state = WindowState.restore(sink.getvalue())
    assert state.open.columns.tolist() == partial_columns("max")
    assert state.open["window_start"].tolist() == [0, HOUR_US]


def _batched(rows: Rows, aggregate: str, batches: list[tuple], long=None):
    """The job's driver over ``rows`` cut into batches ``(first row, map, stored[,
    version])``: each batch's partials under its own map, stored set and version,
    merged, closed and scored. ``long``: the readings (default: every one of ``rows``)."""
    long = long_readings(rows) if long is None else long
    state, results = WindowState(aggregate), []
    t = long["event_time"].to_numpy()
    edges = [*(rows.times[b[0]] for b in batches), t.max() + np.timedelta64(1, "s")]
    for (lo, lm, stored, *version), end in zip(batches, edges[1:], strict=True):
        part = long[(t >= rows.times[lo]) & (t < end)]
        parts, latest = _partials(part, lm, aggregate, 8, 4, stored, *version)
        closed = state.merge(parts, latest, 0)
        if len(closed):
            results.append(shadow_results(closed[closed["n"] > 0], aggregate, 1.0))
    got = pd.concat(results, ignore_index=True)
    got["start_s"] = got["window_start"] // 1_000_000
    return got


@pytest.mark.parametrize("aggregate", ["avg", "sum", "max", "min"])
def test_a_window_is_scored_as_recovery_returns_it_across_versions_and_full_batches(
    aggregate: str,
) -> None:
    """Rows 0-13 under a map of the plan's set; 14-21 a batch over the exposure (every
    sensor stored); 22-47 under a second version that backs up one sensor fewer, so the
    dropped sensor is exact in some batches of a window and rebuilt in others. Each
    window's ``rebuilt`` is the aggregate of the readings a recovery returns (reference:
    recovered reading by reading, by the plan each row's batch ran under)."""
    rows = sample_rows(48)
    first = fit_map(rows.values, rows.sensors, BACKUP)
    second = fit_map(rows.values, rows.sensors, BACKUP[1:])
    every = tuple(rows.sensors)
    got = _batched(
        rows,
        aggregate,
        [(0, first, first.backup, 1), (14, first, every, 1), (22, second, second.backup, 2)],
    )
    part = [rows.values[:14], rows.values[14:22], rows.values[22:]]
    recovered = np.vstack(
        [
            recovered_readings(Rows(rows.times[:14], part[0], rows.sensors), first),
            part[1],
            recovered_readings(Rows(rows.times[22:], part[2], rows.sensors), second),
        ]
    )
    want = reference_results(
        rows, first, 8 * 3600.0, 4 * 3600.0, aggregate, 1.0, recovered=recovered
    )
    merged = want.merge(got, on=["start_s", "sensor"], suffixes=("_ref", ""), validate="1:1")
    assert len(merged) == len(want) == len(got)
    np.testing.assert_allclose(merged["rebuilt"], merged["rebuilt_ref"], rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(merged["miss"], merged["miss_ref"])
    # backed up: every reading of the window stored; the dropped sensor only before 22
    dropped = merged[merged["sensor"] == BACKUP[0]]
    assert dropped.loc[
        dropped["start_s"] + 8 * 3600 <= rows.times[22].astype("datetime64[s]").astype(np.int64),
        "backed_up",
    ].all()
    assert not dropped.loc[
        dropped["start_s"] >= rows.times[16].astype("datetime64[s]").astype(np.int64), "backed_up"
    ].any()
    window_of_full = merged[
        merged["start_s"] == rows.times[14].astype("datetime64[s]").astype(np.int64)
    ]
    assert window_of_full["backed_up"].all() and (window_of_full["error"] == 0).all()
    # what the plan of record alone would have said: a different answer somewhere
    alone = reference_results(rows, second, 8 * 3600.0, 4 * 3600.0, aggregate, 1.0)
    assert not np.allclose(alone["rebuilt"], merged.sort_values(["start_s", "sensor"])["rebuilt"])
    # each window is on the record of the oldest version it was read under
    first_v2 = int(rows.times[22].astype("datetime64[s]").astype(np.int64))
    assert (merged.loc[merged["start_s"] < first_v2, "plan_version"] == 1).all()
    assert (merged.loc[merged["start_s"] >= first_v2, "plan_version"] == 2).all()


def test_a_window_open_when_an_older_state_was_restored_is_not_scored() -> None:
    """A state written before ``stored_n``: what its batches stored is not known, so the
    windows it held open are left out of the shadow check (never guessed); the windows
    opened after it are scored."""
    rows = sample_rows(24)
    lm = fit_map(rows.values, rows.sensors, BACKUP)
    long, n = long_readings(rows), len(rows.sensors)
    state = WindowState("avg")
    parts, latest = _partials(long.iloc[: 10 * n], lm, "avg", 8, 4)
    state.merge(parts, latest, 0)
    old = state.open.drop(columns=[STORED, FIRST])
    state.open = old  # as an older job wrote it
    restored = WindowState.restore(state.snapshot())
    assert (restored.open[STORED] == UNKNOWN).all()
    parts, latest = _partials(long.iloc[10 * n :], lm, "avg", 8, 4)
    out = shadow_results(restored.merge(parts, latest, 0), "avg", 1e-9)
    open_then = out["window_start"].isin(old["window_start"].unique())
    assert open_then.any() and (~open_then).any()
    assert out.loc[open_then, "rebuilt"].isna().all() and not out.loc[open_then, "miss"].any()
    assert not out.loc[open_then, "backed_up"].any()
    later = out[~open_then & ~out["backed_up"]]
    assert later["rebuilt"].notna().all() and later["miss"].any()


@pytest.mark.parametrize("aggregate", ["avg", "sum"])
def test_a_backup_gap_is_scored_as_recovery_has_it_or_not_at_all(aggregate: str) -> None:
    """A backup sensor without its readings at rows 8 and 9: a recovery leaves those time
    steps out. Window partials cannot say which steps a batch's part of a window lacks,
    so where a backup has fewer readings than the target the window is not scored (never
    scored with the wrong steps); where a batch's part holds no reading of a backup, a
    recovery keeps none of its steps, and the window is scored on the rest."""
    rows = sample_rows(24)
    lm = fit_map(rows.values, rows.sensors, BACKUP)
    long = long_readings(rows)
    hour = (long["event_time"] - pd.Timestamp(rows.times[0])) // pd.Timedelta(hours=1)
    gap = long[~((long["sensor"] == lm.backup[0]) & hour.isin([8, 9]))]
    t0 = int(rows.times[0].astype("datetime64[s]").astype(np.int64))
    scored = {}
    for cut in (10, 12):  # rows 8-11 in one batch, or cut after row 9
        got = _batched(rows, aggregate, [(0, lm, lm.backup), (cut, lm, lm.backup)], long=gap)
        got = got[got["sensor"].isin(lm.targets)]
        scored[cut] = got.set_index(["start_s", "sensor"])["rebuilt"].sort_index()
    starts = scored[12].index.get_level_values("start_s")
    hit = starts.isin([t0 + 4 * 3600, t0 + 8 * 3600])  # the windows holding rows 8 and 9
    assert scored[12][hit].isna().all() and scored[12][~hit].notna().all()
    pd.testing.assert_series_equal(scored[10][~hit], scored[12][~hit])
    # cut after row 9: rows 4-9 of window 4-12 lack two backup readings (not scored);
    # rows 8-9 of window 8-16 hold none, so a recovery has rows 10-15 of it
    assert scored[10].loc[t0 + 4 * 3600].isna().all()
    rebuilt = lm.apply(rows.values[10:16][:, [rows.sensors.index(b) for b in lm.backup]])
    want = {"avg": rebuilt.mean(axis=0), "sum": rebuilt.sum(axis=0)}[aggregate]
    want = pd.Series(dict(zip(lm.sensors, want, strict=True)))
    got = scored[10].loc[t0 + 8 * 3600]
    np.testing.assert_allclose(got, want[got.index], rtol=1e-9)


def test_the_monitor_counts_a_versions_own_windows_only() -> None:
    """Windows closed under version 2 but read under version 1 (a re-plan's first
    batches) are version 1's record: version 2's monitor does not count their misses."""
    from engine.job.tally import observe_closed
    from engine.planning.monitor import ViolationMonitor

    starts = np.arange(8, dtype=np.int64) * HOUR_US
    results = pd.DataFrame(
        {
            "window_start": starts,
            "sensor": "b",
            "error": [5.0] * 3 + [0.1] * 5,  # version 1's map missed
            "backed_up": False,
            "plan_version": [1] * 3 + [2] * 5,
        }
    )
    monitor = ViolationMonitor(("a", "b"), 1.0, 0.05, min_windows=1)
    observe_closed(monitor, results, None, ("a", "b"), ("b",), 2)
    assert monitor.rates(2)["b"] == (0.0, 5)
