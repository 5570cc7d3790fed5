"""Hostile backup configs: non-finite numbers, deep nesting, YAML aliases, size, odd types.

Each is refused on load with ONE ``ConfigError`` line (the CLI: exit 2), never a
RecursionError, a MemoryError, or a recovered file full of NaN.
"""

from __future__ import annotations

import json
import re
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cli import main
from engine.errors import ConfigError
from engine.export import BackupConfig, load_config
from engine.export.guard import _json_depth, _json_depth_reference, check_plain_values


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real config from ``plan``: s01 and s02 drive s03 and s04."""
    folder = tmp_path_factory.mktemp("plan")
    rng = np.random.default_rng(4)
    base = rng.normal(0, 1, (60, 2))
    frame = pd.DataFrame(
        {
            "s01": base[:, 0],
            "s02": base[:, 1],
            "s03": base @ [1.0, 2.0] + rng.normal(0, 0.01, 60),
            "s04": base @ [0.5, -1.0] + rng.normal(0, 0.01, 60),
        }
    ).round(4)
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=60, freq="h"))
    frame.to_csv(folder / "data.csv", index=False)
    out = folder / "plan.json"
    argv = ["plan", "--data", str(folder / "data.csv"), "--eps", "0.01", "--delta", "0.2"]
    assert main([*argv, "--window", "2", "--no-backtest", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["backup_sensors"] and data["reconstruction"]
    return data


def _target_and_backup(config: dict[str, Any]) -> tuple[str, str]:
    target = sorted(config["reconstruction"])[0]
    return target, sorted(config["reconstruction"][target]["coefficients"])[0]


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(data))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


def _where(config: dict[str, Any], which: str) -> tuple[str, ...]:
    target, backup = _target_and_backup(config)
    return {
        "coefficient": ("reconstruction", target, "coefficients", backup),
        "intercept": ("reconstruction", target, "intercept"),
        "variance": ("reconstruction", target, "conditional_variance"),
        "anywhere": ("guarantee", "model", "worst_violation_probability"),
    }[which]


# --- 5: NaN and Infinity are refused, naming the key ----------------------------------------


@pytest.mark.parametrize("which", ["coefficient", "intercept", "variance", "anywhere"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_non_finite_numbers_are_refused_with_their_path(
    config: dict[str, Any], tmp_path: Path, which: str, value: float, fmt: str
) -> None:
    path = _where(config, which)
    bad = _set(config, path, value)
    file = tmp_path / f"bad.{fmt}"
    file.write_text(json.dumps(bad) if fmt == "json" else yaml.safe_dump(bad))
    assert ("NaN" in file.read_text() or "Infinity" in file.read_text()) or fmt == "yaml"
    with pytest.raises(ConfigError) as info:
        load_config(file)
    message = str(info.value)
    assert ".".join(path) in message and "not a finite number" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match="not a finite number"):
        BackupConfig.from_dict(bad)


def test_an_overflowing_literal_is_refused(config: dict[str, Any], tmp_path: Path) -> None:
    path = _where(config, "coefficient")
    text = json.dumps(_set(config, path, 12345.0)).replace("12345.0", "1e999")
    (tmp_path / "big.json").write_text(text)
    with pytest.raises(ConfigError, match="not a finite number"):
        load_config(tmp_path / "big.json")


def test_recover_with_a_nan_coefficient_exits_2(
    config: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_set(config, _where(config, "coefficient"), float("nan"))))
    code = main(["recover", "--config", str(bad), "--backup", "x.csv", "--out", "y.csv"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "y.csv").exists()


def test_a_query_the_plan_would_refuse_is_refused_in_a_config(
    config: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A slide longer than the window was accepted by the loader (recover exit 0), where
    ``plan`` refuses it: the loader applies the query's own rules."""
    bad = tmp_path / "slide.json"
    bad.write_text(json.dumps(_set(config, ("parameters", "slide"), 5)))
    code = main(["recover", "--config", str(bad), "--backup", "x.csv", "--out", "y.csv"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: ") and "config parameters: slide" in err, err


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_config_saved_with_a_byte_order_mark_loads(
    config: dict[str, Any], tmp_path: Path, suffix: str
) -> None:
    """Notepad saves UTF-8 with a BOM; CSVs with one were read, configs were refused."""
    text = json.dumps(config) if suffix == ".json" else yaml.safe_dump(config)
    (tmp_path / f"bom{suffix}").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_config(tmp_path / f"bom{suffix}").backup_sensors == tuple(config["backup_sensors"])


# --- 8: size, nesting and aliases ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000 + "]" * 100_000, "[" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000],
    ids=["closed", "unclosed", "objects"],
)
def test_deep_json_nesting_is_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / "deep.json").write_text(text)
    with pytest.raises(ConfigError, match="nested deeper than") as info:
        load_config(tmp_path / "deep.json")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        "".join(f"{'  ' * i}a:\n" for i in range(2_000)) + "  " * 2_000 + "1\n",
    ],
    ids=["flow", "block"],
)
def test_deep_yaml_nesting_is_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / "deep.yaml").write_text(text)
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_config(tmp_path / "deep.yaml")


def _alias_bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "\n".join(lines) + "\n"
    return text + "#" * max(0, 4_500 - len(text)) + "\n"


