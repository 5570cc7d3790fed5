"""Plan versions: which plan governed which rows of the stream.

A plan is valid for a stretch of time. The live pipeline starts with an
``initial`` version and installs a new one at a micro-batch boundary after a
``scheduled`` re-plan (the horizon passed), an ``alert`` of the live monitor, a
``control`` decision (the per-sensor controller changed the backup set) or a
``manual`` change. Each version is stored (``plan_versions``) with the rows
(``seq``) it governed, so a recovery, even by a new process, rebuilds every row
with the reconstruction map that was in force when it was written.

Pure Python, no PySpark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from engine.errors import ConfigError, ParameterError
from engine.live.records import VersionRecord
from engine.live.spec import StreamSpec
from engine.live.store import BackupStore
from engine.model.linear import LinearMap

REASONS: tuple[str, ...] = ("initial", "scheduled", "alert", "manual", "control")


@dataclass(frozen=True)
class PendingPlan:
    """A plan handed to the pipeline; it becomes a version at the next micro-batch."""

    spec: StreamSpec
    reason: str
    detail: str
    created_at: datetime
    calibration: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_reason(self.reason)


@dataclass(frozen=True)
class PlanVersion:
    """One version of the plan and the rows ``first_seq .. last_seq`` it governed.

    ``last_seq`` is ``None`` while the version is in force.
    """

    id: int
    reason: str
    detail: str
    spec: StreamSpec
    created_at: datetime
    first_seq: int
    last_seq: int | None = None
    first_time: datetime | None = None
    last_time: datetime | None = None
    calibration: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_reason(self.reason)
        if self.id < 0 or self.first_seq < 0:
            raise ParameterError(
                "a plan version needs id >= 0 and first_seq >= 0, "
                f"got {(self.id, self.first_seq)!r}"
            )

    @classmethod
    def initial(
        cls, spec: StreamSpec, created_at: datetime, calibration: Mapping[str, Any] | None = None
    ) -> PlanVersion:
        return cls(0, "initial", "plan the stream started with", spec, created_at, 0, None,
                   calibration=dict(calibration or {}))  # fmt: skip

    def following(self, pending: PendingPlan, first_seq: int) -> PlanVersion:
        """The version ``pending`` becomes when it takes effect at row ``first_seq``."""
        return PlanVersion(
            self.id + 1,
            pending.reason,
            pending.detail,
            pending.spec,
            pending.created_at,
            max(first_seq, self.first_seq),
            calibration=dict(pending.calibration),
        )

    def governs(self, seq: int) -> bool:
        return self.first_seq <= seq and (self.last_seq is None or seq <= self.last_seq)

    def record(self, closes_at: datetime | None = None) -> VersionRecord:
        return VersionRecord(
            id=self.id,
            created_at=self.created_at,
            reason=self.reason,
            detail=self.detail,
            first_seq=self.first_seq,
            backup_sensors=self.spec.backup_sensors,
            reconstruction=map_to_json(self.spec.linear_map),
            kept_sensors=self.spec.kept_sensors,
            calibration=json.dumps(dict(self.calibration), allow_nan=False, default=float),
            first_time=self.first_time,
            last_seq=self.last_seq,
            last_time=self.last_time,
            closes_at=closes_at,
        )

    @classmethod
    def from_record(cls, rec: VersionRecord, base: StreamSpec) -> PlanVersion:
        """The stored version, on ``base``'s sensors, windows and query: a run never changes
        them, and a resume with others is refused (``engine.live.ownership.run_identity``)."""
        lm = map_from_json(rec.reconstruction)
        spec = replace(
            base,
            backup_sensors=tuple(rec.backup_sensors),
            linear_map=lm,
            kept_sensors=tuple(rec.kept_sensors),
        )
        return cls(
            rec.id, rec.reason, rec.detail, spec, rec.created_at, rec.first_seq, rec.last_seq,
            rec.first_time, rec.last_time, json.loads(rec.calibration or "{}"),
        )  # fmt: skip

    def to_dict(self, last_row: int | None = None) -> dict[str, Any]:
        """Plain JSON types; an open version's ``last_row`` is ``last_row`` if given."""
        return {
            "id": self.id,
            "reason": self.reason,
            "detail": self.detail,
            "created_at": self.created_at.isoformat(timespec="seconds"),
            "backup_sensors": list(self.spec.backup_sensors),
            "kept_readings": list(self.spec.kept_sensors),
            "first_row": self.first_seq,
            "last_row": self.last_seq if self.last_seq is not None else last_row,
            "first_time": None if self.first_time is None else self.first_time.isoformat(),
            "last_time": None if self.last_time is None else self.last_time.isoformat(),
        }


def versions_of_rows(
    versions: Iterable[PlanVersion], first_row: int, count: int
) -> tuple[list[PlanVersion], np.ndarray]:
    """The versions in row order and, for each of the ``count`` rows from ``first_row``
    on, the index among them of the version it ran under (-1: a row before every one,
    e.g. of a run this process resumed)."""
    ordered = sorted(versions, key=lambda v: (v.first_seq, v.id))
    firsts = np.array([v.first_seq for v in ordered])
    which = np.searchsorted(firsts, first_row + np.arange(count), side="right") - 1
    return ordered, which


def check_reason(reason: str) -> None:
    if reason not in REASONS:
        raise ParameterError(
            f"a re-plan reason must be one of {', '.join(REASONS)}, got {reason!r}"
        )


def read_versions(store: BackupStore, base: StreamSpec) -> list[PlanVersion]:
    """Every stored version (oldest first) on ``base``'s sensors, windows and query."""
    return [PlanVersion.from_record(r, base) for r in store.read_versions()]


def map_to_json(lm: LinearMap) -> str:
    """A reconstruction map as JSON text (floats round-trip exactly)."""
    return json.dumps(
        {
            "sensors": list(lm.sensors),
            "backup": list(lm.backup),
            "targets": list(lm.targets),
            "intercept": np.asarray(lm.intercept, dtype=float).tolist(),
            "coef": np.asarray(lm.coef, dtype=float).tolist(),
            "conditional_variance": np.asarray(lm.conditional_variance, dtype=float).tolist(),
        },
        allow_nan=False,
    )


def map_from_json(text: str) -> LinearMap:
    try:
        d = json.loads(text)
        k, m = len(d["targets"]), len(d["backup"])
        return LinearMap(
            sensors=tuple(d["sensors"]),
            backup=tuple(d["backup"]),
            targets=tuple(d["targets"]),
            intercept=np.asarray(d["intercept"], dtype=float).reshape(k),
            coef=np.asarray(d["coef"], dtype=float).reshape(k, m),
            conditional_variance=np.asarray(d["conditional_variance"], dtype=float).reshape(k),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"a stored reconstruction map is not readable: {err}") from err


def changes(versions: Sequence[PlanVersion]) -> list[dict[str, Any]]:
    """Version history for a page: each version with the sensors it added and dropped."""
    out: list[dict[str, Any]] = []
    before: tuple[str, ...] = ()
    for v in versions:
        now = v.spec.backup_sensors
        row = v.to_dict()
        row["added"] = [s for s in now if s not in before] if v.id else []
        row["dropped"] = [s for s in before if s not in now]
        out.append(row)
        before = now
    return out
