"""The production job on hostile landing files: nothing lost, nothing silently wrong.

* a file written with pandas' defaults (nanosecond timestamps, which Spark
  cannot read) stops the job with one line naming the file and the fix; once
  the file is rewritten, the job resumes and backs up every reading exactly once;
* a sensor the plan does not know is backed up in full, readings without a
  sensor are counted and dropped, NaN readings are counted; each is an
  ``input_anomaly`` event kept beside the backup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.errors import PipelineError
from engine.export.backup_dataset import read_backup
from engine.export.job_status import read_job_status
from tests.production_reference import (
    BACKUP,
    feed,
    long_readings,
    run_landed,
    sample_rows,
    write_config,
)

pytestmark = pytest.mark.spark


def _run(spark: Any, tmp: Path) -> list[dict[str, Any]]:
    return run_landed(spark, tmp, tmp / "plan.json", replan=False)[1]


def test_a_file_spark_cannot_read_stops_the_job_and_loses_nothing(
    spark: Any, tmp_path: Path
) -> None:
    rows = sample_rows(48)
    write_config(tmp_path / "plan.json", rows)
    feed(rows, tmp_path / "landing", rows_per_file=12, stop=24)
    later = long_readings(rows).iloc[24 * len(rows.sensors) :].copy()
    later["event_time"] = later["event_time"].astype("datetime64[ns]")
    bad = tmp_path / "landing" / "zz-from-pandas.parquet"
    later.to_parquet(bad, index=False)  # pandas' default: nanosecond timestamps
    with pytest.raises(PipelineError) as info:
        _run(spark, tmp_path)
    line = str(info.value)
    assert "\n" not in line and "zz-from-pandas.parquet" in line
    assert "coerce_timestamps='us'" in line and "[event_time]" in line

    later.to_parquet(bad, index=False, coerce_timestamps="us")  # the operator's fix
    _run(spark, tmp_path)
    backup = read_backup(tmp_path / "backup")
    truth = long_readings(rows)
    want = truth[truth["sensor"].isin(BACKUP)]
    assert len(backup) == len(want)  # every backup reading once, the fixed file's too
    assert not backup.duplicated(["event_time", "sensor"]).any()


def test_unknown_sensors_rows_without_a_sensor_and_nans_are_counted_and_kept(
    spark: Any, tmp_path: Path
) -> None:
    rows = sample_rows(48)
    write_config(tmp_path / "plan.json", rows)
    feed(rows, tmp_path / "landing", rows_per_file=24)
    times = pd.DatetimeIndex(rows.times[:30]).astype("datetime64[us]")
    odd = pd.DataFrame(
        {
            "event_time": np.concatenate([times, times[:5], times[:4]]),
            "sensor": ["NEW_SENSOR"] * 30 + [None] * 5 + [BACKUP[0]] * 4,
            "value": np.r_[np.arange(30.0), np.ones(5), np.full(4, np.nan)],
        }
    )
    odd.to_parquet(tmp_path / "landing" / "zz-odd.parquet", index=False, coerce_timestamps="us")
    logged = _run(spark, tmp_path)

    events = [r for r in logged if r["event"] == "input_anomaly"]
    assert sum(e["unplanned_readings"] for e in events) == 30
    assert sum(e["unusable_readings"] for e in events) == 5
    assert sum(e["missing_values"] for e in events) == 4
    assert {s for e in events for s in e["unplanned_sensors"]} == {"NEW_SENSOR"}
    shadows = [r for r in logged if r["event"] == "shadow"]
    assert sum(r["readings"] for r in shadows) == 48 * len(rows.sensors) + 39
    backup = read_backup(tmp_path / "backup")
    kept = backup[backup["sensor"] == "NEW_SENSOR"].sort_values("event_time")
    np.testing.assert_array_equal(kept["value"].to_numpy(), np.arange(30.0))  # not lost
    status = read_job_status(tmp_path / "backup")
    assert {e["event"] for e in status.events} >= {"input_anomaly"}
