"""The fast check of a config's ``reconstruction`` section agrees with ``jsonschema``.

``validate_config`` validates the fixed top of a config with the JSON Schema and
the (large) ``reconstruction`` section with ``schema_problem``; these tests hold
the two to the same verdict on a corpus of bad sections and on random ones, and
check that the errors a user sees are still ``jsonschema``'s, with their path,
deep inside a 1,000-sensor plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cli import main
from engine.errors import ConfigError
from engine.export import BackupConfig, load_config, load_schema, validate_config
from engine.export import loader as config_module
from engine.export.reconstruction import coefficient_matrix, schema_problem
from engine.export.seal import seal_config

SECTION_SCHEMA = load_schema(2)["properties"]["reconstruction"]
GOOD_ENTRY = {"intercept": 0.5, "coefficients": {"a": 1.0, "b": -2}, "conditional_variance": 0.1}


def _schema_error(section: Any) -> jsonschema.ValidationError | None:
    return jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(SECTION_SCHEMA).iter_errors(section)
    )


def _entry(**changes: Any) -> dict[str, Any]:
    entry = json.loads(json.dumps(GOOD_ENTRY))
    for key, value in changes.items():
        if value is _DROP:
            del entry[key]
        else:
            entry[key] = value
    return entry


_DROP = object()
BAD_ENTRIES: dict[str, Any] = {
    "entry is a list": [1.0],
    "entry is a string": "x",
    "entry is null": None,
    "entry is a number": 3.0,
    "entry is a bool": True,
    "extra key": _entry(note="hi"),
    "two extra keys": _entry(note="hi", other=1),
    "no intercept": _entry(intercept=_DROP),
    "no coefficients": _entry(coefficients=_DROP),
    "no variance": _entry(conditional_variance=_DROP),
    "empty entry": {},
    "intercept a string": _entry(intercept="0.5"),
    "intercept a bool": _entry(intercept=False),
    "intercept null": _entry(intercept=None),
    "intercept a list": _entry(intercept=[0.5]),
    "variance negative": _entry(conditional_variance=-1e-12),
    "variance a negative int": _entry(conditional_variance=-1),
    "variance a bool": _entry(conditional_variance=True),
    "variance a string": _entry(conditional_variance="0"),
    "coefficients a list": _entry(coefficients=[1.0, 2.0]),
    "coefficients null": _entry(coefficients=None),
    "coefficients a number": _entry(coefficients=1.0),
    "coefficient a string": _entry(coefficients={"a": 1.0, "b": "2"}),
    "coefficient a bool": _entry(coefficients={"a": True, "b": 2.0}),
    "coefficient null": _entry(coefficients={"a": 1.0, "b": None}),
    "coefficient a list": _entry(coefficients={"a": [1.0]}),
    "coefficient an object": _entry(coefficients={"a": {"v": 1.0}}),
    "several problems": _entry(intercept="x", conditional_variance=-1, extra=1),
}
GOOD_ENTRIES: dict[str, Any] = {
    "as exported": _entry(),
    "integers": _entry(intercept=0, conditional_variance=0, coefficients={"a": 3}),
    "no coefficients at all": _entry(coefficients={}),
    "negative zero variance": _entry(conditional_variance=-0.0),
    "a float subclass": _entry(coefficients={"a": np.float64(1.5)}),  # from_dict takes these
}


@pytest.mark.parametrize("name", sorted(BAD_ENTRIES))
@pytest.mark.parametrize("position", [0, 1, 99])
def test_bad_entries_are_found_where_jsonschema_finds_them(name: str, position: int) -> None:
    section = {f"t{i:03d}": _entry() for i in range(100)}
    section[f"t{position:03d}"] = BAD_ENTRIES[name]
    error, found = _schema_error(section), schema_problem(section)
    assert error is not None and found is not None
    assert found[0][:1] == (f"t{position:03d}",)
    if name != "several problems":  # with several, jsonschema picks its most relevant one
        assert found[0] == tuple(error.absolute_path)


@pytest.mark.parametrize("name", sorted(GOOD_ENTRIES))
def test_good_entries_pass_both(name: str) -> None:
    section = {"t0": GOOD_ENTRIES[name], "t1": _entry()}
    assert _schema_error(section) is None
    assert schema_problem(section) is None


@pytest.mark.parametrize("section", [[], "x", None, 1.5, True])
def test_a_section_that_is_not_an_object_is_refused_by_both(section: Any) -> None:
    assert _schema_error(section) is not None and schema_problem(section) is not None


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
NEAR_ENTRY = st.dictionaries(
    st.sampled_from(["intercept", "coefficients", "conditional_variance", "note"]),
    JSON_VALUES | st.dictionaries(st.sampled_from("abc"), JSON_VALUES, max_size=3),
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.text(max_size=2), NEAR_ENTRY | JSON_VALUES | st.just(GOOD_ENTRY), max_size=4)
)
def test_random_sections_get_the_same_verdict(section: dict[str, Any]) -> None:
    assert (schema_problem(section) is None) == (_schema_error(section) is None)


# ---------------------------------------------------------------- through validate_config


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real schema-v2 config from ``plan``: s01 and s02 drive s03 and s04."""
    folder = tmp_path_factory.mktemp("plan")
    rng = np.random.default_rng(4)
    base = rng.normal(0, 1, (60, 2))
    columns = {"s01": base[:, 0], "s02": base[:, 1]}
    columns["s03"] = base @ [1.0, 2.0] + rng.normal(0, 0.01, 60)
    columns["s04"] = base @ [0.5, -1.0] + rng.normal(0, 0.01, 60)
    frame = pd.DataFrame(columns).round(4)
    frame.insert(0, "time", pd.date_range("2024-01-01", periods=60, freq="h"))
    frame.to_csv(folder / "data.csv", index=False)
    out = folder / "plan.json"
    argv = ["plan", "--data", str(folder / "data.csv"), "--eps", "0.01", "--delta", "0.2"]
    assert main([*argv, "--window", "2", "--no-backtest", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def big_config(config: dict[str, Any], n: int = 1000, m: int = 150) -> dict[str, Any]:
    """``config`` grown to ``n`` sensors, the first ``m`` backed up (random dense map)."""
    rng = np.random.default_rng(0)
    data = json.loads(json.dumps(config))
    sensors = [f"s{i:04d}" for i in range(n)]
    backup = sensors[:m]
    data["sensors"], data["backup_sensors"] = sensors, backup
    data["parameters"]["eps_by_sensor"] = dict.fromkeys(sensors, 0.01)
    data["parameters"]["units"] = dict.fromkeys(sensors, "unknown:s")
    data["reconstruction"] = {
        t: {"intercept": float(rng.normal()),
            "coefficients": dict(zip(backup, rng.normal(size=m).tolist(), strict=True)),
            "conditional_variance": float(rng.uniform())}
        for t in sensors[m:]
    }  # fmt: skip
    return seal_config(data)  # grown by hand: sealed again, as an export of it would be


def _old_message(data: dict[str, Any]) -> str:
    """What ``validate_config`` said before the fast path: ``jsonschema`` on the whole config."""
    try:
        jsonschema.validate(data, load_schema(int(data["schema_version"])))
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "top level"
        return f"config invalid at {where}: {err.message}"
    raise AssertionError("jsonschema accepted it")


@pytest.mark.parametrize("name", sorted(BAD_ENTRIES))
def test_validate_config_words_every_bad_entry_as_jsonschema_does(
    config: dict[str, Any], name: str
) -> None:
    data = json.loads(json.dumps(config))
    target = sorted(data["reconstruction"])[-1]
    data["reconstruction"][target] = BAD_ENTRIES[name]
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    assert str(info.value) == _old_message(data)


def test_a_top_level_and_a_reconstruction_problem_together_are_worded_as_before(
    config: dict[str, Any],
) -> None:
    data = json.loads(json.dumps(config))
    data["parameters"]["eps_by_sensor"]["s01"] = "0.1"  # deeper than the entry problem
    data["reconstruction"][sorted(data["reconstruction"])[0]] = _entry(note=1)
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    assert str(info.value) == _old_message(data)


DEEP = "reconstruction/s0777/coefficients/s0123"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.5", f"config invalid at {DEEP}: '0.5' is not of type 'number'"),
        (True, f"config invalid at {DEEP}: True is not of type 'number'"),
        (float("nan"), f"config value at {DEEP.replace('/', '.')} is not a finite number"),
    ],
)
def test_a_bad_coefficient_deep_in_a_1000_sensor_plan_is_named(
    config: dict[str, Any], tmp_path: Path, value: Any, message: str
) -> None:
    data = big_config(config)
    data["reconstruction"]["s0777"]["coefficients"]["s0123"] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))  # NaN written as the NaN literal, as a hostile file would
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("where", ["coefficient", "intercept", "elsewhere"])
def test_an_integer_too_large_for_a_double_is_refused_with_its_key(
    config: dict[str, Any], tmp_path: Path, where: str
) -> None:
    """YAML holds a 401-digit integer (JSON refuses it while parsing); it used to load and
    then crash ``recover`` with an OverflowError traceback."""
    data = json.loads(json.dumps(config))
    target = sorted(data["reconstruction"])[0]
    entry = data["reconstruction"][target]
    backup = sorted(entry["coefficients"])[0]
    node, key, dotted = {
        "coefficient": (
            entry["coefficients"],
            backup,
            f"reconstruction.{target}.coefficients.{backup}",
        ),
        "intercept": (entry, "intercept", f"reconstruction.{target}.intercept"),
        "elsewhere": (data["guarantee"], "history_rows", "guarantee.history_rows"),
    }[where]
    node[key] = 10**400
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=f"at {dotted} is not a finite number") as info:
        load_config(path)
    assert "401 digits" in str(info.value)


