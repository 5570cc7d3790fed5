"""The Production page on a job's record that is incomplete, old or long: each said, with
the job's layout written by PyArrow (``bench.bench_compaction``), no Spark."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from bench.bench_compaction import write_backup
from tests.app.apphelpers import ROOT, metric, texts

pytestmark = pytest.mark.app


def _page(backup: Path) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / "production.py"), default_timeout=60).run()
    at.text_input(key="w_prod_backup").input(str(backup)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_record_without_its_results_is_said_incomplete(tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    write_backup(backup, 12)
    at = _page(backup)
    assert "record is incomplete" not in texts(at)
    shutil.rmtree(backup / "_lacuna" / "results")
    at.button(key="prod_refresh").click().run()
    warned = [w.value for w in at.warning if "record is incomplete" in w.value]
    assert len(warned) == 1 and "results under _lacuna/results are missing" in warned[0]


def test_an_old_record_and_a_long_event_list_are_said(tmp_path: Path) -> None:
    backup = tmp_path / "backup"
    write_backup(backup, 4)
    events = backup / "_lacuna" / "events"
    events.mkdir()
    for b in range(60):  # a sensor's alert, logged again by each of 60 restarts
        event = {"event": "alert", "batch_id": b, "plan_version": 1, "sensors": ["s010"]}
        (events / f"{b:012d}-alert.json").write_text(json.dumps(event))
    week_ago = time.time() - 7 * 86400
    for f in (backup / "_lacuna" / "metrics").rglob("*.json"):
        os.utime(f, (week_ago, week_ago))
    at = _page(backup)
    assert metric(at, "Sensor alerts") == "1"
    stale = [w.value for w in at.warning if "newest micro-batch was written" in w.value]
    assert len(stale) == 1 and "7 d ago" in stale[0] and "has stopped" in stale[0]
    assert len(at.dataframe[-1].value) == 50
    assert "The newest 50 of 60 events" in texts(at)
