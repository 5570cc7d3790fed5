"""Wall seconds of each phase of a production micro-batch (metrics and profile)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Phases"]


class Phases:
    """Wall seconds of each phase of a micro-batch (for the metrics and the profile)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now, self._start = now, now()
        self._last = self._start
        self.phases: dict[str, float] = {}

    def mark(self, name: str) -> None:
        t = self._now()
        self.phases[name] = round(t - self._last, 3)
        self._last = t

    def total(self) -> float:
        return self._now() - self._start
