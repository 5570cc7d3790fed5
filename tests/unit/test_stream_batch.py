"""Pure per-batch functions of the live pipeline, the feeder and the stream spec (no JVM).

Every windowed result is checked against ``engine.model.linear`` run on the
whole history at once.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from engine.errors import ConfigError, EngineError, ParameterError, PipelineError
from engine.live.batch import (
    WindowParams,
    WindowState,
    advance_windows,
    results_frame,
    select_backup_rows,
    shadow_errors,
)
from engine.live.feeder import Feeder, FeedOptions
from engine.live.rebuild import aggregate_windows_frame, reconstruct_frame, seed_state
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec, align_history
from engine.live.status import StatusBoard
from engine.model import LinearMap
from engine.query import WindowQuery
from engine.windows import window_aggregates, window_errors
from tests.helpers import fit_map, write_backup_batch

SENSORS = ("a", "b", "c", "d")


@dataclass(frozen=True)
class History:
    times: np.ndarray
    values: np.ndarray
    sensors: tuple[str, ...]


def make_history(rows: int = 60, seed: int = 0) -> History:
    rng = np.random.default_rng(seed)
    base = np.cumsum(rng.normal(size=(rows, 2)), axis=0)
    mix = np.array([[1.0, 0.0, 0.7, 0.2], [0.0, 1.0, 0.4, 0.9]])
    values = base @ mix + 0.1 * rng.normal(size=(rows, 4))
    times = np.datetime64("2024-01-01T00:00", "ns") + np.arange(rows) * np.timedelta64(1, "h")
    return History(times, values, SENSORS)


def long_frame(h: History, rows: slice | None = None) -> pd.DataFrame:
    rows = rows or slice(None)
    values, times = h.values[rows], h.times[rows]
    start = rows.start or 0
    n = len(h.sensors)
    seq = np.repeat(np.arange(len(values)) + start, n)
    return pd.DataFrame(
        {
            "seq": seq,
            "event_time": np.repeat(times, n),
            "arrival_time": np.repeat(times, n),
            "sensor": np.tile(h.sensors, len(values)),
            "value": values.reshape(-1),
        }
    )


def stream(
    state: WindowState,
    frame: pd.DataFrame,
    params: WindowParams,
    batches: int,
    rng: np.random.Generator,
    linear_map: LinearMap | None = None,
) -> tuple[WindowState, list[np.ndarray], list[np.ndarray], int]:
    """Feed ``frame`` in ``batches`` random pieces; collect ids and aggregates."""
    cuts = np.sort(rng.choice(np.arange(1, len(frame)), size=batches - 1, replace=False))
    ids, aggs, late = [], [], 0
    for piece in np.split(np.arange(len(frame)), cuts):
        adv = advance_windows(state, frame.iloc[rng.permutation(piece)], params, linear_map)
        state = adv.state
        ids.append(adv.closed.ids)
        aggs.append(adv.closed.aggregates)
        late += len(adv.late)
    return state, ids, aggs, late


@pytest.mark.parametrize("aggregate", ["avg", "sum", "max", "min"])
@pytest.mark.parametrize(("window", "slide"), [(6, 6), (6, 2), (5, 3), (1, 1)])
def test_streamed_windows_equal_the_whole_history_reference(
    aggregate: str, window: int, slide: int
) -> None:
    h = make_history(61)
    params = WindowParams(SENSORS, window, slide, aggregate)
    rng = np.random.default_rng(window * 10 + slide)
    state, ids, aggs, late = stream(WindowState.empty(4), long_frame(h), params, 9, rng)
    expected = window_aggregates(h.values, window, slide, aggregate)
    got_ids = np.concatenate(ids)
    assert late == 0
    np.testing.assert_array_equal(got_ids, np.arange(len(expected)))  # each once, in order
    np.testing.assert_allclose(np.vstack(aggs), expected, rtol=1e-12, atol=1e-12)
    assert state.start == state.next_window * slide
    assert state.buffered_rows < window + slide


def test_readings_in_any_order_across_batches_still_give_exact_windows() -> None:
    h = make_history(40)
    params = WindowParams(SENSORS, 8, 4, "avg")
    rng = np.random.default_rng(7)
    frame = long_frame(h).sample(frac=1.0, random_state=3)  # fully shuffled stream
    _, ids, aggs, late = stream(WindowState.empty(4), frame, params, 12, rng)
    assert late == 0
    np.testing.assert_allclose(np.vstack(aggs), window_aggregates(h.values, 8, 4, "avg"))
    assert np.concatenate(ids).tolist() == list(range(9))


def test_late_and_duplicate_readings_are_separated() -> None:
    h = make_history(12)
    params = WindowParams(SENSORS, 4, 4, "sum")
    first = advance_windows(WindowState.empty(4), long_frame(h, slice(0, 8)), params)
    assert first.closed.ids.tolist() == [0, 1] and first.state.start == 8
    again = pd.concat([long_frame(h, slice(6, 9)), long_frame(h, slice(8, 9))])
    adv = advance_windows(first.state, again, params)
    assert len(adv.late) == 8  # rows 6 and 7 belong to emitted windows
    assert set(adv.late["seq"]) == {6, 7} and adv.late.columns[0] == "seq"
    assert adv.duplicates == 4  # row 8 arrived twice; the first copy is kept
    unknown = long_frame(h, slice(9, 12)).assign(sensor="zz")
    assert advance_windows(adv.state, unknown, params).state.buffered_rows == 1


def test_state_survives_a_snapshot_round_trip() -> None:
    h = make_history(30)
    params = WindowParams(SENSORS, 6, 3, "max")
    part = advance_windows(WindowState.empty(4), long_frame(h, slice(0, 13)), params).state
    restored = WindowState.from_bytes(part.to_bytes())
    for name in ("start", "next_window", "damaged_until"):
        assert getattr(restored, name) == getattr(part, name)
    np.testing.assert_array_equal(restored.values, part.values)
    np.testing.assert_array_equal(restored.times, part.times)
    a = advance_windows(part, long_frame(h, slice(13, 30)), params).closed
    b = advance_windows(restored, long_frame(h, slice(13, 30)), params).closed
    np.testing.assert_array_equal(a.aggregates, b.aggregates)
    np.testing.assert_array_equal(a.ids, b.ids)


def test_shadow_errors_equal_the_reference_recovery() -> None:
    h = make_history(48)
    lm = fit_map(h.values, SENSORS, ("a", "b"))
    params = WindowParams(SENSORS, 8, 4, "avg")
    closed = advance_windows(WindowState.empty(4), long_frame(h), params).closed
    expected = window_errors(h.values, lm.apply(h.values[:, :2]), 8, 4, "avg")
    got = shadow_errors(closed, params, lm)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert np.all(got[:, :2] == 0) and got[:, 2:].max() > 0


def test_backup_rows_keep_only_the_chosen_sensors() -> None:
    frame = long_frame(make_history(5))
    rows = select_backup_rows(frame, ("b", "d"))
    assert list(rows.columns) == ["seq", "event_time", "sensor", "value"]
    assert set(rows["sensor"]) == {"b", "d"} and len(rows) == 10
    assert select_backup_rows(frame, ()).empty


def test_damaged_rows_are_rebuilt_from_their_backup_and_marked_recovered() -> None:
    h = make_history(24)
    lm = fit_map(h.values, SENSORS, ("a", "c"))
    params = WindowParams(SENSORS, 6, 6, "avg")
    state = WindowState(
        6, 1, np.zeros((0, 4)), np.zeros(0, "datetime64[ns]"), np.zeros(0, bool), damaged_until=9
    )
    frame = long_frame(h, slice(6, 24))
    damaged = frame["seq"].le(9) & ~frame["sensor"].isin(["a", "c"])
    adv = advance_windows(state, frame[~damaged], params, lm)
    truth_like = h.values.copy()
    truth_like[6:10] = lm.apply(h.values[6:10][:, [0, 2]])
    np.testing.assert_allclose(
        adv.closed.aggregates, window_aggregates(truth_like, 6, 6, "avg")[1:]
    )
    assert adv.closed.recovered.tolist() == [True, False, False]
    kinds = results_frame(adv.closed, SENSORS)["kind"]
    assert kinds.tolist() == ["recovered"] * 4 + ["live"] * 8
    stale = advance_windows(adv.state, long_frame(h, slice(8, 9)), params, lm)
    assert stale.stale == 4 and stale.late.empty


def test_rows_written_before_a_replan_are_rebuilt_with_their_own_plan() -> None:
    """Rows 0-9 were backed up under plan (a), rows 10-19 under the widened (a, c)."""
    h = make_history(20)
    old, new = fit_map(h.values, SENSORS, ("a",)), fit_map(h.values, SENSORS, ("c", "a"))
    wide = pd.DataFrame(
        {"seq": np.arange(20), "event_time": h.times, "b0": h.values[:, 0], "b1": h.values[:, 2]}
    )
    wide.loc[:9, "b1"] = np.nan  # c was not backed up before the re-plan
    outputs = [f"s{SENSORS.index(s)}" for s in new.sensors]
    out = reconstruct_frame(wide, [new, old], {"a": "b0", "c": "b1"}, outputs)
    assert out["complete"].all()
    got = out[[f"s{i}" for i in range(len(SENSORS))]].to_numpy()
    ref_old = old.apply(h.values[:10, [0]])[:, [old.sensors.index(s) for s in SENSORS]]
    ref_new = new.apply(h.values[10:, [2, 0]])[:, [new.sensors.index(s) for s in SENSORS]]
    np.testing.assert_allclose(got, np.vstack([ref_old, ref_new]), rtol=1e-12)
    # With only the newest plan (the old behaviour) the early rows are lost.
    assert not reconstruct_frame(wide, [new], {"a": "b0", "c": "b1"}, outputs)["complete"][
        :10
    ].any()


def test_readings_a_batch_backed_up_beyond_its_set_are_kept_exact() -> None:
    """Rows 10-19 came in a batch that backed up every sensor (over the exposure, or after
    a recovery): a machine loss rebuilds rows 0-9 from (a) and keeps rows 10-19 as read."""
    h = make_history(20)
    lm = fit_map(h.values, SENSORS, ("a",))
    wide = pd.DataFrame({"seq": np.arange(20), "event_time": h.times})
    for i in range(len(SENSORS)):
        wide[f"b{i}"] = h.values[:, i]
    wide.loc[:9, ["b1", "b2", "b3"]] = np.nan  # rows 0-9: only the plan's set
    wide.loc[14, "b2"] = np.nan  # a reading the full batch did not get: rebuilt
    columns = {s: f"b{i}" for i, s in enumerate(SENSORS)}
    outputs = [f"s{SENSORS.index(s)}" for s in lm.sensors]
    out = reconstruct_frame(wide, [lm], columns, outputs, readings=columns)
    got = out[[f"s{i}" for i in range(len(SENSORS))]].to_numpy()
    rebuilt = lm.apply(h.values[:, [0]])[:, [lm.sensors.index(s) for s in SENSORS]]
    expected = np.vstack([rebuilt[:10], h.values[10:]])
    expected[14, 2] = rebuilt[14, 2]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert out["complete"].all()


def test_recovery_frames_match_the_reference() -> None:
    h = make_history(20)
    lm = fit_map(h.values, SENSORS, ("d", "a"))  # input order differs from sensor order
    wide = pd.DataFrame(
        {"seq": np.arange(20), "event_time": h.times, "b0": h.values[:, 3], "b1": h.values[:, 0]}
    )
    wide.loc[5, "b0"] = np.nan  # a row whose backup is incomplete
    outputs = [f"s{SENSORS.index(s)}" for s in lm.sensors]
    out = reconstruct_frame(wide, [lm], {"d": "b0", "a": "b1"}, outputs)
    expected = lm.apply(h.values[:, [3, 0]])
    got = out[[f"s{SENSORS.index(s)}" for s in lm.sensors]].to_numpy()
    np.testing.assert_allclose(np.delete(got, 5, 0), np.delete(expected, 5, 0))
    assert not out["complete"][5] and out["complete"].sum() == 19
    cols = [f"s{i}" for i in range(4)]
    params = WindowParams(SENSORS, 5, 2, "min")
    chunk = out.iloc[3:16].sample(frac=1.0, random_state=0)  # rows 3..15, shuffled
    agg = aggregate_windows_frame(pd.concat([chunk, chunk.iloc[:3]]), 1, 6, params, cols)
    # window 1 needs row 2, window 2 holds row 5 (incomplete backup), window 6 needs row 16
    assert agg["window_id"].tolist() == [3, 4, 5]
    values = out[cols].to_numpy()
    for k, j in enumerate([3, 4, 5]):
        expected = window_aggregates(values[j * 2 : j * 2 + 5], 5, 5, "min")[0]
        np.testing.assert_array_equal(agg[cols].to_numpy()[k], expected)
    assert agg["window_start"].tolist() == list(h.times[[6, 8, 10]])
    assert agg["window_end"].tolist() == list(h.times[[10, 12, 14]])
    assert aggregate_windows_frame(out.iloc[3:8], 2, 3, params, cols).empty


def test_a_seeded_state_finishes_the_windows_that_straddle_the_failure() -> None:
    h = make_history(30)
    params = WindowParams(SENSORS, 6, 3, "avg")
    rebuilt = pd.DataFrame(h.values[9:14] + 0.5, columns=list(SENSORS))
    rebuilt.insert(0, "event_time", h.times[9:14])
    rebuilt.insert(0, "seq", np.arange(9, 14))
    state = seed_state(rebuilt, SENSORS, next_window=3, slide=3, damaged_until=13)
    adv = advance_windows(state, long_frame(h, slice(14, 30)), params)
    mixed = h.values.copy()
    mixed[9:14] += 0.5
    np.testing.assert_allclose(adv.closed.aggregates, window_aggregates(mixed, 6, 3, "avg")[3:])
    assert adv.closed.recovered.tolist() == [True, True, False, False, False, False]


def test_feeder_writes_atomic_ordered_files_that_replay_the_history(tmp_path: Path) -> None:
    h = make_history(50)
    feeder = Feeder(
        h, ("c", "a"), tmp_path / "landing", tmp_path / "truth", FeedOptions(rows_per_file=7)
    )
    progress = feeder.run()
    files = sorted((tmp_path / "landing").glob("*.parquet"))
    assert progress.done and progress.files == len(files) == 8 and progress.readings == 100
    assert progress.rows == 50 and not list((tmp_path / "landing" / ".tmp").iterdir())
    mtimes = [f.stat().st_mtime_ns for f in files]
    assert all(b - a >= 1_000_000 for a, b in itertools.pairwise(mtimes))
    frame = pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
    assert list(frame.columns) == ["seq", "event_time", "arrival_time", "sensor", "value"]
    wide = frame.pivot(index="seq", columns="sensor", values="value")[["c", "a"]].to_numpy()
    np.testing.assert_array_equal(wide, h.values[:, [2, 0]])
    truth = pd.read_parquet(tmp_path / "truth" / "truth.parquet")
    np.testing.assert_array_equal(truth[["c", "a"]].to_numpy(), h.values[:, [2, 0]])


def test_a_resumed_feed_counts_from_the_first_row_and_a_stop_says_stopped(
    tmp_path: Path,
) -> None:
    h = make_history(50)
    feeder = Feeder(h, ("c", "a"), tmp_path / "landing", None, FeedOptions(rows_per_file=7,
                                                                         start_row=20))  # fmt: skip
    first = feeder.progress()
    assert (first.readings, first.rows, first.total_readings) == (40, 20, 100)
    done = feeder.run()
    assert done.readings == done.total_readings == 100 and done.rows == 50
    assert done.done and not done.stopped
    slow = Feeder(h, ("c", "a"), tmp_path / "slow", None, FeedOptions(rows_per_file=1, speed=1.0))
    slow.start()
    while slow.progress().files < 1:
        time.sleep(0.01)
    slow.stop()
    stopped = slow.progress()
    assert stopped.done and stopped.stopped and stopped.readings < stopped.total_readings


def test_feeder_with_delays_writes_in_arrival_order(tmp_path: Path) -> None:
    h = make_history(10)
    delays = np.random.default_rng(1).uniform(0, 7200, size=(10, 4))
    slept: list[float] = []
    feeder = Feeder(
        h,
        SENSORS,
        tmp_path,
        None,
        FeedOptions(speed=3600.0, rows_per_file=2, delays=delays),
        sleep=lambda s, _event: slept.append(s),
    )
    feeder.run()
    frame = pd.concat([pq.read_table(f).to_pandas() for f in sorted(tmp_path.glob("*.parquet"))])
    assert frame["arrival_time"].is_monotonic_increasing and len(frame) == 40
    lag = (frame["arrival_time"] - frame["event_time"]).dt.total_seconds().to_numpy()
    expected = delays[frame["seq"].to_numpy(), [SENSORS.index(s) for s in frame["sensor"]]]
    np.testing.assert_allclose(lag, expected, atol=1e-5)
    assert len(slept) == 4 and all(s >= 0 for s in slept)  # 3600x: seconds of sleep per hour


def test_feeder_stops_when_asked(tmp_path: Path) -> None:
    feeder = Feeder(
        make_history(100),
        SENSORS,
        tmp_path,
        None,
        FeedOptions(speed=1.0, rows_per_file=1),
        sleep=lambda s, e: e.wait(0.01),
    )
    feeder.start()
    feeder.stop(timeout=5.0)
    feeder.join(timeout=5.0)
    assert feeder.progress().files < 100


def test_bad_inputs_raise_clear_engine_errors(tmp_path: Path) -> None:
    h = make_history(10)
    lm = fit_map(h.values, SENSORS, ("a",))
    spec = StreamSpec(SENSORS, ("a",), lm, WindowQuery(0.5, 0.05, 4, slide=2, aggregate="avg"))
    with pytest.raises(ConfigError, match="'c', 'd'"):
        align_history(History(h.times, h.values[:, :3], ("a", "b", "zz")), spec.sensors)
    with pytest.raises(ParameterError, match="got 'median'"):
        StreamSpec(SENSORS, ("a",), lm, WindowQuery(0.5, 0.05, 4, slide=2, aggregate="median"))
    with pytest.raises(ParameterError, match="slide"):
        StreamSpec(SENSORS, ("a",), lm, WindowQuery(0.5, 0.05, 4, slide=5, aggregate="avg"))
    with pytest.raises(ParameterError, match="linear map reads"):
        StreamSpec(SENSORS, ("b",), lm, WindowQuery(0.5, 0.05, 4, slide=2, aggregate="avg"))
    with pytest.raises(ParameterError, match="mode"):
        spec.stored_sensors("partial")
    with pytest.raises(ParameterError):
        PipelineOptions(max_files_per_trigger=0)
    with pytest.raises(ParameterError, match="speed"):
        FeedOptions(speed=-1.0)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PipelineError, match="file") as info:
        PipelinePaths(blocker / "root").ensure()
    assert isinstance(info.value, EngineError)


def test_spec_modes_and_compatibility() -> None:
    h = make_history(10)
    spec = StreamSpec(
        SENSORS,
        ("a",),
        fit_map(h.values, SENSORS, ("a",)),
        WindowQuery(0.5, 0.05, 4, slide=2, aggregate="avg"),
    )
    assert spec.stored_sensors("approx") == ("a",) and spec.stored_sensors("none") == ()
    full = spec.recovery_map("full")
    np.testing.assert_array_equal(full.apply(h.values), h.values)
    wider = StreamSpec(
        SENSORS,
        ("a", "b"),
        fit_map(h.values, SENSORS, ("a", "b")),
        WindowQuery(0.5, 0.05, 4, slide=2, aggregate="avg"),
    )
    spec.check_compatible(wider)
    other = StreamSpec(
        SENSORS, ("a",), spec.linear_map, WindowQuery(0.5, 0.05, 6, slide=2, aggregate="avg")
    )
    with pytest.raises(PipelineError, match="window"):
        spec.check_compatible(other)


def test_status_board_counts_shadow_misses_of_reconstructed_sensors_only() -> None:
    board = StatusBoard()
    errors = np.array([[0.0, 0.9, 0.1], [0.0, 0.2, 0.8], [5.0, 0.6, 0.0]])
    board.record_shadow(errors, ("x", "y", "z"), ("y", "z"), eps=0.5)
    status = board.snapshot()
    assert status.shadow_violations == {"y": 2, "z": 1}
    assert status.shadow_violation_rate == pytest.approx(3 / 6)
    assert status.shadow_worst_rate == pytest.approx(2 / 3)
    board.add(batches=2, input_rows=10)
    assert board.snapshot().batches == 2 and board.snapshot().to_dict()["input_rows"] == 10


class CountingStage:
    """A stand-in disorder stage: releases everything, counts what it was fed."""

    def __init__(self) -> None:
        self.seen = 0

    def process(self, batch: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        self.seen += len(batch)
        return batch, batch.iloc[0:0]

    def snapshot(self) -> dict[str, int]:
        return {"seen": self.seen}

    def restore(self, state: dict[str, int]) -> CountingStage:
        self.seen = int(state["seen"])
        return self


class FakeBatch:
    """What foreachBatch hands over, without Spark: only ``toPandas`` is used."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    def toPandas(self) -> pd.DataFrame:  # the PySpark name
        return self.frame


