"""The backup config's typed values: the window query (``to_config`` and
``from_config``) and its times (``iso_utc``, ``parse_utc``).

The exported config keeps the query flat under fixed keys that other tools read:
``parameters`` holds ``eps``, ``delta``, ``window``, ``slide`` (in readings),
``aggregate``, ``eps_by_sensor`` (every sensor's eps, v2; one eps for all in v1)
and ``exposure`` (v3; null for whole windows); ``validity.horizon_rows`` holds the
horizon (v2). Code that reads a config asks for its ``WindowQuery`` here (or
``BackupConfig.query``) instead of reading those keys, and a planning request
(``plan_parameters``) to plan again the same way.

``from_config(to_config(q, sensors)) == q`` for a query whose per-sensor eps is
none, or names every sensor (sorted), as a config states it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from engine.data.units import guess_unit
from engine.errors import ConfigError, EngineError
from engine.planning.parameters import PlanParameters
from engine.query import WindowQuery

__all__ = [
    "from_config", "iso_utc", "parse_utc", "plan_parameters", "to_config", "unit_corrections",
]  # fmt: skip


def to_config(query: WindowQuery, sensors: Sequence[str]) -> dict[str, Any]:
    """The config's sections for ``query`` over ``sensors``: ``parameters`` (the query's
    keys; ``exposure`` null for whole windows) and ``validity`` (``horizon_rows``, when
    set)."""
    eps = query.eps_vector(tuple(sensors))
    parameters: dict[str, Any] = {
        "eps": float(query.eps),
        "delta": float(query.delta),
        "window": int(query.window),
        "slide": int(query.effective_slide),
        "aggregate": query.aggregate,
        "eps_by_sensor": {s: float(e) for s, e in zip(sensors, eps, strict=True)},
        "exposure": None if query.exposure is None else int(query.exposure),
    }
    validity = {} if query.horizon is None else {"horizon_rows": int(query.horizon)}
    return {"parameters": parameters, "validity": validity}


def from_config(config: Mapping[str, Any]) -> WindowQuery:
    """The window query a config (or ``to_config``'s sections) states.

    Per-sensor eps is kept when some sensor's differs from ``eps`` (every sensor's,
    sorted), else none. A value the query refuses is a ``ConfigError`` naming it.
    """
    p = _section(config, "parameters")
    v = _section(config, "validity") if config.get("validity") is not None else {}
    try:
        eps = p["eps"]
        by_sensor = sorted((str(s), e) for s, e in dict(p.get("eps_by_sensor", {})).items())
        return WindowQuery(
            eps,
            p["delta"],
            p["window"],
            slide=p["slide"],
            aggregate=p["aggregate"],
            eps_by_sensor=tuple(by_sensor) if any(e != eps for _, e in by_sensor) else (),
            horizon=v.get("horizon_rows"),
            exposure=p.get("exposure"),
        )
    except KeyError as err:
        raise ConfigError(f"config parameters lack {err.args[0]!r}") from None
    except EngineError as err:
        raise ConfigError(f"config parameters: {err}") from None


def plan_parameters(config: Mapping[str, Any]) -> PlanParameters:
    """The planning request behind a config, to plan again the same way: its query, its
    selection method, the calibration it asked for (``backtest`` when the config
    records that calibration could not measure, ``unmeasured``) and the operator's unit
    corrections (``PlanParameters.units``)."""
    guarantee = dict(config.get("guarantee") or {})
    calibration = dict(guarantee.get("calibration") or {}).get("method", "backtest")
    return PlanParameters(
        from_config(config),
        method=guarantee.get("method", "greedy"),
        calibration="backtest" if calibration == "unmeasured" else calibration,  # loader-checked
        units=unit_corrections(config),
    )


def unit_corrections(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(sensor, unit) for each sensor whose unit in ``parameters.units`` (v2) is not the
    one its name suggests: the operator's corrections, as the CLI and the app hold them
    (``PlanParameters.units``). A re-plan gets every unit the config states back (the
    rest are guessed alike); a v1 config states none."""
    units = dict(_section(config, "parameters").get("units") or {})
    return tuple((s, u) for s, u in units.items() if u != guess_unit(s))


def _section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    found = config.get(name)
    if not isinstance(found, Mapping):
        raise ConfigError(f"config {name} must be an object, got {found!r}")
    return found


def iso_utc(t: np.datetime64) -> str:
    """``2016-09-01T00:00:00Z``: a naive-UTC time as ISO 8601 with its zone."""
    return pd.Timestamp(t).isoformat() + "Z"


def parse_utc(text: str) -> np.datetime64:
    """The inverse of ``iso_utc``: a naive-UTC ``datetime64[ns]``."""
    try:
        stamp = pd.Timestamp(text)
    except ValueError as err:
        raise ConfigError(f"not an ISO 8601 time: got {text!r} ({err})") from None
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert(None)
    return np.datetime64(stamp.to_datetime64(), "ns")
