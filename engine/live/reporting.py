"""What a live micro-batch reports: status-board totals, shadow errors, metrics.

``_report`` adds the batch to the board's totals and feeds its shadow errors
to the board and the monitor (and its closed windows to a monitor that steers the
backup set online: ``engine.live.control_loop``); ``_record`` puts the batch's point on the
metrics history, with the disorder stage's counts when there is a stage.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.aggregates import leave_out
from engine.live.batch import ClosedWindows, WindowAdvance
from engine.live.exposure import BatchBackup
from engine.live.records import BackupWritten
from engine.live.shadow_rows import ShadowRows
from engine.live.spec import Monitor, PipelineOptions, Stage, StreamSpec
from engine.live.status import StatusBoard
from engine.live.versions import PlanVersion
from engine.planning.feedback import window_misses
from engine.planning.monitor import newly_alerting
from engine.planning.verdict import disjoint_share


class BatchReporting:
    """Mixin of ``LivePipeline``: a batch's outcome on the status board."""

    board: StatusBoard
    monitor: Monitor | None
    options: PipelineOptions
    stage: Stage | None
    _kinds: dict[str, int]
    _alerts: int
    _alerting: dict[int, set[str]]  # plan version -> sensors an alert has named
    _full_reason: str | None  # why the previous batch backed up every sensor (None: it did not)
    _history: dict[int, PlanVersion]  # the plan versions this process has run, by id

    def _report(
        self,
        pdf: pd.DataFrame,
        advance: WindowAdvance,
        late: pd.DataFrame,
        shadow: tuple[np.ndarray, ShadowRows] | None,
        backup: BackupWritten,
        version: PlanVersion,
    ) -> None:
        spec = version.spec
        self.board.add(
            batches=1,
            input_rows=len(pdf),
            backup_rows=backup.rows,
            backup_bytes=backup.bytes,
            windows_emitted=len(advance.closed),
            late_rows=len(late),
            duplicate_readings=advance.duplicates,
            stale_readings=advance.stale,
        )
        self.board.update(buffered_rows=advance.state.buffered_rows)
        steer = getattr(self.monitor, "observe_windows", None)  # online control, if any
        if steer is not None and self.options.shadow:
            steer(advance.closed, version)
        if shadow is None:
            return
        errors, rows = shadow
        # a window holding rows recovery rebuilt is not measured: those rows are the map's
        # output, and rebuilt again they match themselves (as ``crash_shadow_misses``)
        # nor is a (window, sensor) pair whose every reading was backed up (by the
        # version's set or its batch's, over the exposure): it is exact, no evidence for
        # the map, as the recovery report and online control leave it out
        errors = rows.mask_exact(
            np.where(np.asarray(advance.closed.recovered)[:, None], np.nan, errors)
        )
        crash = spec.query.exposure is not None  # else the range contract: whole windows
        # the crash contract: the windows' m-row losses, as the plan promises
        misses = (
            rows.mask_exact(crash_shadow_misses(advance.closed, spec, rows.rebuilt))
            if crash
            else None
        )
        for vid in np.unique(rows.versions):  # each window on its oldest version's record
            own, held = rows.versions == vid, self._history.get(int(vid), version).spec
            share = disjoint_share(held.query.window, held.slide)  # what the status line tests
            if misses is None:
                self.board.record_shadow(errors[own], spec.sensors, held.linear_map.targets,
                                         held.eps_vector, int(vid), share)  # fmt: skip
            else:
                self.board.record_misses(misses[own], spec.sensors, held.linear_map.targets,
                                         int(vid), "crash", share)  # fmt: skip
        own = rows.versions == version.id  # the monitor judges the version in force
        if self.monitor is not None and own.any():
            targets = spec.linear_map.targets
            if misses is None:
                alert = self.monitor.observe(errors[own], reconstructed=targets, version=version.id)
            else:
                alert = self.monitor.observe_misses(misses[own], targets, version.id)
            if alert is not None:
                reason = str(getattr(alert, "reason", alert))
                self.board.update(last_alert=reason)
                # marked once per sensor and version (the monitor alerts every batch
                # while a rate stays above delta, e.g. while the re-plan computes)
                sensors = getattr(alert, "sensors", ())
                if newly_alerting(self._alerting, version.id, sensors) or not sensors:
                    self.board.mark("alert", reason)
                    self._alerts += 1

    def _record(
        self,
        batch_id: int,
        pdf: pd.DataFrame,
        advance: WindowAdvance,
        late: pd.DataFrame,
        backup: BackupWritten,
        duration_ms: float | None,
        store_ms: float | None,
    ) -> None:
        """The batch's point on the metrics history (and the stage's K, watermark, results)."""
        kinds, self._kinds = self._kinds, {}
        metrics = getattr(self.stage, "metrics", None)  # a stage may expose none
        if metrics is not None:
            self.board.update(**metrics())
            self.board.add(
                provisional_results=int(kinds.get("provisional", 0)),
                corrected_results=int(kinds.get("correction", 0)),
                final_results=int(kinds.get("final", 0)),
            )
        alerts, self._alerts = self._alerts, 0
        self.board.record_batch(
            batch_id,
            input_rows=len(pdf),
            duration_ms=duration_ms,
            store_ms=store_ms,
            backup_rows=backup.rows,
            backup_bytes=backup.bytes,
            windows=len(advance.closed),
            alerts=alerts,
            late=len(late),
            provisional=int(kinds.get("provisional", 0)),
            corrections=int(kinds.get("correction", 0)),
            final=int(kinds.get("final", 0)),
        )

    def _report_backup(self, choice: BatchBackup) -> None:
        """A batch that backed up every sensor to keep the crash contract: counted, and
        marked on the timeline where a run of such batches begins (or changes reason)."""
        if choice.reason is not None:
            self.board.add(full_backup_batches=1)
            self.board.update(last_full_backup=choice.text)
            if choice.reason != self._full_reason:
                self.board.mark("exposure", choice.text, rows=choice.rows)
        self._full_reason = choice.reason


def crash_shadow_misses(
    closed: ClosedWindows, spec: StreamSpec, rebuilt: np.ndarray | None = None
) -> np.ndarray:
    """(W, n) each closed window's crash-contract miss per sensor, ``spec.sensors`` order:
    of the ``w + m - 1`` failure positions touching it, the fraction whose m lost rows,
    rebuilt from the backed-up columns with the version's map (a kept sensor's left out,
    ``engine.aggregates.leave_out``; or as given, ``rebuilt``: each row under its own
    version, ``engine.live.shadow_rows``), put it more than eps off
    (``engine.planning.feedback.window_misses``). NaN for a window holding rows recovery
    rebuilt: its truth is not known."""
    params, lm = spec.window_params, spec.linear_map
    if len(closed) == 0:
        return np.zeros((0, len(params.sensors)))
    if rebuilt is None:
        rebuilt = lm.rebuild_columns(closed.block, params.sensors)
        kept = np.isin(np.asarray(params.sensors), np.asarray(spec.kept_sensors, dtype=object))
        if kept.any():
            rebuilt = leave_out(rebuilt, kept, params.aggregate)
    misses = window_misses(closed.block, rebuilt, len(closed), params.window, params.slide,
                           params.aggregate, spec.eps_vector, spec.query.exposure)  # fmt: skip
    return np.where(np.asarray(closed.recovered)[:, None], np.nan, misses)
