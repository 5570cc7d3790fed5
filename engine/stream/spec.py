"""What the live pipeline runs with, where it writes, and what it reports.

Pure Python (no PySpark): the stream spec taken from a plan, the pipeline's
paths and options, and the thread-safe status board a UI can poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import pandas as pd

from engine.aggregates import check_window, get_aggregate
from engine.errors import ConfigError, ParameterError, PipelineError
from engine.model.linear import LinearMap, column_indices
from engine.planning.monitor import check_eps
from engine.stream.metrics import (
    BatchPoint,
    MetricsHistory,
    PipelineEvent,
    make_point,
    worst_sensors,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.planning.plan import BackupPlan

MODES: tuple[str, ...] = ("approx", "full", "none")
STATES: tuple[str, ...] = ("idle", "running", "failed", "recovering", "stopped", "error")


class HistoryLike(Protocol):
    """What the feeder needs from ``engine.data.history.SensorHistory`` (read-only)."""

    @property
    def times(self) -> np.ndarray: ...  # (T,) datetime64[ns]

    @property
    def values(self) -> np.ndarray: ...  # (T, n) float64

    @property
    def sensors(self) -> tuple[str, ...]: ...


FAILURE_MARK = "lacuna simulated failure"


class SimulatedFailure(RuntimeError):
    """Raised inside ``foreachBatch`` to kill the query on purpose."""


class Monitor(Protocol):
    """Sees every batch's shadow errors, with the plan version they were found under."""

    def observe(self, errors: np.ndarray, reconstructed: Any, version: int = 0) -> Any: ...


