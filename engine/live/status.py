"""The live pipeline's status: frozen snapshots and the thread-safe board behind them.

``StatusBoard`` is where the feeder, the query, Spark's listener and the
manager write what happens (counters, shadow misses overall and per plan
version, phase timings, the metrics history); a UI polls ``snapshot()`` for a
frozen ``PipelineStatus``. Pure Python (no PySpark).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engine.errors import ParameterError
from engine.live.metrics import (
    BatchPoint,
    MetricsHistory,
    PipelineEvent,
    make_point,
    worst_sensors,
)

__all__ = ["RESTORE_KINDS", "STATES", "FeedProgress", "PipelineStatus", "Restore", "StatusBoard"]

STATES: tuple[str, ...] = ("idle", "running", "failed", "recovering", "stopped", "error")


@dataclass(frozen=True)
class FeedProgress:
    """How far the feed got, counted from the history's first row (a resumed feed
    starts at the rows fed before it). ``done``: no more files will come, because the
    feed reached its end or (``stopped``) was stopped."""

    files: int = 0
    readings: int = 0
    rows: int = 0  # history rows whose every reading was written
    total_readings: int = 0
    last_event_time: str | None = None
    done: bool = False
    stopped: bool = False  # ended by a stop before its end


RESTORE_KINDS = ("recovery", "resume")


@dataclass(frozen=True)
class Restore:
    """The latest restore of the live pipeline, as Flink's checkpoint history keeps one:
    a ``recovery`` after a failure (the lost rows rebuilt from the backup) or the
    ``resume`` of a stopped run from its checkpoint and store."""

    kind: str
    at: str  # ISO time
    run: int | None
    resumed_at_row: int  # the first row the restarted query reads
    lost_first_row: int | None = None  # recovery: the rows rebuilt
    lost_last_row: int | None = None
    windows: int = 0  # recovery: windows that needed a lost row
    rows_read: int = 0  # recovery: backup rows read
    seconds: float | None = None
    plan_version: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in RESTORE_KINDS:
            raise ParameterError(f"restore kind must be one of {RESTORE_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class PipelineStatus:
    """A snapshot of the live pipeline for a UI to show. Rates are per second."""

    state: str = "idle"
    mode: str | None = None
    run: int | None = None
    batches: int = 0
    input_rows: int = 0
    input_rows_per_second: float | None = None  # None until Spark measured one
    processed_rows_per_second: float = 0.0
    batch_duration_ms: float = 0.0
    # The query's processing-time trigger in seconds (0: batches back to back, None: not
    # started or run once over what has landed)
    trigger_seconds: float | None = None
    backup_rows: int = 0
    backup_bytes: int = 0
    windows_emitted: int = 0
    late_rows: int = 0
    duplicate_readings: int = 0
    stale_readings: int = 0  # readings of windows lost in a failure, dropped
    # Micro-batches that backed up every sensor to keep a crash-contract plan's promise
    # (more rows than its exposure, or windows open at the last failure not closed yet)
    full_backup_batches: int = 0
    last_full_backup: str | None = None  # why the latest of them backed up everything
    buffered_rows: int = 0
    shadow_windows: int = 0
    # misses per sensor: whole windows (range contract) or, under the crash contract, each
    # window's fraction of the failure positions that missed, summed (a real count)
    shadow_violations: dict[str, float] = field(default_factory=dict)
    shadow_contract: str = "range"  # what the shadow check counts: "range" or "crash"
    shadow_violation_rate: float | None = None  # over (window, reconstructed sensor) pairs
    shadow_worst_rate: float | None = None
    # what the worst rate counts: (sensor, its misses, its rebuilt windows), all versions
    shadow_worst: tuple[str, float, int] | None = None
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
    restores: int = 0  # recoveries and resumes of this pipeline so far
    last_restore: Restore | None = None
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
        self._shadow_misses = 0.0
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
        share: float = 1.0,
    ) -> None:
        """Count shadow-recovery misses of whole windows (the range contract): errors (W, n)
        in ``sensors`` order, found under plan ``version``, kept overall and per version (a
        re-plan resets nothing); ``eps`` a number or one per sensor (n,); ``share`` as
        ``record_misses``."""
        e = np.asarray(errors, dtype=float)
        with np.errstate(invalid="ignore"):
            misses = np.where(np.isfinite(e), (e > eps).astype(float), np.nan)
        self.record_misses(misses, sensors, targets, version, "range", share)

    def record_misses(
        self,
        misses: np.ndarray,
        sensors: Sequence[str],
        targets: Sequence[str],
        version: int = 0,
        contract: str = "range",
        share: float = 1.0,
    ) -> None:
        """Count shadow-recovery misses (W, n) in ``sensors`` order: whole-window
        indicators (range contract) or each window's fraction of the failure positions
        that missed (crash contract); NaN where a window was not measured. ``share``: of
        the windows, the disjoint ones (``verdict.disjoint_share``), which the status
        line's test counts (kept with the version's tally)."""
        m = np.asarray(misses, dtype=float)
        mask = np.isin(np.asarray(sensors, dtype=object), np.asarray(list(targets), dtype=object))
        finite = np.isfinite(m) & mask
        misses = np.where(finite, m, 0.0)
        with self._lock:
            counts = dict(self._status.shadow_violations)
            for i, s in enumerate(sensors):
                if mask[i]:
                    counts[s] = counts.get(s, 0) + float(misses[:, i].sum())
                    seen = int(finite[:, i].sum())
                    self._per_sensor_windows[s] = self._per_sensor_windows.get(s, 0) + seen
            self._shadow_pairs += int(finite.sum())
            self._shadow_misses += float(misses.sum())
            rates = [counts[s] / w for s, w in self._per_sensor_windows.items() if w]
            worst = max(
                (s for s, w in self._per_sensor_windows.items() if w),
                key=lambda s: (counts[s] / self._per_sensor_windows[s], s),
                default=None,
            )
            tally = self._versions.setdefault(int(version), _Tally(share))
            tally.add(misses, finite, sensors)
            by_version = {k: t.figures() for k, t in sorted(self._versions.items())}
            self._status = replace(
                self._status,
                shadow_by_version=by_version,
                shadow_windows=self._status.shadow_windows + len(m),  # closed windows
                shadow_violations=counts,
                shadow_contract=contract,
                shadow_violation_rate=(
                    self._shadow_misses / self._shadow_pairs if self._shadow_pairs else None
                ),
                shadow_worst_rate=max(rates) if rates else None,
                shadow_worst=(
                    None
                    if worst is None
                    else (worst, counts[worst], self._per_sensor_windows[worst])
                ),
                updated_at=self._now().isoformat(),
            )

    @classmethod
    def from_store(
        cls, now: Callable[[], datetime], totals: dict[str, int], input_rows: int
    ) -> StatusBoard:
        """The board of a run resumed by a new process: its counters as its store holds
        them (``BackupStore.totals``: batches, backup rows and bytes, windows) and the
        readings up to its last committed row."""
        board = cls(now)
        board.add(
            batches=totals["batches"],
            backup_rows=totals["backup_rows"],
            backup_bytes=totals["backup_bytes"],
            windows_emitted=totals["windows"],
            input_rows=input_rows,
        )
        return board

    def restored(
        self, kind: str, row: int, text: str, run: int | None = None, **details: Any
    ) -> None:
        """Count a recovery or resume of ``run`` (default: the run in force) restarting at
        ``row``, keep it as the latest restore, mark it on the metrics' time axis."""
        snap = self.snapshot()
        restore = Restore(
            kind=kind, at=self._now().isoformat(), run=snap.run if run is None else run,
            resumed_at_row=row, plan_version=snap.plan_version, **details,
        )  # fmt: skip
        self.record_restore(restore)
        self.mark(kind, text, seconds=details.get("seconds"), rows=details.get("rows_read"))

    def record_restore(self, restore: Restore) -> None:
        """A recovery or resume: counted and kept as the latest."""
        with self._lock:
            self._status = replace(
                self._status, restores=self._status.restores + 1, last_restore=restore
            )

    def add_profile(self, seconds: dict[str, float]) -> None:
        """Add phase timings (seconds) to the profile."""
        with self._lock:
            profile = dict(self._status.profile)
            for key, value in seconds.items():
                profile[key] = profile.get(key, 0.0) + float(value)
            self._status = replace(self._status, profile=profile)


