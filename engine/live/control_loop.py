"""Online per-sensor control in the live pipeline: every closed window steers the set.

``ControlledReplanning`` is a ``ReplanningMonitor`` (scheduled and alert re-plans,
the violation tally) whose backup set is decided by a ``SensorController``
(``engine.planning.control``). The pipeline calls ``observe_windows`` after every
committed micro-batch, on the batch thread:

1. the closed windows become ``ShadowFeedback`` (``engine.planning.feedback``): each
   row rebuilt with the reconstruction map of the plan version that governed it, a
   sensor counted as rebuilt in a window where any of its readings was not backed up;
   the miss is the plan's contract's (crash contract, exposure m: the fraction of the
   m-row losses touching the window that miss eps; range contract: the whole window
   rebuilt); a window holding rows rebuilt after a failure (or rows before every
   version a resumed process has seen) is unmeasured: a miss for every rebuilt
   sensor. Windows the pipeline never closed for this controller (the recovery job
   rebuilt them; the process before a restart closed them) are skipped, counted in
   ``skipped``: the guarantee covers the windows applied;
2. the controller applies them and decides; when its set differs from the one last
   handed to the pipeline, the plan steered to that set (``with_backup``) is handed
   over (``apply``: the manager queues it, the next micro-batch makes it a plan
   version of kind ``control``);
3. a scheduled, alert or manual re-plan is computed on the worker thread as before
   (a fresh plan on the learning rows; an alert refits too instead of widening, the
   controller does the tightening) and parked; the next ``observe_windows`` rebases
   the controller on its model and targets (``rebase``: the scales, evidence and
   tallies carry over, the set is kept and repaired) and installs the steered plan
   with the re-plan's kind.

Every set change thus happens on the batch thread, one per micro-batch at most, so
no queued plan is replaced before it takes effect. The decision costs a few ms at
1,000 sensors (``bench.bench_control``: median 4 ms), the counterfactual rebuild one
inverse of the backed-up block per version; a rebase recomputes the selection from
the covariance once per re-plan.

**Delay.** The feedback of a window arrives when it closes, after its last reading
(with a disorder stage: after its stragglers are released). Every row up to ``h``, the
largest row of a batch, was governed by decisions made before that batch's feedback;
so the oldest window the batch brings feedback for, ``watermark`` (taken before it is
applied), had its feedback outstanding while the decisions for windows up to
``h // slide`` were made: ``d >= h // slide - watermark``, measured before every batch's
feedback is applied (a batch of many windows, a catch-up, counts them all).
``delay`` is the largest seen, the ``d`` of the controller's bound
(``ControlConfig.miss_bound``): about ``window / slide`` without disorder, plus the
stage's lateness in slides with it.

**Restart.** Each installed version stores the controller's snapshot in its
calibration record (``"control"``). A process that resumes a run sees the stored
version at its first batch and resumes the controller from that snapshot on its own
model (``SensorController.resume``); the windows closed between that version and the
restart were not seen: they are skipped (see 1). In one process the controller
lives on in memory across a failure and recovery.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.data import SensorHistory
from engine.live.batch import ClosedWindows
from engine.live.versions import PlanVersion, versions_of_rows
from engine.model.linear import column_indices
from engine.planning.control import (
    ControlConfig,
    ControlDecision,
    SensorController,
    ShadowFeedback,
)
from engine.planning.feedback import DropOneRebuilds, rebuild_under_versions, shadow_feedback
from engine.planning.plan import BackupPlan
from engine.planning.replan import ReplanningMonitor, calibration_state, fresh_plan
from engine.planning.steering import controller_for, controller_inputs, with_backup

Apply = Callable[[BackupPlan, str, str], None]


@dataclass(frozen=True)
class ControlStatus:
    """The controller's state for a status line: its guarantee so far."""

    windows: int  # windows applied
    skipped: int  # windows closed without the controller (a recovery, another process)
    delay: int  # the largest feedback delay d measured, in windows
    backup: int  # sensors in the controller's set
    forced: int  # sensors at the floor
    changes: int  # decisions that changed the set
    miss_bound: float | None  # the guaranteed miss fraction over the windows applied


