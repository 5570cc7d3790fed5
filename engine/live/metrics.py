"""The live pipeline's metrics over time: a bounded ring buffer of per-batch points.

Pure Python. ``StatusBoard`` (``engine.live.spec``) owns one ``MetricsHistory``;
the pipeline appends a ``BatchPoint`` in every micro-batch's report, Spark's
progress listener later patches that point with Spark's own duration and
rates, and control calls (re-plan, failure, recovery) add ``PipelineEvent``s.
A UI polls ``points()`` and ``events()``: immutable tuples, safe to read
from any thread. Old points fall off the front, so memory stays bounded on
a pipeline that runs for days.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from engine.errors import ParameterError

DEFAULT_CAPACITY = 2000  # points: ~33 minutes of 1 s micro-batches
EVENT_KINDS: tuple[str, ...] = (
    "alert", "replan", "failure", "recovery", "resume", "stop", "exposure", "compaction"
)  # fmt: skip


@dataclass(frozen=True)
class BatchPoint:
    """One micro-batch as the dashboard plots it.

    ``at`` is the ISO time the batch was reported; rates are per second;
    ``backlog`` counts readings the feeder has landed that the query has not
    processed yet; ``shadow_*`` are the cumulative shadow miss rates over every
    plan version the run has had (pooled over (window, rebuilt sensor) pairs,
    and the worst few sensors). The disorder fields are None without a stage.
    """

    at: str
    run: int
    batch_id: int
    input_rows: int
    rows_per_second: float | None = None
    duration_ms: float | None = None
    store_ms: float | None = None
    backlog: int | None = None
    backup_rows: int = 0
    backup_bytes: int = 0
    windows: int = 0
    shadow_pooled: float | None = None
    shadow_worst: tuple[tuple[str, float], ...] = ()
    alerts: int = 0
    late: int = 0
    k_s: float | None = None
    watermark_gap_s: float | None = None
    provisional: int = 0
    corrections: int = 0
    final: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PipelineEvent:
    """Something that happened between batches: an alert, a re-plan, a failure, a recovery.

    ``seconds`` is how long it took (recovery), ``rows`` how many rows it read.
    """

    at: str
    kind: str
    text: str
    run: int | None = None
    batch_id: int | None = None
    seconds: float | None = None
    rows: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ParameterError(
                f"event kind must be one of {', '.join(EVENT_KINDS)}, got {self.kind!r}"
            )


class MetricsHistory:
    """Thread-safe ring buffers of the last ``capacity`` points and events."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ParameterError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._points: deque[BatchPoint] = deque(maxlen=capacity)
        self._events: deque[PipelineEvent] = deque(maxlen=capacity)
        self.dropped = 0  # points pushed out of the front

    def append(self, point: BatchPoint) -> None:
        with self._lock:
            if len(self._points) == self.capacity:
                self.dropped += 1
            self._points.append(point)

    def patch(self, run: int, batch_id: int, **changes: Any) -> bool:
        """Change fields of the newest point of ``(run, batch_id)``; False if none is held."""
        with self._lock:
            for i in range(len(self._points) - 1, -1, -1):
                p = self._points[i]
                if p.run == run and p.batch_id == batch_id:
                    self._points[i] = replace(p, **changes)
                    return True
        return False

    def add_event(self, event: PipelineEvent) -> None:
        with self._lock:
            self._events.append(event)

    def points(self) -> tuple[BatchPoint, ...]:
        with self._lock:
            return tuple(self._points)

    def events(self) -> tuple[PipelineEvent, ...]:
        with self._lock:
            return tuple(self._events)

    def last(self) -> BatchPoint | None:
        with self._lock:
            return self._points[-1] if self._points else None


def make_point(
    now: datetime,
    previous: BatchPoint | None,
    batch_id: int,
    landed: int | None,
    worst: tuple[tuple[str, float], ...],
    status: dict[str, Any],
    fields: dict[str, Any],
) -> BatchPoint:
    """A batch's point from the status after its counters were added.

    The rate is the batch's rows over the time since ``previous`` (until Spark's
    listener patches its own); the backlog is ``landed`` minus the rows processed.
    """
    rate = None
    if previous is not None:
        gap = (now - datetime.fromisoformat(previous.at)).total_seconds()
        rate = fields.get("input_rows", 0) / gap if gap > 0 else None
    return BatchPoint(
        at=now.isoformat(),
        run=-1 if status["run"] is None else status["run"],
        batch_id=batch_id,
        rows_per_second=rate,
        backlog=None if landed is None else max(0, landed - status["input_rows"]),
        shadow_pooled=status["shadow_violation_rate"],
        shadow_worst=worst,
        k_s=status["k_s"],
        watermark_gap_s=status["watermark_gap_s"],
        **fields,
    )


def worst_sensors(
    violations: dict[str, float], windows: dict[str, int], k: int = 3
) -> tuple[tuple[str, float], ...]:
    """The ``k`` sensors with the highest miss rate (ties: name), as (sensor, rate)."""
    rates = [(s, violations.get(s, 0) / w) for s, w in windows.items() if w]
    rates.sort(key=lambda sr: (-sr[1], sr[0]))
    return tuple(rates[:k])


def summarise(values: Iterable[float | int | None]) -> dict[str, float | int | None]:
    """count, min, avg, max of the non-None values (None for an empty series)."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"count": 0, "min": None, "avg": None, "max": None}
    return {"count": len(xs), "min": min(xs), "avg": sum(xs) / len(xs), "max": max(xs)}