class Stage(Protocol):
    """Optional disorder stage (``engine.disorder.buffer``) run before windowing.

    A stage may also offer ``pop_results() -> pd.DataFrame``: its own versioned
    results (provisional, correction, final), which the pipeline stores.
    """

    def process(self, batch: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]: ...
    def snapshot(self) -> dict[str, Any]: ...
    def restore(self, state: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class Fault:
    """Test fault: raise in batch ``batch_id`` inside the store transaction after
    the rows are inserted (``before_commit``), or right after it commits."""

    batch_id: int
    point: Literal["before_commit", "after_commit"]


@dataclass(frozen=True)
class StreamSpec:
    """What the live pipeline needs from a plan.

    ``window`` and ``slide`` are in readings (rows of the history); ``eps`` is in
    the unit of the aggregate. The linear map rebuilds every sensor that is not in
    ``backup_sensors`` from those that are.
    """

    sensors: tuple[str, ...]
    backup_sensors: tuple[str, ...]
    linear_map: LinearMap
    window: int
    slide: int
    aggregate: str
    eps: float
    delta: float
    eps_by_sensor: tuple[float, ...] = ()  # one eps per sensor, ``sensors`` order; () = eps

    def __post_init__(self) -> None:
        check_window(self.window, self.slide)
        get_aggregate(self.aggregate)
        if not np.isfinite(self.eps) or self.eps <= 0:
            raise ParameterError(f"eps must be a finite number > 0, got {self.eps!r}")
        if self.eps_by_sensor:
            check_eps(np.asarray(self.eps_by_sensor, dtype=float), len(self.sensors))
        if not 0.0 < self.delta < 1.0:
            raise ParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        if not self.sensors or len(set(self.sensors)) != len(self.sensors):
            raise ParameterError(f"sensors must be non-empty and unique, got {self.sensors!r}")
        unknown = [s for s in self.backup_sensors if s not in self.sensors]
        if unknown:
            raise ParameterError(f"backup sensors not among the sensors: got {unknown!r}")
        if set(self.linear_map.sensors) != set(self.sensors):
            raise ParameterError(
                "the linear map covers other sensors than the spec: "
                f"got {sorted(set(self.linear_map.sensors) ^ set(self.sensors))!r}"
            )
        if set(self.linear_map.backup) != set(self.backup_sensors):
            raise ParameterError(
                f"the linear map reads {self.linear_map.backup!r}, "
                f"but the backup sensors are {self.backup_sensors!r}"
            )

    @classmethod
    def from_plan(cls, plan: BackupPlan) -> StreamSpec:
        """Take sensors, backup set, linear map and window parameters from a plan."""
        p = plan.parameters
        return cls(
            sensors=tuple(plan.sensors),
            backup_sensors=tuple(plan.backup_sensors),
            linear_map=plan.linear_map,
            window=int(p.window),
            slide=int(p.window if p.slide is None else p.slide),
            aggregate=str(p.aggregate),
            eps=float(p.eps),
            delta=float(p.delta),
            eps_by_sensor=(tuple(float(e) for e in plan.eps_per_sensor) if p.eps_by_sensor else ()),
        )

    @property
    def eps_vector(self) -> np.ndarray:
        """Each sensor's eps, (n,) in ``sensors`` order."""
        if self.eps_by_sensor:
            return np.asarray(self.eps_by_sensor, dtype=float)
        return np.full(len(self.sensors), self.eps)

    def stored_sensors(self, mode: str) -> tuple[str, ...]:
        """Sensors whose readings the backup writer keeps in ``mode``."""
        check_mode(mode)
        return {"approx": self.backup_sensors, "full": self.sensors, "none": ()}[mode]

    def recovery_map(self, mode: str) -> LinearMap:
        """The map recovery applies: the plan's in ``approx``, the identity in ``full``."""
        if mode == "full":
            k = len(self.sensors)
            return LinearMap(
                sensors=self.sensors,
                backup=self.sensors,
                targets=(),
                intercept=np.zeros(0),
                coef=np.zeros((0, k)),
                conditional_variance=np.zeros(0),
            )
        return self.linear_map

    def check_compatible(self, new: StreamSpec) -> None:
        """A running pipeline may swap its plan, but not its sensors or windows."""
        fields = ("sensors", "window", "slide", "aggregate")
        changed = [f for f in fields if getattr(self, f) != getattr(new, f)]
        if changed:
            raise PipelineError(
                f"a running pipeline cannot change {', '.join(changed)}; stop and start it again"
            )


def check_mode(mode: str) -> None:
    """Raise ``ParameterError`` unless ``mode`` is approx, full or none."""
    if mode not in MODES:
        raise ParameterError(f"backup mode must be one of {', '.join(MODES)}, got {mode!r}")


def align_history(history: HistoryLike, sensors: Sequence[str]) -> np.ndarray:
    """The history's values in ``sensors`` order: (T, len(sensors)).

    Raises ``ConfigError`` naming the sensors the plan has but the data lacks.
    """
    have = tuple(history.sensors)
    missing = [s for s in sensors if s not in have]
    if missing:
        raise ConfigError(
            f"plan sensors not in the data: {', '.join(map(repr, missing[:8]))}"
            f"{' ...' if len(missing) > 8 else ''} (the data has {len(have)} sensors)"
        )
    return np.asarray(history.values, dtype=float)[:, column_indices(have, sensors)]


@dataclass(frozen=True)
class PipelinePaths:
    """Where the pipeline reads and writes. Every location can be overridden."""

    root: Path
    landing: Path | None = None
    checkpoint: Path | None = None
    store: Path | None = None
    truth: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        defaults = {
            "landing": "landing",
            "checkpoint": "checkpoint",
            "store": "store.duckdb",
            "truth": "truth",
        }
        for name, default in defaults.items():
            value = getattr(self, name)
            object.__setattr__(self, name, Path(value) if value else self.root / default)

    @property
    def landing_dir(self) -> Path:
        return Path(str(self.landing))

    @property
    def checkpoint_dir(self) -> Path:
        return Path(str(self.checkpoint))

    @property
    def store_file(self) -> Path:
        return Path(str(self.store))

    @property
    def truth_dir(self) -> Path:
        return Path(str(self.truth))

    def ensure(self) -> PipelinePaths:
        """Create the directories and prove they are writable (``PipelineError`` if not)."""
        dirs = (
            self.landing_dir,
            self.truth_dir,
            self.checkpoint_dir.parent,
            self.store_file.parent,
        )
        for d in dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
                probe = d / f".lacuna-probe-{threading.get_ident()}"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as err:
                raise PipelineError(
                    f"pipeline directory {str(d)!r} is not writable: {err}"
                ) from err
        return self


@dataclass(frozen=True)
class PipelineOptions:
    """How the streaming query runs.

    ``trigger_seconds=0`` runs micro-batches back to back; ``available_now`` processes
    what has landed and then stops the query; ``fail_after_readings``
    makes the query die inside ``foreachBatch`` once that many readings went
    through (the failure used by ``run_simulation``).
    """

    max_files_per_trigger: int = 10
    trigger_seconds: float = 1.0
    available_now: bool = False  # process what has landed, then stop (benchmarks, tests)
    shadow: bool = True
    fail_after_readings: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_files_per_trigger, int) or self.max_files_per_trigger < 1:
            raise ParameterError(
                f"max_files_per_trigger must be an integer >= 1, got {self.max_files_per_trigger!r}"
            )
        if not self.trigger_seconds >= 0:
            raise ParameterError(f"trigger_seconds must be >= 0, got {self.trigger_seconds!r}")
        limit = self.fail_after_readings
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ParameterError(f"fail_after_readings must be an integer >= 0, got {limit!r}")


