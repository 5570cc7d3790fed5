"""What a managed live run was started with, and the defaults it derives.

``RunConfig`` is what ``PipelineManager.start`` (or ``attach``) fixes for the
run; ``_Recovery`` is what the last recovery measured, kept for its report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.live.feeder import FeedOptions
from engine.live.recovery import LostRange
from engine.live.spec import (
    HistoryLike,
    Monitor,
    PipelineOptions,
    PipelinePaths,
    StreamSpec,
    check_mode,
)
from engine.planning.replan import ReplanningMonitor, calibration_state

__all__ = ["RunConfig", "default_rows_per_file"]


@dataclass(frozen=True)
class _Recovery:
    lost: LostRange
    seconds: float
    rows_read: int
    seed_next_window: int  # lost windows from here on are finished by the live query
    rows_by_version: dict[int, int] = field(default_factory=dict)
    # Sensors backed up throughout the lost range (by every version governing its rows):
    # the report scores the others as rebuilt, whatever plan is in force when it is read.
    stored: tuple[str, ...] | None = None
    failure: str = "machine"  # the kind of failure recovered from (engine.live.failure)
    kept: tuple[str, ...] = ()  # a crash's kept-readings sensors (their lost readings left out)
    # a machine loss: which readings of the lost range the backup held (RecoveryOutcome.stored)
    cells: np.ndarray | None = None


@dataclass(frozen=True)
class RunConfig:
    """What the running pipeline was started with. ``spec`` fixes the sensors and
    windows; the plan in force is the newest plan version (pipeline or store)."""

    spec: StreamSpec
    mode: str
    paths: PipelinePaths
    options: PipelineOptions = field(default_factory=PipelineOptions)
    monitor: Monitor | None = None
    history: HistoryLike | None = None  # what the feeder replays (None: attached run)
    feed: FeedOptions | None = None

    def __post_init__(self) -> None:
        check_mode(self.mode)


def _calibration(monitor: Monitor | None) -> dict[str, Any]:
    """The initial plan's calibration state, when the monitor knows its plan."""
    if isinstance(monitor, ReplanningMonitor):
        return calibration_state(monitor.plan, monitor.scale)
    return {}


def default_rows_per_file(spec: StreamSpec) -> int:
    """Rows per landing file when not told: ``slide // 2 + 1``.

    Micro-batches then rarely end exactly on a window boundary, so a failure
    lands inside an open window as a crash at a random time would; with files
    of a multiple of the slide every batch would close all its windows and a
    failure between batches would lose nothing.
    """
    return spec.slide // 2 + 1