def test_a_batch_retried_after_a_crash_restarts_from_the_stored_state(tmp_path: Path) -> None:
    from engine.live.pipeline import LivePipeline
    from engine.live.spec import Fault
    from engine.live.store import BackupStore
    from engine.stream.query_errors import SimulatedFailure

    h = make_history(16)
    spec = StreamSpec(
        SENSORS,
        ("a",),
        fit_map(h.values, SENSORS, ("a",)),
        WindowQuery(0.5, 0.05, 4, slide=4, aggregate="avg"),
    )
    stage = CountingStage()
    with BackupStore(tmp_path / "s.duckdb") as store:
        pipeline = LivePipeline(
            None,
            spec,
            "approx",
            PipelinePaths(tmp_path),
            store,
            stage=stage,
            fault=Fault(1, "before_commit"),
            backup_writer=lambda df, target, sensors, version: write_backup_batch(
                target, select_backup_rows(df.frame, sensors), version
            ),
        )
        pipeline.run = 0
        pipeline._on_batch(FakeBatch(long_frame(h, slice(0, 6))), 0)
        with pytest.raises(SimulatedFailure):
            pipeline._on_batch(FakeBatch(long_frame(h, slice(6, 16))), 1)
        assert stage.seen == 64 and store.committed_batches(0) == [0]
        pipeline._on_batch(FakeBatch(long_frame(h, slice(6, 16))), 1)  # Spark's retry
        pipeline._on_batch(FakeBatch(long_frame(h, slice(6, 16))), 1)  # a replay: skipped
        assert stage.seen == 64  # 24 + 40: the failed attempt was rolled back
        res = store.read_results().pivot(index="window_id", columns="sensor", values="value")
        np.testing.assert_allclose(
            res[list(SENSORS)].to_numpy(), window_aggregates(h.values, 4, 4, "avg")
        )
        backup = store.read_table("backup")  # the failed attempt's directory was overwritten
        assert len(backup) == 16 and not backup.duplicated(["seq", "sensor"]).any()
        assert backup["seq"].tolist() == list(range(16)) and set(backup["batch_id"]) == {0, 1}
        assert pipeline.board.snapshot().input_rows == 64


