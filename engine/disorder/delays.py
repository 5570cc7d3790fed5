"""Arrival-delay models for replaying a sensor history out of order.

A delay model draws, for every reading, how many seconds after its event time
it reaches the pipeline (``arrival_time = event_time + delay``). Models are
described by a short spec string (the CLI's ``--delays``):

* ``exp:MEAN`` exponential delays with mean ``MEAN`` seconds;
* ``pareto:SHAPE,SCALE`` classic Pareto: ``delay >= SCALE`` seconds, tail index
  ``SHAPE`` (heavy tail: the mean is infinite for ``SHAPE <= 1``);
* ``const:SECONDS`` every reading is delayed by the same amount (in order);
* ``mix:P,SPEC1,SPEC2`` with probability ``P`` a delay from ``SPEC1``, else from
  ``SPEC2`` (each an ``exp``, ``pareto`` or ``const`` spec);
* ``file:PATH[,scale=F]`` resample (with replacement) real delays from a CSV:
  either a ``delay_s`` column (seconds) or an event log with ``event_time_ms``
  and ``server_receive_ms`` columns (delay = receive - event, in ms), multiplied
  by ``F`` (default 1).

Sampling always uses the ``np.random.Generator`` passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engine.errors import DataError, ParameterError

DELAY_KINDS: tuple[str, ...] = ("exp", "pareto", "const", "mix", "file")
# A delay parameter (mean, scale, constant) is at most 1e7 s (116 days), and a drawn
# delay at most 1e9 s (32 years): arrival times must stay within what a timestamp holds
# (up to 2262) and latency sums finite, as eps is capped so that its square is. An
# exponential mean of 1e7 s draws beyond 1e9 s with probability e^-100.
MAX_DELAY_PARAMETER_S = 1e7
MAX_DELAY_S = 1e9


def _check_positive(
    name: str, value: float, *, allow_zero: bool = False, cap: float | None = None
) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ParameterError(f"{name} must be a finite number {bound}, got {value!r}")
    if cap is not None and value > cap:
        raise ParameterError(f"{name} must be at most {cap:g} seconds, got {value!r}")


def _within_cap(delays: np.ndarray, spec: str) -> np.ndarray:
    """``delays`` unchanged, or a ``ParameterError`` when one is beyond ``MAX_DELAY_S``
    (a heavy tail, e.g. a Pareto shape near 0, draws astronomically long delays)."""
    worst = float(delays.max(initial=0.0))
    if not worst <= MAX_DELAY_S:
        raise ParameterError(
            f"delay spec {spec!r} drew a delay of {worst:.3g} s, beyond the cap of "
            f"{MAX_DELAY_S:g} s (32 years); lower its scale or raise its shape"
        )
    return delays


@dataclass(frozen=True)
class ExponentialDelays:
    """Exponential delays, mean ``mean_s`` seconds."""

    mean_s: float

    def __post_init__(self) -> None:
        _check_positive("exponential mean", self.mean_s, cap=MAX_DELAY_PARAMETER_S)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n,) delays in seconds."""
        return _within_cap(rng.exponential(self.mean_s, size=n), self.describe())

    def describe(self) -> str:
        return f"exp:{self.mean_s:g}"


@dataclass(frozen=True)
class ParetoDelays:
    """Classic Pareto delays: ``P(D > x) = (scale / x) ** shape`` for ``x >= scale``."""

    shape: float
    scale_s: float

    def __post_init__(self) -> None:
        _check_positive("pareto shape", self.shape)
        _check_positive("pareto scale", self.scale_s, cap=MAX_DELAY_PARAMETER_S)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n,) delays in seconds, each ``>= scale_s``."""
        # numpy's pareto is the Lomax (Pareto II) law; +1 then scale gives the classic one.
        with np.errstate(over="ignore"):  # an infinite draw is refused by _within_cap
            drawn = (rng.pareto(self.shape, size=n) + 1.0) * self.scale_s
        return _within_cap(drawn, self.describe())

    def describe(self) -> str:
        return f"pareto:{self.shape:g},{self.scale_s:g}"


@dataclass(frozen=True)
class ConstantDelays:
    """Every reading is delayed by ``delay_s`` (the stream stays in order)."""

    delay_s: float

    def __post_init__(self) -> None:
        _check_positive("constant delay", self.delay_s, allow_zero=True, cap=MAX_DELAY_PARAMETER_S)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n,) delays in seconds, all equal."""
        return np.full(n, self.delay_s)

    def describe(self) -> str:
        return f"const:{self.delay_s:g}"


