"""Simulate a failure and recover from it: the ``PipelineManager``'s restore side.

Two kinds of failure (``engine.live.failure``): a machine loss takes the window
state with the consumed input, and recovery rebuilds every open window from the
backup (``engine.live.recovery``, a Spark job); a crash the committed state
survives takes the micro-batch in flight, and recovery rebuilds its rows only
(``engine.live.crash``). Either way the query restarts as a new run seeded with
the rebuilt rows of the windows still open.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from engine.errors import PipelineError
from engine.live.crash import recover_crash
from engine.live.failure import (
    CrashedBatch,
    await_end,
    check_failure_kind,
    discard_after_crash,
    discard_lost_state,
)
from engine.live.feeder import Feeder
from engine.live.pipeline import LivePipeline
from engine.live.recovery import find_lost_range, recover_lost_range, stored_throughout
from engine.live.recovery_report import RecoveryReport
from engine.live.run_config import RunConfig, _Recovery
from engine.live.status import PipelineStatus, StatusBoard
from engine.live.versions import PendingPlan, PlanVersion, read_versions
from engine.live.views import ManagerViews


class FailureAndRecovery(ManagerViews):
    """Mixin of ``PipelineManager``: a simulated failure of either kind, and recovery."""

    board: StatusBoard
    _lock: threading.RLock
    _now: Callable[[], datetime]
    _clock: Callable[[], float]
    _pipeline: LivePipeline | None
    _feeder: Feeder | None
    _spark: Any
    _failed_run: int | None
    _crash: CrashedBatch | None
    _carry: PendingPlan | None
    _recovery: _Recovery | None
    _config: RunConfig | None

    _new_pipeline: Callable[..., LivePipeline]  # the manager's: (version, seed, resume_row)

    def arm_failure(self, kind: str) -> None:
        """Ask for a failure of ``kind`` at the next batch that qualifies, without waiting
        (``simulate_failure`` then waits for it and cleans up)."""
        check_failure_kind(kind)
        with self._lock:
            self._require_pipeline().request_failure(kind)

    def simulate_failure(
        self, grace_seconds: float = 15.0, kind: str = "machine"
    ) -> PipelineStatus:
        """Fail the query and destroy what that failure destroys (``engine.live.failure``).

        ``"machine"``: the first batch that starts with a window open raises inside
        ``foreachBatch`` (``FailureTrigger``: up to ``LET_THROUGH`` that would lose nothing
        are let through); the consumed input, the checkpoint and the window state go.
        ``"crash"``: the next batch with rows dies after its backup is written; its input
        and the checkpoint go, the committed window state stays. When no batch can come
        (the feed has ended and every landed file is processed) the query is stopped
        where it is at once (a crash then takes no batch); when none comes within
        ``grace_seconds`` (the query is stuck), then.
        """
        check_failure_kind(kind)
        with self._lock:
            pipeline, store = self._require_pipeline(), self._require_store()
            pipeline.request_failure(kind)
            await_end(pipeline, self._feeder, self._clock, grace_seconds)
            pipeline.stop()
            run = pipeline.run
            if kind == "crash":
                horizon = store.horizon()
                crash = pipeline.crashed or CrashedBatch(run, -1, horizon + 1, horizon, 0)
                deleted = discard_after_crash(pipeline.paths, store, crash, pipeline.source)
                rows = crash.last_row - crash.first_row + 1
                what = f"batch {crash.batch_id} lost in flight ({rows} rows), window state kept"
                if crash.batch_id < 0:  # the stand-in: no batch could come, none was lost
                    what = "no batch in flight (nothing lost), window state kept"
            else:
                crash = None
                deleted = discard_lost_state(pipeline.paths, store, run, pipeline.source)
                what = "checkpoint and window state discarded"
            self._failed_run, self._crash, self._pipeline = run, crash, None
            self._carry = pipeline.pending  # a re-plan not in force yet survives the failure
            files = f"{len(deleted)} consumed input file{'' if len(deleted) == 1 else 's'} deleted"
            self.board.mark("failure", f"run {run} killed ({kind}); {files}")
            self.board.update(
                state="failed",
                buffered_rows=0,
                last_error=f"simulated {'crash' if crash else 'machine loss'} of run {run}: "
                f"query killed, {what}, {files}",
            )
            return self.status()

    def recover(self) -> RecoveryReport:
        """Rebuild the lost windows from the backup, then restart the live query."""
        with self._lock:
            failed = self._failed_run
            if failed is None:
                raise PipelineError("nothing to recover: simulate a failure first")
            self.board.update(state="recovering")
            try:
                return self._recover(failed)
            except Exception as err:  # failed, not stuck "recovering": Recover is offered again
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                self.board.update(
                    state="failed", last_error=f"recovery failed: {first}; recover again or stop"
                )
                raise

    def _recover(self, failed: int) -> RecoveryReport:
        """``recover``'s work, under its lock: the failure of run ``failed``."""
        store, cfg = self._require_store(), self._require_config()
        t0 = self._clock()
        versions = read_versions(store, cfg.spec)  # not memory: a new process has them too
        current = versions[-1] if versions else PlanVersion.initial(cfg.spec, self._now())
        if self._crash is not None:
            ran = self._crash.version or current  # the version the crashed batch ran under
            # a queued re-plan took effect in the crashed batch: its version starts there,
            # stored with the batch's commit, and the restarted query runs under it
            started = ran.record(self._crash.closes_at) if ran.id > current.id else None
            crash = recover_crash(store, ran.spec, cfg.mode, self._crash, started)
            if started is not None and crash.lost.rows:  # committed with the batch
                current = ran
                if self._carry is not None and self._carry.spec is ran.spec:
                    self._carry = None  # that re-plan is the version now in force
            # the batch took its readings in before it died: taken in, not waiting; and
            # unless it lost nothing, the recovery committed it with its backup, which
            # the counters take as the store's totals do (its windows are recovered ones);
            # added once the restart is up, so a retried recovery counts them once
            counted = {
                "input_rows": self._crash.readings,
                "batches": 1 if crash.lost.rows else 0,
                "backup_rows": self._crash.backup_rows if crash.lost.rows else 0,
                "backup_bytes": self._crash.backup_bytes if crash.lost.rows else 0,
            }
            lost, seed, rows_read = crash.lost, crash.seed, crash.rows_read
            by_version, stored, kept = {ran.id: crash.lost.rows}, crash.stored, crash.kept
            cells = None
        else:
            lost = find_lost_range(store, cfg.spec.slide)
            outcome = recover_lost_range(
                self._spark, store, current.spec, cfg.mode, lost, failed, versions
            )
            seed, rows_read, by_version = (
                outcome.seed,
                outcome.rows_read,
                outcome.rows_by_version,
            )
            stored, kept = stored_throughout(versions or [current], lost, cfg.mode), ()
            cells = outcome.stored
            counted = {}
        seconds = self._clock() - t0
        self._recovery = _Recovery(
            lost, seconds, rows_read, seed.next_window, by_version, stored,
            failure="machine" if self._crash is None else "crash", kept=kept, cells=cells,
        )  # fmt: skip
        rows = f"{lost.rows} lost row{'' if lost.rows == 1 else 's'}"
        # The restarted run must not fail again on its own.
        options = replace(cfg.options, fail_after_readings=None)
        self._config = replace(cfg, options=options)
        self._pipeline = self._new_pipeline(
            current, seed=seed, resume_row=lost.last_row + 1
        ).start()
        if self._carry is not None:
            self._pipeline.queue(self._carry)
        self.board.add(**counted)
        # windows with a result, the recovery's included, as a Resume counts them (a
        # retried recovery's range starts after what an earlier attempt committed)
        self.board.update(windows_emitted=store.totals()["windows"])
        self._failed_run, self._carry, self._crash = None, None, None
        self.board.restored(
            "recovery", lost.last_row + 1, f"{cfg.mode}: {rows} rebuilt", run=failed,
            lost_first_row=lost.first_row, lost_last_row=lost.last_row,
            windows=int(lost.lost_windows(cfg.spec.slide).size), rows_read=rows_read,
            seconds=seconds,
        )  # fmt: skip
        return self.report()
