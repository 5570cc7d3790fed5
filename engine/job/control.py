"""Online per-sensor control in the production job: every closed window steers the set.

The live pipeline's controller (``engine.planning.control``, driven there by
``engine.live.control_loop``) for ``engine run``, on the driver. Under control the job
keeps the open windows' rows (``engine.job.crash_check.keep_rows``), as it does for a
crash plan's shadow check.

**Per micro-batch** (``steer``), after the shadow check has scored the windows the
watermark closed:

1. each closed window's ``w`` rows are rebuilt as recovery rebuilds them: every row
   with the map of the plan version its batch was backed up under (the rows carry it,
   ``crash_check.VERSION``), a batch over the exposure exact; each backed-up sensor is
   also rebuilt from the rest of its version's set under the controller's model (the
   counterfactual that releases it). The misses are the plan's contract's
   (``engine.planning.feedback.shadow_feedback``): for a crash plan the fraction of the
   ``w + m - 1`` m-row losses touching the window that miss eps, for a range plan
   whether the whole window rebuilt misses eps. A sensor is rebuilt in a window where
   any of its readings was not backed up. A (window, sensor) pair is measured only when
   the window has its ``w`` rows, each brought under one known version, and the sensor's
   readings and the backup readings rebuilding it are numbers; the controller counts a
   rebuilt sensor's unmeasured window as a miss;
2. the controller applies them and decides; when its set differs from the version that
   governs the next batch, that version's model with the controller's set
   (``engine.planning.steering.with_backup``) becomes a plan version of kind
   ``control`` from the next batch on (a ``control`` event says what changed and why).

**Its model.** The controller needs the covariance of a fitted model, which a config
does not carry. At the first batch the job fits the version in force again on its fit
period (``validity``) as landed in the source directory, with the plan's parameters,
in the background as a re-plan is. If the landing directory no longer holds that
period, a ``control_waiting`` event says so and control starts with the next re-plan.
Under control a scheduled or alert re-plan refits the model and the controller keeps
its set, repaired to the new targets (``adopt``): the version installed is the refit
with the controller's set. Nothing is pinned: a sensor that keeps missing is forced by
the controller's floor.

**Guarantee** (``ControlConfig.miss_bound``). For each sensor, over the ``T`` windows
applied, the miss fraction (backed-up windows count as hits) is at most
``delta * margin + (s_0 - s_min + gamma (d + 1)) / (gamma T)``, where ``d`` is the
feedback delay in windows: measured before each batch's feedback is applied, as the
newest window holding its rows (the newest event time's) minus the oldest window whose
feedback it brings, since decisions made without that feedback governed every row up
to there (``engine.live.control_loop`` measures it the same way). A miss is
the contract's: for a crash plan it assumes the crash contract's own conditions
(``engine.job.exposure``: batches of at most m rows, or every sensor backed up for the
batch). Windows that closed without the controller once it had applied one (while a
restarted job fitted its model again, or in a gap of the stream) are skipped and
counted (``skipped``); windows before its first are not its own. The bound covers the
windows applied.

**Restart.** The controller's state is kept with the window state after every batch
(``WindowState.extra["control"]``, with its delay and skipped windows); a resumed job
restores it once its model is fitted again (the scales, evidence and tallies carry
over; a state it cannot resume is said, ``control_failed``, and a fresh controller
starts from the plan's set).

What it costs per micro-batch: the closed windows' rows rebuilt once per plan version
and once more for the counterfactual, ``O(closed windows x (w + m - 1) x sensors)`` to
score them, a decision (a few ms at 1,000 sensors, ``bench.bench_control``), and the
controller's snapshot (about 30 numbers a sensor) written with the window state, taken
again only after the controller changed (it refreshes the selection: a Cholesky of the
backed-up block). ``bench.bench_job_control``: about 20 ms a batch that closes a window
at 1,000 sensors, against 10 ms for the crash check of the same windows.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from engine.errors import ParameterError
from engine.export import BackupConfig, plan_to_config
from engine.export.codec import parse_utc
from engine.job.crash_check import TIME, VERSION, WHOLE
from engine.job.plans import JobPlan, PlanBook, Runner, fit_again, in_background
from engine.model.linear import LinearMap, column_indices
from engine.planning.control import ControlConfig, SensorController
from engine.planning.control_types import ShadowFeedback
from engine.planning.feedback import DropOneRebuilds, rebuild_under_versions, shadow_feedback
from engine.planning.plan import BackupPlan
from engine.planning.steering import controller_inputs, with_backup

CONTROL_KEY = "control"  # the controller's snapshot in the window state's extra
Log = Callable[[dict[str, Any]], None]
Fit = Callable[[BackupConfig, pd.DataFrame, tuple[str, ...]], BackupPlan]


@dataclass
class JobControl:
    """The online controller of a job's backup set (see the module).

    ``read``: (start_us, end_us) -> every sensor's landed readings, wide (as re-plans
    read them); ``run``: where the model fit runs (as the re-planner's).
    """

    book: PlanBook
    read: Callable[[int, int], pd.DataFrame]
    log: Log
    sampling_interval_s: float
    window_us: int
    slide_us: int
    run: Runner = in_background
    fit: Fit = fit_again
    constants: ControlConfig | None = None  # None: the defaults at the plan's delta
    controller: SensorController | None = field(default=None, init=False)
    model_plan: BackupPlan | None = field(default=None, init=False)
    delay: int = field(default=0, init=False)  # the largest feedback delay d seen, windows
    skipped: int = field(default=0, init=False)  # windows closed without the controller

    def __post_init__(self) -> None:
        self._fitting: tuple[Future[Any], int] | None = None  # the model fit, its version
        self._tried: set[int] = set()  # versions whose fit period was tried
        self._saved: dict[str, Any] | None = None  # a controller snapshot to resume from
        self._snap: dict[str, Any] | None = None  # the controller's, until it changes
        self._batch = 0  # the micro-batch being steered (events of a re-plan's adopt)
        self._maps: dict[int, LinearMap] = {}
        self._drop = DropOneRebuilds()

    # ------------------------------------------------------------ the hooks
    def resume(self, saved: Any) -> None:
        """What a run before this one kept with the state (``snapshot``; None: none)."""
        if isinstance(saved, dict) and self.controller is None:
            self._saved = saved.get("controller")
            self.delay = int(saved.get("delay_windows", 0))
            self.skipped = int(saved.get("skipped", 0))

    def snapshot(self) -> dict[str, Any] | None:
        """What to keep with the state after this batch: the controller's snapshot (the
        saved one until the controller runs again; taken again only when it changed,
        as taking it refreshes the selection), its delay and skipped windows."""
        if self.controller is not None and self._snap is None:
            self._snap = self.controller.snapshot()
        controller = self._snap if self.controller is not None else self._saved
        if controller is None:
            return None
        return {"controller": controller, "delay_windows": self.delay, "skipped": self.skipped}

    def steer(
        self,
        batch_id: int,
        rows: pd.DataFrame,
        starts_us: np.ndarray,
        max_event_us: int,
        watermark_us: int | None = None,
    ) -> JobPlan | None:
        """One committed micro-batch: its closed windows (``starts_us``, their rows in
        ``rows``) steer the set; the version it made, if any (from ``batch_id + 1``).
        ``watermark_us``: the state's watermark after the batch (every window ending at
        or before it has closed: those not applied by now never will be).

        Never raises: a failure is said (``control_failed``) and the version in force
        is kept, as a failed re-plan is; the stream goes on."""
        self._batch = batch_id
        try:
            return self._steer(batch_id, rows, starts_us, max_event_us, watermark_us)
        except Exception as err:  # said, never silent; the stream must not die of it
            self.log({"event": "control_failed", "batch_id": batch_id,
                      "error": f"{type(err).__name__}: {err}",
                      "reason": "online control failed: the plan in force is kept"})  # fmt: skip
            return None

    def _steer(
        self,
        batch_id: int,
        rows: pd.DataFrame,
        starts_us: np.ndarray,
        max_event_us: int,
        watermark_us: int | None,
    ) -> JobPlan | None:
        self._collect_fit(batch_id)
        if self.controller is None:
            self._start_fit(batch_id)  # run at once (a catch-up): the controller is here
            if self.controller is None:
                return None
        starts = np.sort(np.asarray(starts_us, dtype=np.int64))
        if starts.size:
            self._skip_unseen(int(starts[0] // self.slide_us))
        elif watermark_us is not None and watermark_us >= self.window_us:
            self._skip_unseen((watermark_us - self.window_us) // self.slide_us + 1)
        # before this batch's feedback: every window holding its rows was governed by
        # decisions made without it
        self._measure_delay(max_event_us)
        if starts.size:
            self.controller.observe(self.feedback(rows, starts))
            self._snap = None
        return self._install(batch_id)

    def adopt(self, plan: BackupPlan) -> BackupConfig:
        """A re-plan's fresh plan: the controller takes its model (created on it if it
        had none) and the version is that model with the controller's set."""
        self._take_model(plan)
        assert self.controller is not None
        return _config(with_backup(plan, self.controller.backup))

    def status(self) -> dict[str, Any]:
        """The controller's figures for the ``control`` event and ``status``."""
        c = self.controller
        if c is None:
            return {"active": False}
        return {
            "active": True,
            "windows": c.windows,
            "skipped": self.skipped,
            "delay_windows": self.delay,
            "backup_sensors": len(c.backup),
            "forced": int(np.sum(c.scale <= c.config.s_min)),
            "changes": c.changes,
            "miss_bound": c.config.miss_bound(c.windows, self.delay) if c.windows else None,
        }

    # ------------------------------------------------------------ the model
    def _start_fit(self, batch_id: int) -> None:
        """Fit the version in force again on its fit period, once per version."""
        current = self.book.in_force(batch_id)
        if self._fitting is not None or current.version in self._tried:
            return
        self._tried.add(current.version)
        v = current.config.validity
        if v is None:
            self._waiting(current.version, batch_id, "its config (schema v1) states no fit period")
            return
        step_us = round(self.sampling_interval_s * 1e6)
        start_us = _epoch_us(v["fit_start"])
        end_us = _epoch_us(v["fit_end"]) + step_us
        config, read, fit = current.config, self.read, self.fit
        self.log({"event": "control_fit_started", "plan_version": current.version,
                  "batch_id": batch_id})  # fmt: skip
        self._fitting = (self.run(lambda: fit(config, read(start_us, end_us), ())), current.version)
        self._collect_fit(batch_id)

    def _collect_fit(self, batch_id: int) -> None:
        if self._fitting is None or not self._fitting[0].done():
            return
        future, version = self._fitting
        self._fitting = None
        if self.controller is not None:  # a re-plan's fresher model was adopted meanwhile
            return
        try:
            plan = future.result()
        except Exception as err:  # unreadable or unfittable: said, control waits
            self._waiting(version, batch_id, f"{type(err).__name__}: {err}")
            return
        self._take_model(plan)
        self.log({"event": "control_started", "plan_version": version, "batch_id": batch_id,
                  **self.status()})  # fmt: skip

    def _waiting(self, version: int, batch_id: int, why: str) -> None:
        self.log(
            {
                "event": "control_waiting",
                "plan_version": version,
                "batch_id": batch_id,
                "reason": f"the fit period of version {version} could not be fitted again "
                f"({why}): online control starts with the next re-plan",
            }
        )

    def _take_model(self, plan: BackupPlan) -> None:
        cov, targets = controller_inputs(plan)
        self._snap = None
        if self.controller is not None:
            self.controller.rebase(cov, targets)
        elif self._saved is not None:
            saved, self._saved = self._saved, None
            try:
                self.controller = SensorController.resume(saved, cov, targets)
            except ParameterError as err:  # said; a fresh controller instead of none
                self.log({"event": "control_failed", "batch_id": self._batch,
                          "error": str(err), "reason": "the saved controller state could not "
                          "be resumed: a fresh controller starts from the plan's set"})  # fmt: skip
                self.delay = self.skipped = 0
        if self.controller is None:
            constants = self.constants or ControlConfig(delta=plan.parameters.delta)
            newest = self.book.versions[-1].config  # the set the job backs up from now on
            backup = column_indices(plan.sensors, newest.backup_sensors)
            self.controller = SensorController(constants, cov, targets, backup)
            self.controller.observe(())  # repaired to the model's targets, as a rebase is
        self.model_plan = plan
        self._drop.clear()

    # ------------------------------------------------------------ a decision
    def _install(self, batch_id: int) -> JobPlan | None:
        assert self.controller is not None and self.model_plan is not None
        sensors = self.model_plan.sensors
        chosen = {sensors[i] for i in self.controller.backup}
        current = self.book.in_force(batch_id + 1)
        if chosen == set(current.config.backup_sensors):
            return None
        config = _config(with_backup(self.model_plan, self.controller.backup))
        detail = _reason(current.config.backup_sensors, config.backup_sensors)
        new = JobPlan(self.book.next_version(), batch_id + 1, "control", detail, config)
        self.book.add(new)
        before, after = set(current.config.backup_sensors), set(config.backup_sensors)
        self.log(
            {
                "event": "control",
                "plan_version": new.version,
                "first_batch": new.first_batch,
                "added": sorted(after - before),
                "released": sorted(before - after),
                "detail": detail,
                **self.status(),
            }
        )
        return new

    def _skip_unseen(self, first_id: int) -> None:
        """Windows before ``first_id`` this controller never got are skipped, counted."""
        assert self.controller is not None
        if self.controller.windows == 0:
            self.controller.watermark = max(self.controller.watermark, first_id)
            return
        self.skipped += self.controller.skip_to(first_id)

    def _measure_delay(self, max_event_us: int) -> None:
        assert self.controller is not None
        if self.controller.watermark > 0 and max_event_us >= 0:  # once a window is known
            newest = max_event_us // self.slide_us  # the newest window holding a row
            self.delay = max(self.delay, int(newest - self.controller.watermark))

    # ------------------------------------------------------------ feedback
    def feedback(self, rows: pd.DataFrame, starts: np.ndarray) -> list[ShadowFeedback]:
        """One ``ShadowFeedback`` per window starting at ``starts`` (see the module)."""
        assert self.model_plan is not None
        plan = self.model_plan
        sensors, n = list(plan.sensors), len(plan.sensors)
        query = plan.query
        w = query.window
        times = rows[TIME].to_numpy(dtype=np.int64)
        lo = np.searchsorted(times, starts, side="left")
        present = np.searchsorted(times, starts + self.window_us, side="left") - lo
        full = present == w
        # a short window keeps the rows it has (they say which sensors were rebuilt in
        # it), padded; it is not measured
        keep = np.arange(w)[None, :] < np.minimum(present, w)[:, None]
        take = np.where(keep, lo[:, None] + np.arange(w), -1).ravel()
        pick = np.maximum(take, 0)
        truth = np.where((take >= 0)[:, None], rows[sensors].to_numpy(float)[pick], np.nan)
        version = np.where(take >= 0, rows[VERSION].to_numpy(float)[pick], -1.0)
        whole = (take >= 0) & (rows[WHOLE].to_numpy(float)[pick] > 0)
        recovered, backed, dropped = self._rebuild(truth, version.astype(int), whole)
        # a short window (a time step missing) is not measured, but its absent rows
        # rebuild nothing: a sensor backed up in every row present is not rebuilt in it
        backed[take < 0] = True
        known = np.isfinite(truth) & np.isfinite(recovered) & (version >= 1)[:, None]
        known &= np.repeat(full, w)[:, None]
        count = len(starts)
        feedback = shadow_feedback(
            starts // self.slide_us, np.where(known, truth, 0.0),
            np.where(known, recovered, 0.0), backed, window=w, slide=w,
            aggregate=query.aggregate, eps=plan.eps_per_sensor, exposure=query.exposure,
            dropped=np.nan_to_num(dropped),
            kept=np.isin(sensors, plan.keepable),  # a released one's counterfactual too
        )  # fmt: skip
        measured = known.reshape(count, w, n).all(axis=1)  # (count, n)
        gone = np.isnan(dropped) & backed
        counter_known = measured & ~gone.reshape(count, w, n).any(axis=1)
        return [
            ShadowFeedback(
                f.window,
                np.where(measured[k], f.miss, np.nan),
                f.rebuilt,
                None
                if f.counterfactual is None
                else np.where(counter_known[k], f.counterfactual, np.nan),
            )
            for k, f in enumerate(feedback)
        ]

    def _rebuild(
        self, truth: np.ndarray, version: np.ndarray, whole: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(recovered, backed, dropped) of ``truth``'s rows, each under its version."""
        assert self.model_plan is not None
        model, sensors = self.model_plan.model, list(self.model_plan.sensors)
        plans = sorted(self.book.versions, key=lambda p: p.version)
        numbers = [p.version for p in plans]
        group = np.where(np.isin(version, numbers), np.searchsorted(numbers, version), -1)
        recovered, backed, dropped = rebuild_under_versions(
            truth,
            group,
            [(self._map(p.version, p.config), p.config.backup_sensors) for p in plans],
            sensors,
            lambda idx: self._drop(model, idx),
        )
        # a row of no one version (two brought it): backed up where every version backs
        # up; its readings unknown (NaN, so not measured)
        unknown = group < 0
        always = set.intersection(*(set(p.config.backup_sensors) for p in plans))
        backed[np.ix_(unknown, np.isin(sensors, sorted(always)))] = True
        recovered[unknown] = np.nan
        backed[whole] = True
        recovered[whole] = truth[whole]
        return recovered, backed, dropped

    def _map(self, version: int, config: BackupConfig) -> LinearMap:
        if version not in self._maps:
            self._maps[version] = config.linear_map()
        return self._maps[version]


def _config(plan: BackupPlan) -> BackupConfig:
    return BackupConfig.from_dict(plan_to_config(plan))


def _epoch_us(text: str) -> int:
    return int(parse_utc(text).astype("datetime64[us]").astype(np.int64))


def _reason(before: tuple[str, ...], after: tuple[str, ...]) -> str:
    added = sorted(set(after) - set(before))
    released = sorted(set(before) - set(after))
    parts = []
    if added:
        parts.append(f"backed up {', '.join(added)} (its recent windows missed eps)")
    if released:
        parts.append(f"released {', '.join(released)} (measured windows within delta)")
    if not parts:
        parts.append("the controller's set re-issued")
    return "online control: " + "; ".join(parts)


__all__ = ["CONTROL_KEY", "JobControl"]