def test_a_batch_a_stop_interrupts_raises_a_short_stop_without_its_cause(tmp_path: Path) -> None:
    import traceback

    from engine.live.failure import LET_THROUGH
    from engine.live.pipeline import LivePipeline
    from engine.live.store import BackupStore
    from engine.stream.query_errors import (
        STOPPED_CAUSE,
        STOPPED_PREFIX,
        QueryStopped,
        SimulatedFailure,
    )

    h = make_history(16)
    lm = fit_map(h.values, SENSORS, ("a",))
    spec = StreamSpec(SENSORS, ("a",), lm, WindowQuery(0.5, 0.05, 4, aggregate="avg"))

    def interrupted(df, target, sensors, version):  # type: ignore[no-untyped-def]
        raise RuntimeError("An error occurred while calling o85.parquet.\n" + "\tat x\n" * 5000)

    with BackupStore(tmp_path / "s.duckdb") as store:
        pipeline = LivePipeline(
            None, spec, "approx", PipelinePaths(tmp_path), store, backup_writer=interrupted
        )
        pipeline.run = 0
        with pytest.raises(RuntimeError, match="o85"):  # a real failure stays itself
            pipeline._on_batch(FakeBatch(long_frame(h, slice(0, 6))), 0)
        pipeline._stopping.set()  # what ``stop`` does before it stops the query
        with pytest.raises(QueryStopped) as caught:
            pipeline._on_batch(FakeBatch(long_frame(h, slice(0, 6))), 0)
        text = "".join(traceback.format_exception(caught.value))
        assert STOPPED_PREFIX in text and STOPPED_CAUSE in text
        assert "o85" not in text and len(text) < 2000  # the interrupted call's text is gone
        pipeline.request_failure()
        pipeline._failure._let_through = LET_THROUGH  # nothing more is let through
        with pytest.raises(SimulatedFailure):  # a simulated failure is not a stop
            pipeline._on_batch(FakeBatch(long_frame(h, slice(0, 6))), 0)
        assert store.committed_batches(0) == []