class _Tally:
    """Shadow misses of one plan version: windows and misses per sensor, and the share of
    its windows that are disjoint (``verdict.disjoint_share``: the version's window and
    slide)."""

    def __init__(self, share: float = 1.0) -> None:
        self.share = float(share)
        self.windows: dict[str, int] = {}
        self.misses: dict[str, float] = {}
        self.closed = 0

    def add(self, misses: np.ndarray, counted: np.ndarray, sensors: Sequence[str]) -> None:
        self.closed += len(misses)
        for i, s in enumerate(sensors):
            if counted[:, i].any():
                self.windows[s] = self.windows.get(s, 0) + int(counted[:, i].sum())
                self.misses[s] = self.misses.get(s, 0) + float(misses[:, i].sum())

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
            # what the worst rate counts: its misses of its rebuilt windows
            "worst_misses": self.misses[worst] if worst is not None else 0,
            "worst_windows": self.windows[worst] if worst is not None else 0,
            "rebuilt_sensors": len(rates),
            # every rebuilt sensor's (misses, windows): a test must look at each, not only
            # the highest rate (a lower rate over many windows can be the significant one)
            "per_sensor": {s: (self.misses[s], w) for s, w in self.windows.items() if w},
            "share": self.share,  # the test counts these windows' disjoint share
        }
