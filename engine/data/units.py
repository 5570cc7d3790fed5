"""Unit groups: which sensors share a unit, so that they can share one ``eps``.

``eps`` is in the unit of the aggregate. A network of mixed sensors (degC,
ug/m3, hPa, mm) needs one tolerance per unit group: 2 degC is loose, 2 ug/m3
of PM2.5 is tight, 2 hPa is something else again. Nothing in a CSV says what
the units are, so they are *guessed* from the column names (an explicit unit
suffix such as ``_degC``, ``_hPa``, ``_mg_m3``; else a known quantity such as
``TEMP``, ``PM2.5``, ``PRES``) and the operator may correct any guess with a
column-to-unit mapping. A column with nothing recognisable gets a group of its
own name pattern (``unknown:<quantity>``), never silently a known unit; columns
named only by numbers share one group (``unknown:id``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engine.errors import ParameterError

UNKNOWN = "unknown:"
# Explicit unit tokens at the end of a name (case-insensitive), as written in the file.
UNIT_TOKENS: dict[str, str] = {
    "degc": "degC",
    "degf": "degF",
    "pct": "%",
    "percent": "%",
    "hpa": "hPa",
    "mbar": "hPa",  # 1 mbar = 1 hPa
    "kpa": "kPa",
    "pa": "Pa",
    "mmhg": "mmHg",
    "uv": "uV",
    "mv": "mV",
    "v": "V",
    "a": "A",
    "ma": "mA",
    "w": "W",
    "kw": "kW",
    "mw": "MW",
    "wh": "Wh",
    "kwh": "kWh",
    "mwh": "MWh",
    "lux": "lux",
    "ppm": "ppm",
    "ppb": "ppb",
    "ms": "m/s",
    "mps": "m/s",
    "mm": "mm",
    "km": "km",
    "hz": "Hz",
    "db": "dB",
}
# Two trailing tokens that spell one unit: ``CO_mg_m3`` -> mg/m3.
UNIT_PAIRS: dict[tuple[str, str], str] = {
    ("mg", "m3"): "mg/m3",
    ("ug", "m3"): "ug/m3",
    ("m", "s"): "m/s",
}
# Known quantities anywhere in a name (case-insensitive) and their usual unit.
QUANTITIES: dict[str, str] = {
    "temp": "degC",
    "temperature": "degC",
    "dewp": "degC",
    "dewpoint": "degC",
    "pm2.5": "ug/m3",
    "pm25": "ug/m3",
    "pm10": "ug/m3",
    "pm": "ug/m3",
    "so2": "ug/m3",
    "no2": "ug/m3",
    "o3": "ug/m3",
    "co": "ug/m3",
    "pres": "hPa",
    "humi": "%",
    "humidity": "%",
    "hum": "%",
    "rh": "%",
    "rain": "mm",
    "precipitation": "mm",
    "wspm": "m/s",
    "iws": "m/s",
    "lux": "lux",
    "light": "lux",
    "co2": "ppm",
}
_SPLIT = re.compile(r"[_\s\-]+")


def _tokens(name: str) -> list[str]:
    return [t for t in _SPLIT.split(name.strip()) if t]


def _explicit_unit(tokens: list[str]) -> str | None:
    if "/" in tokens[-1]:
        return tokens[-1]
    if len(tokens) >= 3:  # the pair must follow a quantity: ``CO_mg_m3``, not ``m_s``
        pair = UNIT_PAIRS.get((tokens[-2].lower(), tokens[-1].lower()))
        if pair is not None:
            return pair
    if len(tokens) >= 2:
        return UNIT_TOKENS.get(tokens[-1].lower())
    return None


NUMBERED = "id"  # the pattern of names that are only numbers (detector ids)


def _unknown_key(name: str, tokens: list[str]) -> str:
    """The name pattern of a column with no recognisable unit: its last word without
    digits; names without a word (``773869``, ``12-04``) all share ``NUMBERED``."""
    words = [t for t in tokens if not any(c.isdigit() for c in t)]
    if words:
        return words[-1]
    stripped = re.sub(r"\d+", "", name).strip("_- ")
    return stripped if any(c.isalpha() for c in stripped) else NUMBERED


def guess_unit(name: str) -> str:
    """The unit a column name suggests, e.g. ``Dongsi_TEMP`` -> ``degC``.

    Returns a unit (``degC``, ``ug/m3``, ``hPa``, ...) or ``unknown:<pattern>``
    (``s07`` -> ``unknown:s``, ``Zone_1_Power_Consumption`` ->
    ``unknown:Consumption``), so columns with the same unrecognised pattern share
    a group and different patterns do not. Names that are only numbers (detector
    ids such as ``773869``) are one group, ``unknown:id``.
    """
    tokens = _tokens(name)
    if not tokens:
        return UNKNOWN + name
    quantity = next((QUANTITIES[t.lower()] for t in reversed(tokens) if t.lower() in QUANTITIES),
                    None)  # fmt: skip
    explicit = _explicit_unit(tokens)
    # a one-letter suffix after a known quantity is a label, not a unit: Temp_A is a
    # temperature (sensor A), not amperes; Pump_A, with no quantity, stays amperes
    if explicit is not None and not (quantity is not None and len(tokens[-1]) == 1):
        return explicit
    if quantity is not None:
        return quantity
    return UNKNOWN + _unknown_key(name, tokens)


def sensor_units(
    sensors: Sequence[str], overrides: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> dict[str, str]:
    """Each sensor's unit: the operator's ``overrides`` (sensor -> unit), else the guess."""
    given = dict(overrides)
    bad = [s for s, u in given.items() if not isinstance(u, str) or not u.strip()]
    if bad:
        raise ParameterError(f"units must be non-empty text, got {given[bad[0]]!r} for {bad[0]!r}")
    return {s: given[s].strip() if s in given else guess_unit(s) for s in sensors}


def unit_groups(
    sensors: Sequence[str], overrides: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> dict[str, list[str]]:
    """Sensors grouped by unit, groups in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for sensor, unit in sensor_units(sensors, overrides).items():
        groups.setdefault(unit, []).append(sensor)
    return groups


