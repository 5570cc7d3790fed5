"""The production job's pure parts, without a JVM: settings, CLI edges, the per-window shadow."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.backup.dataset import partition_columns
from engine.cli import main
from engine.errors import ParameterError
from engine.job.layout import SinkPaths, join_uri
from engine.job.partials import rebuild_window_partials
from engine.job.run import JobSettings
from engine.job.transforms import WindowSpec
from engine.model import LinearMap
from engine.query import WindowQuery


def _map() -> LinearMap:
    return LinearMap(
        sensors=("a", "b", "c"),
        backup=("a",),
        targets=("b", "c"),
        intercept=np.array([1.0, -2.0]),
        coef=np.array([[2.0], [0.5]]),
        conditional_variance=np.array([0.1, 0.1]),
    )


@pytest.mark.parametrize("aggregate", ["max", "min"])
def test_window_partials_rebuild_each_reading_then_aggregate(aggregate: str) -> None:
    rng = np.random.default_rng(3)
    times = pd.date_range("2020-01-01", periods=5, freq="h")
    values = rng.normal(size=(5, 1))
    pdf = pd.DataFrame(
        {
            "window_start": 0,
            "window_end": 5 * 3_600_000_000,
            "event_time": times,
            "sensor": "a",
            "value": values[:, 0],
        }
    )
    out = rebuild_window_partials(pdf.sample(frac=1.0, random_state=1), _map(), aggregate)
    out = out.set_index("sensor")
    reduce = np.max if aggregate == "max" else np.min
    a = values[:, 0]
    assert out.loc["b", "rebuilt_agg"] == pytest.approx(reduce(1.0 + 2.0 * a))
    assert out.loc["c", "rebuilt_agg"] == pytest.approx(reduce(-2.0 + 0.5 * a))
    assert (out["rebuilt_n"] == 5).all() and (out["n"] == 0).all()


def test_window_partials_without_the_backup_sensor_do_not_rebuild() -> None:
    pdf = pd.DataFrame(
        {
            "window_start": 0,
            "window_end": 86_400_000_000,
            "event_time": pd.Timestamp("2020-01-01T01:00"),
            "sensor": ["b", "c"],
            "value": [1.0, 2.0],
        }
    )
    out = rebuild_window_partials(pdf, _map(), "max")
    assert out["rebuilt_agg"].isna().all() and (out["rebuilt_n"] == 0).all()


def test_partitions_are_daily_or_hourly_for_sub_minute_data() -> None:
    assert partition_columns(3600.0) == ("date",)
    assert partition_columns(60.0) == ("date",)
    assert partition_columns(1.0) == ("date", "hour")


def test_results_live_next_to_the_backup_under_an_ignored_name() -> None:
    paths = SinkPaths("s3a://bucket/backup/", "hdfs://nn/ck")
    assert paths.results == "s3a://bucket/backup/_lacuna/results"
    assert paths.query_checkpoint("job") == "hdfs://nn/ck/job"
    assert paths.state == "hdfs://nn/ck/lacuna_state"
    assert paths.backup_batch(7) == "s3a://bucket/backup/batch_id=7"
    assert join_uri("/a[1]/", "x") == "/a[1]/x"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"watermark_s": -1.0}, "got -1.0"),
        ({"trigger_s": 0.0}, "got 0.0"),
        ({"source": " "}, "--source"),
        ({"max_files_per_trigger": 0}, "got 0"),
        # inf was a traceback (trigger) or Spark's empty error line (watermark)
        ({"trigger_s": float("inf")}, "--trigger must be above 0 and at most .* got inf"),
        ({"watermark_s": float("inf")}, "--watermark must be 0 to .* got inf"),
        ({"watermark_s": float("nan")}, "got nan"),
    ],
)
def test_job_settings_name_the_bad_value(kwargs: dict, message: str) -> None:
    base = {"source": "in", "backup": "out", "checkpoint": "ck"}
    with pytest.raises(ParameterError, match=message):
        JobSettings(**{**base, **kwargs})


def test_window_spec_from_the_configs_query() -> None:
    spec = WindowSpec.from_query(WindowQuery(0.5, 0.05, 24, 6), 60.0, 30.0)
    assert (spec.window_s, spec.slide_s, spec.watermark_s) == (1440.0, 360.0, 30.0)
    with pytest.raises(ParameterError, match=r"got -1\.0"):
        WindowSpec.from_query(WindowQuery(0.5, 0.05, 24), 60.0, -1.0)
    with pytest.raises(ParameterError, match=r"got 0\.0"):
        WindowSpec.from_query(WindowQuery(0.5, 0.05, 24), 0.0, 0.0)


def test_cli_run_bad_flag_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--config", "p.json", "--source", "in", "--backup", "b",
                 "--checkpoint", "c", "--watermark", "-5"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "got -5.0" in err


def test_cli_recover_range_of_a_missing_dataset_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    code = main(["recover", "--config", str(tmp_path / "none.json"), "--backup",
                 str(tmp_path / "nothing"), "--from", "2020-01-01", "--out", "x.csv"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1


def test_cli_run_flags_give_the_settings_replan_on_by_default() -> None:
    import argparse

    from engine.job.flags import add_run_flags
    from engine.job.run import settings_from_args

    parser = argparse.ArgumentParser()
    add_run_flags(parser)
    base = ["--config", "p.json", "--source", "in", "--backup", "b", "--checkpoint", "c"]
    assert settings_from_args(parser.parse_args(base)).replan is True
    assert settings_from_args(parser.parse_args([*base, "--no-replan"])).replan is False
    assert settings_from_args(parser.parse_args(base)).control is True
    assert settings_from_args(parser.parse_args([*base, "--no-control"])).control is False
    from engine.job.run import _replan_waits

    stream = settings_from_args(parser.parse_args(base))
    assert stream.replan_wait is None and not _replan_waits(stream)  # background
    catch_up = settings_from_args(parser.parse_args([*base, "--available-now"]))
    assert _replan_waits(catch_up)  # a catch-up plans inside the batch
    inline = settings_from_args(parser.parse_args([*base, "--replan-in-batch"]))
    assert inline.replan_wait is True and _replan_waits(inline)


@pytest.mark.parametrize(
    ("commits", "backup", "behind"),
    [
        ([], [], None),  # a new job
        ([], ["batch_id=0"], None),  # batch 0 written, the job died before committing it
        (["0", "1", ".1.crc"], ["batch_id=0", "batch_id=1", "batch_id=2"], None),  # a replay
        (["0", "1"], ["batch_id=0", "batch_id=3"], (1, 3)),  # a restored older checkpoint
        (["5"], ["batch_id=0-9", "batch_id=10", "_lacuna"], (5, 10)),  # behind a compaction
        (["9"], ["batch_id=0-9"], None),
    ],
)
def test_a_checkpoint_behind_its_backup_is_found(commits, backup, behind) -> None:  # type: ignore[no-untyped-def]
    from engine.job.run import newest_batch_behind

    assert newest_batch_behind(commits, backup) == behind
