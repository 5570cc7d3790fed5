"""Parameters of the disorder handling (``engine.disorder.buffer``): ``DisorderConfig``.

The window query (``engine.query.WindowQuery``: window and slide in readings, the
aggregate, eps and delta) plus the K-slack controller's settings, times in
seconds of event time; every field is checked on construction (the query's by
the query) and the config round-trips through ``to_dict`` / ``from_dict``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from engine.errors import ParameterError
from engine.query import HoldsQuery, WindowQuery

POLICIES: tuple[str, ...] = ("adaptive", "mp_kslack", "fixed", "none")


def _finite(name: str, value: Any, *, low: float | None = None, strict: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if strict else value >= low
    if not ok:
        bound = "" if low is None else f" {'>' if strict else '>='} {low:g}"
        raise ParameterError(f"{name} must be a finite number{bound}, got {value!r}")


@dataclass(frozen=True)
class DisorderConfig(HoldsQuery):
    """Parameters of the disorder handling (validated on construction).

    Attributes
    ----------
    query : the window query (window and slide in readings, ``slide=None``:
        tumbling; the aggregate; the quality target
        ``P(|provisional - exact| > eps) <= delta``), checked by ``WindowQuery``.
    interval_s : sampling interval in seconds (one reading per sensor per interval).
    origin_s : event time (s) at which window 0 starts; windows are aligned to it.
    policy : ``adaptive`` (ours), ``mp_kslack``, ``fixed`` (a fixed watermark) or ``none``.
    kp, kd : PD gains (seed: 0.2 and 4).
    alpha0, alpha_max : initial ``alpha`` and its upper clamp (lower clamp 0).
    fixed_k_s : ``K`` in seconds for the ``fixed`` policy.
    gamma_s : batch trigger, seconds of event time spanned by recorded late tuples
        (``None``: one window width; the seed's 5 s is ten of its windows).
    target_history : recent windows per sensor used to estimate ``lambda_thr``.
    target_model : ``tail`` (the newest readings of a window are the late ones)
        or ``srs`` (a simple random sample is late; the seed's argument); see
        ``CoverageTarget``.
    settle_s : a window's coverage is measured once ``t_max`` has passed its
        end by ``K`` (at its close) plus ``settle_s`` (``None``: one window width).
    control_tuples : the controller is updated with the pooled coverage of
        consecutive measured windows once they hold at least this many tuples
        (1, the default: every window, as in the seed; pooling damps the noise
        of small windows' coverage).

    ``to_dict`` is flat: the query's ``window``, ``slide``, ``aggregate``, ``eps_thr``
    (its eps) and ``delta``, then the fields above.
    """

    query: WindowQuery
    interval_s: float = 1.0
    origin_s: float = 0.0
    policy: str = "adaptive"
    kp: float = 0.2
    kd: float = 4.0
    alpha0: float = 1.0
    alpha_max: float = 1.0
    fixed_k_s: float = 0.0
    gamma_s: float | None = None
    target_history: int = 50
    target_model: str = "tail"
    settle_s: float | None = None
    control_tuples: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.query, WindowQuery):
            raise ParameterError(f"query must be a WindowQuery, got {self.query!r}")
        for name in ("target_history", "control_tuples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        if self.target_model not in ("tail", "srs"):
            raise ParameterError(f"target_model must be tail or srs, got {self.target_model!r}")
        if self.policy not in POLICIES:
            raise ParameterError(
                f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}"
            )
        _finite("interval_s", self.interval_s, low=0.0, strict=True)
        _finite("origin_s", self.origin_s)
        for name in ("kp", "kd", "alpha0", "fixed_k_s"):
            _finite(name, getattr(self, name), low=0.0)
        _finite("alpha_max", self.alpha_max, low=0.0, strict=True)
        if self.alpha0 > self.alpha_max:
            raise ParameterError(f"alpha0 must not exceed alpha_max, got {self.alpha0!r}")
        for name in ("gamma_s", "settle_s"):
            if getattr(self, name) is not None:
                _finite(name, getattr(self, name), low=0.0)

    @property
    def eps_thr(self) -> float:
        """The quality target's tolerance: the query's eps."""
        return self.query.eps

    @property
    def width_s(self) -> float:
        """Window width in seconds."""
        return self.window * self.interval_s

    @property
    def step_s(self) -> float:
        """Window slide in seconds."""
        return self.query.effective_slide * self.interval_s

    @property
    def gamma(self) -> float:
        """Batch trigger span in seconds."""
        return self.width_s if self.gamma_s is None else self.gamma_s

    @property
    def settle(self) -> float:
        """Seconds of event time after a window's close before its coverage is measured."""
        return self.width_s if self.settle_s is None else self.settle_s

    def to_dict(self) -> dict[str, Any]:
        q = self.query
        flat: dict[str, Any] = {"window": q.window, "slide": q.slide, "aggregate": q.aggregate}
        flat |= {"eps_thr": q.eps, "delta": q.delta}
        return flat | {k: v for k, v in asdict(self).items() if k != "query"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DisorderConfig:
        known = {f.name for f in fields(cls)} - {"query"} | set(QUERY_KEYS)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ParameterError(f"unknown disorder config key(s): {', '.join(unknown)}")
        rest = {k: v for k, v in data.items() if k not in QUERY_KEYS}
        return cls(query_of(**{k: v for k, v in data.items() if k in QUERY_KEYS}), **rest)


QUERY_KEYS: tuple[str, ...] = ("window", "slide", "aggregate", "eps_thr", "delta")


def query_of(
    window: int,
    slide: int | None = None,
    aggregate: str = "avg",
    eps_thr: float = 1.0,
    delta: float = 0.05,
) -> WindowQuery:
    """The window query of a disorder config's flat keys (``to_dict``'s), with their
    defaults: tumbling, ``avg``, ``eps_thr`` 1 and ``delta`` 0.05."""
    return WindowQuery(eps_thr, delta, window, slide, aggregate)
