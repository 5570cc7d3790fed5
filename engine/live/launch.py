"""Starting a live run: the one path the app's Live page and ``python -m engine simulate`` take.

``start_live`` starts the feeder and the streaming query of a ``PipelineManager``
and, when readings arrive late (``Disorder``), draws their arrival delays and
runs the K-slack disorder stage (``engine.disorder.DisorderStage``) before the
windows: provisional results, corrections as late readings land, final ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.disorder import DelayModel, DisorderStage
from engine.live.exposure import feed_within_exposure
from engine.live.manager import PipelineManager
from engine.live.spec import HistoryLike, Monitor, PipelineOptions, PipelinePaths, StreamSpec
from engine.live.status import PipelineStatus

__all__ = ["Disorder", "start_live"]


@dataclass(frozen=True, eq=False)
class Disorder:
    """Readings arrive late: each delay (seconds) drawn from ``delays`` with ``rng``."""

    delays: DelayModel
    rng: np.random.Generator

    def arrivals(self, history: HistoryLike, n_sensors: int) -> np.ndarray:
        """(T, n) arrival delays in seconds, one per reading of ``history``."""
        rows = len(history.times)
        drawn = self.delays.sample(rows * n_sensors, self.rng)
        return np.asarray(drawn, dtype=float).reshape(rows, n_sensors)

    def stage_factory(self, history: HistoryLike, spec: StreamSpec) -> Callable[[], DisorderStage]:
        """A new disorder stage for ``spec`` whose windows line up with ``history``'s rows
        (one per query: a restart after a failure starts a new one)."""

        def stage() -> DisorderStage:
            return DisorderStage.for_history(
                history.times, spec.query, backup_sensors=spec.backup_sensors
            )

        return stage


def start_live(
    manager: PipelineManager,
    history: HistoryLike,
    spec: StreamSpec,
    mode: str,
    paths: PipelinePaths,
    *,
    disorder: Disorder | None = None,
    monitor: Monitor | None = None,
    speed: float = 0.0,
    rows_per_file: int | None = None,
    options: PipelineOptions | None = None,
    leftovers: str = "refuse",
    stop_row: int | None = None,
) -> PipelineStatus:
    """Replay ``history`` through ``manager``'s pipeline under ``spec`` in ``mode``.

    ``disorder``: readings arrive late by the delays it draws and the disorder stage
    runs. ``monitor`` sees every batch's shadow errors (re-planning). The rest is
    ``PipelineManager.start``'s: replay ``speed`` (0: as fast as possible), history
    rows per landing file, query options, what to do with an earlier run's files
    (``leftovers``) and the row the feed pauses at (``stop_row``). For a crash-contract
    plan the files and the trigger are cut so a micro-batch holds at most its exposure
    (``engine.live.exposure.feed_within_exposure``).
    """
    rows_per_file, options = feed_within_exposure(spec, rows_per_file, options)
    delays, stage_factory = None, None
    if disorder is not None:
        delays = disorder.arrivals(history, len(spec.sensors))
        stage_factory = disorder.stage_factory(history, spec)
    return manager.start(
        history,
        spec,
        mode,
        paths,
        speed=speed,
        rows_per_file=rows_per_file,
        delays=delays,
        options=options,
        monitor=monitor,
        stage_factory=stage_factory,
        leftovers=leftovers,
        stop_row=stop_row,
    )
