"""The window query: validated once, named in its errors, carried by every config, and
round-tripped through the exported config's codec."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.query as query_module
from engine.disorder import DisorderConfig
from engine.errors import ConfigError, ParameterError
from engine.export import from_config, to_config
from engine.job.transforms import WindowSpec
from engine.live.spec import StreamSpec
from engine.model.linear import LinearMap
from engine.planning import PlanningSpec, PlanParameters
from engine.query import WindowQuery

SENSORS = ("a", "b", "c")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((0.0, 0.05, 10, 10, "avg"), "eps"),
        ((-1.0, 0.05, 10, 10, "avg"), "-1.0"),
        ((float("nan"), 0.05, 10, 10, "avg"), "nan"),
        ((float("inf"), 0.05, 10, 10, "avg"), "inf"),
        ((1.0, 0.0, 10, 10, "avg"), "delta"),
        ((1.0, 1.0, 10, 10, "avg"), "delta"),
        ((1.0, float("nan"), 10, 10, "avg"), "delta"),
        ((1.0, 0.05, 0, 1, "avg"), "window"),
        ((1.0, 0.05, 2.5, 1, "avg"), "2.5"),
        ((1.0, 0.05, True, 1, "avg"), "window"),
        ((1.0, 0.05, 10, 0, "avg"), "slide"),
        ((1.0, 0.05, 10, 11, "avg"), "11"),
        ((1.0, 0.05, 10, 10, "median"), "median"),
        (("1", 0.05, 10, 10, "avg"), "eps"),
    ],
)
def test_a_bad_query_value_is_named(args: tuple, fragment: str) -> None:
    with pytest.raises(ParameterError, match=fragment):
        WindowQuery(*args)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"horizon": 0}, "horizon must be an integer >= 1 row, got 0"),
        ({"horizon": 2.5}, "got 2.5"),
        ({"exposure": 0}, "exposure must be an integer >= 1 row, got 0"),
        ({"exposure": True}, "got True"),
        ({"eps_by_sensor": (("a", -2.0),)}, "eps of 'a' must be a finite number > 0, got -2.0"),
        ({"eps_by_sensor": (("a", 1e200),)}, "eps of 'a' must be at most 1e+100, got 1e+200"),
    ],
)
def test_the_other_query_values_are_named_too(changes: dict, named: str) -> None:
    with pytest.raises(ParameterError) as info:
        WindowQuery(1.0, 0.05, 10, **changes)
    assert named in str(info.value)


def test_a_query_is_normalised_tumbling_and_typed() -> None:
    q = WindowQuery(1, 0.5, np.int64(3), 3, "sum")
    assert q.slide is None and q.effective_slide == 3
    assert type(q.eps) is float and type(q.window) is int
    assert q == WindowQuery(1.0, 0.5, 3, aggregate="sum")
    assert WindowQuery(0.5, 0.05, 30, 1, "max").effective_slide == 1


def test_the_horizon_is_the_operators_else_the_default_and_never_below_a_window() -> None:
    assert WindowQuery(1.0, 0.05, 24).horizon_rows(96) == 96
    assert WindowQuery(1.0, 0.05, 24, horizon=48).horizon_rows(96) == 48
    assert WindowQuery(1.0, 0.05, 24, horizon=5).horizon_rows(96) == 24
    assert WindowQuery(1.0, 0.05, 24).horizon_rows(3) == 24


def _identity_map() -> LinearMap:
    return LinearMap(SENSORS, SENSORS, (), np.zeros(0), np.zeros((0, 3)), np.zeros(0))


def test_every_carrier_takes_the_query_without_checking_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The query's values are checked when it is made, and by no config built from it."""
    calls: list[object] = []
    real = query_module.check_eps

    def counted(eps: object, name: str = "eps") -> None:
        calls.append(eps)
        real(eps, name)

    monkeypatch.setattr(query_module, "check_eps", counted)
    q = WindowQuery(0.5, 0.05, 6, 2, "max", horizon=12)
    assert calls == [0.5]
    params = PlanParameters(q, method="paper")
    spec = StreamSpec(SENSORS, SENSORS, _identity_map(), q)
    config = DisorderConfig(q, interval_s=60.0)
    planning = PlanningSpec.from_query(q, "paper")
    job = WindowSpec.from_query(q, 60.0, 0.0)
    assert calls == [0.5]
    assert (params.window, spec.slide, config.eps_thr, planning.horizon_rows) == (6, 2, 0.5, 12)
    assert (job.window_s, job.slide_s, job.aggregate) == (360.0, 120.0, "max")
    assert params.spec() == planning and spec.window_params.slide == 2