@dataclass(frozen=True)
class MixtureDelays:
    """With probability ``p`` a delay from ``first``, otherwise from ``second``."""

    p: float
    first: ExponentialDelays | ParetoDelays | ConstantDelays
    second: ExponentialDelays | ParetoDelays | ConstantDelays

    def __post_init__(self) -> None:
        if not (math.isfinite(self.p) and 0.0 <= self.p <= 1.0):
            raise ParameterError(f"mixture probability must be in [0, 1], got {self.p!r}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n,) delays in seconds."""
        pick_first = rng.random(n) < self.p
        a = self.first.sample(n, rng)
        b = self.second.sample(n, rng)
        return np.where(pick_first, a, b)

    def describe(self) -> str:
        return f"mix:{self.p:g},{self.first.describe()},{self.second.describe()}"


@dataclass(frozen=True, eq=False)
class EmpiricalDelays:
    """Resample recorded delays with replacement, multiplied by ``scale``.

    Attributes
    ----------
    delays_s : (D,) recorded delays in seconds, finite and >= 0.
    scale : factor applied to every drawn delay.
    source : where the delays came from (for reports).
    """

    delays_s: np.ndarray
    scale: float = 1.0
    source: str = "<array>"

    def __post_init__(self) -> None:
        d = np.asarray(self.delays_s, dtype=float)
        if d.ndim != 1 or d.size == 0:
            raise ParameterError(f"recorded delays must be a non-empty 1-D array, got {d.shape}")
        if not np.all(np.isfinite(d)) or np.any(d < 0):
            raise ParameterError(f"recorded delays must be finite and >= 0 ({self.source})")
        _check_positive("delay scale", self.scale)
        if float(d.max()) * self.scale > MAX_DELAY_S:
            raise ParameterError(
                f"recorded delays times scale reach {float(d.max()) * self.scale:.3g} s, "
                f"beyond the cap of {MAX_DELAY_S:g} s ({self.source})"
            )

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n,) delays in seconds drawn from the recorded ones."""
        return rng.choice(np.asarray(self.delays_s, dtype=float), size=n) * self.scale

    def describe(self) -> str:
        return f"file:{self.source},scale={self.scale:g}"


DelayModel = ExponentialDelays | ParetoDelays | ConstantDelays | MixtureDelays | EmpiricalDelays


def read_delay_file(path: str | Path) -> np.ndarray:
    """Recorded delays in seconds from a CSV: (D,) float.

    Accepts a ``delay_s`` column, or ``event_time_ms`` and ``server_receive_ms``
    (an event log such as the UMTS out-of-order log). Negative delays (clock
    skew) are an error, because the file then does not describe arrival delays.
    """
    p = Path(path)
    try:
        frame = pd.read_csv(p)
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read delay file {p}: {err}") from err
    if "delay_s" in frame.columns:
        delays = pd.to_numeric(frame["delay_s"], errors="coerce").to_numpy(float)
        column = "delay_s"
    elif {"event_time_ms", "server_receive_ms"} <= set(frame.columns):
        sent = pd.to_numeric(frame["event_time_ms"], errors="coerce").to_numpy(float)
        got = pd.to_numeric(frame["server_receive_ms"], errors="coerce").to_numpy(float)
        delays = (got - sent) / 1000.0
        column = "server_receive_ms - event_time_ms"
    else:
        raise DataError(
            f"delay file {p} needs a 'delay_s' column or 'event_time_ms' and "
            f"'server_receive_ms', got columns {list(frame.columns)[:8]!r}"
        )
    bad = np.flatnonzero(~np.isfinite(delays) | (delays < 0))
    if bad.size:
        row = int(bad[0]) + 2  # 1-based, after the header line
        raise DataError(f"delay file {p}: {column} is missing or negative at row {row}")
    if delays.size == 0:
        raise DataError(f"delay file {p} has no rows")
    return delays


def _parse_number(text: str, what: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParameterError(f"bad {what} in delay spec {spec!r}: got {text!r}") from None


def _parse_simple(kind: str, args: list[str], spec: str) -> DelayModel:
    nums = [_parse_number(a, f"{kind} argument", spec) for a in args]
    expected = {"exp": 1, "pareto": 2, "const": 1}[kind]
    if len(nums) != expected:
        raise ParameterError(
            f"delay spec {kind!r} takes {expected} number(s), got {len(nums)} in {spec!r}"
        )
    if kind == "exp":
        return ExponentialDelays(nums[0])
    if kind == "pareto":
        return ParetoDelays(nums[0], nums[1])
    return ConstantDelays(nums[0])


def _split_components(text: str, spec: str) -> list[tuple[str, list[str]]]:
    """Split ``exp:1,pareto:2,5`` into ``[("exp", ["1"]), ("pareto", ["2", "5"])]``."""
    parts: list[tuple[str, list[str]]] = []
    for token in text.split(","):
        token = token.strip()
        if ":" in token:
            kind, first = token.split(":", 1)
            parts.append((kind.strip().lower(), [first.strip()]))
        elif parts:
            parts[-1][1].append(token)
        else:
            raise ParameterError(f"mixture components must look like exp:MEAN, got {spec!r}")
    return parts


def _parse_mix(body: str, spec: str) -> MixtureDelays:
    head, _, rest = body.partition(",")
    p = _parse_number(head.strip(), "mixture probability", spec)
    parts = _split_components(rest, spec)
    if len(parts) != 2 or any(kind not in ("exp", "pareto", "const") for kind, _ in parts):
        raise ParameterError(
            f"mix takes a probability and two exp/pareto/const components, got {spec!r}"
        )
    first, second = (_parse_simple(kind, args, spec) for kind, args in parts)
    assert not isinstance(first, MixtureDelays | EmpiricalDelays)
    assert not isinstance(second, MixtureDelays | EmpiricalDelays)
    return MixtureDelays(p, first, second)


def _parse_file(body: str, spec: str) -> EmpiricalDelays:
    path, scale = body, 1.0
    head, sep, tail = body.rpartition(",scale=")
    if sep:
        path, scale = head, _parse_number(tail.strip(), "scale", spec)
    if not path.strip():
        raise ParameterError(f"file delay spec needs a path, got {spec!r}")
    delays = read_delay_file(path.strip())
    return EmpiricalDelays(delays, scale=scale, source=Path(path.strip()).name)


def parse_delays(spec: str) -> DelayModel:
    """Build a delay model from a spec string (see the module docstring).

    Raises
    ------
    ParameterError
        The spec is malformed or a number is out of range.
    DataError
        A ``file:`` spec names a file that cannot be used.
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise ParameterError(
            f"delay spec must look like KIND:ARGS with KIND in {', '.join(DELAY_KINDS)}, "
            f"got {spec!r}"
        )
    kind, body = spec.split(":", 1)
    kind = kind.strip().lower()
    if kind == "file":
        return _parse_file(body, spec)
    if kind == "mix":
        return _parse_mix(body, spec)
    if kind in ("exp", "pareto", "const"):
        return _parse_simple(kind, [a.strip() for a in body.split(",")], spec)
    raise ParameterError(f"unknown delay kind {kind!r} (use one of {', '.join(DELAY_KINDS)})")