def test_a_resumed_pipeline_scores_rows_under_the_versions_that_governed_them(
    tmp_path: Path,
) -> None:
    """A run resumed under version 1 (in force from row 10) holds, in its first windows,
    rows version 0 governed. They are rebuilt with version 0's map and those windows count
    on version 0's record, as in the process that ran them: version 0's map is 100 off,
    so its two windows miss, and version 1 is judged on its own two alone."""
    from datetime import UTC, datetime

    from engine.live.pipeline import LivePipeline
    from engine.live.store import BackupStore
    from engine.live.versions import PlanVersion

    h = make_history(24)
    query = WindowQuery(5.0, 0.05, 6, slide=6, aggregate="avg")
    good = fit_map(h.values, SENSORS, ("a",))
    off = LinearMap(good.sensors, good.backup, good.targets, good.intercept + 100.0,
                    good.coef, good.conditional_variance)  # fmt: skip
    when = datetime(2026, 1, 1, tzinfo=UTC)
    v0 = PlanVersion(0, "initial", "", StreamSpec(SENSORS, ("a",), off, query), when, 0)
    v1 = PlanVersion(1, "manual", "", StreamSpec(SENSORS, ("a",), good, query), when, 10)
    with BackupStore(tmp_path / "s.duckdb") as store:
        store.write_version(v0.record())
        pipeline = LivePipeline(
            None,
            v1.spec,
            "approx",
            PipelinePaths(tmp_path),
            store,
            version=v1,
            backup_writer=lambda df, target, sensors, version: write_backup_batch(
                target, select_backup_rows(df.frame, sensors), version
            ),
        )
        pipeline.run = 0
        pipeline._on_batch(FakeBatch(long_frame(h, slice(0, 24))), 0)
        by_version = pipeline.board.snapshot().shadow_by_version
    assert by_version[0]["windows"] == 2 and by_version[0]["worst_rate"] == 1.0
    assert by_version[1]["windows"] == 2 and by_version[1]["worst_rate"] == 0.0


