"""Drive a ``ControlledReplanning`` as the live pipeline does, in pure Python: rows in
micro-batches through ``advance_windows``, a handed-over plan becoming the next plan
version at the following batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from engine.data import SensorHistory
from engine.live.batch import WindowState, advance_windows, shadow_errors
from engine.live.control_loop import ControlledReplanning
from engine.live.reporting import crash_shadow_misses
from engine.live.spec import StreamSpec
from engine.live.versions import PendingPlan, PlanVersion
from engine.planning import BackupPlan
from engine.planning.control import ControlConfig

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Loop:
    """The pipeline's side: plan versions, the window state, the rows seen."""

    plan: BackupPlan
    history: SensorHistory  # the replayed rows: row 0 is ``seq`` 0
    versions: list[PlanVersion] = field(default_factory=list)
    pending: list[tuple[BackupPlan, str, str]] = field(default_factory=list)
    rows: int = 0
    recovered_rows: set[int] = field(default_factory=set)  # rows rebuilt, not measured
    full: bool = False  # batches back up every sensor (over the exposure, after a recovery)

    def __post_init__(self) -> None:
        self.versions.append(PlanVersion.initial(StreamSpec.from_plan(self.plan), NOW))
        self.state = WindowState.empty(len(self.plan.sensors), 0, self.plan.query.effective_slide)

    def apply(self, new: BackupPlan, kind: str, reason: str) -> None:
        self.pending.append((new, kind, reason))

    def monitor(self, config: ControlConfig | None = None, **kw: object) -> ControlledReplanning:
        config = config or ControlConfig(delta=self.plan.parameters.delta)
        self.ctl = ControlledReplanning(
            self.plan, lambda: self.history.rows(0, max(self.rows, 1)), self.apply,
            control=config, rows_seen=lambda: self.rows, run=lambda job: job(),
            now=lambda: NOW, **kw,
        )  # fmt: skip
        return self.ctl

    def batch(self, stop: int) -> None:
        """Rows ``self.rows .. stop`` as one micro-batch."""
        if self.pending:
            new, kind, reason = self.pending.pop()
            self.pending.clear()
            cal = self.ctl.calibration_for(new)
            pending = PendingPlan(StreamSpec.from_plan(new), kind, reason, NOW, cal)
            self.versions.append(self.versions[-1].following(pending, self.rows))
        frame = feed_frame(self.history, self.rows, stop)
        stored = np.full(len(frame), self.full)
        advance = advance_windows(
            self.state, frame, self.versions[-1].spec.window_params, stored=stored
        )
        closed = advance.closed
        if len(closed) and self.recovered_rows:
            slide, w = self.plan.query.effective_slide, self.plan.query.window
            hit = [any(r in self.recovered_rows for r in range(j * slide, j * slide + w))
                   for j in closed.ids]  # fmt: skip
            closed = type(closed)(closed.ids, closed.starts, closed.ends, closed.aggregates,
                                  np.asarray(hit), closed.block, closed.stored)  # fmt: skip
        self.state, self.rows = advance.state, stop
        version = self.versions[-1]
        self.ctl.observe_windows(closed, version)  # the pipeline's order (``_report``)
        if len(closed):  # the monitor under the plan's contract, as ``_report`` feeds it
            targets = version.spec.linear_map.targets
            if version.spec.query.exposure is None:
                errors = shadow_errors(closed, version.spec.window_params, version.spec.linear_map)
                self.ctl.observe(errors, targets, version.id)
            else:
                self.ctl.observe_misses(
                    crash_shadow_misses(closed, version.spec), targets, version.id
                )

    def run(self, stop: int, batch_rows: int) -> None:
        while self.rows < stop:
            self.batch(min(stop, self.rows + batch_rows))

    def backup_sets(self) -> list[set[str]]:
        return [set(v.spec.backup_sensors) for v in self.versions]


def feed_frame(history: SensorHistory, start: int, stop: int) -> pd.DataFrame:
    """The feed's long rows for ``history`` rows ``start .. stop`` (``seq`` = row)."""
    n = len(history.sensors)
    rows = np.arange(start, stop)
    times = history.times[start:stop]
    return pd.DataFrame(
        {
            "seq": np.repeat(rows, n),
            "event_time": np.repeat(times, n),
            "arrival_time": np.repeat(times, n),
            "sensor": np.tile(np.asarray(history.sensors, dtype=object), rows.size),
            "value": history.values[start:stop].reshape(-1),
        }
    )
