"""The online controller's inputs and outputs: its constants, one window's shadow
feedback and a decision (``engine.planning.control`` is the controller itself)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import ParameterError
from engine.selection.incremental import REFRESH_EVERY

__all__ = ["ControlConfig", "ControlDecision", "ShadowFeedback", "check_feedback"]


@dataclass(frozen=True)
class ControlConfig:
    """Constants of the controller (see the module docstring for their roles)."""

    delta: float
    margin: float = 0.7  # aim = delta * margin, as the calibration aims
    gamma: float = 0.2  # step of the log-target per window
    s_start: float = 0.0  # s_0
    s_min: float = -2.0  # the floor: at or below it a sensor is backed up
    s_max: float = 2.0  # the clip above
    evidence_windows: int = 24  # measured windows needed to release a sensor
    hold_windows: int = 6  # a sensor stays backed up at least this many windows once added
    release_margin: float = 0.8  # a release keeps every rising variance within this x target
    max_releases: int = 2  # sensors released per decision at most (adds are not limited)
    refresh_every: int = REFRESH_EVERY

    def __post_init__(self) -> None:
        if not 0.0 < self.delta < 1.0:
            raise ParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        if not 0.0 < self.margin <= 1.0:
            raise ParameterError(f"margin must be in (0, 1], got {self.margin!r}")
        if not (np.isfinite(self.gamma) and self.gamma > 0):
            raise ParameterError(f"gamma must be finite and > 0, got {self.gamma!r}")
        if not (np.isfinite(self.s_min) and np.isfinite(self.s_max)):
            raise ParameterError(f"s_min and s_max must be finite, got {self.s_min!r}, "
                                 f"{self.s_max!r}")  # fmt: skip
        if not self.s_min <= self.s_start <= self.s_max:
            raise ParameterError(
                f"s_start must be in [s_min, s_max] = [{self.s_min}, {self.s_max}], "
                f"got {self.s_start!r}"
            )
        for name in ("evidence_windows", "hold_windows", "refresh_every", "max_releases"):
            value = getattr(self, name)
            low = 0 if name == "hold_windows" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ParameterError(f"{name} must be an integer >= {low}, got {value!r}")
        if not 0.0 < self.release_margin <= 1.0:
            raise ParameterError(f"release_margin must be in (0, 1], got {self.release_margin!r}")

    @property
    def aim(self) -> float:
        """The long-run miss fraction each sensor is steered to: ``delta * margin``."""
        return self.delta * self.margin

    def miss_bound(self, windows: int, delay: int = 0) -> float:
        """The guaranteed miss fraction over ``windows`` applied windows from the start."""
        if windows < 1 or delay < 0:
            raise ParameterError(f"need windows >= 1 and delay >= 0, got {windows}, {delay}")
        slack = (self.s_start - self.s_min + self.gamma * (delay + 1)) / self.gamma
        return self.aim + slack / windows


@dataclass(frozen=True, eq=False)
class ShadowFeedback:
    """One closed window's shadow check, every array (n,) in the controller's sensor order.

    miss : the window's miss per sensor in [0, 1] (only rebuilt sensors' entries are read);
        NaN: not measured.
    rebuilt : which sensors were rebuilt in the window: True where any of the sensor's
        readings in it was not backed up (a set changed mid-window counts as rebuilt).
    counterfactual : the miss a backed-up sensor would have had were it dropped, in
        [0, 1] or NaN (not measured); None: none measured.
    """

    window: int
    miss: np.ndarray
    rebuilt: np.ndarray
    counterfactual: np.ndarray | None = None


@dataclass(frozen=True)
class ControlDecision:
    """The backup set after a batch of feedback, and what changed."""

    backup: tuple[int, ...]
    added: tuple[int, ...]
    released: tuple[int, ...]
    forced: tuple[int, ...]  # sensors at the floor (backed up whatever the model says)
    applied: int  # windows of the batch applied (duplicates and stale ones are not)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.released)


def check_feedback(f: ShadowFeedback, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(miss, rebuilt, counterfactual) as (n,) arrays; NaN for unmeasured."""
    if isinstance(f.window, bool) or not isinstance(f.window, int | np.integer) or f.window < 0:
        raise ParameterError(f"window must be an integer id >= 0, got {f.window!r}")
    miss = np.asarray(f.miss, dtype=float)
    rebuilt = np.asarray(f.rebuilt)
    counter = (
        np.full(n, np.nan) if f.counterfactual is None else np.asarray(f.counterfactual, float)
    )
    for name, given in (("miss", miss), ("rebuilt", rebuilt), ("counterfactual", counter)):
        if given.shape != (n,):
            raise ParameterError(f"{name} must have shape ({n},), got {given.shape}")
    if rebuilt.dtype != bool:
        raise ParameterError(f"rebuilt must be a boolean mask, got dtype {rebuilt.dtype}")
    for name, a in (("miss", miss), ("counterfactual", counter)):
        known = a[~np.isnan(a)]
        if np.any(known < 0) or np.any(known > 1):
            low, high = float(known.min()), float(known.max())
            raise ParameterError(f"{name} must be in [0, 1] or NaN, got {low!r}..{high!r}")
    return miss, rebuilt, counter
