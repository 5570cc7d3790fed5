"""The production job's pure parts, without a JVM: settings, CLI edges, the per-window shadow."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.cli import main
from engine.errors import ParameterError
from engine.model import LinearMap
from engine.stream.job import JobSettings
from engine.stream.sink import SinkPaths, join_uri
from engine.stream.transforms import WindowSpec, make_window_shadow, partition_columns


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
def test_window_shadow_rebuilds_each_reading_then_aggregates(aggregate: str) -> None:
    rng = np.random.default_rng(3)
    times = pd.date_range("2020-01-01", periods=5, freq="h")
    values = rng.normal(size=(5, 3))
    pdf = pd.DataFrame(
        {
            "window_start": times[0],
            "window_end": times[-1] + pd.Timedelta(hours=1),
            "event_time": np.repeat(times, 3),
            "sensor": np.tile(["a", "b", "c"], 5),
            "value": values.reshape(-1),
        }
    )
    spec = WindowSpec(5 * 3600.0, 5 * 3600.0, 0.0, aggregate, eps=0.3)
    out = make_window_shadow(_map(), spec)(pdf.sample(frac=1.0, random_state=1)).set_index("sensor")
    reduce = np.max if aggregate == "max" else np.min
    a = values[:, 0]
    want_rebuilt = {"a": reduce(a), "b": reduce(1.0 + 2.0 * a), "c": reduce(-2.0 + 0.5 * a)}
    for j, s in enumerate("abc"):
        assert out.loc[s, "value"] == pytest.approx(reduce(values[:, j]))
        assert out.loc[s, "rebuilt"] == pytest.approx(want_rebuilt[s])
        assert out.loc[s, "miss"] == (abs(want_rebuilt[s] - reduce(values[:, j])) > 0.3)
        assert out.loc[s, "n"] == 5
    assert out.loc["a", "backed_up"] and not out.loc["b", "backed_up"]


def test_window_shadow_without_the_backup_sensor_does_not_rebuild() -> None:
    pdf = pd.DataFrame(
        {
            "window_start": pd.Timestamp("2020-01-01"),
            "window_end": pd.Timestamp("2020-01-02"),
            "event_time": pd.Timestamp("2020-01-01T01:00"),
            "sensor": ["b", "c"],
            "value": [1.0, 2.0],
        }
    )
    out = make_window_shadow(_map(), WindowSpec(86400.0, 86400.0, 0.0, "max", 1.0))(pdf)
    assert out["rebuilt"].isna().all() and not out["miss"].any()


def test_partitions_are_daily_or_hourly_for_sub_minute_data() -> None:
    assert partition_columns(3600.0) == ("date",)
    assert partition_columns(60.0) == ("date",)
    assert partition_columns(1.0) == ("date", "hour")


def test_results_live_next_to_the_backup_under_an_ignored_name() -> None:
    paths = SinkPaths("s3a://bucket/backup/", "hdfs://nn/ck")
    assert paths.results == "s3a://bucket/backup/_lacuna/results"
    assert paths.query_checkpoint("backup") == "hdfs://nn/ck/backup"
    assert join_uri("/a[1]/", "x") == "/a[1]/x"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"watermark_s": -1.0}, "got -1.0"),
        ({"trigger_s": 0.0}, "got 0.0"),
        ({"plan_version": 0}, "got 0"),
        ({"source": " "}, "--source"),
        ({"max_files_per_trigger": 0}, "got 0"),
    ],
)
def test_job_settings_name_the_bad_value(kwargs: dict, message: str) -> None:
    base = {"source": "in", "backup": "out", "checkpoint": "ck"}
    with pytest.raises(ParameterError, match=message):
        JobSettings(**{**base, **kwargs})


def test_window_spec_from_config_parameters() -> None:
    params = {"window": 24, "slide": 6, "aggregate": "avg", "eps": 0.5, "sampling_interval_s": 60}
    spec = WindowSpec.from_parameters(params, 30.0)
    assert (spec.window_s, spec.slide_s, spec.watermark_s) == (1440.0, 360.0, 30.0)
    with pytest.raises(ParameterError, match="aggregate"):
        WindowSpec(10.0, 5.0, 0.0, "median", 1.0)


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
