"""The production job's plan versions without a JVM: the plan book, the schedule, the
parameters a re-plan repeats, and a recovery that rebuilds each row with its version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.data import load_history
from engine.errors import ConfigError, DataError, PipelineError
from engine.export import BackupConfig, load_config, plan_to_config
from engine.export.plan_book import JobPlan, read_plan_book
from engine.export.recover import recover_dataset
from engine.export.seal import seal_config
from engine.job.plans import PlanBook, Replanner, at_once
from engine.planning import PlanParameters, make_plan
from engine.query import WindowQuery
from tests.helpers import SMALL_SAMPLE

HOUR_US = 3_600_000_000


class MemoryFiles:
    """``DurableFiles`` on a dict (the job's real one goes through Hadoop)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def write(self, uri: str, data: bytes) -> None:
        self.data[uri] = data

    def read(self, uri: str) -> bytes:
        return self.data[uri]

    def names(self, uri: str) -> list[str]:
        prefix = uri.rstrip("/") + "/"
        return sorted(k[len(prefix) :] for k in self.data if k.startswith(prefix))

    def delete(self, uri: str) -> None:
        self.data.pop(uri, None)


PARAMS = PlanParameters(WindowQuery(20.0, 0.05, 8, aggregate="avg", horizon=24))


@pytest.fixture(scope="module")
def history():  # type: ignore[no-untyped-def]
    return load_history(SMALL_SAMPLE)


@pytest.fixture(scope="module")
def first(history) -> BackupConfig:  # type: ignore[no-untyped-def]
    return BackupConfig.from_dict(plan_to_config(make_plan(history.rows(0, 400), PARAMS)))


def until_us(config: BackupConfig) -> int:
    return int(pd.Timestamp(config.validity["valid_until"]).value // 1000)  # type: ignore[index]


def test_a_re_plan_repeats_the_request_behind_the_config(first: BackupConfig) -> None:
    again = first.plan_parameters()
    assert again == PARAMS  # query (its horizon the plan's, 24 rows) and method alike
    assert again.eps_by_sensor == ()  # one eps: no per-sensor overrides invented
    assert first.query == again.query


def test_a_re_plan_keeps_a_crash_contract_plans_exposure(first: BackupConfig) -> None:
    """A plan made for the crash contract is re-planned for the same exposure, not for
    whole windows (the range contract), which would back up far more."""
    data = first.to_dict()
    data["parameters"] = {**data["parameters"], "exposure": 3}
    data["guarantee"]["contract"] = "crash"  # as a crash plan's export says
    assert BackupConfig.from_dict(seal_config(data)).plan_parameters().exposure == 3
    assert first.plan_parameters().exposure is None


def test_the_book_starts_at_the_given_config_and_refuses_another(first, history) -> None:  # type: ignore[no-untyped-def]
    files = MemoryFiles()
    book = PlanBook(files, "file:///b")  # type: ignore[arg-type]
    assert book.start(first).version == 1
    again = PlanBook(files, "file:///b")  # type: ignore[arg-type]
    assert again.start(first).config == first  # a resumed job: read back, same plan
    other = BackupConfig.from_dict(plan_to_config(make_plan(history.rows(100, 500), PARAMS)))
    with pytest.raises(PipelineError, match="another plan"):
        PlanBook(files, "file:///b").start(other)  # type: ignore[arg-type]


def test_the_version_in_force_is_the_newest_that_started_at_or_before_a_batch(first) -> None:  # type: ignore[no-untyped-def]
    book = PlanBook(MemoryFiles(), "b")  # type: ignore[arg-type]
    book.start(first)
    book.add(JobPlan(2, 5, "scheduled", "", first))
    assert [book.in_force(b).version for b in (0, 4, 5, 9)] == [1, 1, 2, 2]
    book.add(JobPlan(2, 7, "scheduled", "again after a crash", first))  # replaces, not adds
    assert len(book.versions) == 2 and book.in_force(6).version == 1


def test_the_schedule_re_plans_once_the_watermark_passes_valid_until(first, history) -> None:  # type: ignore[no-untyped-def]
    book, logged = PlanBook(MemoryFiles(), "b"), []  # type: ignore[arg-type]
    book.start(first)
    asked: list[tuple[int, int]] = []

    def read(start: int, end: int) -> pd.DataFrame:
        asked.append((start, end))
        frame = history.rows(24, 424).to_frame()
        return frame

    replanner = Replanner(book, read, logged.append, 3600.0, run=at_once)
    until = until_us(first)
    assert replanner.after_batch(3, until - HOUR_US) is None and not asked
    new = replanner.after_batch(4, until)
    assert new is not None and (new.version, new.first_batch, new.reason) == (2, 5, "scheduled")
    rows = first.data["guarantee"]["history_rows"]
    assert asked == [(until - rows * HOUR_US, until)]  # as much history as version 1 had
    assert until_us(new.config) > until  # the new version's horizon starts at its fit end
    assert logged[-1]["event"] == "replan" and logged[-1]["plan_version"] == 2
    started = next(r for r in logged if r["event"] == "replan_started")
    assert started["background"] is False  # planned inside the batch: the page says so
    assert replanner.after_batch(5, until + HOUR_US) is None  # version 2 is not expired


def test_a_failed_re_plan_keeps_the_plan_says_so_and_retries_a_horizon_later(first) -> None:  # type: ignore[no-untyped-def]
    book, logged = PlanBook(MemoryFiles(), "b"), []  # type: ignore[arg-type]
    book.start(first)

    def gone(start: int, end: int) -> pd.DataFrame:
        raise DataError("the landing files of the fit period were deleted")

    replanner = Replanner(book, gone, logged.append, 3600.0, run=at_once)
    until = until_us(first)
    assert replanner.after_batch(4, until) is None
    assert logged[-1]["event"] == "plan_expired" and "deleted" in logged[-1]["reason"]
    assert replanner.after_batch(5, until + HOUR_US) is None and len(logged) == 2  # not yet
    horizon = first.validity["horizon_seconds"] * 1_000_000  # type: ignore[index]
    replanner.after_batch(6, until + int(horizon))
    assert [r["event"] for r in logged] == ["replan_started", "plan_expired"] * 2
    assert book.in_force(99).version == 1


def test_a_batch_run_again_withdraws_the_versions_its_uncommitted_run_wrote(first) -> None:  # type: ignore[no-untyped-def]
    """Batch 3 re-planned (version 2 from batch 4) and the run was killed before Spark
    committed it. Its rerun took version 3, then 4: versions that governed nothing, and
    version 2, written by a run whose decision the rerun did not repeat, governed from
    batch 4 once the job restarted."""
    files = MemoryFiles()
    book = PlanBook(files, "b")  # type: ignore[arg-type]
    book.start(first)
    book.add(JobPlan(book.next_version(), 3, "control", "batch 2's, committed", first))
    book.add(JobPlan(book.next_version(), 4, "alert", "", first))
    restarted = PlanBook(files, "b")  # type: ignore[arg-type]
    assert [p.version for p in restarted.versions] == [1, 2, 3]
    assert restarted.withdraw_after(3) == [3]  # batch 3 starts again
    assert restarted.next_version() == 3 and restarted.in_force(4).version == 2
    assert [p.version for p in PlanBook(files, "b").versions] == [1, 2]  # its file is gone
    assert restarted.withdraw_after(3) == []  # the versions of committed batches stay


def test_no_replan_says_once_that_the_plan_expired(first) -> None:  # type: ignore[no-untyped-def]
    book, logged = PlanBook(MemoryFiles(), "b"), []  # type: ignore[arg-type]
    book.start(first)
    replanner = Replanner(
        book, lambda a, b: pd.DataFrame(), logged.append, 3600.0, enabled=False, run=at_once
    )
    for batch in range(3):
        replanner.after_batch(batch, until_us(first) + batch)
    assert [r["event"] for r in logged] == ["plan_expired"] and "--no-replan" in logged[0]["reason"]


def _write_backup(
    root: Path, rows: Any, versions: list[tuple[int, BackupConfig, slice]], full: int = -1
) -> None:
    """A job-layout backup (one committed batch per version) and its plan book; batch
    ``full`` stores every sensor (a micro-batch over a crash plan's exposure)."""
    (root / "_lacuna" / "plans").mkdir(parents=True)
    for batch, (v, config, span) in enumerate(versions):
        frame = rows.rows(span.start, span.stop).to_frame()
        long = frame.melt(id_vars="time", var_name="sensor", value_name="value")
        if batch != full:
            long = long[long["sensor"].isin(config.backup_sensors)]
        folder = root / f"batch_id={batch}" / "date=2013-03-01"
        folder.mkdir(parents=True)
        table = pa.table(
            {
                "event_time": pa.array(long["time"].to_numpy(), pa.timestamp("us", tz="UTC")),
                "sensor": long["sensor"].to_numpy(),
                "value": long["value"].to_numpy(),
                "plan_version": np.full(len(long), v, dtype=np.int32),
            }
        )
        pq.write_table(table, folder / "part-0.parquet")
        (root / f"batch_id={batch}" / "_SUCCESS").touch()
        plan = JobPlan(v, batch, "initial" if v == 1 else "scheduled", "", config)
        (root / "_lacuna" / "plans" / f"v{v:06d}.json").write_bytes(plan.to_bytes())


def test_recovery_rebuilds_each_row_with_the_version_that_wrote_it(  # type: ignore[no-untyped-def]
    first, history, tmp_path
) -> None:
    second = BackupConfig.from_dict(plan_to_config(make_plan(history.rows(24, 424), PARAMS)))
    assert first.linear_map().backup != second.linear_map().backup or not np.allclose(
        first.linear_map().coef, second.linear_map().coef
    )
    backup = tmp_path / "backup"
    _write_backup(backup, history, [(1, first, slice(400, 424)), (2, second, slice(424, 448))])
    assert sorted(read_plan_book(backup)) == [1, 2]
    config = tmp_path / "plan.json"
    config.write_text(json.dumps(first.to_dict()))
    out = tmp_path / "all.parquet"
    result = recover_dataset(config, backup, out)
    assert result.rows == 48 and result.plan_versions == (1, 2)
    got = pd.read_parquet(out)[list(history.sensors)].to_numpy()
    want = []
    for config_v, span in ((first, slice(400, 424)), (second, slice(424, 448))):
        lm = config_v.linear_map()
        part = history.rows(span.start, span.stop)
        want.append(lm.apply(part.select(list(lm.backup)).values))
    np.testing.assert_allclose(got, np.vstack(want), rtol=1e-9, atol=1e-9)
    # Rebuilt all with version 1 (what recover did before plan versions) is different.
    lm1 = first.linear_map()
    old = lm1.apply(history.rows(400, 448).select(list(lm1.backup)).values)
    assert not np.allclose(got, old, rtol=1e-6)


def test_without_a_plan_book_rows_of_several_versions_are_said_to_use_the_config(  # type: ignore[no-untyped-def]
    first, history, tmp_path
) -> None:
    """A backup whose writer raised its plan version but keeps no plan book (the exported
    snippet): every row is rebuilt with --config, and the warning says so."""
    second = BackupConfig.from_dict(plan_to_config(make_plan(history.rows(24, 424), PARAMS)))
    backup = tmp_path / "backup"
    _write_backup(backup, history, [(1, first, slice(400, 424)), (2, second, slice(424, 448))])
    shutil.rmtree(backup / "_lacuna")
    config = tmp_path / "plan.json"
    config.write_text(json.dumps(first.to_dict()))
    result = recover_dataset(config, backup, tmp_path / "all.csv")
    said = [w for w in result.warnings if "keeps no plan book" in w]
    assert len(said) == 1 and "plan versions 1, 2" in said[0] and "--config" in said[0]
    assert result.plan_versions == (1, 2)
    alone = tmp_path / "alone"  # one version: the config is the plan of every row
    _write_backup(alone, history, [(1, first, slice(400, 424))])
    shutil.rmtree(alone / "_lacuna")
    one = recover_dataset(config, alone, tmp_path / "one.csv")
    assert not any("plan book" in w for w in one.warnings)


def test_a_reading_a_batch_stored_is_recovered_as_read_though_another_version_backs_it_up(  # type: ignore[no-untyped-def]
    first, history, tmp_path
) -> None:
    """Version 1's batch stored every sensor (over the exposure); version 2 backs up a
    sensor version 1 rebuilds. Over version 1's rows that sensor is the reading the
    backup holds, not version 1's rebuild of it (as every sensor outside both sets is)."""
    lm1 = first.linear_map()
    added = next(s for s in lm1.targets if s != lm1.targets[0])
    raw = plan_to_config(make_plan(history.rows(24, 424), PARAMS))
    raw["backup_sensors"] = [*raw["backup_sensors"], added]
    del raw["reconstruction"][added]
    for target in raw["reconstruction"].values():
        target["coefficients"][added] = 0.0
    second = BackupConfig.from_dict(seal_config(raw))  # as the job's controller exports it
    assert added in second.backup_sensors and added not in first.backup_sensors
    backup = tmp_path / "backup"
    spans = [(1, first, slice(400, 424)), (2, second, slice(424, 448))]
    _write_backup(backup, history, spans, full=0)
    config = tmp_path / "plan.json"
    config.write_text(json.dumps(first.to_dict()))
    result = recover_dataset(config, backup, tmp_path / "all.parquet")
    got = pd.read_parquet(tmp_path / "all.parquet")[list(history.sensors)].to_numpy()
    np.testing.assert_array_equal(got[:24], history.rows(400, 424).values)  # all as read
    assert result.stored_readings == 24 * len(lm1.targets)
    lm2 = second.linear_map()
    want = lm2.apply(history.rows(424, 448).select(list(lm2.backup)).values)
    np.testing.assert_allclose(got[24:], want, rtol=1e-9, atol=1e-9)


def test_a_versions_absent_backup_sensor_leaves_its_steps_unrebuilt_not_the_range(  # type: ignore[no-untyped-def]
    first, history, tmp_path
) -> None:
    """Version 2 backs up a sensor its batch lost entirely: version 1's rows are rebuilt,
    version 2's written with what the backup holds, and the warning names the sensor and
    its version. The whole range was refused, naming a sensor the config does not hold."""
    lm1 = first.linear_map()
    added = lm1.targets[0]
    raw = plan_to_config(make_plan(history.rows(24, 424), PARAMS))
    raw["backup_sensors"] = [*raw["backup_sensors"], added]
    del raw["reconstruction"][added]
    for target in raw["reconstruction"].values():
        target["coefficients"][added] = 0.0
    second = BackupConfig.from_dict(seal_config(raw))  # as the job's controller exports it
    backup = tmp_path / "backup"
    _write_backup(backup, history, [(1, first, slice(400, 424)), (2, second, slice(424, 448))])
    part = backup / "batch_id=1" / "date=2013-03-01" / "part-0.parquet"
    table = pq.read_table(part)
    pq.write_table(table.filter(pa.compute.not_equal(table["sensor"], added)), part)
    config = tmp_path / "plan.json"
    config.write_text(json.dumps(first.to_dict()))
    result = recover_dataset(config, backup, tmp_path / "all.parquet")
    got = pd.read_parquet(tmp_path / "all.parquet")[list(history.sensors)]
    want = lm1.apply(history.rows(400, 424).select(list(lm1.backup)).values)
    np.testing.assert_allclose(got.to_numpy()[:24], want, rtol=1e-9, atol=1e-9)
    assert result.incomplete_rows == 24 and got[list(second.linear_map().targets)][24:].isna().all(
        axis=None
    )
    said = [w for w in result.warnings if "holds no readings of" in w]
    assert said == [
        f"the range holds no readings of backup sensor(s) {added} of plan version 2 "
        "(24 step(s)): none of its steps is rebuilt"
    ]
    # nothing rebuilt at all (a backup of version 2 alone): refused, naming sensor and version
    only = tmp_path / "only"
    _write_backup(only, history, [(2, second, slice(424, 448))])
    part = only / "batch_id=0" / "date=2013-03-01" / "part-0.parquet"
    pq.write_table(table.filter(pa.compute.not_equal(table["sensor"], added)), part)
    config.write_text(json.dumps(second.to_dict()))
    with pytest.raises(
        ConfigError, match=f"no readings of backup sensor.s. {added} of plan version 2"
    ):
        recover_dataset(config, only, tmp_path / "two.csv")


def test_recovery_refuses_a_config_that_is_no_version_of_the_backup(  # type: ignore[no-untyped-def]
    first, history, tmp_path
) -> None:
    backup = tmp_path / "backup"
    _write_backup(backup, history, [(1, first, slice(400, 424))])
    other = BackupConfig.from_dict(plan_to_config(make_plan(history.rows(200, 600), PARAMS)))
    config = tmp_path / "other.json"
    config.write_text(json.dumps(other.to_dict()))
    with pytest.raises(ConfigError, match="none of the backup's 1 plan version"):
        recover_dataset(config, backup, tmp_path / "x.csv")
    assert load_config(config).backup_sensors  # the config itself is valid


def _alert(*sensors: str) -> Any:
    from engine.planning.monitor import MonitorAlert

    names = sensors or ("Dongsi_PM2.5",)
    return MonitorAlert(
        names, dict.fromkeys(names, 0.5), dict.fromkeys(names, 0.3), 12,
        f"live violation rate of {names[0]} is 50 %",
    )  # fmt: skip


def test_an_alert_re_plans_before_the_horizon_once_per_version(first, history) -> None:  # type: ignore[no-untyped-def]
    book, logged = PlanBook(MemoryFiles(), "b"), []  # type: ignore[arg-type]
    book.start(first)
    replanner = Replanner(
        book, lambda a, b: history.rows(0, 400).to_frame(), logged.append, 3600.0, run=at_once
    )
    early = until_us(first) - 10 * HOUR_US
    new = replanner.after_batch(2, early, _alert())
    assert new is not None and (new.version, new.reason) == (2, "alert")
    assert "live violation rate of Dongsi_PM2.5" in new.detail
    assert logged[-1]["reason"] == "alert"
    assert replanner.after_batch(2, early, _alert()) is None  # not twice for version 1
    assert replanner.after_batch(3, early, _alert()) is not None  # version 2's first alert


def test_a_failed_alert_re_plan_keeps_the_version_and_its_schedule(first, history) -> None:  # type: ignore[no-untyped-def]
    book, logged = PlanBook(MemoryFiles(), "b"), []  # type: ignore[arg-type]
    book.start(first)
    reads = iter([DataError("landing files gone"), history.rows(24, 424).to_frame()])

    def read(start: int, end: int) -> pd.DataFrame:
        got = next(reads)
        if isinstance(got, Exception):
            raise got
        return got

    replanner = Replanner(book, read, logged.append, 3600.0, run=at_once)
    assert replanner.after_batch(2, until_us(first) - HOUR_US, _alert()) is None
    assert logged[-1]["event"] == "replan_failed" and "gone" in logged[-1]["error"]
    new = replanner.after_batch(3, until_us(first))  # the schedule is not pushed back
    assert new is not None and new.reason == "scheduled"


def test_a_sensor_that_alerts_again_under_its_fix_is_pinned_to_the_backup(first, history) -> None:  # type: ignore[no-untyped-def]
    """First alert: a fresh plan (a stale fit is cured by it). The same sensor alerting
    under that fresh plan is not rebuildable here: every later version backs it up."""
    files = MemoryFiles()
    book, logged = PlanBook(files, "b"), []  # type: ignore[arg-type]
    book.start(first)
    rebuilt = [s for s in first.sensors if s not in first.backup_sensors]
    a, b = rebuilt[0], rebuilt[1]
    replanner = Replanner(
        book, lambda x, y: history.rows(0, 400).to_frame(), logged.append, 3600.0, run=at_once
    )
    early = until_us(first) - 10 * HOUR_US

    v2 = replanner.after_batch(2, early, _alert(a))
    assert v2 is not None and v2.alerted == (a,) and v2.pinned == ()
    v3 = replanner.after_batch(3, early, _alert(a, b))  # a again; b for the first time
    assert v3 is not None and v3.alerted == tuple(sorted((a, b))) and v3.pinned == (a,)
    assert a in v3.config.backup_sensors and "pinned" in v3.detail
    assert logged[-1]["pinned"] == [a]
    warned = v3.config.data["guarantee"]["warnings"]
    assert any("backtest measured the plan without them" in w for w in warned)
    v4 = replanner.after_batch(4, until_us(v3.config))  # a scheduled re-plan keeps the pin
    assert v4 is not None and v4.reason == "scheduled" and v4.pinned == (a,)
    assert a in v4.config.backup_sensors
    again = PlanBook(files, "b")  # type: ignore[arg-type]
    assert [(p.alerted, p.pinned) for p in again.versions] == [
        ((), ()), ((a,), ()), (tuple(sorted((a, b))), (a,)), ((), (a,))
    ]  # fmt: skip


def test_a_re_plan_computes_in_the_background_while_batches_go_on(first, history) -> None:  # type: ignore[no-untyped-def]
    """The batch that starts a re-plan does not wait for it; the first batch after it is
    done adds the version, from the batch after that; one re-plan at a time; a job
    that stops first gives it up."""
    from concurrent.futures import Future

    book, logged = PlanBook(MemoryFiles(), "b"), []  # type: ignore[arg-type]
    book.start(first)
    works: list[tuple[Future[Any], Any]] = []

    def later(work):  # type: ignore[no-untyped-def]
        future: Future[Any] = Future()
        works.append((future, work))
        return future

    replanner = Replanner(
        book, lambda a, b: history.rows(24, 424).to_frame(), logged.append, 3600.0, run=later
    )
    until = until_us(first)
    assert replanner.after_batch(4, until) is None and replanner.busy  # started, not waited for
    assert replanner.after_batch(5, until + HOUR_US, _alert()) is None  # still one at a time
    assert len(works) == 1 and book.in_force(6).version == 1
    future, work = works[0]
    future.set_result(work())  # the plan is ready during batch 6
    new = replanner.after_batch(6, until + 2 * HOUR_US)
    assert new is not None and (new.version, new.first_batch, new.reason) == (2, 7, "scheduled")
    assert logged[-1]["started_batch"] == 4 and book.in_force(7).version == 2
    assert not replanner.busy

    assert replanner.after_batch(7, until_us(new.config)) is None and replanner.busy
    replanner.close()  # the job stops before it is done
    assert logged[-1]["event"] == "replan_abandoned" and not replanner.busy
    assert works[1][0].cancelled() and len(book.versions) == 2
    assert "before the re-plan finished" in logged[-1]["reason"]

    # finished, but the job stops before a micro-batch takes it: said too, not silent
    assert replanner.after_batch(8, until_us(new.config)) is None and replanner.busy
    works[2][0].set_result(works[2][1]())
    replanner.close()
    assert logged[-1]["event"] == "replan_abandoned" and len(book.versions) == 2
    assert "before a micro-batch took the finished re-plan" in logged[-1]["reason"]


def test_the_background_runner_hands_back_results_and_errors() -> None:
    from engine.job.plans import in_background

    assert in_background(lambda: 42).result(timeout=10) == 42

    def fails() -> None:
        raise DataError("gone")

    with pytest.raises(DataError, match="gone"):
        in_background(fails).result(timeout=10)


def test_a_plan_book_file_is_accepted_as_a_config(first: BackupConfig, tmp_path: Path) -> None:
    """An operator passes ``_lacuna/plans/v000002.json`` to ``recover --config``: it holds
    the version's config under ``config``, which is what is read."""
    from engine.export import load_config
    from engine.export.plan_book import JobPlan

    record = JobPlan(2, 7, "scheduled", "horizon passed", first)
    (tmp_path / "v000002.json").write_bytes(record.to_bytes())
    assert load_config(tmp_path / "v000002.json") == first