def test_a_carrier_refuses_anything_but_a_query() -> None:
    with pytest.raises(ParameterError, match=r"query must be a WindowQuery, got 0\.5"):
        PlanParameters(0.5)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="query must be a WindowQuery"):
        DisorderConfig({"window": 4})  # type: ignore[arg-type]


@st.composite
def queries(draw: st.DrawFn) -> WindowQuery:
    window = draw(st.integers(1, 500))
    eps = draw(st.floats(1e-6, 1e6, allow_nan=False))
    per = draw(st.none() | st.lists(st.floats(1e-6, 1e6), min_size=3, max_size=3))
    return WindowQuery(
        eps,
        draw(st.floats(1e-4, 0.999)),
        window,
        draw(st.none() | st.integers(1, window)),
        draw(st.sampled_from(("avg", "sum", "max", "min"))),
        eps_by_sensor=() if per is None else tuple(zip(SENSORS, per, strict=True)),
        horizon=draw(st.none() | st.integers(1, 10**6)),
        exposure=draw(st.none() | st.integers(1, 10**4)),
    )


@settings(max_examples=200, deadline=None)
@given(queries())
def test_the_config_codec_round_trips(q: WindowQuery) -> None:
    """Per-sensor eps as a config states it: none, or every sensor's (sorted)."""
    if q.eps_by_sensor and all(e == q.eps for _, e in q.eps_by_sensor):
        q = WindowQuery(q.eps, q.delta, q.window, q.slide, q.aggregate, horizon=q.horizon,
                        exposure=q.exposure)  # fmt: skip
    assert from_config(to_config(q, SENSORS)) == q


def test_the_codec_writes_the_configs_flat_keys() -> None:
    q = WindowQuery(2.0, 0.05, 24, eps_by_sensor=(("b", 5.0),), horizon=96)
    assert to_config(q, SENSORS) == {
        "parameters": {
            "eps": 2.0,
            "delta": 0.05,
            "window": 24,
            "slide": 24,
            "aggregate": "avg",
            "eps_by_sensor": {"a": 2.0, "b": 5.0, "c": 2.0},
            "exposure": None,
        },
        "validity": {"horizon_rows": 96},
    }
    back = from_config(to_config(q, SENSORS))
    assert back.eps_vector(SENSORS).tolist() == [2.0, 5.0, 2.0]


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        ({"window": 0}, "config parameters: window must be an integer >= 1, got 0"),
        ({"aggregate": "mode"}, "got 'mode'"),
        ({"eps": None}, "eps must be a finite number > 0, got None"),
    ],
)
def test_a_bad_config_value_is_a_config_error_naming_it(parameters: dict, named: str) -> None:
    good = to_config(WindowQuery(1.0, 0.05, 4), SENSORS)
    config = {**good, "parameters": {**good["parameters"], **parameters}}
    with pytest.raises(ConfigError) as info:
        from_config(config)
    assert named in str(info.value)


def test_a_config_without_a_query_key_says_which() -> None:
    parameters = to_config(WindowQuery(1.0, 0.05, 4), SENSORS)["parameters"]
    del parameters["delta"]
    with pytest.raises(ConfigError, match="config parameters lack 'delta'"):
        from_config({"parameters": parameters})


def test_plan_parameters_round_trip_flat_and_name_what_is_wrong() -> None:
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, 6, "max", horizon=48), "paper")
    flat = params.to_dict()
    assert flat["window"] == 24 and flat["method"] == "paper" and "query" not in flat
    assert PlanParameters.from_dict(flat) == params
    with pytest.raises(ParameterError, match=r"unknown plan parameter.*colour"):
        PlanParameters.from_dict({**flat, "colour": 1})
    with pytest.raises(ParameterError, match="plan parameters lack delta"):
        PlanParameters.from_dict({"eps": 1.0, "window": 3})