def test_a_yaml_alias_bomb_is_refused_without_using_memory(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(_alias_bomb())
    assert 4_400 <= (tmp_path / "bomb.yaml").stat().st_size <= 4_600
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ConfigError, match="alias"):
            load_config(tmp_path / "bomb.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6 and time.perf_counter() - start < 5.0


def test_an_oversized_config_is_refused_before_it_is_read(
    config: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.export import guard as config_guard

    (tmp_path / "plan.json").write_text(json.dumps(config))
    assert load_config(tmp_path / "plan.json").sensors == tuple(config["sensors"])
    monkeypatch.setattr(config_guard, "MAX_CONFIG_BYTES", 1_000)
    with pytest.raises(ConfigError, match="larger than"):
        load_config(tmp_path / "plan.json")


def test_yaml_values_json_cannot_hold_are_refused(config: dict[str, Any], tmp_path: Path) -> None:
    text = yaml.safe_dump(config).replace("model:\n", "model:\n    when: 2024-01-01\n", 1)
    (tmp_path / "dated.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"guarantee\.model\.when"):
        load_config(tmp_path / "dated.yaml")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_5000_digit_integer_is_one_line(config: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    bad = _set(config, ("parameters", "window"), 777)
    text = json.dumps(bad) if fmt == "json" else yaml.safe_dump(bad)
    (tmp_path / f"big.{fmt}").write_text(text.replace("777", "7" * 5_000))
    with pytest.raises(ConfigError, match="digits"):
        load_config(tmp_path / f"big.{fmt}")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_repeated_key_is_refused_not_silently_overwritten(
    config: dict[str, Any], tmp_path: Path, fmt: str
) -> None:
    target, backup = _target_and_backup(config)
    coefficient = config["reconstruction"][target]["coefficients"][backup]
    if fmt == "json":
        text = json.dumps(config)
        entry = f'"{backup}": {json.dumps(coefficient)}'
        text = text.replace(entry, f'{entry}, "{backup}": 123.0', 1)
    else:
        text = yaml.safe_dump(config)
        entry = f"{backup}: {coefficient!r}\n"
        assert entry in text
        indent = text.split(entry, 1)[0].rsplit("\n", 1)[1]
        text = text.replace(entry, f"{entry}{indent}{backup}: 123.0\n", 1)
    (tmp_path / f"twice.{fmt}").write_text(text)
    with pytest.raises(ConfigError, match=f"key {backup!r} appears twice"):
        load_config(tmp_path / f"twice.{fmt}")


# --- the fast paths of the guard agree with the slow ones ----------------------------------

JSON_TEXTS = st.recursive(
    st.none() | st.floats(allow_nan=False) | st.text(alphabet='[]{}"\\ab', max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=4), inner, max_size=3),
    max_leaves=12,
).map(json.dumps)


@settings(max_examples=500, deadline=None)
@given(JSON_TEXTS)
def test_vectorised_json_depth_equals_the_regex_scan(text: str) -> None:
    """Brackets, quotes and backslash runs inside strings: the same depth as the regex."""
    assert _json_depth(text) == _json_depth_reference(text)


@pytest.mark.parametrize("before", ['"\\""', '"\\\\"', '"\\\\\\"]]]]"', '"]]]]"'])
def test_deep_nesting_after_escaped_quotes_is_still_refused(tmp_path: Path, before: str) -> None:
    """A string that ends in (escaped) quotes or hides closing brackets cannot mask depth."""
    text = "[" + before + "," + "[" * 100 + "]" * 100 + "]"
    assert json.loads(text)  # valid JSON: only the depth guard may refuse it
    (tmp_path / "deep.json").write_text(text)
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_config(tmp_path / "deep.json")


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": 1.0, "b": float("nan")}, "x.b"),
        ([1.0, 2, "s", None, float("-inf")], "x.4"),
        ({"a": 1.0, "b": {"c": float("inf")}}, "x.b.c"),
        ({"a": 1.0, "b": np.float64("nan")}, "x.b"),  # a float subclass takes the slow walk
    ],
)
def test_non_finite_numbers_among_many_plain_ones_are_named(value: Any, where: str) -> None:
    with pytest.raises(ConfigError, match=f"at {re.escape(where)} is not a finite number"):
        check_plain_values({"x": value, "y": dict.fromkeys(map(str, range(1_000)), 0.5)})


def test_a_key_that_is_not_a_string_is_named_among_plain_values() -> None:
    with pytest.raises(ConfigError, match="config key 3 at x is not a string"):
        check_plain_values({"x": {"a": 1.0, 3: 2.0}})


def test_a_deleted_coefficient_is_refused_not_read_as_zero(
    config: dict[str, Any], tmp_path: Path
) -> None:
    """Deleting a coefficient line by hand would rebuild that target with 0 x the sensor
    (about 0 instead of about 26 in a hostile review): refused, naming both."""
    target, backup = _target_and_backup(config)
    copy = json.loads(json.dumps(config))
    del copy["reconstruction"][target]["coefficients"][backup]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(copy))
    with pytest.raises(ConfigError, match=f"reconstruction of {target} lacks coefficient"):
        load_config(path)
