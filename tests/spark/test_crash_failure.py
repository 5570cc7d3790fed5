"""A crash the window state survives, and the rules that keep a crash-contract plan true.

Each recovered window is checked against a pure-Python rebuild of the truth: the
crashed micro-batch's rows of the rebuilt sensors replaced by the plan's linear map,
every other reading exact; a max plan's kept-readings sensor takes the extreme of the
readings the crash did not lose.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.live.manager import PipelineManager
from engine.live.simulation import run_simulation
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.stream.session import SparkSettings
from engine.windows import window_aggregates

pytestmark = pytest.mark.spark

LOCAL = SparkSettings(master="local[2]", shuffle_partitions=2)
FAST = PipelineOptions(max_files_per_trigger=2, trigger_seconds=0.0)


@pytest.fixture(scope="module")
def history(history: Any) -> Any:
    """The first 56 of the shared 96 rows: 14 windows around a crash at the middle,
    enough for every rule here, at 3-row micro-batches half the Spark time."""
    return replace(history, times=history.times[:56], values=history.values[:56])


def crash_spec(spec: StreamSpec, exposure: int) -> StreamSpec:
    return replace(spec, query=replace(spec.query, exposure=exposure))


@pytest.fixture(scope="module")
def crashed(
    spark: Any, history: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, StreamSpec, PipelinePaths]:
    """One simulated crash of a crash-contract plan (exposure 3), recovered and replayed,
    and the status board at the end."""
    from tests.spark.conftest import make_spec

    crash = crash_spec(make_spec(history), exposure=3)
    paths = PipelinePaths(tmp_path_factory.mktemp("crash"))
    managers: list[PipelineManager] = []
    report = run_simulation(history, crash, "approx", 0.5, paths, LOCAL, options=FAST,
                            failure="crash", monitor_factory=managers.append)  # fmt: skip
    return report, crash, paths, managers[0].board.snapshot()


@pytest.fixture(scope="module")
def kept_crash(
    spark: Any, history: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, StreamSpec, PipelinePaths]:
    """One simulated crash of a max plan (exposure 3) that keeps one PM2.5 sensor's readings."""
    from tests.spark.conftest import make_spec

    spec = crash_spec(make_spec(history, aggregate="max"), exposure=3)
    kept = replace(spec, kept_sensors=(KEPT,))
    paths = PipelinePaths(tmp_path_factory.mktemp("kept"))
    report = run_simulation(history, kept, "approx", 0.5, paths, LOCAL, options=FAST,
                            failure="crash")  # fmt: skip
    return report, kept, paths


KEPT = "Dongsi_PM2.5"  # its rebuilt readings at the crash overshoot its kept max


def recovered_values(paths: PipelinePaths, spec: StreamSpec, ids: np.ndarray) -> np.ndarray:
    """(W, n) the stored recovered results of windows ``ids``, ``spec.sensors`` order."""
    from engine.live.store import BackupStore

    with BackupStore(paths.store_file) as store:
        res = store.read_results("recovered")
    wide = res.pivot_table(index="window_id", columns="sensor", values="value", aggfunc="last")
    return wide.loc[list(ids), list(spec.sensors)].to_numpy(dtype=float)


def rebuilt_truth(history: Any, spec: StreamSpec, first: int, last: int) -> np.ndarray:
    """The readings recovery should hold: exact, but rows first..last of the rebuilt
    sensors from the plan's linear map."""
    x = np.array(history.values, dtype=float)
    lm = spec.linear_map
    backup = [history.sensors.index(s) for s in lm.backup]
    mapped = lm.apply(x[first : last + 1, backup])
    for j, s in enumerate(lm.sensors):
        if s not in spec.backup_sensors:
            x[first : last + 1, history.sensors.index(s)] = mapped[:, j]
    return x


def test_a_crash_rebuilds_only_the_batch_in_flight_and_its_windows_match_the_reference(
    history: Any, crashed: Any
) -> None:
    report, crash, paths, status = crashed
    first, last = report.lost_rows
    assert report.failure == "crash" and report.contract == "crash"
    assert 1 <= last - first + 1 <= 3  # the feed was cut to the exposure: one batch, <= m rows
    assert report.windows_lost >= 1 and report.windows_recovered == report.windows_lost
    assert report.windows_pending == 0 and report.windows_unrecoverable == 0
    # Every recovered window holds a lost row, and matches the reference rebuild
    w, step = crash.window, crash.slide
    ids = np.asarray(report.window_ids)
    assert ((ids * step <= last) & (ids * step + w - 1 >= first)).all()
    x = rebuilt_truth(history, crash, first, last)
    truth = np.asarray(history.values, dtype=float)
    expected = np.vstack(
        [
            np.abs(
                window_aggregates(x[j * step : j * step + w], w, w, crash.aggregate)
                - window_aggregates(truth[j * step : j * step + w], w, w, crash.aggregate)
            )
            for j in ids
        ]
    )
    np.testing.assert_allclose(np.asarray(report.errors), expected, rtol=1e-9, atol=1e-9)
    # the backed-up sensors are exact, the rebuilt ones are not (the crash did lose them)
    cols = [crash.sensors.index(s) for s in crash.backup_sensors]
    assert np.asarray(report.errors)[:, cols].max() < 1e-9
    assert np.asarray(report.errors).max() > 1e-6
    assert "crash contract" in report.note
    # the crashed batch took its readings in: none is left waiting once the feed is done
    assert status.input_rows == np.asarray(history.values).size
    # the recovery committed the crashed batch: the counters are the store's totals (a
    # Resume in a new process starts from these), that batch's backup rows included
    from engine.live.store import BackupStore

    with BackupStore(paths.store_file) as store:
        totals = store.totals()
    assert (status.batches, status.backup_rows, status.backup_bytes, status.windows_emitted) == (
        totals["batches"], totals["backup_rows"], totals["backup_bytes"], totals["windows"]
    )  # fmt: skip