@dataclass(frozen=True)
class FeedProgress:
    """How far the feeder got."""

    files: int = 0
    readings: int = 0
    rows: int = 0  # history rows whose every reading was written
    total_readings: int = 0
    last_event_time: str | None = None
    done: bool = False


@dataclass(frozen=True)
class PipelineStatus:
    """A snapshot of the live pipeline for a UI to show. Rates are per second."""

    state: str = "idle"
    mode: str | None = None
    run: int | None = None
    batches: int = 0
    input_rows: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    batch_duration_ms: float = 0.0
    backup_rows: int = 0
    backup_bytes: int = 0
    windows_emitted: int = 0
    late_rows: int = 0
    duplicate_readings: int = 0
    stale_readings: int = 0  # readings of windows lost in a failure, dropped
    buffered_rows: int = 0
    shadow_windows: int = 0
    shadow_violations: dict[str, int] = field(default_factory=dict)
    shadow_violation_rate: float | None = None  # over (window, reconstructed sensor) pairs
    shadow_worst_rate: float | None = None
    # The same tallies per plan version (id -> figures); the fields above are overall.
    shadow_by_version: dict[int, dict[str, Any]] = field(default_factory=dict)
    plan_version: int | None = None  # the version in force
    plan_changes: int = 0
    replan_every_rows: int | None = None  # the plan's horizon (None: no schedule)
    scheduled_replanning: bool = False  # False: the plan is kept past its horizon
    rows_under_plan: int = 0  # rows the stream has run since the version in force began
    plan_expired: bool = False  # the horizon passed without a re-plan
    # With a disorder stage: buffer size K, arrival clock minus watermark, result rows.
    k_s: float | None = None
    watermark_gap_s: float | None = None
    provisional_results: int = 0
    corrected_results: int = 0
    final_results: int = 0
    last_alert: str | None = None
    last_error: str | None = None
    feed: FeedProgress = field(default_factory=FeedProgress)
    profile: dict[str, float] = field(default_factory=dict)  # seconds per phase, summed
    updated_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StatusBoard:
    """Thread-safe, mutable home of the status; readers get frozen snapshots."""

    def __init__(self, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._lock = threading.Lock()
        self._now = now
        self._status = PipelineStatus()
        self._shadow_pairs = 0
        self._shadow_misses = 0
        self._per_sensor_windows: dict[str, int] = {}
        self._versions: dict[int, _Tally] = {}
        self.history = MetricsHistory()
        self._feed_probe: Callable[[], int] | None = None

    def watch_feed(self, probe: Callable[[], int] | None) -> None:
        """``probe()`` -> readings the feeder has landed so far (for the backlog)."""
        self._feed_probe = probe

    def record_batch(self, batch_id: int, **fields: Any) -> BatchPoint:
        """Append the batch's point, after its counters were added to the status.

        ``fields`` are ``BatchPoint`` fields (input_rows, backup_rows, ...). The
        rate is the batch's rows over the time since the previous point, until
        Spark's listener patches in its own (``patch_batch``).
        """
        probe = self._feed_probe
        landed = probe() if probe is not None else None
        with self._lock:
            s = self._status
            worst = worst_sensors(s.shadow_violations, self._per_sensor_windows)
        point = make_point(
            self._now(), self.history.last(), batch_id, landed, worst, s.to_dict(), fields
        )
        self.history.append(point)
        return point

    def patch_batch(self, run: int, batch_id: int, **changes: Any) -> bool:
        """Spark's own figures for a batch already recorded (duration, rates)."""
        return self.history.patch(run, batch_id, **changes)

    def mark(self, kind: str, text: str, **details: Any) -> PipelineEvent:
        """Record an alert, re-plan, failure or recovery on the metrics time axis."""
        last = self.history.last()
        s = self.snapshot()
        event = PipelineEvent(
            at=self._now().isoformat(),
            kind=kind,
            text=text,
            run=s.run,
            batch_id=None if last is None else last.batch_id,
            **details,
        )
        self.history.add_event(event)
        return event

    def snapshot(self) -> PipelineStatus:
        with self._lock:
            return self._status

    def update(self, **changes: Any) -> None:
        """Set fields of the status (unknown names are a programming error)."""
        with self._lock:
            self._status = replace(self._status, updated_at=self._now().isoformat(), **changes)

    def add(self, **increments: int) -> None:
        """Add to counters of the status."""
        with self._lock:
            values = {k: getattr(self._status, k) + v for k, v in increments.items()}
            self._status = replace(self._status, updated_at=self._now().isoformat(), **values)

    def record_shadow(
        self,
        errors: np.ndarray,
        sensors: Sequence[str],
        targets: Sequence[str],
        eps: float | np.ndarray,
        version: int = 0,
    ) -> None:
        """Count shadow-recovery misses: errors (W, n) in ``sensors`` order, found under
        plan ``version``, kept overall and per version (a re-plan resets nothing);
        ``eps`` a number or one per sensor (n,)."""
        mask = np.isin(np.asarray(sensors, dtype=object), np.asarray(list(targets), dtype=object))
        finite = np.isfinite(np.asarray(errors, dtype=float))
        misses = (np.asarray(errors) > eps) & mask & finite
        with self._lock:
            counts = dict(self._status.shadow_violations)
            for i, s in enumerate(sensors):
                if mask[i]:
                    counts[s] = counts.get(s, 0) + int(misses[:, i].sum())
                    seen = int(finite[:, i].sum())
                    self._per_sensor_windows[s] = self._per_sensor_windows.get(s, 0) + seen
            self._shadow_pairs += int((finite & mask).sum())
            self._shadow_misses += int(misses.sum())
            rates = [counts[s] / w for s, w in self._per_sensor_windows.items() if w]
            tally = self._versions.setdefault(int(version), _Tally())
            tally.add(misses, finite & mask, sensors)
            by_version = {k: t.figures() for k, t in sorted(self._versions.items())}
            self._status = replace(
                self._status,
                shadow_by_version=by_version,
                shadow_windows=self._status.shadow_windows + len(errors),
                shadow_violations=counts,
                shadow_violation_rate=(
                    self._shadow_misses / self._shadow_pairs if self._shadow_pairs else None
                ),
                shadow_worst_rate=max(rates) if rates else None,
                updated_at=self._now().isoformat(),
            )

    def add_profile(self, seconds: dict[str, float]) -> None:
        """Add phase timings (seconds) to the profile."""
        with self._lock:
            profile = dict(self._status.profile)
            for key, value in seconds.items():
                profile[key] = profile.get(key, 0.0) + float(value)
            self._status = replace(self._status, profile=profile)


class _Tally:
    """Shadow misses of one plan version: windows and misses per sensor."""

    def __init__(self) -> None:
        self.windows: dict[str, int] = {}
        self.misses: dict[str, int] = {}
        self.closed = 0

    def add(self, misses: np.ndarray, counted: np.ndarray, sensors: Sequence[str]) -> None:
        self.closed += len(misses)
        for i, s in enumerate(sensors):
            if counted[:, i].any():
                self.windows[s] = self.windows.get(s, 0) + int(counted[:, i].sum())
                self.misses[s] = self.misses.get(s, 0) + int(misses[:, i].sum())

    def figures(self) -> dict[str, Any]:
        pairs, missed = sum(self.windows.values()), sum(self.misses.values())
        rates = {s: self.misses[s] / w for s, w in self.windows.items() if w}
        worst = max(rates, key=lambda s: rates[s]) if rates else None
        return {
            "windows": self.closed,
            "pairs": pairs,
            "misses": missed,
            "violation_rate": missed / pairs if pairs else None,
            "worst_rate": rates[worst] if worst is not None else None,
            "worst_sensor": worst,
        }
