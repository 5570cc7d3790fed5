"""The production job on real Spark, checked against a pure-Python run on the same data.

One run feeds half the history, stops (availableNow), then resumes from its
checkpoint on the rest: the backup must hold every backup reading exactly once,
the results every closed window exactly once, both equal to the reference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import TimeRange, read_backup
from engine.errors import PipelineError
from engine.export import load_config
from engine.export.recover import recover_dataset
from engine.query import WindowQuery
from tests.production_reference import (
    BACKUP,
    Rows,
    feed,
    job_settings,
    long_readings,
    read_results,
    reference_results,
    run_landed,
    sample_rows,
    write_config,
    wrong_map_config,
)

pytestmark = pytest.mark.spark


def _run(spark: Any, tmp: Path, config: Path, **kw: Any) -> Any:
    return run_landed(spark, tmp, config, **kw)


def _compare(got: pd.DataFrame, want: pd.DataFrame) -> None:
    keys = ["start_s", "end_s", "sensor"]
    assert not got.duplicated(keys).any(), "a window was written twice"
    merged = want.merge(got, on=keys, how="outer", suffixes=("_ref", ""), indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"][keys]
    np.testing.assert_array_equal(merged["n"], merged["n_ref"])
    np.testing.assert_allclose(merged["value"], merged["value_ref"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(merged["rebuilt"], merged["rebuilt_ref"], rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(merged["miss"], merged["miss_ref"])


def test_job_backup_results_and_resume_match_the_reference(spark: Any, tmp_path: Path) -> None:
    rows = sample_rows(96)
    config = tmp_path / "plan.json"
    write_config(config, rows, aggregate="avg", eps=1.0)
    feed(rows, tmp_path / "landing", rows_per_file=12, stop=48)
    first, logged = _run(spark, tmp_path, config, replan=False)  # one map: the reference's
    assert first.stopped_by == "available_now" and first.input_rows == 48 * 6
    # the progress line counts readings, not Spark's rows of the batch's two scans
    progress = [r for r in logged if r["event"] == "progress" and r.get("readings")]
    shadow = {r["batch_id"]: r["readings"] for r in logged if r["event"] == "shadow"}
    assert sum(r["readings"] for r in progress) == 48 * 6
    assert all(r["readings"] == shadow[r["batchId"]] for r in progress)
    assert all("numInputRows" not in r and r["readings_per_second"] > 0 for r in progress)
    feed(rows, tmp_path / "landing", rows_per_file=12, start=48)
    second, _ = _run(spark, tmp_path, config, replan=False)
    assert second.input_rows == 48 * 6  # resumed: the first half is not read again

    backup = read_backup(tmp_path / "backup")
    truth = long_readings(rows)
    want = truth[truth["sensor"].isin(BACKUP)].sort_values(["event_time", "sensor"])
    assert len(backup) == len(want) == 96 * len(BACKUP)
    np.testing.assert_array_equal(backup["event_time"].to_numpy(), want["event_time"].to_numpy())
    np.testing.assert_array_equal(backup["value"].to_numpy(), want["value"].to_numpy())
    assert set(backup["plan_version"]) == {1}

    lm = load_config(config).linear_map()
    reference = reference_results(rows, lm, 8 * 3600.0, 4 * 3600.0, "avg", 1.0)
    got = read_results(tmp_path / "backup")
    _compare(got, reference)
    assert reference["miss"].any() and not reference["miss"].all()  # the check can fail
    rebuilt = ~got["backed_up"]
    assert first.misses + second.misses == int(got.loc[rebuilt, "miss"].sum())
    assert any(r["event"] == "shadow" and r["windows"] > 0 for r in logged)
    assert any(r["event"] == "alert" for r in logged)  # this map misses; the monitor says so


def test_job_max_shadow_runs_per_window_on_executors(spark: Any, tmp_path: Path) -> None:
    rows = sample_rows(48)
    config = tmp_path / "plan.json"
    write_config(config, rows, aggregate="max", eps=2.0, window=6, slide=3)
    feed(rows, tmp_path / "landing", rows_per_file=24)
    report, _ = _run(spark, tmp_path, config)
    lm = load_config(config).linear_map()
    reference = reference_results(rows, lm, 6 * 3600.0, 3 * 3600.0, "max", 2.0)
    _compare(read_results(tmp_path / "backup"), reference)
    assert report.windows == reference["start_s"].nunique()


def test_recover_a_range_from_the_job_backup(spark: Any, tmp_path: Path) -> None:
    rows = sample_rows(72)
    config = tmp_path / "plan.json"
    write_config(config, rows)
    feed(rows, tmp_path / "landing", rows_per_file=24)
    _run(spark, tmp_path, config)
    start, end = pd.Timestamp(rows.times[30]), pd.Timestamp(rows.times[54])
    out = tmp_path / "rebuilt.parquet"
    result = recover_dataset(config, tmp_path / "backup", out, start.isoformat(), end.isoformat())
    assert result.rows == 24 and result.plan_versions == (1,)
    rebuilt = pd.read_parquet(out)
    lm = load_config(config).linear_map()
    expected = lm.apply(rows.values[30:54][:, [rows.sensors.index(b) for b in lm.backup]])
    np.testing.assert_allclose(rebuilt[list(lm.sensors)].to_numpy(), expected, rtol=1e-12)
    assert read_backup(tmp_path / "backup", TimeRange.parse(None, start.isoformat())).shape[0] == 60


def _ran_with_nothing_landed(spark: Any, tmp: Path, n_rows: int) -> tuple[Rows, Path, Any]:
    """The sample's first ``n_rows`` (not landed yet), a sum plan of them (eps 3) and the
    report of one job run over the empty landing directory: its query and checkpoint
    exist, no batch ran."""
    rows = sample_rows(n_rows)
    config = tmp / "plan.json"
    write_config(config, rows, aggregate="sum", eps=3.0)
    (tmp / "landing").mkdir()
    return rows, config, _run(spark, tmp, config, replan=False)[0]


def test_a_batch_replayed_after_a_crash_is_neither_lost_nor_counted_twice(
    spark: Any, tmp_path: Path
) -> None:
    rows, config, nothing = _ran_with_nothing_landed(spark, tmp_path, 72)
    assert nothing.batches == 0 and nothing.input_rows == 0  # Spark reports one progress
    feed(rows, tmp_path / "landing", rows_per_file=12, stop=36)
    # one map, the reference's: this map misses, and a resumed monitor would re-plan
    first, _ = _run(spark, tmp_path, config, max_files_per_trigger=1, replan=False)
    assert first.batches == 3
    # the crash: every output of batch 2 written, Spark's commit of it not
    commits = tmp_path / "checkpoint" / "job" / "commits"
    for name in ("2", ".2.crc"):
        (commits / name).unlink(missing_ok=True)
    feed(rows, tmp_path / "landing", rows_per_file=12, start=36)
    second, logged = _run(spark, tmp_path, config, max_files_per_trigger=1, replan=False)
    assert [r["batch_id"] for r in logged if r["event"] == "shadow"] == [2, 3, 4, 5]
    resumed = [r for r in logged if r["event"] == "monitor_resumed"]
    assert resumed and resumed[0]["before_batch"] == 2  # the replayed batch is counted once
    assert second.input_rows == 48 * 6  # batch 2 again, then three new files

    backup = read_backup(tmp_path / "backup")
    assert len(backup) == 72 * len(BACKUP)
    assert not backup.duplicated(["event_time", "sensor"]).any()
    lm = load_config(config).linear_map()
    reference = reference_results(rows, lm, 8 * 3600.0, 4 * 3600.0, "sum", 3.0)
    _compare(read_results(tmp_path / "backup"), reference)


def test_a_job_stopped_while_its_first_batch_was_logged_starts_again(
    spark: Any, tmp_path: Path
) -> None:
    rows, config, _ = _ran_with_nothing_landed(spark, tmp_path, 48)  # the query, no batch
    # a stop or kill while Spark wrote batch 0's offsets leaves its temporary file
    offsets = tmp_path / "checkpoint" / "job" / "offsets"
    offsets.mkdir(exist_ok=True)
    (offsets / ".0.7d1f4c2a-5b3e-4f60-9a8b-2c1d0e9f8a7b.tmp").write_bytes(b"")
    feed(rows, tmp_path / "landing", rows_per_file=12)
    report, logged = _run(spark, tmp_path, config, replan=False)
    assert report.input_rows == 48 * 6
    cleared = [r["removed"] for r in logged if r["event"] == "checkpoint_cleared"]
    assert cleared == [["offsets/.0.7d1f4c2a-5b3e-4f60-9a8b-2c1d0e9f8a7b.tmp"]]
    lm = load_config(config).linear_map()
    reference = reference_results(rows, lm, 8 * 3600.0, 4 * 3600.0, "sum", 3.0)
    _compare(read_results(tmp_path / "backup"), reference)


def test_a_checkpoint_of_the_two_query_job_is_refused(spark: Any, tmp_path: Path) -> None:
    rows = sample_rows(24)
    config = tmp_path / "plan.json"
    write_config(config, rows)
    feed(rows, tmp_path / "landing", rows_per_file=12)
    (tmp_path / "checkpoint" / "windows").mkdir(parents=True)
    with pytest.raises(PipelineError, match="two-query job"):
        _run(spark, tmp_path, config)


def test_the_job_re_plans_on_schedule_and_recovery_uses_each_version(
    spark: Any, tmp_path: Path
) -> None:
    """A v2 plan fitted on the first 400 rows, kept for 24: streamed on, the job plans
    again each time the watermark passes the version's valid_until (fitting on the
    landed readings before it), stamps every backup row with the version in force,
    and ``recover`` rebuilds each time step with the version that wrote it."""
    from engine.data import load_history
    from engine.export import plan_to_config
    from engine.export.plan_book import read_plan_book
    from engine.planning import PlanParameters, make_plan
    from tests.helpers import SMALL_SAMPLE

    history = load_history(SMALL_SAMPLE)
    params = PlanParameters(WindowQuery(20.0, 0.05, 8, aggregate="avg", horizon=24))
    config = tmp_path / "plan.json"
    config.write_text(json.dumps(plan_to_config(make_plan(history.rows(0, 400), params))))
    rows = Rows(history.times[:472], history.values[:472], history.sensors)
    feed(rows, tmp_path / "landing", rows_per_file=12)
    report, logged = _run(spark, tmp_path, config, max_files_per_trigger=4)

    book = read_plan_book(tmp_path / "backup")
    replans = [r for r in logged if r["event"] == "replan"]
    assert len(book) == report.plan_versions == 1 + len(replans) >= 2
    backup = read_backup(tmp_path / "backup")
    for v, part in backup.groupby("plan_version"):
        assert set(part["sensor"]) <= set(book[int(v)].backup_sensors)
    used = sorted(int(v) for v in backup["plan_version"].unique())
    assert used[0] == 1 and len(used) >= 2 and set(used) <= set(book)  # the last may be unused
    assert not backup.duplicated(["event_time", "sensor"]).any()
    for r in replans:  # each version was fitted before the batch that first used it
        until = pd.Timestamp(book[r["plan_version"] - 1].validity["valid_until"])  # type: ignore[index]
        first_used = backup.loc[backup["plan_version"] == r["plan_version"], "event_time"].min()
        assert pd.isna(first_used) or pd.Timestamp(first_used).tz_localize(
            None
        ) >= until.tz_localize(None)

    out = tmp_path / "all.parquet"
    result = recover_dataset(config, tmp_path / "backup", out)
    assert result.plan_versions == tuple(used)
    got = pd.read_parquet(out)
    step = backup.groupby("event_time")["plan_version"].max()
    want = []
    for t, v in step.items():
        lm = book[int(v)].linear_map()
        i = int(
            np.flatnonzero(history.times == pd.Timestamp(t).tz_localize(None).to_datetime64())[0]
        )
        x = history.values[i, [history.sensors.index(b) for b in lm.backup]]
        want.append(lm.apply(x[None, :])[0])
    np.testing.assert_allclose(got[list(history.sensors)].to_numpy(), np.array(want), rtol=1e-9)


def test_the_live_monitor_alerts_and_the_job_re_plans_before_the_horizon(
    spark: Any, tmp_path: Path
) -> None:
    """A plan whose map is wrong (every rebuilt target off by 1,000): the job's monitor
    alerts once its rebuilt windows show it, and the job re-plans at once (the alert
    re-planner alone: --no-control; under control, test_production_control)."""
    from engine.export.plan_book import read_plan_book

    path = tmp_path / "plan.json"
    history, config = wrong_map_config(path)
    assert 0 < len(config["backup_sensors"]) < len(config["sensors"])
    rows = Rows(history.times[:240], history.values[:240], history.sensors)
    feed(rows, tmp_path / "landing", rows_per_file=24)
    _, logged = _run(spark, tmp_path, path, max_files_per_trigger=1, control=False)

    alerts = [r for r in logged if r["event"] == "alert"]
    assert alerts and alerts[0]["plan_version"] == 1
    book = read_plan_book(tmp_path / "backup")
    plans = tmp_path / "backup" / "_lacuna" / "plans"
    second = json.loads((plans / "v000002.json").read_text())
    assert second["reason"] == "alert" and len(book) >= 2
    results = read_results(tmp_path / "backup")
    assert "plan_version" in results
    assert set(results["plan_version"]) >= {1, 2}  # windows closed under the new version
    rebuilt = results[~results["backed_up"]]
    old = rebuilt["plan_version"] == 1
    assert rebuilt.loc[old, "miss"].all()  # every window read under the wrong map missed
    # a window is scored as a recovery returns it and on the record of the version its
    # readings were backed up under: one read under version 1 that closed in version 2's
    # first batch is version 1's miss, never version 2's
    assert (rebuilt.loc[old, "batch_id"] >= second["first_batch"]).any()
    assert rebuilt.loc[~old, "miss"].mean() < 0.5 if (~old).any() else True  # or all backed up

    # what the console and `engine status` read back, with DuckDB, from the backup alone
    from engine.cli import main as cli_main
    from engine.job.status import read_job_status

    status = read_job_status(tmp_path / "backup")
    assert [p.version for p in status.versions] == sorted(book)
    kinds = {(e["event"], e.get("plan_version")) for e in status.events}
    assert ("alert", 1) in kinds and ("replan", 2) in kinds
    shadows = [r for r in logged if r["event"] == "shadow"]
    assert status.batches["batch_id"].tolist() == [r["batch_id"] for r in shadows]
    assert status.summary()["readings"] == sum(r["readings"] for r in shadows)
    scored = rebuilt[rebuilt["rebuilt"].notna()]
    want = scored.groupby(["plan_version", "sensor"])["miss"].agg(["size", "sum"]).reset_index()
    got = status.rates.merge(want, on=["plan_version", "sensor"], how="outer")
    assert len(got) == len(want) == len(status.rates)
    assert (got["windows"] == got["size"]).all() and (got["misses"] == got["sum"]).all()
    first = status.version_rates(1)
    assert first["above_delta"].any()  # every window of the wrong map missed
    assert cli_main(["status", "--backup", str(tmp_path / "backup")]) == 0


def test_a_restarted_job_keeps_counting_its_versions_windows(spark: Any, tmp_path: Path) -> None:
    """The wrong map again (every target off by 1,000), fed in two runs of 8 windows each:
    neither run alone shows a sensor the monitor's 10 windows, both together do. The
    second run starts its tally from the first run's durable results and alerts."""
    path = tmp_path / "plan.json"
    history, _ = wrong_map_config(path)
    rows = Rows(history.times[:128], history.values[:128], history.sensors)
    feed(rows, tmp_path / "landing", rows_per_file=16, stop=64)
    _, first = _run(spark, tmp_path, path, replan=False)
    assert not [r for r in first if r["event"] in ("alert", "monitor_resumed")]
    feed(rows, tmp_path / "landing", rows_per_file=16, start=64)
    _, second = _run(spark, tmp_path, path, replan=False)

    resumed = [r for r in second if r["event"] == "monitor_resumed"]
    results = read_results(tmp_path / "backup")
    rebuilt = results[~results["backed_up"] & results["rebuilt"].notna()]
    shadows = [r for r in first if r["event"] == "shadow"]
    assert len(resumed) == 1 and resumed[0]["plan_version"] == 1
    assert resumed[0]["rebuilt_pairs"] == sum(r["rebuilt_pairs"] for r in shadows) > 0
    assert resumed[0]["misses"] == resumed[0]["rebuilt_pairs"]  # every rebuilt window misses
    assert rebuilt.groupby("sensor").size().max() >= 10  # together they are enough
    assert [r for r in second if r["event"] == "alert"]

    # the results are Spark's to read too: microsecond timestamps, not pandas' nanoseconds
    on_spark = spark.read.parquet(str(tmp_path / "backup" / "_lacuna" / "results"))
    assert on_spark.count() == len(results)

    # a third run: the monitor alerts in every batch (the rates stay above delta); the
    # log says each sensor once, and each batch's metrics count the sensors alerting
    more = Rows(history.times[:192], history.values[:192], history.sensors)
    feed(more, tmp_path / "landing", rows_per_file=16, start=128)
    _, third = _run(spark, tmp_path, path, replan=False, max_files_per_trigger=1)
    alerts = [r for r in third if r["event"] == "alert"]
    named = [s for r in alerts for s in r["new_sensors"]]
    assert alerts and len(named) == len(set(named)) == len(alerts[-1]["sensors"])
    batches = [r for r in third if r["event"] == "shadow"]
    assert len(batches) == 4 and all(r["alerting_sensors"] == len(named) for r in batches)
    assert len(alerts) < len(batches)