def mixed_unit_warning(
    sensors: Sequence[str],
    overrides: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    per_sensor_eps: bool = False,
) -> str | None:
    """A warning when sensors of several units would share one eps; else None."""
    if per_sensor_eps:
        return None
    groups = unit_groups(sensors, overrides)
    if len(groups) < 2:
        return None
    shown = ", ".join(f"{u} ({len(m)})" for u, m in list(groups.items())[:6])
    more = "" if len(groups) <= 6 else f" and {len(groups) - 6} more"
    return (
        f"the sensors have {len(groups)} units ({shown}{more}) but one eps: eps is in the "
        "aggregate's unit, so set one eps per unit group (--eps-by-unit in the CLI, the unit "
        "groups on the Tune page)"
    )


def eps_for_units(
    sensors: Sequence[str],
    eps_by_unit: Mapping[str, float],
    overrides: Mapping[str, str] | Iterable[tuple[str, str]] = (),
) -> tuple[tuple[str, float], ...]:
    """Per-sensor eps from one eps per unit: ``(sensor, eps)`` for every sensor whose unit
    is in ``eps_by_unit``. A unit that matches no sensor is a ``ParameterError``."""
    units = sensor_units(sensors, overrides)
    present = set(units.values())
    unused = [u for u in eps_by_unit if u not in present]
    if unused:
        raise ParameterError(
            f"unit(s) {', '.join(map(repr, unused))} match no sensor; "
            f"the sensors' units are {', '.join(sorted(present))}"
        )
    return tuple((s, float(eps_by_unit[u])) for s, u in units.items() if u in eps_by_unit)


def check_unit_pairs(value: object) -> tuple[tuple[str, str], ...]:
    """Validated (sensor, unit) pairs: names unique, units non-empty text."""
    pairs = sensor_pairs(value, "units")
    for name, unit in pairs:
        if not isinstance(unit, str) or not unit.strip():
            raise ParameterError(f"unit of {name!r} must be non-empty text, got {unit!r}")
    return tuple((name, str(unit).strip()) for name, unit in pairs)


def sensor_pairs(value: object, what: str) -> list[tuple[str, Any]]:
    """(sensor, value) pairs from a mapping or a sequence of pairs; names unique."""
    items = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(items, list | tuple):
        raise ParameterError(f"{what} must be (sensor, value) pairs, got {value!r}")
    pairs = []
    for item in items:
        if not isinstance(item, list | tuple) or len(item) != 2 or not isinstance(item[0], str):
            raise ParameterError(f"{what} must be (sensor, value) pairs, got {item!r}")
        pairs.append((item[0], item[1]))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ParameterError(f"{what} names a sensor twice, got {sorted(names)!r}")
    return pairs


def eps_summary(
    sensors: Sequence[str],
    eps: Sequence[float],
    overrides: Mapping[str, str] | Iterable[tuple[str, str]] = (),
) -> str:
    """``eps degC 1, ug/m3 20``: each unit group's eps (a range if it varies inside one)."""
    by_unit: dict[str, list[float]] = {}
    for (_, unit), value in zip(sensor_units(sensors, overrides).items(), eps, strict=True):
        by_unit.setdefault(unit, []).append(float(value))
    parts = []
    for unit, values in by_unit.items():
        low, high = min(values), max(values)
        parts.append(f"{unit} {low:g}" if low == high else f"{unit} {low:g}..{high:g}")
    return "eps " + ", ".join(parts)


def parse_unit_overrides(text: str, sensors: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``"*_CO = mg/m3"`` lines (a sensor name or glob, ``=``, a unit) -> (sensor, unit) pairs.

    Later lines win. A line without ``=``, with an empty unit or matching no sensor is a
    ``ParameterError`` naming the line.
    """
    given: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, sep, unit = (part.strip() for part in line.partition("="))
        hits = [s for s in sensors if fnmatch.fnmatchcase(s, pattern)] if pattern else []
        if not sep or not unit or not hits:
            raise ParameterError(
                f"unit line {number} must be SENSOR_OR_GLOB = UNIT matching a sensor, got {raw!r}"
            )
        given.update(dict.fromkeys(hits, unit))
    return tuple((s, given[s]) for s in sensors if s in given)
