"""Delay models: spec parsing, sampling laws against their formulas, delay files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.disorder.delays import (
    ConstantDelays,
    EmpiricalDelays,
    ExponentialDelays,
    MixtureDelays,
    ParetoDelays,
    parse_delays,
    read_delay_file,
)
from engine.errors import DataError, ParameterError


def test_parse_simple_specs() -> None:
    assert parse_delays("exp:2.5") == ExponentialDelays(2.5)
    assert parse_delays("pareto:1.5,0.2") == ParetoDelays(1.5, 0.2)
    assert parse_delays("const:0") == ConstantDelays(0.0)
    assert parse_delays(" EXP : 3 ") == ExponentialDelays(3.0)


def test_parse_mixture_with_multi_argument_component() -> None:
    model = parse_delays("mix:0.9,exp:1,pareto:2,5")
    assert model == MixtureDelays(0.9, ExponentialDelays(1.0), ParetoDelays(2.0, 5.0))


@pytest.mark.parametrize("spec", ["exp:2", "pareto:1.5,0.2", "const:3", "mix:0.25,exp:1,const:4"])
def test_describe_round_trips(spec: str) -> None:
    model = parse_delays(spec)
    assert parse_delays(model.describe()) == model


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "KIND:ARGS"),
        ("exp", "KIND:ARGS"),
        ("exp:-1", "got -1.0"),
        ("exp:abc", "got 'abc'"),
        ("exp:nan", "got nan"),
        ("pareto:1", "takes 2 number(s), got 1"),
        ("pareto:0,1", "got 0.0"),
        ("mix:1.5,exp:1,exp:2", "got 1.5"),
        ("mix:0.5,exp:1", "two exp/pareto/const"),
        ("mix:0.5,exp:1,mix:0.5,exp:1,exp:2", "two exp/pareto/const"),
        ("mix:0.5,1,exp:2", "mixture components"),
        ("gauss:1", "unknown delay kind 'gauss'"),
        ("file:", "needs a path"),
        ("file:x.csv,scale=-2", "got -2.0"),
    ],
)
def test_bad_specs_raise_parameter_error_naming_the_value(
    spec: str, fragment: str, tmp_path: Path
) -> None:
    if spec.startswith("file:x.csv"):
        (tmp_path / "x.csv").write_text("delay_s\n1\n")
        spec = spec.replace("x.csv", str(tmp_path / "x.csv"))
    with pytest.raises(ParameterError, match=None) as info:
        parse_delays(spec)
    assert fragment in str(info.value)


def test_exponential_mean_and_determinism() -> None:
    model = ExponentialDelays(3.0)
    a = model.sample(200_000, np.random.default_rng(1))
    b = model.sample(200_000, np.random.default_rng(1))
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 0
    assert abs(a.mean() - 3.0) < 0.05  # standard error 3 / sqrt(2e5) ~ 0.007


def test_pareto_support_and_tail_follow_the_formula() -> None:
    shape, scale = 1.5, 0.2
    d = ParetoDelays(shape, scale).sample(400_000, np.random.default_rng(2))
    assert d.min() >= scale
    for x in (0.4, 1.0, 3.0):
        expected = (scale / x) ** shape
        assert abs(np.mean(d > x) - expected) < 4 * np.sqrt(expected / d.size) + 1e-3


def test_mixture_proportion() -> None:
    model = MixtureDelays(0.3, ConstantDelays(1.0), ConstantDelays(100.0))
    d = model.sample(100_000, np.random.default_rng(3))
    assert set(np.unique(d)) == {1.0, 100.0}
    assert abs(np.mean(d == 1.0) - 0.3) < 0.01


def test_delay_file_with_delay_column_is_resampled_and_scaled(tmp_path: Path) -> None:
    path = tmp_path / "delays.csv"
    pd.DataFrame({"delay_s": [0.5, 1.0, 2.0]}).to_csv(path, index=False)
    model = parse_delays(f"file:{path},scale=10")
    assert isinstance(model, EmpiricalDelays)
    d = model.sample(10_000, np.random.default_rng(4))
    assert set(np.unique(d)) == {5.0, 10.0, 20.0}
    assert model.describe() == "file:delays.csv,scale=10"


def test_delay_file_from_event_log_uses_receive_minus_event(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    pd.DataFrame(
        {
            "session": ["a", "a", "a"],
            "event_time_ms": [1000, 1500, 2000],
            "server_receive_ms": [1100, 1750, 4000],
        }
    ).to_csv(path, index=False)
    np.testing.assert_allclose(read_delay_file(path), [0.1, 0.25, 2.0])
    assert parse_delays(f"file:{path}").describe() == "file:events.csv,scale=1"


def test_delay_file_problems_are_data_errors_naming_the_row(tmp_path: Path) -> None:
    negative = tmp_path / "neg.csv"
    pd.DataFrame({"delay_s": [1.0, -0.5]}).to_csv(negative, index=False)
    with pytest.raises(DataError, match="row 3"):
        read_delay_file(negative)
    wrong = tmp_path / "wrong.csv"
    pd.DataFrame({"latency": [1.0]}).to_csv(wrong, index=False)
    with pytest.raises(DataError, match="needs a 'delay_s' column"):
        read_delay_file(wrong)
    with pytest.raises(DataError, match="cannot read"):
        read_delay_file(tmp_path / "missing.csv")


def test_empirical_delays_validate() -> None:
    with pytest.raises(ParameterError, match="non-empty"):
        EmpiricalDelays(np.array([]))
    with pytest.raises(ParameterError, match="finite and >= 0"):
        EmpiricalDelays(np.array([1.0, np.inf]))
