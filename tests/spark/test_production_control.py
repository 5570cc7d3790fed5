"""The production job's online control on real Spark: a crash or range plan's rebuilt
sensor that starts missing is backed up from the next micro-batch on, by a plan version of kind
``control`` the job writes itself, and the backup holds its readings from there; the
model is fitted again on the version's fit period from the landing directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import read_backup
from engine.data.history import history_from_frame
from engine.export import plan_to_config
from engine.export.plan_book import read_plan_book
from engine.job import read_job_status
from engine.planning import PlanParameters, make_plan
from engine.query import WindowQuery
from tests.production_reference import Rows, feed, run_landed

pytestmark = pytest.mark.spark

HISTORY, STREAM = 400, 72  # rows: the plan's fit period, then the stream's files
EXPOSURE = 4


def file_rows(exposure: int | None) -> int:
    """A crash plan's stream lands in files of its exposure; a range plan's in 8 rows."""
    return exposure or 8


def _landed(tmp: Path, exposure: int | None) -> tuple[Rows, Path]:
    """Four sensors reading one AR(1) factor plus their own noise, hourly. The plan (avg,
    window 8, slide 4, eps 0.5, ``exposure``) of the first 400 rows backs up d alone;
    in the stream a reads 30 above what the map rebuilds. The history lands as one file,
    the stream in files of ``file_rows(exposure)`` rows."""
    rng = np.random.default_rng(0)
    f = np.zeros(HISTORY + 96)  # the same draws whatever the stream's length
    for t in range(1, f.size):
        f[t] = 0.95 * f[t - 1] + rng.normal(0, 1)
    x = f[:, None] + rng.normal(0, 0.3, (f.size, 4))
    times = pd.date_range("2026-01-01", periods=f.size, freq="h")
    frame = pd.DataFrame({"time": times, **{s: x[:, i] for i, s in enumerate("abcd")}})
    query = WindowQuery(0.5, 0.05, 8, slide=4, aggregate="avg", horizon=48, exposure=exposure)
    plan = make_plan(history_from_frame(frame[:HISTORY]), PlanParameters(query))
    assert plan.backup_sensors == ("d",)
    config = tmp / "plan.json"
    config.write_text(json.dumps(plan_to_config(plan)))
    x[HISTORY:, 0] += 30.0
    rows = Rows(times.to_numpy(), x, ("a", "b", "c", "d"))
    feed(rows, tmp / "landing", rows_per_file=HISTORY, stop=HISTORY)
    each = file_rows(exposure)
    feed(rows, tmp / "landing", rows_per_file=each, start=HISTORY, stop=HISTORY + STREAM)
    return rows, config


@pytest.mark.parametrize("exposure", [EXPOSURE, None], ids=["crash", "range"])
def test_a_rebuilt_sensor_that_starts_missing_is_backed_up_by_online_control(
    spark: Any, tmp_path: Path, exposure: int | None
) -> None:
    rows, config = _landed(tmp_path, exposure)
    report, logged = run_landed(spark, tmp_path, config, max_files_per_trigger=1, control=True)
    assert report.batches == 1 + STREAM // file_rows(exposure)
    events = [e["event"] for e in logged]
    mode = next(e for e in logged if e["event"] == "control_mode")
    assert mode["online_control"] is True
    assert f"({'crash' if exposure else 'range'} contract)" in mode["reason"]
    assert events.index("control_fit_started") < events.index("control_started")
    changes = [e for e in logged if e["event"] == "control"]
    # a is added (under the range contract the controller may first add b, which the
    # model says predicts a, before a's own misses force a)
    adds_a = next(e for e in changes if "a" in e["added"])
    assert not any(e["released"] for e in changes[: changes.index(adds_a) + 1])
    first = adds_a["first_batch"]
    book = read_plan_book(tmp_path / "backup")
    assert {"a", "d"} <= set(book[adds_a["plan_version"]].backup_sensors)
    # in the stream (batch 0, the history, was over the exposure: every sensor backed up)
    # the backup holds each of a's readings from the version's first batch on, none before
    backup = read_backup(tmp_path / "backup")
    times = pd.to_datetime(backup["event_time"]).to_numpy()
    a = backup[(backup["sensor"] == "a") & (times >= rows.times[HISTORY])]
    start = rows.times[HISTORY + (first - 1) * file_rows(exposure)]
    fed = rows.times[: HISTORY + STREAM]
    assert pd.to_datetime(a["event_time"]).tolist() == list(fed[fed >= start])
    assert a["plan_version"].min() >= adds_a["plan_version"]  # or a re-plan adopting it
    kept = sorted(p.name for p in (tmp_path / "backup" / "_lacuna" / "events").iterdir())
    assert any(n.endswith("-control.json") for n in kept)
    shadow = [e for e in logged if e["event"] == "shadow"]
    assert shadow[-1]["control"]["active"] and shadow[-1]["control"]["windows"] > 0
    if exposure:  # windows read partly before a version began are its predecessor's record
        assert sum(e["crash_windows_older_version"] for e in shadow) > 0
    # what `engine status` and the Production page read back from the backup alone
    said = read_job_status(tmp_path / "backup").summary()["online_control"]
    assert said == shadow[-1]["control"] and said["miss_bound"] is not None
