"""The operator's planning request: ``PlanParameters``, validated when made.

The window query (eps, delta, window, slide, aggregate, per-sensor eps, horizon,
exposure) is one ``engine.query.WindowQuery``; the request adds the planning
knobs (selection method, calibration, history, unit corrections). Also the two
defaults the request leaves open: how many rows to learn from
(``default_history``) and how many rows a plan is used before re-planning
(``resolve_horizon``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar

import numpy as np

from engine.data.units import check_unit_pairs, mixed_unit_warning
from engine.errors import ParameterError
from engine.planning.calibration import CALIBRATIONS, PlanningSpec
from engine.planning.folds import MIN_HISTORY_ROWS
from engine.planning.horizon import HORIZON_MIN_WINDOWS, default_horizon
from engine.planning.horizon import default_history as _default_history
from engine.query import HoldsQuery, WindowQuery, check_window_fits, horizon_rows
from engine.selection.greedy import METHODS, Method

__all__ = ["PlanParameters", "default_history", "resolve_horizon"]

_QUERY_KEYS = tuple(f.name for f in fields(WindowQuery))


@dataclass(frozen=True)
class PlanParameters(HoldsQuery):
    """The operator's request: the window ``query`` and how to plan for it."""

    query: WindowQuery
    method: Method = "greedy"
    calibration: str = "backtest"
    history: int | None = None  # rows to learn from; None: ``default_history``
    # The operator's sensor -> unit corrections; other sensors' units are guessed from
    # their names (``engine.data.units``). Only used to warn about mixed units under one eps.
    units: tuple[tuple[str, str], ...] = ()

    # the flat keys of ``to_dict``: the query's, then the planning knobs'
    KEYS: ClassVar[tuple[str, ...]] = (*_QUERY_KEYS, "method", "calibration", "history", "units")

    def __post_init__(self) -> None:
        if not isinstance(self.query, WindowQuery):
            raise ParameterError(f"query must be a WindowQuery, got {self.query!r}")
        if self.method not in METHODS:
            raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.calibration not in CALIBRATIONS:
            raise ParameterError(
                f"calibration must be one of {', '.join(CALIBRATIONS)}, got {self.calibration!r}"
            )
        h = self.history
        if h is not None and (
            isinstance(h, bool) or not isinstance(h, int) or h < MIN_HISTORY_ROWS
        ):
            raise ParameterError(
                f"history must be an integer >= {MIN_HISTORY_ROWS} rows, got {h!r}"
            )
        object.__setattr__(self, "units", check_unit_pairs(self.units))

    def check_fits(self, n_rows: int) -> None:
        """Refuse a window or an exposure longer than a history of ``n_rows`` rows: no
        window of the history could be scored (and a failure's stretch, ``w + m - 1``
        positions a window, would be scored on arrays of that size)."""
        check_window_fits(self.window, n_rows)
        if self.exposure is not None and self.exposure > n_rows:
            raise ParameterError(
                f"exposure ({self.exposure} rows) is longer than the history ({n_rows} rows): "
                "a failure that can lose more rows than that is planned for with the range "
                "contract (whole windows rebuilt: leave the exposure out)"
            )

    def eps_vector(self, sensors: tuple[str, ...]) -> np.ndarray:
        """Each sensor's eps, (n,) in ``sensors`` order (``WindowQuery.eps_vector``)."""
        return self.query.eps_vector(sensors)

    def with_query(self, **changes: Any) -> PlanParameters:
        """These parameters with the query's fields ``changes`` (validated again)."""
        return replace(self, query=replace(self.query, **changes))

    def unit_warning(self, sensors: tuple[str, ...]) -> str | None:
        """The mixed-unit warning for the sensors sharing the single ``eps``, if any."""
        overridden = {s for s, _ in self.eps_by_sensor}
        shared = [s for s in sensors if s not in overridden]
        return mixed_unit_warning(shared, self.units)

    def spec(self) -> PlanningSpec:
        return PlanningSpec.from_query(self.query, self.method, self.calibration)

    def to_dict(self) -> dict[str, Any]:
        """Flat plain values: the query's keys, then the planning knobs' (``KEYS``)."""
        knobs = {k: v for k, v in asdict(self).items() if k != "query"}
        return {**asdict(self.query), **knobs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanParameters:
        """The inverse of ``to_dict``; an unknown key is a ``ParameterError``."""
        unknown = sorted(set(data) - set(cls.KEYS))
        if unknown:
            raise ParameterError(f"unknown plan parameter(s): {', '.join(unknown)}")
        missing = [k for k in ("eps", "delta", "window") if k not in data]
        if missing:
            raise ParameterError(f"plan parameters lack {', '.join(missing)}")
        query = WindowQuery(**{k: v for k, v in data.items() if k in _QUERY_KEYS})
        return cls(query, **{k: v for k, v in data.items() if k not in _QUERY_KEYS})


def default_history(
    n_rows: int, window: int, n_sensors: int = 1, horizon: int | None = None
) -> int:
    """Rows to learn from when not told: all of them, up to a cost cap.

    See ``engine.planning.horizon.default_history``: at most ``HISTORY_READINGS_CAP``
    readings, never less than calibration needs for the window and horizon.
    """
    rows = horizon_rows(horizon, window, HORIZON_MIN_WINDOWS * window)
    return _default_history(n_rows, n_sensors, window, rows)


def resolve_horizon(params: PlanParameters, n_rows: int, sampling_interval_s: float) -> int:
    """The horizon in rows: the operator's, or ``default_horizon``; at least one window."""
    return params.query.horizon_rows(default_horizon(n_rows, params.window, sampling_interval_s))
