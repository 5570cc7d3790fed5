"""The honesty protocol with the plan used as the job uses it: shadow-monitored.

``bench.bench_honesty`` scores an exported config applied alone for its horizon,
which is the protocol's measure. The production job (``engine run``)
and the app's live pipeline do not use a plan alone: every sensor still flows
through them, so after each closed window they compare the rebuilt aggregate with
the true one (``engine.planning.monitor.ViolationMonitor``), and an alert re-plans
at once on the latest readings (``engine.job.plans.Replanner``: one alert
re-plan per version, a sensor alerting again under the version its alert made is
pinned to the backup).

Here, per fold, version 1 is the CLI's plan (the same config the plain protocol
scores); the fold's windows then close one at a time, each one micro-batch (the
finest a job can react, so this is the monitor at its quickest): the window's
errors of the sensors the version in force rebuilds go to the product's monitor
(its default confidence 0.95 and 10 windows), its alert to the product's
re-planner, whose plan (``plan_again``, backtest included) reads the ``H``
readings before the window's end, as the job reads the landing directory. The
new version governs from the next window. Every rebuilt (window, sensor) pair is
scored, the windows before an alert included; savings are averaged over the
windows (each under its own version's backup set).

Nothing here is product code; the pieces it runs are (monitor, re-planner,
planner). The plan book is kept in memory instead of under ``<backup>/_lacuna``,
which needs Spark's file system.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from engine.export import BackupConfig
from engine.export.plan_book import JobPlan
from engine.job import Replanner, at_once
from engine.planning.monitor import ViolationMonitor


@dataclass
class MemoryBook:
    """``PlanBook``'s methods the re-planner uses, in memory."""

    versions: list[JobPlan] = field(default_factory=list)

    def next_version(self) -> int:
        return max(p.version for p in self.versions) + 1

    def add(self, plan: JobPlan) -> None:
        self.versions = [p for p in self.versions if p.version < plan.version] + [plan]

    def in_force(self, batch_id: int) -> JobPlan:
        return max((p for p in self.versions if p.first_batch <= batch_id), key=lambda p: p.version)


def rebuild(config: BackupConfig, truth: np.ndarray, sensors: list[str]) -> tuple[Any, Any]:
    """(T, n) readings rebuilt by ``config``'s linear map from ``truth``'s backup columns,
    and the (n,) rebuilt mask (``bench_honesty.recover_from_config`` on a loaded config)."""
    from bench.bench_honesty import recover_from_config

    return recover_from_config(config.data, truth, sensors)


def run_live_fold(
    config: dict[str, Any],
    times: np.ndarray,
    values: np.ndarray,
    sensors: list[str],
    t: int,
    s: int,
    window: int,
    aggregate: str,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Score the fold ``[t, t + s)`` with the monitor and alert re-plans in the loop.

    ``config`` is version 1 (the exported JSON); ``times`` (T,) datetime64 and
    ``values`` (T, n) are the whole recording, read by the re-planner as the job reads
    its landing directory. Returns misses and pairs per sensor, the mean backup size
    over the windows, and the re-plans made.
    """
    from bench.bench_honesty import eps_vector, tumbling

    first = BackupConfig.from_dict(config)
    params = first.parameters
    eps = eps_vector(config, sensors)  # each sensor's own (a network of mixed units)
    monitor = ViolationMonitor(sensors, eps, float(params["delta"]))
    stamps_us = times.astype("datetime64[us]").astype(np.int64)
    step_s = float(np.median(np.diff(stamps_us[: t + 1])) / 1e6)
    events: list[dict[str, Any]] = []

    def read(start_us: int, end_us: int) -> pd.DataFrame:
        keep = (stamps_us >= start_us) & (stamps_us < end_us)
        wide = pd.DataFrame(values[keep], columns=sensors)
        wide.insert(0, "time", times[keep])
        return wide

    book = MemoryBook()
    book.add(JobPlan(1, 0, "initial", "the CLI's plan", first))
    replanner = Replanner(
        book=book,
        read=read,
        log=(log or events.append),
        sampling_interval_s=step_s,
        run=at_once,
    )
    n, windows = len(sensors), s // window
    misses, pairs = np.zeros(n, dtype=int), np.zeros(n, dtype=int)
    backed: list[int] = []
    replans: list[dict[str, Any]] = []
    for k in range(windows):
        lo, hi = t + k * window, t + (k + 1) * window
        plan = book.in_force(k)
        truth = values[lo:hi]
        rebuilt_values, rebuilt = rebuild(plan.config, truth, sensors)
        error = np.abs(
            tumbling(rebuilt_values, window, aggregate) - tumbling(truth, window, aggregate)
        )
        misses += np.where(rebuilt, (error[0] > eps).astype(int), 0)
        pairs += rebuilt.astype(int)
        backed.append(len(plan.config.backup_sensors))
        targets = [x for x, r in zip(sensors, rebuilt, strict=True) if r]
        alert = monitor.observe(np.where(rebuilt, error, np.nan), targets, version=plan.version)
        if k == windows - 1:
            break  # the fold ends: a plan made now would govern nothing scored
        new = replanner.after_batch(k, int(stamps_us[hi]), alert)
        if new is not None:
            replans.append(
                {
                    "window": k,
                    "version": new.version,
                    "alerted": list(new.alerted),
                    "pinned": list(new.pinned),
                    "backup_sensors": len(new.config.backup_sensors),
                }
            )
    failed = [e for e in events if e.get("event") in ("replan_failed", "plan_expired")]
    return {
        "misses": misses,
        "pairs": pairs,
        "backup": float(np.mean(backed)) if backed else float(len(first.backup_sensors)),
        "replans": replans,
        "failed_replans": failed,
        "warnings": [],
    }