def test_the_status_tally_keeps_the_disjoint_share_of_its_sliding_windows(tmp_path: Path) -> None:
    """A window of 6 readings sliding by 2: a third of the closed windows are disjoint,
    the share the status line's test counts (``verdict.rejected``), kept per version."""
    from datetime import UTC, datetime

    from engine.live.pipeline import LivePipeline
    from engine.live.store import BackupStore
    from engine.live.versions import PlanVersion

    h = make_history(24)
    query = WindowQuery(5.0, 0.05, 6, slide=2, aggregate="avg")
    spec = StreamSpec(SENSORS, ("a",), fit_map(h.values, SENSORS, ("a",)), query)
    v0 = PlanVersion(0, "initial", "", spec, datetime(2026, 1, 1, tzinfo=UTC), 0)
    with BackupStore(tmp_path / "s.duckdb") as store:
        store.write_version(v0.record())
        pipeline = LivePipeline(
            None, v0.spec, "approx", PipelinePaths(tmp_path), store, version=v0,
            backup_writer=lambda df, target, sensors, version: write_backup_batch(
                target, select_backup_rows(df.frame, sensors), version
            ),
        )  # fmt: skip
        pipeline.run = 0
        pipeline._on_batch(FakeBatch(long_frame(h, slice(0, 24))), 0)
        figures = pipeline.board.snapshot().shadow_by_version[0]
    assert figures["windows"] > 3
    assert figures["share"] == pytest.approx(1 / 3)