def test_batches_over_the_exposure_and_after_a_recovery_back_up_every_sensor(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    crash = crash_spec(spec, exposure=3)
    n, rows = len(crash.sensors), len(history.times)
    manager = PipelineManager(LOCAL)
    try:
        # files of 10 rows: every micro-batch holds more rows than the exposure of 3
        manager.start(history, crash, "approx", PipelinePaths(tmp_path), rows_per_file=10,
                      options=FAST)  # fmt: skip
        status = manager.drain(600)
    finally:
        manager.close()
    assert status.input_rows == rows * n
    assert status.backup_rows == rows * n  # every sensor, in every batch
    assert status.full_backup_batches == status.batches >= 2
    assert "exceeds the plan's exposure of 3 rows" in (status.last_full_backup or "")
    kinds = [e.kind for e in manager.board.history.events()]
    assert kinds.count("exposure") == 1  # marked where the run of such batches began
    # every reading was stored, so a crash anywhere is recovered exactly: every (window,
    # sensor) pair is exact and none is measured, never scored as the plan's rebuild
    tally = status.shadow_by_version[0]
    assert status.shadow_contract == "crash" and tally["windows"] >= 10
    assert tally["pairs"] == 0 and tally["misses"] == 0 and tally["worst_rate"] is None
    assert status.shadow_violation_rate is None


def test_readings_a_full_batch_stored_are_scored_as_read_through_the_disorder_stage(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path
) -> None:
    """With out-of-order arrival the stage releases a batch's readings later, some in
    another batch: every batch over the exposure stored every sensor, so no window the
    shadow check scores misses, whichever batch released its readings."""
    from tests.spark.test_live_disorder import replay_through_stage

    crash = crash_spec(spec, exposure=3)
    pipeline, _, _ = replay_through_stage(spark, history, crash, PipelinePaths(tmp_path), 8, 10, 1)
    status = pipeline.board.snapshot()
    assert status.full_backup_batches == status.batches - 1 >= 2  # all but the flush
    tally = status.shadow_by_version[0]
    assert status.shadow_contract == "crash" and tally["windows"] >= 10
    # the pairs stored whole are not measured; those the flush batch left rebuilt miss none
    assert tally["misses"] == 0 and tally["worst_rate"] in (None, 0.0)


def test_after_a_crash_every_sensor_is_backed_up_until_the_windows_open_at_it_close(
    history: Any, crashed: Any
) -> None:
    report, crash, paths, _ = crashed
    _, last = report.lost_rows
    end = (last // crash.slide) * crash.slide + crash.window - 1
    from engine.live.store import BackupStore

    with BackupStore(paths.store_file) as store:
        rows = store.read_backup(0, len(history.times)).to_pandas()
    per_row = rows.groupby("seq")["sensor"].nunique()
    n, k = len(crash.sensors), len(crash.backup_sensors)
    after = per_row[(per_row.index > last)]
    assert (after[after.index <= end] == n).all() and (after.index <= end).any()
    # past the windows open at the crash the plan's own set again (a batch straddling
    # the edge backs up everything: rows up to its first beyond the edge)
    assert (after[after.index > end + 3] == k).all()
    before = per_row[per_row.index < report.lost_rows[0]]
    assert (before == k).all()


def test_a_crash_gives_a_kept_sensor_the_extreme_of_its_kept_readings(
    history: Any, kept_crash: Any
) -> None:
    report, spec, paths = kept_crash
    first, last = report.lost_rows
    assert report.contract == "crash" and report.windows_recovered == report.windows_lost >= 2
    ids = np.asarray(report.window_ids)
    w, step = spec.window, spec.slide
    got = recovered_values(paths, spec, ids)
    x = rebuilt_truth(history, spec, first, last)  # every rebuilt sensor by the linear map
    mapped = np.vstack([window_aggregates(x[j * step : j * step + w], w, w, "max") for j in ids])
    k = spec.sensors.index(KEPT)
    truth = np.asarray(history.values, dtype=float)[:, k]
    kept = [max(truth[r] for r in range(j * step, j * step + w) if not first <= r <= last)
            for j in ids]  # fmt: skip
    np.testing.assert_allclose(got[:, k], kept, rtol=0, atol=1e-12)
    others = [i for i in range(len(spec.sensors)) if i != k]
    np.testing.assert_allclose(got[:, others], mapped[:, others], rtol=1e-12, atol=1e-12)
    assert not np.allclose(got[:, k], mapped[:, k])  # a rebuild would have given another max
    assert np.isfinite(np.asarray(report.errors)).all()
    assert f"({KEPT}: the extreme of the readings the crash did not lose" in report.note


def test_a_machine_loss_still_rebuilds_a_kept_sensor_with_the_linear_map(
    spark: Any, history: Any, kept_crash: Any, tmp_path: Path
) -> None:
    """The recovery job a machine loss runs (no window state: whole windows from the
    backup) on the same spec: every rebuilt sensor, the kept one too, by the linear map."""
    from engine.live.recovery import LostRange, recover_lost_range
    from engine.live.store import BackupStore
    from tests.spark.test_recovery import commit_backup

    _, spec, _ = kept_crash
    lost = LostRange(first_window=8, first_row=32, last_row=51)
    with BackupStore(tmp_path / "store.duckdb") as store:
        commit_backup(store, history, spec.backup_sensors)
        outcome = recover_lost_range(spark, store, spec, "approx", lost, run=0)
    ids = outcome.window_ids
    assert ids.tolist() == lost.inside_windows(spec.window, spec.slide).tolist() and ids.size >= 2
    w, step = spec.window, spec.slide
    x = rebuilt_truth(history, spec, lost.first_row, lost.last_row)
    mapped = np.vstack([window_aggregates(x[j * step : j * step + w], w, w, "max") for j in ids])
    paths = PipelinePaths(tmp_path)
    np.testing.assert_allclose(recovered_values(paths, spec, ids), mapped, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("full", [True, False])
def test_a_crashed_batch_that_stored_every_sensor_comes_back_as_read(
    spark: Any, history: Any, spec: StreamSpec, tmp_path: Path, full: bool
) -> None:
    """A crash in a batch that backed up every sensor (a second failure while the rules
    still store everything): its rows come back from its backup complete, so the restarted
    state marks their readings beyond the set as stored (the shadow check and online
    control take them as read), not filled. A batch of the plan's own set comes back
    rebuilt: filled, and nothing marked stored."""
    from engine.live.backup_writer import write_batch
    from engine.live.crash import recover_crash
    from engine.live.failure import CrashedBatch
    from engine.live.store import BackupStore
    from tests.spark.test_recovery import backup_frame

    crash = crash_spec(spec, exposure=3)
    sensors = crash.sensors if full else crash.backup_sensors
    rows = 6  # fewer than a window (8): every row stays in the restarted state
    frame = backup_frame(history, sensors, slice(0, rows))
    with BackupStore(tmp_path / "store.duckdb") as store:
        nbytes = write_batch(spark.createDataFrame(frame), store.batch_uri(0, 0), sensors, 0)
        crashed = CrashedBatch(0, 0, 0, rows - 1, len(frame), nbytes)
        outcome = recover_crash(store, crash, "approx", crashed)
    seed = outcome.seed
    assert outcome.window_ids.size == 0 and seed.buffered_rows == rows
    beyond = ~np.isin(np.asarray(crash.sensors), np.asarray(crash.backup_sensors))
    np.testing.assert_array_equal(seed.stored_cells, np.tile(beyond & full, (rows, 1)))
    assert seed.filled.all() != full
    np.testing.assert_allclose(seed.values[:, ~beyond], history.values[:rows][:, ~beyond])


def test_a_crash_with_readings_in_flight_rebuilds_their_rows_and_names_the_range_contract(
    spark: Any, history: Any, tmp_path: Path
) -> None:
    """Arrival delays: the out-of-order stage holds the newest rows back at each commit,
    and a crash loses its held readings with the batch in flight. Recovery counts those
    rows lost and rebuilds them from the backup their batches wrote, so every lost window
    gets a result, and the report names the range contract when the rows exceed the
    exposure. Before, the windows holding held rows were abandoned as having no whole
    backup and the report claimed the crash contract for the batch's rows alone."""
    from engine.disorder import parse_delays
    from engine.live.launch import Disorder
    from engine.live.recovery_report import covering_contract
    from tests.spark.conftest import make_spec

    spec = crash_spec(make_spec(history), exposure=3)
    late = Disorder(parse_delays("exp:900"), np.random.default_rng(1))
    report = run_simulation(history, spec, "approx", 0.5, PipelinePaths(tmp_path), LOCAL,
                            options=FAST, failure="crash", disorder=late)  # fmt: skip
    first, last = report.lost_rows
    assert report.windows_lost >= 1 and report.windows_unrecoverable == 0
    assert report.windows_recovered == report.windows_lost
    assert report.contract == covering_contract("crash", last - first + 1, 3)
    assert np.isfinite(np.asarray(report.errors, dtype=float)).all()
