"""The operator's planning request: ``PlanParameters``, validated when made.

Also the two defaults the request leaves open: how many rows to learn from
(``default_history``) and how many rows a plan is used before re-planning
(``resolve_horizon``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from engine.data.units import check_eps_pairs, check_unit_pairs, mixed_unit_warning
from engine.errors import ParameterError
from engine.planning.calibration import CALIBRATIONS, PlanningSpec, check_exposure
from engine.planning.guarantee import check_parameters
from engine.planning.horizon import default_history as _default_history
from engine.planning.horizon import default_horizon
from engine.selection.greedy import METHODS, Method

__all__ = ["PlanParameters", "default_history", "resolve_horizon"]


@dataclass(frozen=True)
class PlanParameters:
    """The operator's request. ``slide=None`` means tumbling (slide = window)."""

    eps: float
    delta: float
    window: int
    slide: int | None = None
    aggregate: str = "avg"
    method: Method = "greedy"
    calibration: str = "backtest"
    history: int | None = None  # rows to learn from; None: ``default_history``
    # Per-sensor tolerances (sensor -> eps, in that sensor's unit); a sensor not named
    # here uses ``eps``. Empty: one eps for every sensor.
    eps_by_sensor: tuple[tuple[str, float], ...] = ()
    # The operator's sensor -> unit corrections; other sensors' units are guessed from
    # their names (``engine.data.units``). Only used to warn about mixed units under one eps.
    units: tuple[tuple[str, str], ...] = ()
    horizon: int | None = (
        None  # rows the plan is used before re-planning; None: ``default_horizon``
    )
    # The most consecutive rows one failure can lose (the crash contract: the open
    # windows' state survives, a failure loses the micro-batch that did not commit);
    # None: whole windows are rebuilt (the range contract).
    exposure: int | None = None

    def __post_init__(self) -> None:
        check_parameters(self.eps, self.delta, self.window, self.effective_slide, self.aggregate)
        if self.method not in METHODS:
            raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.calibration not in CALIBRATIONS:
            raise ParameterError(
                f"calibration must be one of {', '.join(CALIBRATIONS)}, got {self.calibration!r}"
            )
        if self.history is not None and (not isinstance(self.history, int) or self.history < 4):
            raise ParameterError(f"history must be an integer >= 4 rows, got {self.history!r}")
        object.__setattr__(self, "eps_by_sensor", check_eps_pairs(self.eps_by_sensor))
        object.__setattr__(self, "units", check_unit_pairs(self.units))
        if self.horizon is not None and (
            isinstance(self.horizon, bool) or not isinstance(self.horizon, int) or self.horizon < 1
        ):
            raise ParameterError(f"horizon must be an integer >= 1 row, got {self.horizon!r}")
        check_exposure(self.exposure)

    @property
    def effective_slide(self) -> int:
        return self.window if self.slide is None else self.slide

    def eps_vector(self, sensors: tuple[str, ...]) -> np.ndarray:
        """Each sensor's eps, (n,) in ``sensors`` order; ``eps`` unless overridden.

        An override naming a sensor outside ``sensors`` is a ``ParameterError``.
        """
        given = dict(self.eps_by_sensor)
        unknown = [s for s in given if s not in sensors]
        if unknown:
            raise ParameterError(
                "eps_by_sensor names sensor(s) not planned for: "
                f"{', '.join(map(repr, unknown[:5]))}"
            )
        return np.array([given.get(s, self.eps) for s in sensors], dtype=float)

    def unit_warning(self, sensors: tuple[str, ...]) -> str | None:
        """The mixed-unit warning for the sensors sharing the single ``eps``, if any."""
        overridden = {s for s, _ in self.eps_by_sensor}
        shared = [s for s in sensors if s not in overridden]
        return mixed_unit_warning(shared, self.units)

    def spec(self) -> PlanningSpec:
        return PlanningSpec(
            eps=self.eps,
            delta=self.delta,
            window=self.window,
            slide=self.effective_slide,
            aggregate=self.aggregate,
            method=self.method,
            calibration=self.calibration,
            horizon=self.horizon,
            exposure=self.exposure,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_history(
    n_rows: int, window: int, n_sensors: int = 1, horizon: int | None = None
) -> int:
    """Rows to learn from when not told: all of them, up to a cost cap.

    See ``engine.planning.horizon.default_history``: at most ``HISTORY_READINGS_CAP``
    readings, never less than calibration needs for the window and horizon.
    """
    return _default_history(n_rows, n_sensors, window, horizon or 4 * window)


def resolve_horizon(params: PlanParameters, n_rows: int, sampling_interval_s: float) -> int:
    """The horizon in rows: the operator's, or ``default_horizon``; at least one window."""
    rows = params.horizon or default_horizon(n_rows, params.window, sampling_interval_s)
    return max(rows, params.window)
