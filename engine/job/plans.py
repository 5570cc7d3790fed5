"""The production job's plan versions: kept with the backup, re-planned on schedule.

``<backup>/_lacuna/plans/v000001.json``, one file per version: the exported
config (schema v3) it rebuilds with, the first micro-batch written under it and
why it was made:

* ``initial``: the ``--config`` the job was started with;
* ``scheduled``: the event time passed the version's ``valid_until`` (its fit
  end plus its horizon), so the job planned again on the most recent
  readings, with the same parameters and as much history as the version had;
* ``alert``: the live monitor found the version missing more than ``delta`` of
  its rebuilt windows with confidence, so the job planned again at once (the
  same way, once per version). A fresh fit cures a stale model; a sensor that
  alerts again under the version its own alert made is not rebuildable within
  ``eps`` on this data, whatever the fit: from then on it is *pinned*, backed
  up by every later version (``pinned`` in the version's file);
* ``control``: the online controller (``engine.job.control``) changed the backup set
  of a crash-contract plan from its windows' shadow check. Under control, a scheduled
  or alert re-plan refits the model and the controller keeps and repairs its set
  (nothing is pinned: a sensor that keeps missing is forced by the controller).

Backup rows carry ``plan_version``; ``recover --backup`` rebuilds each time step
with its version's map (``engine.export.recover``). A version is written before
the first batch that uses it; a crash in between leaves a version whose
``first_batch`` is never reached, and the job writes it again.

Re-planning needs every sensor's readings, which the backup does not hold: it
reads the fit period from the landing directory (``--source``), with Spark,
filtered to the period, and plans on the driver (``make_plan``, backtest
included; seconds to minutes per horizon, not per batch) on a background
thread: the stream goes on under the version in force meanwhile
(``replan_started``, then ``replan`` with the batch it governs from). If those
readings are gone, or the plan fails, the job says so (a JSON line), keeps the
version in force (expired) and tries a scheduled re-plan again one horizon
later. A job that stops while a re-plan computes gives it up
(``replan_abandoned``); the next run plans again.

PySpark is imported inside functions only.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pandas as pd

from engine.backup.durable import DurableFiles
from engine.errors import ConfigError, DataError, EngineError, PipelineError
from engine.export import BackupConfig, plan_to_config
from engine.export.plan_book import PLANS_DIR, JobPlan, is_plan_file, plan_file, same_plan
from engine.planning.monitor import MonitorAlert
from engine.planning.plan import BackupPlan
from engine.stream.source import StreamSource

Alert = MonitorAlert | None


class PlanBook:
    """The plan versions under ``<backup>/_lacuna/plans`` (any URI Spark can write)."""

    def __init__(self, files: DurableFiles, backup: str) -> None:
        self.files = files
        self.root = "/".join([backup.rstrip("/"), *PLANS_DIR])
        self.versions: list[JobPlan] = [
            JobPlan.from_bytes(self.files.read(f"{self.root}/{name}"), name)
            for name in self.files.names(self.root)
            if is_plan_file(name)
        ]
        self.versions.sort(key=lambda p: p.version)

    def start(self, config: BackupConfig) -> JobPlan:
        """Version 1 is ``config``: written on a new backup, checked on a resumed one."""
        if not self.versions:
            first = JobPlan(1, 0, "initial", "the --config the job was started with", config)
            self.add(first)
            return first
        if not same_plan(self.versions[0].config, config):
            raise PipelineError(
                f"the backup at {self.root.rsplit('/', 2)[0]!r} was started with another "
                "plan (version 1 differs from --config): resume with that config, or start "
                "a new --backup and --checkpoint"
            )
        return self.versions[0]

    def add(self, plan: JobPlan) -> None:
        """Write ``plan`` (replacing a version of the same number a crash left unused)."""
        self.files.write(f"{self.root}/{plan_file(plan.version)}", plan.to_bytes())
        self.versions = [p for p in self.versions if p.version < plan.version] + [plan]

    def withdraw_after(self, batch_id: int) -> list[int]:
        """Delete the versions whose first batch is after ``batch_id``, as micro-batch
        ``batch_id`` starts; returns their numbers. Only that batch makes such versions:
        a run killed after writing one and before Spark committed the batch left it, and
        Spark now runs the batch again, which decides afresh. Kept, it would take the
        next number (a version that governed nothing) or govern the next batch although
        this run of the batch chose otherwise."""
        gone = [p for p in self.versions if p.first_batch > batch_id]
        for plan in gone:
            self.files.delete(f"{self.root}/{plan_file(plan.version)}")
        self.versions = [p for p in self.versions if p.first_batch <= batch_id]
        return [p.version for p in gone]

    def next_version(self) -> int:
        """The number the next version takes (the online controller adds versions too)."""
        return max(p.version for p in self.versions) + 1

    def in_force(self, batch_id: int) -> JobPlan:
        """The newest version whose first batch is at or before ``batch_id``."""
        found = [p for p in self.versions if p.first_batch <= batch_id]
        if not found:
            raise PipelineError(f"no plan version covers micro-batch {batch_id}")
        return max(found, key=lambda p: p.version)


def history_rows(config: BackupConfig) -> int:
    """Rows the version was fitted on (as much history as the re-plan reads)."""
    rows = config.data.get("guarantee", {}).get("history_rows")
    if rows is None:
        raise ConfigError("the config does not say how much history its plan was fitted on")
    return int(rows)


def read_fit_period(
    spark: Any, source: StreamSource, sensors: tuple[str, ...], start_us: int, end_us: int
) -> pd.DataFrame:
    """Every sensor's landed readings in ``[start_us, end_us)``, wide: ``time`` + sensors.

    Filtered and pivoted by Spark (Parquet statistics skip other files' row
    groups; one row per time step with a column per sensor), so the driver
    receives ``rows x sensors`` numbers, not a long row with a sensor name per
    reading (collecting 2.3 M long rows ran a 2 GB driver out of heap).
    """
    from pyspark.sql import functions as F

    start = pd.Timestamp(start_us, unit="us", tz="UTC").to_pydatetime()
    end = pd.Timestamp(end_us, unit="us", tz="UTC").to_pydatetime()
    wide = (
        source.read_batch(spark)
        .where((F.col("event_time") >= F.lit(start)) & (F.col("event_time") < F.lit(end)))
        .groupBy("event_time")
        .pivot("sensor", list(sensors))
        .agg(F.last("value"))
        .toPandas()
    )
    wide = wide.rename(columns={"event_time": "time"}).sort_values("time")
    wide["time"] = pd.to_datetime(wide["time"], utc=True).dt.tz_localize(None)
    return wide[["time", *sensors]].reset_index(drop=True)


def plan_again(
    config: BackupConfig, wide: pd.DataFrame, pinned: tuple[str, ...] = ()
) -> BackupConfig:
    """A fresh plan on ``wide`` with ``config``'s parameters, exported (schema v3);
    the ``pinned`` sensors backed up whatever it chooses."""
    return BackupConfig.from_dict(plan_to_config(fit_again(config, wide, pinned)))


def fit_again(config: BackupConfig, wide: pd.DataFrame, pinned: tuple[str, ...] = ()) -> BackupPlan:
    """The fresh plan ``plan_again`` exports (the online controller takes its model)."""
    from engine.data.history import history_from_frame
    from engine.planning import make_plan, pin_backups

    if len(wide) < 4:
        raise DataError(f"only {len(wide)} time steps of readings in the fit period")
    history = history_from_frame(wide, source="the landing directory's fit period")
    if history.sensors != config.sensors:
        missing = sorted(set(config.sensors) - set(history.sensors))
        raise DataError(f"the fit period lacks sensor(s) {', '.join(missing[:5])}")
    plan = make_plan(history, config.plan_parameters())
    if pinned:
        why = "the live monitor found each missing more than delta under two plans in a row"
        plan = pin_backups(plan, pinned, why)
    return plan


Runner = Callable[[Callable[[], Any]], "Future[Any]"]


_BACKGROUND: list[threading.Thread] = []  # the daemon threads ``in_background`` started


def in_background(work: Callable[[], Any]) -> Future[Any]:
    """Run ``work`` on a daemon thread (a stopping job does not wait for a plan, beyond
    ``settle_background``'s grace)."""
    future: Future[Any] = Future()

    def target() -> None:
        if future.set_running_or_notify_cancel():
            _settle(future, work)

    thread = threading.Thread(target=target, name="lacuna-replan", daemon=True)
    _BACKGROUND[:] = [t for t in _BACKGROUND if t.is_alive()] + [thread]
    thread.start()
    return future


def settle_background(timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` in all for the background plans to finish; True when none
    is left running."""
    end = time.monotonic() + timeout_s
    for thread in list(_BACKGROUND):
        thread.join(max(0.0, end - time.monotonic()))
    return not any(t.is_alive() for t in _BACKGROUND)


# Seconds a leaving job waits for a background re-plan or model fit to finish.
BACKGROUND_GRACE_S = 10.0


def leave(code: int, grace_s: float = BACKGROUND_GRACE_S) -> int:
    """``code``, once the background plans have finished (``grace_s`` at most).

    Why: a daemon thread still inside native code (DuckDB, Arrow) when the interpreter
    finalises is killed there, which aborts the process ("terminate called without an
    active exception", SIGABRT and a fatal-error dump) instead of exiting with ``code``:
    a job whose JVM was killed during its first re-plan's read did. A plan still running
    after the grace is abandoned: the process leaves at once with ``code``, its output
    flushed, without finalising (Spark is already stopped or gone by then).
    """
    if settle_background(grace_s):
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def at_once(work: Callable[[], Any]) -> Future[Any]:
    """Run ``work`` now, on the caller's thread (the re-plan blocks the stream)."""
    future: Future[Any] = Future()
    _settle(future, work)
    return future


def _settle(future: Future[Any], work: Callable[[], Any]) -> None:
    """``work``'s result or error into ``future`` (handed to whoever collects it)."""
    try:
        future.set_result(work())
    except BaseException as err:
        future.set_exception(err)


@dataclass(frozen=True)
class _Pending:
    """A re-plan being computed: its inputs, and the future of (config, rows fitted on)."""

    future: Future[Any]
    current: JobPlan
    batch_id: int
    watermark_us: int
    why: str
    reason: str  # "alert" or "scheduled"
    alerted: tuple[str, ...]  # the alert's sensors
    pinned: tuple[str, ...]
    again: tuple[str, ...]  # pinned by this alert


@dataclass
class Replanner:
    """Decides after each micro-batch whether the version in force has expired (or the
    live monitor alerted on it) and, if so, plans again and adds the next version. One
    alert re-plan per version; a failed scheduled one is tried again a horizon later.

    A re-plan (reading the fit period, planning, its backtest: seconds to minutes) runs
    in the background (``run``): the stream goes on under the version in force until
    the new one is ready, which then governs from the batch after the one it was
    collected in. One re-plan at a time. ``run=at_once`` plans inside the batch.

    ``adopt``: under online control, ``plan`` returns the fresh ``BackupPlan`` and
    ``adopt`` (``JobControl.adopt``) turns it into the version's config: the refit
    model with the controller's set. Nothing is pinned then."""

    book: PlanBook
    read: Callable[[int, int], pd.DataFrame]  # (start_us, end_us) -> wide readings
    log: Callable[[dict[str, Any]], None]
    sampling_interval_s: float
    enabled: bool = True
    plan: Callable[[BackupConfig, pd.DataFrame, tuple[str, ...]], Any] = plan_again
    run: Runner = in_background
    adopt: Callable[[Any], BackupConfig] | None = None

    def __post_init__(self) -> None:
        self._retry_at: dict[int, int] = {}  # version -> watermark of the next attempt
        self._said: set[int] = set()  # versions whose expiry was said once for good
        self._alerted: set[int] = set()  # versions an alert has re-planned already
        self._pending: _Pending | None = None

    @property
    def busy(self) -> bool:
        """A re-plan is being computed."""
        return self._pending is not None

    def after_batch(
        self, batch_id: int, watermark_us: int, alert: MonitorAlert | None = None
    ) -> JobPlan | None:
        """The new version if one was made (it governs batch ``batch_id + 1`` on).

        ``alert``: the live monitor found the version in force missing more than
        ``delta`` of its windows; it is re-planned now, before its horizon.
        """
        new = self._collect(batch_id)
        if new is not None or self._pending is not None:
            return new
        current = self.book.in_force(batch_id)
        if alert is not None and self.enabled and current.version not in self._alerted:
            self._alerted.add(current.version)  # one alert re-plan per version, even if it fails
            self._start(current, batch_id, watermark_us, alert.reason, alert)
            return self._collect(batch_id)
        until = current.valid_until_us
        if until is None:
            self._once(current, batch_id, "a schema v1 config states no horizon: never re-planned")
            return None
        if watermark_us < until:
            return None
        if not self.enabled:
            self._once(current, batch_id, "re-planning is off (--no-replan)")
            return None
        if watermark_us < self._retry_at.get(current.version, until):
            return None
        why = f"version {current.version} expired at {current.config.validity['valid_until']}"  # type: ignore[index]
        self._start(current, batch_id, watermark_us, why)
        return self._collect(batch_id)

    def close(self) -> None:
        """The job stops: a re-plan not yet applied is given up (said once), whether still
        being computed or finished with no batch after it to take it; the next run plans
        again, as the version in force is still expired or alerting."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        finished = pending.future.done()
        pending.future.cancel()
        self.log(
            {
                "event": "replan_abandoned",
                "plan_version": pending.current.version,
                "batch_id": pending.batch_id,
                "reason": "the job stopped before a micro-batch took the finished re-plan"
                if finished
                else "the job stopped before the re-plan finished",
            }
        )

    def _start(
        self, current: JobPlan, batch_id: int, watermark_us: int, why: str, alert: Alert = None
    ) -> None:
        """Start re-planning: on ``alert`` (reason ``alert``), else on schedule."""
        rows = history_rows(current.config)
        step_us = round(self.sampling_interval_s * 1e6)
        end_us = watermark_us  # every reading before the watermark has been seen
        start_us = end_us - rows * step_us
        reason = "alert" if alert is not None else "scheduled"
        alerted = tuple(sorted(alert.sensors)) if alert is not None else ()
        again = tuple(sorted(set(alerted) & set(current.alerted)))  # alerted under their fix
        pinned = tuple(sorted({*current.pinned, *again}))
        if self.adopt is not None:  # the controller forces a sensor that keeps missing
            again = pinned = ()
        config, read, plan = current.config, self.read, self.plan

        def work() -> tuple[Any, int]:
            wide = read(start_us, end_us)
            return plan(config, wide, pinned), len(wide)

        self.log(
            {
                "event": "replan_started",
                "reason": reason,
                "plan_version": current.version,
                "batch_id": batch_id,
                # planned inside the batch (``at_once``: --available-now) or beside it
                "background": self.run is not at_once,
            }
        )
        future = self.run(work)
        self._pending = _Pending(
            future, current, batch_id, watermark_us, why, reason, alerted, pinned, again
        )

    def _collect(self, batch_id: int) -> JobPlan | None:
        """The finished re-plan as the version from batch ``batch_id + 1``, if one is done."""
        p = self._pending
        if p is None or not p.future.done():
            return None
        self._pending = None
        current = p.current
        try:
            config, rows = p.future.result()
            if self.adopt is not None:
                config = self.adopt(config)
        except EngineError as err:
            if p.reason == "alert":  # the version in force stays, within its horizon
                failed = {"event": "replan_failed", "reason": p.reason, "error": str(err)}
                self.log({**failed, "plan_version": current.version, "batch_id": batch_id})
                return None
            horizon_s = (current.config.validity or {}).get("horizon_seconds", 0.0)
            horizon_us = round(float(horizon_s) * 1e6)
            self._retry_at[current.version] = p.watermark_us + max(1, horizon_us)
            self._expired(current, batch_id, f"re-plan failed: {err}")
            return None
        detail = f"{p.why}; fresh plan on {rows} rows of the landing directory before the watermark"
        if p.again:
            detail += f"; pinned to the backup (alerted again): {', '.join(p.again)}"
        new = JobPlan(
            self.book.next_version(),
            batch_id + 1,
            p.reason,
            detail,
            config,
            p.alerted,
            p.pinned,
        )
        before = self.book.in_force(batch_id)  # online control may have moved on meanwhile
        self.book.add(new)
        added = sorted(set(new.config.backup_sensors) - set(before.config.backup_sensors))
        dropped = sorted(set(before.config.backup_sensors) - set(new.config.backup_sensors))
        self.log(
            {
                "event": "replan",
                "reason": new.reason,
                "plan_version": new.version,
                "first_batch": new.first_batch,
                "started_batch": p.batch_id,
                "detail": new.detail,
                "backup_sensors": len(new.config.backup_sensors),
                "added": added,
                "dropped": dropped,
                "pinned": list(new.pinned),
                "valid_until": new.config.validity["valid_until"],  # type: ignore[index]
            }
        )
        return new

    def _once(self, current: JobPlan, batch_id: int, why: str) -> None:
        if current.version not in self._said:
            self._said.add(current.version)
            self._expired(current, batch_id, why)

    def _expired(self, current: JobPlan, batch_id: int, why: str) -> None:
        v = current.config.validity or {}
        self.log(
            {
                "event": "plan_expired",
                "plan_version": current.version,
                "batch_id": batch_id,
                "valid_until": v.get("valid_until"),
                "reason": why,
            }
        )
