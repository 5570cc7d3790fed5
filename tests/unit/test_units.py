"""Unit groups guessed from column names, the operator's corrections, mixed-unit warnings."""

from __future__ import annotations

import pytest

from engine.data.units import eps_for_units, guess_unit, mixed_unit_warning, unit_groups
from engine.errors import ParameterError
from engine.planning import PlanParameters
from engine.query import WindowQuery


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("Dongsi_TEMP", "degC"),
        ("Dongsi_DEWP", "degC"),
        ("T1_kitchen_degC", "degC"),
        ("temp_r01", "degC"),
        ("Temperature", "degC"),
        ("Aotizhongxin_PM2.5", "ug/m3"),
        ("Beijing_PM_US_Post", "ug/m3"),
        ("Dongsi_CO", "ug/m3"),
        ("CO_mg_m3", "mg/m3"),
        ("Beijing_PRES", "hPa"),
        ("AP_ambient_press_mbar", "hPa"),
        ("airport_press_mmHg", "mmHg"),
        ("AF3_uV", "uV"),
        ("RH1_kitchen_pct", "%"),
        ("TEY_energy_yield_MWh", "MWh"),
        ("S1_light_lux", "lux"),
        ("S5_CO2_ppm", "ppm"),
        ("airport_wind_ms", "m/s"),
        ("Dongsi_RAIN", "mm"),
        ("hum_r07", "%"),
        ("airport_visibility_km", "km"),
        ("s07", "unknown:s"),
        ("Zone_1_Power_Consumption", "unknown:Consumption"),
        ("S6_PIR_motion_01", "unknown:motion"),
        ("773869", "unknown:id"),
        ("12-04", "unknown:id"),
    ],
)
def test_guess_unit_from_names(name: str, unit: str) -> None:
    assert guess_unit(name) == unit


def test_groups_follow_guesses_and_operator_overrides() -> None:
    sensors = ["A_TEMP", "B_TEMP", "A_PM2.5", "node1", "node2"]
    assert unit_groups(sensors) == {
        "degC": ["A_TEMP", "B_TEMP"],
        "ug/m3": ["A_PM2.5"],
        "unknown:node": ["node1", "node2"],
    }
    fixed = unit_groups(sensors, {"node1": "degC", "node2": "degC"})
    assert fixed["degC"] == ["A_TEMP", "B_TEMP", "node1", "node2"]
    with pytest.raises(ParameterError, match="node1"):
        unit_groups(sensors, {"node1": " "})


def test_columns_named_by_numbers_form_one_group_and_no_warning() -> None:
    # a traffic file: 207 detectors named by their ids, no unit anywhere
    sensors = tuple(str(773000 + 17 * i) for i in range(207))
    assert unit_groups(sensors) == {"unknown:id": list(sensors)}
    assert mixed_unit_warning(sensors) is None


def test_mixed_units_under_one_eps_warn_and_per_unit_eps_does_not() -> None:
    sensors = ("A_TEMP", "B_TEMP", "A_PM2.5", "B_PM2.5")
    warning = mixed_unit_warning(sensors)
    assert warning is not None and "2 units" in warning and "degC (2)" in warning
    assert mixed_unit_warning(sensors[:2]) is None
    one = PlanParameters(WindowQuery(1.0, 0.05, 24))
    assert one.unit_warning(sensors) == warning
    per = PlanParameters(
        WindowQuery(1.0, 0.05, 24, eps_by_sensor=eps_for_units(sensors, {"ug/m3": 20.0}))
    )
    # the PM2.5 sensors have their own eps; the rest (all degC) share the single eps
    assert per.unit_warning(sensors) is None
    assert per.eps_vector(sensors).tolist() == [1.0, 1.0, 20.0, 20.0]
    # the operator says the PM sensors are degC too: no longer mixed
    same = PlanParameters(
        WindowQuery(1.0, 0.05, 24), units=(("A_PM2.5", "degC"), ("B_PM2.5", "degC"))
    )
    assert same.unit_warning(sensors) is None


def test_eps_for_units_rejects_a_unit_no_sensor_has() -> None:
    with pytest.raises(ParameterError, match="hPa"):
        eps_for_units(["A_TEMP"], {"hPa": 1.0})


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"eps_by_sensor": (("a", 0.0),)}, "eps of 'a'"),
        ({"eps_by_sensor": (("a", float("inf")),)}, "eps of 'a'"),
        ({"eps_by_sensor": (("a", "1"),)}, "eps of 'a'"),
        ({"eps_by_sensor": (("a", 1.0), ("a", 2.0))}, "twice"),
        ({"eps_by_sensor": ((1, 1.0),)}, "pairs"),
        ({"units": (("a", ""),)}, "unit of 'a'"),
    ],
)
def test_per_sensor_parameters_validate_themselves(kwargs: dict, word: str) -> None:
    with pytest.raises(ParameterError, match=word):
        PlanParameters.from_dict({"eps": 1.0, "delta": 0.05, "window": 24, **kwargs})


def test_eps_vector_rejects_sensors_not_planned_for() -> None:
    p = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor={"x": 2.0}))
    assert p.eps_by_sensor == (("x", 2.0),)
    with pytest.raises(ParameterError, match="'x'"):
        p.eps_vector(("a", "b"))


def test_a_one_letter_label_after_a_quantity_is_not_a_unit() -> None:
    """Temp_A and Temp_B are two temperature sensors (A and B), not amperes and degC;
    with no quantity in the name a one-letter suffix is still the unit it spells."""
    assert guess_unit("Temp_A") == guess_unit("Temp_B") == "degC"
    assert guess_unit("Humidity_A") == "%"
    assert guess_unit("Pump_A") == "A" and guess_unit("Zone1_W") == "W"
    assert guess_unit("T1_kitchen_degC") == "degC" and guess_unit("airport_wind_ms") == "m/s"
