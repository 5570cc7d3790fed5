"""How a history file is read: layout, time column, missing values, time units."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from engine.errors import ParameterError

Layout = Literal["auto", "wide", "long"]
MissingPolicy = Literal["interpolate", "drop"]
UNIT_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "min": 60 * 10**9, "h": 3600 * 10**9}
UNIT_WORDS = {"ns": "nanoseconds", "us": "microseconds", "ms": "milliseconds", "s": "seconds"}
UNIT_WORDS |= {"min": "minutes", "h": "hours"}
CLOCK_MAX_S = 366 * 86400  # the longest clock step


@dataclass(frozen=True)
class LoadOptions:
    """How to read a history file; every field is checked on construction."""

    layout: Layout = "auto"
    time_column: str | None = None  # auto-detect when None
    missing: MissingPolicy = "interpolate"  # linear in time, then drop rows still missing
    # unit of a numeric time column ("s", "min", "h", "ms", ...); None: not said, so
    # seconds (hours for a column named with "hour"), and numbers that are certainly
    # dates (YYYYMMDD, Excel serial days) are refused rather than read as 1970
    numeric_time_unit: str | None = None
    min_rows: int | None = None  # None: sensors + 2, what fitting a model needs
    sensors: tuple[str, ...] | None = None  # names or globs kept, before the row minimum
    # seconds of one step of a common clock (None: times as read): every reading moves to
    # the step nearest its time, and a sensor's readings in one step are averaged
    clock_s: float | None = None

    def __post_init__(self) -> None:
        _check_choice("layout", self.layout, ("auto", "wide", "long"))
        _check_choice("missing", self.missing, ("interpolate", "drop"))
        if self.numeric_time_unit is not None:
            _check_choice("numeric_time_unit", self.numeric_time_unit, tuple(UNIT_NS))
        if self.time_column is not None and not (
            isinstance(self.time_column, str) and self.time_column
        ):
            raise ParameterError(
                f"time_column must be a column name or None, got {self.time_column!r}"
            )
        if self.min_rows is not None and (not isinstance(self.min_rows, int) or self.min_rows < 2):
            raise ParameterError(f"min_rows must be an integer >= 2 or None, got {self.min_rows!r}")
        if self.clock_s is not None and (
            isinstance(self.clock_s, bool)
            or not isinstance(self.clock_s, int | float)
            or not math.isfinite(self.clock_s)
            or not 1 <= self.clock_s * 1e9 <= CLOCK_MAX_S * 1e9
        ):
            raise ParameterError(
                f"clock_s must be a step from 1 ns to {CLOCK_MAX_S:,} s (a year), in "
                f"seconds, or None, got {self.clock_s!r}"
            )
        if self.sensors is not None and not (
            isinstance(self.sensors, tuple) and all(isinstance(s, str) for s in self.sensors)
        ):
            raise ParameterError(f"sensors must be a tuple of names or None, got {self.sensors!r}")


_STEP = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s|min|h)?\s*")


def parse_step(text: str) -> float:
    """Seconds of a clock step written as a number and an optional unit (``UNIT_NS``;
    seconds when none): ``60``, ``30s``, ``5min``, ``1h``, ``250ms``."""
    match = _STEP.fullmatch(text)
    seconds = float(match.group(1)) * UNIT_NS[match.group(2) or "s"] / 1e9 if match else math.nan
    if not 1 <= seconds * 1e9 <= CLOCK_MAX_S * 1e9:  # no match (NaN), 0, < 1 ns, > a year
        raise ParameterError(
            f"a clock step is a number and a unit ({', '.join(UNIT_NS)}), from 1 ns to "
            f"{CLOCK_MAX_S // 3600} h (a year), e.g. 60s, 5min or 1h; got {text!r}"
        )
    return seconds


def step_text(seconds: float) -> str:
    """A step in the largest unit that keeps it a plain number: 3600 -> "1 h"."""
    for unit in ("h", "min", "s", "ms", "us", "ns"):
        count = seconds * 1e9 / UNIT_NS[unit]
        if count >= 1 and abs(count - round(count)) < 1e-9 * count:
            return f"{round(count)} {unit}"
    return f"{seconds:g} s"


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ParameterError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


DEFAULT_OPTIONS = LoadOptions()