class ControlledReplanning(ReplanningMonitor):
    """A ``ReplanningMonitor`` whose backup set a ``SensorController`` steers.

    Parameters as ``ReplanningMonitor``'s, plus ``control`` (the controller's constants).
    """

    def __init__(
        self,
        plan: BackupPlan,
        recent: Callable[[], SensorHistory],
        apply: Apply,
        *,
        control: ControlConfig,
        **kwargs: Any,
    ) -> None:
        super().__init__(plan, recent, apply, **kwargs)
        self.controller = controller_for(plan, control)
        self.model_plan = plan  # the plan whose model and targets the controller holds
        self.delay = 0
        self.skipped = 0  # windows closed where the controller did not see them
        self._drop = DropOneRebuilds()  # the counterfactual rebuilds under the model
        self._handed = self.controller.backup  # the set last handed to the pipeline
        self._parked: tuple[BackupPlan, str, str] | None = None  # a re-plan to install
        self._unsent: tuple[str, str] | None = None  # a rebased re-plan not installed yet
        self._versions: dict[int, PlanVersion] = {}
        self._control_lock = threading.Lock()
        query = plan.query
        self._window, self._slide = query.window, query.effective_slide
        self._aggregate, self._exposure = query.aggregate, query.exposure
        self._eps = plan.eps_per_sensor

    # ------------------------------------------------------------ the hook
    def observe_windows(
        self, closed: ClosedWindows, version: PlanVersion
    ) -> ControlDecision | None:
        """One committed micro-batch: its closed windows steer the set (batch thread).

        Never raises: a failure is reported (``on_failure``: the status shows it) and the
        plan in force is kept, as a failed re-plan is; the stream goes on."""
        try:
            return self._steer(closed, version)
        except Exception as err:  # reported, never silent; the stream must not die of it
            if self.on_failure is not None:
                self.on_failure(f"online control failed, the plan in force is kept: "
                                f"{type(err).__name__}: {err}")  # fmt: skip
            return None

    def _steer(self, closed: ClosedWindows, version: PlanVersion) -> ControlDecision | None:
        with self._control_lock:
            self._versions.setdefault(version.id, version)
            if self.controller.windows == 0 and "control" in version.calibration:
                self._resume(version)
            if self._parked is not None:
                self._rebase()
            elif self._unsent is not None:
                self._send()
            if not len(closed):
                return None
            self._skip_unseen(int(closed.ids[0]))
            self._measure_delay()  # before its feedback: it governed every row up to now
            decision = self.controller.observe(self._feedback(closed))
            if set(self.controller.backup) != set(self._handed):
                self._install(with_backup(self.model_plan, self.controller.backup), "control",
                              _control_reason(decision, self.plan.sensors))  # fmt: skip
            return decision

    def status(self) -> ControlStatus:
        with self._control_lock:
            c = self.controller
            bound = c.config.miss_bound(c.windows, self.delay) if c.windows else None
            forced = int(np.sum(c.scale <= c.config.s_min))
            return ControlStatus(c.windows, self.skipped, self.delay, len(c.backup), forced,
                                 c.changes, bound)  # fmt: skip

    def calibration_for(self, plan: BackupPlan) -> dict[str, Any]:
        """The version's calibration record: the target scale is ``exp(s_i)`` and the
        controller's snapshot rides along (a restarted process resumes from it)."""
        return {
            **calibration_state(plan, np.exp(self.controller.scale)),
            "control": self.controller.snapshot(),
        }

    # ------------------------------------------------------------ re-plans
    def _new_plan(self, old: BackupPlan, history: SensorHistory, alert: Any) -> BackupPlan:
        """A refit on the learning rows, alert or not: the controller tightens."""
        return fresh_plan(old, history)

    def _hand_over(self, new: BackupPlan, kind: str, reason: str) -> None:
        """Park the re-plan: the next batch rebases the controller and installs it."""
        with self._control_lock:
            self._parked = (new, kind, reason)

    def _rebase(self) -> None:
        assert self._parked is not None
        fresh, kind, reason = self._parked
        self._parked = None
        try:
            self.controller.rebase(*controller_inputs(fresh))
        except Exception:  # the re-plan is abandoned: the plan in force stays, re-plans go on
            with self._lock:
                self._busy, self._wait_for, self._made_since = False, None, None
            raise
        self.model_plan = fresh
        self._unsent = (kind, reason)
        self._send()

    def _send(self) -> None:
        """Install the rebased re-plan with the controller's set. A pipeline that cannot
        take it now (one restarting after a failure) gets it at the next batch: until
        then no other re-plan starts (``_busy``), and none is lost."""
        assert self._unsent is not None
        kind, reason = self._unsent
        steered = with_backup(self.model_plan, self.controller.backup)
        kept = ", ".join(steered.backup_sensors) or "none"
        if self._install(steered, kind, f"{reason}; the controller's set kept: {kept}"):
            self._unsent = None
            with self._lock:
                self._busy = False

    def _install(self, plan: BackupPlan, kind: str, reason: str) -> bool:
        """Hand ``plan`` to the pipeline (True); on failure the next batch tries again."""
        try:
            self.apply(plan, kind, reason)
        except Exception as err:  # e.g. the pipeline is restarting: said, retried
            if self.on_failure is not None:
                self.on_failure(f"{kind} plan not installed yet ({err}); trying again")
            return False
        self._handed = tuple(self.controller.backup)
        self._log_applied(plan, kind, reason)
        return True

    def _resume(self, version: PlanVersion) -> None:
        cov, targets = controller_inputs(self.model_plan)
        self.controller = SensorController.resume(version.calibration["control"], cov, targets)
        self._handed = tuple(sorted(column_indices(self.plan.sensors, version.spec.backup_sensors)))

    # ------------------------------------------------------------ feedback
    def _feedback(self, closed: ClosedWindows) -> list[ShadowFeedback]:
        block = closed.block
        first = int(closed.ids[0]) * self._slide
        recovered, backed, known, dropped = self._rebuild(block, first, closed.stored_cells)
        starts = (closed.ids - closed.ids[0]) * self._slide
        gaps = np.vstack([[0], np.cumsum(~known)[:, None]])[:, 0]
        whole = gaps[starts + self._window] - gaps[starts] == 0
        return shadow_feedback(
            closed.ids, block, recovered, backed, window=self._window, slide=self._slide,
            aggregate=self._aggregate, eps=self._eps, exposure=self._exposure,
            measured=whole & ~closed.recovered, dropped=dropped,
            kept=np.isin(self.plan.sensors, self.plan.keepable),  # released ones' too
        )  # fmt: skip

    def _rebuild(
        self, block: np.ndarray, first: int, stored: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``first ..`` as recovery rebuilds them, each with its plan version's map:
        (recovered, backed, known, dropped). A row before every version seen (a process
        that resumed a run) takes the first one's and is not ``known``. A reading its
        batch backed up beyond the version's set (``stored``) is backed up, as read."""
        model = self.model_plan.model
        ordered, which = versions_of_rows(self._versions.values(), first, block.shape[0])
        recovered, backed, dropped = rebuild_under_versions(
            block,
            np.maximum(which, 0),
            [(v.spec.linear_map, v.spec.backup_sensors) for v in ordered],
            self.plan.sensors,
            lambda idx: self._drop(model, idx),
        )
        backed |= stored
        recovered[stored] = block[stored]
        return recovered, backed, which >= 0, dropped

    def _skip_unseen(self, first_id: int) -> None:
        """Windows before ``first_id`` this controller never got (recovery closed them, or
        the process that ran before a restart did) are not applied: skipped, counted."""
        if self.controller.windows == 0:
            self.controller.watermark = max(self.controller.watermark, first_id)
            return
        self.skipped += self.controller.skip_to(first_id)

    def _measure_delay(self) -> None:
        last_row = self.rows_seen() - 1
        if last_row >= 0:
            self.delay = max(self.delay, last_row // self._slide - self.controller.watermark)


def _control_reason(decision: ControlDecision, sensors: tuple[str, ...]) -> str:
    names = lambda idx: ", ".join(sensors[i] for i in idx)  # noqa: E731
    parts = []
    if decision.added:
        parts.append(f"backed up {names(decision.added)} (its recent windows missed eps)")
    if decision.released:
        parts.append(f"released {names(decision.released)} (measured windows within delta)")
    if not parts:
        parts.append("the controller's set re-issued")
    return "online control: " + "; ".join(parts)


__all__ = ["ControlStatus", "ControlledReplanning"]
