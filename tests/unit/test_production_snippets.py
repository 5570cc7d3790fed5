"""The export's production snippets: documented Flink 2.x keys only, sensible values."""

from __future__ import annotations

import ast
import json
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


@pytest.mark.parametrize(
    ("interval_s", "exposure", "slide_rows", "expected"),
    [
        (1.0, 5, 600, "5 s"),  # a failure may lose 5 s of readings: no checkpoint 10 min apart
        (60.0, 6, 24, "6 min"),
        (3600.0, 6, 24, "10 min"),  # 6 hours of exposure: the usual interval already fits
        (1.0, None, 600, "10 min"),  # range contract: no bound from the exposure
    ],
)
def test_flink_checkpoints_at_least_as_often_as_the_crash_contracts_exposure(
    interval_s: float, exposure: int | None, slide_rows: int, expected: str
) -> None:
    snippets = production_snippets(SENSORS, slide_rows * interval_s, sampling_interval_s=interval_s,
                                   exposure_rows=exposure)  # fmt: skip
    assert snippets["flink_config"]["execution.checkpointing.interval"] == expected
    assert yaml.safe_load(snippets["flink_config_yaml"]) == snippets["flink_config"]
    header = snippets["flink_config_yaml"].replace("\n# ", " ")
    script = snippets["spark_filter"]
    ast.parse(script)
    if exposure is None:
        assert "Range contract: after a failure every open window is rebuilt" in header
        assert "Range contract" in script and "Crash contract" not in script
    else:
        said = f"loses at most {exposure} rows ({exposure * interval_s:g} s of readings)"
        assert said in header and said in " ".join(script.split())
        assert "range-contract figure is the one that holds" in " ".join(script.split())


def test_an_operators_checkpoint_interval_is_kept() -> None:
    flink = production_snippets(SENSORS, 600.0, sampling_interval_s=1.0, exposure_rows=5,
                                flink_minutes=3)["flink_config"]  # fmt: skip
    assert flink["execution.checkpointing.interval"] == "3 min"


def test_an_exported_crash_plan_carries_its_exposure_into_the_snippets() -> None:
    from engine.data import load_history
    from engine.export import plan_to_config
    from engine.planning import PlanParameters, make_plan
    from engine.query import WindowQuery
    from tests.app.apphelpers import SMALL

    history = load_history(SMALL).select(["Aotizhongxin_TEMP", "Changping_TEMP", "Dingling_TEMP"])
    plan = make_plan(history, PlanParameters(WindowQuery(1.0, 0.05, 24, exposure=6)),
                     run_backtest_now=False)  # fmt: skip
    production = plan_to_config(plan)["production"]
    assert "loses at most 6 rows (21600 s of readings)" in " ".join(
        production["spark_filter"].split()
    )


def test_names_and_paths_cannot_break_the_snippets_out_of_their_quotes() -> None:
    """A sensor named with a quote gave Java that did not compile, one with a newline an
    uncommented line in Flink's config.yaml; a Windows path (``\\u``) or a path holding
    three quotes made the exported script a SyntaxError."""
    odd = ('a"b', "s2\nstate.backend.type: hashmap", "it's")
    snippets = production_snippets(odd, 3600.0)
    text = snippets["flink_config_yaml"]
    assert yaml.safe_load(text) == snippets["flink_config"]
    assert all(line.startswith("#") or line.split(":")[0] in FLINK_2_OPTIONS
               for line in text.splitlines() if line.strip())  # fmt: skip
    java = next(line for line in text.splitlines() if "Set.of(" in line)
    listed = java.split("Set.of(", 1)[1].rsplit(");", 1)[0]
    assert json.loads(f"[{listed}]") == list(odd)  # a JSON string is a Java string literal
    for config in (r"C:\users\plan.json", 'plan """ x.json', 'a\\""" b.json'):
        paths = ProductionPaths(config=config)
        script = production_snippets(SENSORS, 3600.0, paths=paths)["spark_filter"]
        assert ast.get_docstring(ast.parse(script)) is not None
    # a path with a quote reads in the docstring as a shell takes it, with no escape shown
    paths = ProductionPaths(config="it's plan.json")
    doc = ast.get_docstring(
        ast.parse(production_snippets(SENSORS, 3600.0, paths=paths)["spark_filter"])
    )
    assert doc is not None and "--config 'it'\"'\"'s plan.json'" in doc


def test_the_exported_script_reads_every_landed_file_however_old() -> None:
    """Spark's file source skips a file more than maxFileAge (7 days) older than the
    newest it has read; the production job sets it to a century, and so does the script."""
    script = production_snippets(SENSORS, 3600.0)["spark_filter"]
    assert '.option("maxFileAge", "36500d")' in script