def test_a_valid_1000_sensor_plan_never_reaches_full_jsonschema(
    config: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path is what runs; full ``jsonschema`` only words errors."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(big_config(config)))

    def refuse(*_args: Any, **_kw: Any) -> None:
        raise AssertionError("full jsonschema validation ran on a valid config")

    monkeypatch.setattr(config_module.jsonschema, "validate", refuse)
    loaded = load_config(path)
    assert len(loaded.sensors) == 1000
    assert BackupConfig.from_dict(loaded.to_dict()) == loaded


def test_coefficient_matrix_matches_the_dict_lookups(config: dict[str, Any]) -> None:
    """Against the lookups ``linear_map`` used before, with a sparse and a reordered row."""
    data = big_config(config, n=60, m=12)
    section, backup = data["reconstruction"], tuple(data["backup_sensors"])
    targets = tuple(sorted(section, reverse=True))
    del section[targets[0]]["coefficients"][backup[3]]
    section[targets[1]]["coefficients"] = dict(
        reversed(section[targets[1]]["coefficients"].items())
    )
    intercept, coef, variance = coefficient_matrix(section, targets, backup)
    expected = np.array([[section[t]["coefficients"].get(b, 0.0) for b in backup] for t in targets])
    np.testing.assert_array_equal(coef, expected)
    assert coef[0, 3] == 0.0
    np.testing.assert_array_equal(intercept, [section[t]["intercept"] for t in targets])
    np.testing.assert_array_equal(variance, [section[t]["conditional_variance"] for t in targets])
