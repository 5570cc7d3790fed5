"""The operator's window query, validated in one place: ``WindowQuery``.

``eps`` (in the aggregate's unit, or one per sensor), ``delta``, ``window`` and
``slide`` (in readings), the aggregate, the horizon and the exposure travel
together through planning (``PlanParameters``), the live pipeline
(``StreamSpec``), the disorder stage (``DisorderConfig``) and the production
job (its exported config, ``engine.export.codec``). Each holds one
``WindowQuery``; none checks these values again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.aggregates import get_aggregate
from engine.data.units import sensor_pairs
from engine.errors import ParameterError
from engine.windows import check_window

MAX_EPS = 1e100  # a variance target squares it (and readings stay within 1e60: engine.data.range)
# The cap's mirror: eps squared stays a normal double (1e-200; below about 1e-154 it is
# subnormal, below 1e-162 zero, and a variance target of 0 divides by zero). A per-sensor
# eps must also keep the readings in eps units within the limit: engine.data.range.
MIN_EPS = 1e-100


def _is_real(x: object) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def _is_count(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def check_eps(eps: object, name: str = "eps") -> None:
    """A tolerance is a finite number > 0, within ``MIN_EPS .. MAX_EPS`` (its square must
    neither overflow nor vanish)."""
    if not _is_real(eps) or not math.isfinite(float(eps)) or float(eps) <= 0:  # type: ignore[arg-type]
        raise ParameterError(f"{name} must be a finite number > 0, got {eps!r}")
    if float(eps) > MAX_EPS:  # type: ignore[arg-type]
        raise ParameterError(f"{name} must be at most {MAX_EPS:g}, got {eps!r}")
    if float(eps) < MIN_EPS:  # type: ignore[arg-type]
        raise ParameterError(f"{name} must be at least {MIN_EPS:g}, got {eps!r}")


# Below this the guarantee's quantile levels (1 - 0.7 delta, (1 - delta) ** (1 / w) for
# max/min over long windows) round to 1 in double precision, so every target would be 0
# or a division by zero; and no history could measure so small a rate anyway.
MIN_DELTA = 1e-12


def check_eps_pairs(value: object) -> tuple[tuple[str, float], ...]:
    """Validated (sensor, eps) pairs: names unique, each eps a finite number > 0 and at
    most ``MAX_EPS``, as ``eps`` is."""
    out = []
    for name, eps in sensor_pairs(value, "eps_by_sensor"):
        if isinstance(eps, bool) or not isinstance(eps, int | float | np.floating):
            raise ParameterError(f"eps of {name!r} must be a number, got {eps!r}")
        check_eps(eps, f"eps of {name!r}")  # the one cap of every eps
        out.append((name, float(eps)))
    return tuple(out)


def check_delta(delta: object) -> None:
    """An error rate is strictly between 0 and 1, and at least ``MIN_DELTA``."""
    if not _is_real(delta) or not 0.0 < float(delta) < 1.0:  # type: ignore[arg-type]
        raise ParameterError(f"delta must be a number strictly between 0 and 1, got {delta!r}")
    if float(delta) < MIN_DELTA:  # type: ignore[arg-type]
        raise ParameterError(
            f"delta must be at least {MIN_DELTA:g} (a smaller miss rate rounds to 0 in the "
            f"guarantee's arithmetic and no history can measure it), got {delta!r}"
        )


def check_horizon(horizon: object) -> None:
    """A horizon is None (the default) or a whole number of rows >= 1."""
    if horizon is not None and (not _is_count(horizon) or horizon < 1):  # type: ignore[operator]
        raise ParameterError(f"horizon must be an integer >= 1 row, got {horizon!r}")


def check_window_fits(window: int, n_rows: int) -> None:
    """A window no longer than a history of ``n_rows`` rows: else no window is scored."""
    if window > n_rows:
        raise ParameterError(
            f"window ({window} readings) is longer than the history ({n_rows} rows)"
        )


def check_exposure(exposure: object) -> None:
    """An exposure is None (whole windows) or a whole number of rows >= 1."""
    if exposure is not None and (not _is_count(exposure) or exposure < 1):  # type: ignore[operator]
        raise ParameterError(f"exposure must be an integer >= 1 row, got {exposure!r}")


def contract_of(exposure: int | None) -> str:
    """The contract a plan with this ``exposure`` is made for: "crash" (a failure loses
    at most ``exposure`` rows) or "range" (None: whole windows rebuilt)."""
    return "range" if exposure is None else "crash"


def horizon_rows(horizon: int | None, window: int, default: int) -> int:
    """Rows a plan is used before re-planning: ``horizon``, else ``default``; at least a window.

    The one rule every horizon follows (planning, calibration, the exported validity).
    """
    return int(max(horizon or default, window))


@dataclass(frozen=True)
class WindowQuery:
    """What the operator asks of every window, validated on construction.

    Attributes
    ----------
    eps : tolerance in the aggregate's unit (every sensor not in ``eps_by_sensor``).
    delta : allowed miss rate, in (0, 1).
    window, slide : in readings; ``slide=None`` (or equal to ``window``) is tumbling,
        and is kept as None.
    aggregate : a name of ``engine.aggregates.AGGREGATES``.
    eps_by_sensor : (sensor, eps) pairs, each in that sensor's unit (what an eps per
        unit resolves to); a sensor not named uses ``eps``.
    horizon : rows a plan is used before re-planning; None: derived from the data.
    exposure : the most consecutive rows one failure can lose; None: whole windows
        are rebuilt (the range contract).

    A bad value raises ``ParameterError`` naming it (``got ...``).
    """

    eps: float
    delta: float
    window: int
    slide: int | None = None
    aggregate: str = "avg"
    eps_by_sensor: tuple[tuple[str, float], ...] = ()
    horizon: int | None = None
    exposure: int | None = None

    def __post_init__(self) -> None:
        check_eps(self.eps)
        check_delta(self.delta)
        check_window(self.window, self.window if self.slide is None else self.slide)
        get_aggregate(self.aggregate)
        check_horizon(self.horizon)
        check_exposure(self.exposure)
        pairs = check_eps_pairs(self.eps_by_sensor)
        tumbling = self.slide is None or int(self.slide) == int(self.window)
        for name, value in (
            ("eps", float(self.eps)),
            ("delta", float(self.delta)),
            ("window", int(self.window)),
            ("slide", None if tumbling else int(self.slide)),  # type: ignore[arg-type]
            ("eps_by_sensor", pairs),
            ("horizon", None if self.horizon is None else int(self.horizon)),
            ("exposure", None if self.exposure is None else int(self.exposure)),
        ):
            object.__setattr__(self, name, value)

    @property
    def effective_slide(self) -> int:
        """The slide in readings (the window when tumbling)."""
        return self.window if self.slide is None else self.slide

    @property
    def contract(self) -> str:
        """``contract_of(self.exposure)``."""
        return contract_of(self.exposure)

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

    def horizon_rows(self, default: int) -> int:
        """The horizon in rows: the operator's, else ``default``; at least one window."""
        return horizon_rows(self.horizon, self.window, default)


class HoldsQuery:
    """The values of a held window ``query``, read through (for the configs that hold one:
    ``PlanParameters``, ``StreamSpec``, ``DisorderConfig``); none is stored twice."""

    query: WindowQuery

    @property
    def eps(self) -> float:
        return self.query.eps

    @property
    def delta(self) -> float:
        return self.query.delta

    @property
    def window(self) -> int:
        return self.query.window

    @property
    def slide(self) -> int | None:
        return self.query.slide

    @property
    def effective_slide(self) -> int:
        return self.query.effective_slide

    @property
    def aggregate(self) -> str:
        return self.query.aggregate

    @property
    def eps_by_sensor(self) -> tuple[tuple[str, float], ...]:
        return self.query.eps_by_sensor

    @property
    def horizon(self) -> int | None:
        return self.query.horizon

    @property
    def exposure(self) -> int | None:
        return self.query.exposure
