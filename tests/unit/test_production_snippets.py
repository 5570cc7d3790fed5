"""The export's production snippets: documented Flink 2.x keys only, sensible values."""

from __future__ import annotations

import ast
import shlex

import pytest
import yaml

from engine.errors import ConfigError
from engine.export import production_snippets
from engine.export.snippets import ProductionPaths, checkpoint_minutes

# Option names of Flink 2.x, as its documentation generates them from the option classes:
# - CheckpointingOptions (apache/flink, flink-core .../configuration/CheckpointingOptions.java):
#   execution.checkpointing.incremental (deprecated key: state.backend.incremental),
#   execution.checkpointing.dir, execution.checkpointing.storage,
#   execution.checkpointing.num-retained, execution.checkpointing.savepoint-dir;
# - docs/layouts/shortcodes/generated/execution_checkpointing_configuration.html:
#   execution.checkpointing.interval, .mode, .timeout, .min-pause,
#   .max-concurrent-checkpoints, .externalized-checkpoint-retention
#   (DELETE_ON_CANCELLATION, RETAIN_ON_CANCELLATION, NO_EXTERNALIZED_CHECKPOINTS);
# - StateBackendOptions: state.backend.type ('hashmap', 'rocksdb', 'forst');
# - docs/layouts/shortcodes/generated/fixed_delay_restart_strategy_configuration.html:
#   restart-strategy.fixed-delay.attempts, restart-strategy.fixed-delay.delay
#   (durations written "1 min", "20 s"), with restart-strategy.type: fixed-delay.
FLINK_2_OPTIONS = frozenset(
    {
        "execution.checkpointing.interval",
        "execution.checkpointing.mode",
        "execution.checkpointing.timeout",
        "execution.checkpointing.min-pause",
        "execution.checkpointing.max-concurrent-checkpoints",
        "execution.checkpointing.externalized-checkpoint-retention",
        "execution.checkpointing.incremental",
        "execution.checkpointing.dir",
        "execution.checkpointing.storage",
        "execution.checkpointing.num-retained",
        "execution.checkpointing.savepoint-dir",
        "state.backend.type",
        "restart-strategy.type",
        "restart-strategy.fixed-delay.attempts",
        "restart-strategy.fixed-delay.delay",
    }
)
DEPRECATED_IN_2 = frozenset({"state.backend.incremental", "state.checkpoints.dir", "state.backend"})

SENSORS = ("site_a", "site_b")


def test_every_flink_key_is_a_documented_flink_2_option() -> None:
    flink = production_snippets(SENSORS, 4 * 3600.0)["flink_config"]
    assert set(flink) <= FLINK_2_OPTIONS, set(flink) - FLINK_2_OPTIONS
    assert not set(flink) & DEPRECATED_IN_2


def test_flink_checkpoints_are_retained_and_restarts_bounded() -> None:
    flink = production_snippets(SENSORS, 4 * 3600.0)["flink_config"]
    assert flink["execution.checkpointing.externalized-checkpoint-retention"] == (
        "RETAIN_ON_CANCELLATION"
    )
    assert flink["execution.checkpointing.incremental"] is True
    assert flink["restart-strategy.type"] == "fixed-delay"
    assert 1 <= flink["restart-strategy.fixed-delay.attempts"] <= 10
    assert flink["restart-strategy.fixed-delay.delay"].endswith(" s")


@pytest.mark.parametrize(
    ("slide_s", "given", "minutes"),
    [(4 * 3600.0, None, 10), (86400.0, None, 10), (300.0, None, 5), (10.0, None, 1), (60.0, 7, 7)],
)
def test_checkpoint_interval_is_in_minutes_and_configurable(
    slide_s: float, given: int | None, minutes: int
) -> None:
    assert checkpoint_minutes(slide_s, given) == minutes
    flink = production_snippets(SENSORS, slide_s, flink_minutes=given)["flink_config"]
    assert flink["execution.checkpointing.interval"] == f"{minutes} min"


def test_bad_interval_names_the_value() -> None:
    with pytest.raises(ConfigError, match="got 0"):
        checkpoint_minutes(60.0, 0)


def test_yaml_has_no_custom_key_and_says_how_to_filter() -> None:
    text = production_snippets(SENSORS, 3600.0)["flink_config_yaml"]
    assert yaml.safe_load(text) == production_snippets(SENSORS, 3600.0)["flink_config"]
    assert "lacuna" not in "".join(yaml.safe_load(text))
    assert "filter" in text and '"site_a", "site_b"' in text


def test_run_command_uses_the_operators_paths_quoted() -> None:
    paths = ProductionPaths(
        config="my plan.json",
        source="/mnt/shared/landing",
        backup="s3a://bucket/backup",
        checkpoint="hdfs://nn/ck/",
    )
    snippets = production_snippets(SENSORS, 3600.0, paths=paths)
    argv = shlex.split(snippets["run_command"])
    assert argv[:4] == ["python", "-m", "engine", "run"]
    flags = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert flags == {
        "--config": "my plan.json",
        "--source": "/mnt/shared/landing",
        "--backup": "s3a://bucket/backup",
        "--checkpoint": "hdfs://nn/ck/lacuna",
    }
    script = snippets["spark_filter"]
    ast.parse(script)  # a real Python file
    assert "BACKUP = 's3a://bucket/backup'" in script
    assert "BACKUP_SENSORS = ['site_a', 'site_b']" in script
    assert "awaitTermination" in script and "readings" in script


def test_sub_minute_data_is_partitioned_by_hour_too() -> None:
    script = production_snippets(SENSORS, 10.0, sampling_interval_s=1.0)["spark_filter"]
    assert "PARTITIONS = ['date', 'hour']" in script