def test_a_streaming_job_re_plans_in_the_background_while_batches_go_on(
    spark: Any, tmp_path: Path
) -> None:
    """A continuous job (no --available-now) whose map is wrong: the alert starts a
    re-plan, batches keep coming under version 1 while it computes, and version 2
    governs from the batch after the one that found it done. (A re-plan inside the
    batch would make the very next batch version 2's.) The alert re-planner alone
    (--no-control)."""
    import threading
    import time

    from engine.export import load_config
    from engine.job.run import run_job

    path = tmp_path / "plan.json"
    history, _ = wrong_map_config(path)
    rows = Rows(history.times[:720], history.values[:720], history.sensors)
    landing = tmp_path / "landing"
    feed(rows, landing, rows_per_file=24, stop=144)
    settings = job_settings(tmp_path, trigger_s=0.2, max_files_per_trigger=1, control=False)
    stop, logged = threading.Event(), []
    args = (spark, load_config(path), settings, stop)
    job = threading.Thread(target=run_job, args=args, kwargs={"log": logged.append})
    job.start()

    def wait_for(found: Any, seconds: float = 120.0) -> None:
        deadline = time.monotonic() + seconds
        while not found() and job.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert found(), [r["event"] for r in logged]

    def under_v2() -> bool:
        return any(r["event"] == "shadow" and r["plan_version"] == 2 for r in logged)

    try:
        wait_for(lambda: any(r["event"] == "replan_started" for r in logged))
        for start in range(144, 720, 24):  # files keep landing while it plans
            feed(rows, landing, rows_per_file=24, start=start, stop=start + 24)
            time.sleep(0.4)
            if under_v2():
                break
        wait_for(under_v2)
    finally:
        stop.set()
        job.join(timeout=60)
    started = next(r for r in logged if r["event"] == "replan_started")
    replan = next(r for r in logged if r["event"] == "replan")
    assert started["reason"] == "alert" and replan["started_batch"] == started["batch_id"]
    assert started["background"] is True
    assert replan["first_batch"] >= started["batch_id"] + 2  # at least one batch went on
    under_v1 = [r for r in logged if r["event"] == "shadow" and r["plan_version"] == 1]
    assert max(r["batch_id"] for r in under_v1) == replan["first_batch"] - 1
    from engine.job.status import read_job_status

    kept = {e["event"] for e in read_job_status(tmp_path / "backup").events}
    assert {"alert", "replan_started", "replan"} <= kept  # what the console shows


