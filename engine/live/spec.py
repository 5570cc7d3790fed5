"""What the live pipeline runs with and where it writes.

Pure Python (no PySpark): the stream spec taken from a plan, the pipeline's
paths and options, the failure and stage protocols. What it reports (the
status board) is ``engine.live.status``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import pandas as pd

from engine.errors import ConfigError, ParameterError, PipelineError
from engine.live.batch import WindowParams
from engine.model.linear import LinearMap, column_indices
from engine.query import HoldsQuery, WindowQuery

if TYPE_CHECKING:  # pragma: no cover
    from engine.planning.plan import BackupPlan

MODES: tuple[str, ...] = ("approx", "full", "none")


class HistoryLike(Protocol):
    """What the feeder needs from ``engine.data.history.SensorHistory`` (read-only)."""

    @property
    def times(self) -> np.ndarray: ...  # (T,) datetime64[ns]

    @property
    def values(self) -> np.ndarray: ...  # (T, n) float64

    @property
    def sensors(self) -> tuple[str, ...]: ...


class Monitor(Protocol):
    """Sees every batch's shadow check, with the plan version it was found under: whole
    windows' errors for a range plan (``observe``), each window's crash-contract miss
    fraction for a crash plan (``observe_misses``)."""

    def observe(self, errors: np.ndarray, reconstructed: Any, version: int = 0) -> Any: ...
    def observe_misses(self, misses: np.ndarray, reconstructed: Any, version: int = 0) -> Any: ...


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
class StreamSpec(HoldsQuery):
    """What the live pipeline needs from a plan: its sensors, backup set and linear
    map, and its window ``query`` (window and slide in readings, eps in the unit of
    the aggregate; validated by ``WindowQuery``). The linear map rebuilds every sensor
    that is not in ``backup_sensors`` from those that are.

    ``kept_sensors`` (max/min plans under the crash contract only): after a crash, the
    lost rows of these sensors are left out of their windows, so each window the crash
    touches takes the extreme of the sensor's kept readings (``engine.live.crash``). A
    machine loss still rebuilds them with the linear map.
    """

    sensors: tuple[str, ...]
    backup_sensors: tuple[str, ...]
    linear_map: LinearMap
    query: WindowQuery
    kept_sensors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.query, WindowQuery):
            raise ParameterError(f"query must be a WindowQuery, got {self.query!r}")
        if not self.sensors or len(set(self.sensors)) != len(self.sensors):
            raise ParameterError(f"sensors must be non-empty and unique, got {self.sensors!r}")
        self.query.eps_vector(self.sensors)  # per-sensor eps names only these sensors
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
        self._check_kept()

    def _check_kept(self) -> None:
        """Kept-readings sensors: rebuilt sensors of a max/min query with an exposure < window."""
        kept = self.kept_sensors
        if not isinstance(kept, tuple) or len(set(kept)) != len(kept):
            raise ParameterError(f"kept sensors must be a tuple of unique names, got {kept!r}")
        if not kept:
            return
        unknown = [s for s in kept if s not in self.sensors]
        if unknown:
            raise ParameterError(f"kept sensors not among the sensors: got {unknown!r}")
        backed = [s for s in kept if s in self.backup_sensors]
        if backed:
            raise ParameterError(f"kept sensors cannot be backup sensors too: got {backed!r}")
        q = self.query
        if q.aggregate not in ("max", "min"):
            raise ParameterError(
                f"kept sensors apply to max and min queries only, got aggregate {q.aggregate!r} "
                f"with kept sensors {kept!r}"
            )
        if q.exposure is None or q.exposure >= q.window:
            raise ParameterError(
                "kept sensors need a crash exposure shorter than the window "
                f"({q.window} rows), got exposure {q.exposure!r}"
            )

    @classmethod
    def from_plan(cls, plan: BackupPlan) -> StreamSpec:
        """Sensors, backup set, linear map, window query and kept sensors of ``plan``.

        A kept sensor the plan also backs up (a set widened after planning, e.g. by
        online control) is recovered exactly from its backup: it is not kept.
        """
        backup = tuple(plan.backup_sensors)
        kept = tuple(s for s in plan.kept_sensors if s not in backup)
        return cls(tuple(plan.sensors), backup, plan.linear_map, plan.query, kept)

    @property
    def slide(self) -> int:
        """The slide in readings (the window when tumbling)."""
        return self.query.effective_slide

    @property
    def window_params(self) -> WindowParams:
        """The window geometry the per-batch functions take (``engine.live.batch``)."""
        return WindowParams.of(self.sensors, self.query)

    @property
    def eps_vector(self) -> np.ndarray:
        """Each sensor's eps, (n,) in ``sensors`` order."""
        return self.query.eps_vector(self.sensors)

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
    """Where the pipeline reads and writes. Every location can be overridden.

    ``backup`` is a path or any URI Spark writes (``file://``, a shared mount,
    ``s3a://`` with its connector); the embedded store reads it back only when
    it is local or mounted. Default ``<root>/backup``.
    """

    root: Path
    landing: Path | None = None
    checkpoint: Path | None = None
    store: Path | None = None
    truth: Path | None = None
    backup: str | Path | None = None

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
        # A URI stays text: Path("s3a://b/x") would fold its "//".
        object.__setattr__(self, "backup", str(self.backup or self.root / "backup"))

    @property
    def backup_uri(self) -> str:
        return str(self.backup)

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
