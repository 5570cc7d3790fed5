"""The console's Production page on a real job's backup: what the job did, and a range rebuilt.

The job runs for real (Spark, ``run_job``) with a map that misses every rebuilt
window; the page (Streamlit's AppTest) must say the guarantee does not hold,
show the alert the job raised, and rebuild a range exactly as ``recover`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from engine.export.recover import recover_dataset
from tests.production_reference import Rows, feed, run_landed, wrong_map_config

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def test_the_production_page_reads_a_jobs_backup_and_rebuilds_a_range(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "plan.json"
    history, _ = wrong_map_config(path)  # every rebuilt window misses
    feed(Rows(history.times[:160], history.values[:160], history.sensors), tmp_path / "landing",
         rows_per_file=8)  # fmt: skip
    _, logged = run_landed(spark, tmp_path, path, replan=False, max_files_per_trigger=1)
    assert [r for r in logged if r["event"] == "alert"]

    at = AppTest.from_file(str(ROOT / "pages" / "production.py"), default_timeout=60).run()
    assert not at.exception and "Give the job's --backup" in at.info[0].value
    at.text_input(key="w_prod_backup").input(str(tmp_path / "backup")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error or "missed eps more often than delta" in at.error[0].value
    assert at.error, "a map that misses every window must not look like it holds"
    captions = [c.value for c in at.caption]
    assert any(c.startswith("Online control: no micro-batch recorded it") for c in captions)
    assert any(c.startswith("The newest micro-batch was written") for c in captions)
    assert not [w.value for w in at.warning if "record is incomplete" in w.value]
    assert not at.toggle(key="prod_follow").value  # following a running job is opt-in
    at.toggle(key="prod_follow").set_value(True).run()  # the board as a timed fragment
    assert not at.exception, [e.value for e in at.exception]
    at.toggle(key="prod_follow").set_value(False).run()
    shadow = [r for r in logged if r["event"] == "shadow"]
    batches = next(m for m in at.metric if m.label == "Micro-batches")
    assert batches.value == f"{len(shadow):,}"
    live = next(m for m in at.metric if m.label == "Live miss rate (this version, pooled)")
    assert live.value == "100.0 %"
    events = at.dataframe[-1].value
    assert "Alert" in set(events["event"])
    # an alert is counted once per sensor and version, not once per batch it stays above
    alerts = [r for r in logged if r["event"] == "alert"]
    alerting = [r for r in shadow if r["alerting_sensors"]]
    named = {(r["plan_version"], s) for r in alerts for s in r["sensors"]}
    assert next(m for m in at.metric if m.label == "Sensor alerts").value == str(len(named))
    assert len(alerts) < len(alerting)

    start, end = str(history.times[40]), str(history.times[80])
    at.text_input(key="w_prod_from").input(start)
    at.text_input(key="w_prod_to").input(end).run()
    at.button(key="prod_recover").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"Rebuilt 40 time steps (from {start} to {end})" in s.value for s in at.success), [
        s.value for s in at.success
    ]
    want = recover_dataset(path, tmp_path / "backup", tmp_path / "want.csv", start, end)
    assert want.rows == 40
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "want.csv"),
        pd.read_csv(pd.io.common.BytesIO(at.session_state["prod_recovered"][0])),
    )
    # the range edited after the rebuild: the old range's file is no longer offered
    at.text_input(key="w_prod_to").input(str(history.times[60])).run()
    assert not any("Rebuilt 40 time steps" in s.value for s in at.success)
    assert not at.get("download_button")
    at.text_input(key="w_prod_to").input(end).run()  # back to the range rebuilt
    assert any("Rebuilt 40 time steps" in s.value for s in at.success)

    at.button(key="prod_compact").click().run()  # 20 micro-batches: all but 10 folded
    assert not at.exception, [e.value for e in at.exception]
    assert any("Folded micro-batches 0-9" in s.value for s in at.success)
    batches = next(m for m in at.metric if m.label == "Micro-batches")
    assert batches.value == f"{len(shadow):,}"  # every batch's metrics, once
    again = recover_dataset(path, tmp_path / "backup", tmp_path / "again.csv", start, end)
    assert again.rows == 40
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "want.csv"), pd.read_csv(tmp_path / "again.csv")
    )

    at.text_input(key="w_prod_backup").input(str(tmp_path / "nowhere")).run()
    assert not at.exception and "no backup directory" in at.error[0].value