def test_a_config_the_backup_was_not_started_with_leaves_its_record_alone(
    spark: Any, tmp_path: Path
) -> None:
    """Refused (version 1 differs from --config): the start record ``run.json`` that
    `status` reads the contract and durability from was overwritten before the refusal.
    And the run's report says its counts are this run's and which contract it measured;
    flags the run takes but does not use are said."""
    rows = sample_rows(48)
    config = tmp_path / "plan.json"
    write_config(config, rows, aggregate="avg", eps=1.0)
    feed(rows, tmp_path / "landing", rows_per_file=12)
    report, logged = _run(spark, tmp_path, config, replan=False, trigger_s=5.0)
    assert (report.scope, report.contract, report.crash_windows) == ("this run", "range", 0)
    assert report.batches == 1 and report.plan_versions == 1  # what landed, one catch-up batch
    ignored = [r["flag"] for r in logged if r["event"] == "flag_ignored"]
    assert len(ignored) == 1 and ignored[0].startswith("--trigger")
    record = (tmp_path / "backup" / "_lacuna" / "run.json").read_bytes()
    other = tmp_path / "other.json"
    write_config(other, rows, aggregate="avg", eps=2.0, exposure=4)
    with pytest.raises(PipelineError, match="was started with another plan"):
        _run(spark, tmp_path, other, replan=False)
    assert (tmp_path / "backup" / "_lacuna" / "run.json").read_bytes() == record
