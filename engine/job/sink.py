"""The production job's ``foreachBatch``: backup, partial aggregates, shadow check.

Per micro-batch the executors filter and write the backup and reduce the batch to
partial window aggregates; the driver merges those into the open windows' state,
scores the windows the watermark closed, and writes results, metrics and the
state (where each goes: ``engine.job.layout``).

PySpark is imported inside functions only.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.aggregates import get_aggregate
from engine.backup.dataset import COMMIT_MARKER, RESULTS_SUFFIX
from engine.backup.durable import DurableFiles
from engine.errors import PipelineError
from engine.export import BackupConfig
from engine.job.control import CONTROL_KEY, JobControl
from engine.job.crash_check import (
    check_closed,
    collect_rows,
    keep_rows,
    shadow_contract,
    window_versions,
)
from engine.job.exposure import BatchExposure, check_batch
from engine.job.landing import LandingWatch
from engine.job.layout import SinkPaths, WindowStates, join_uri
from engine.job.partials import (
    WindowState,
    collected_partials,
    recovered_partials,
    shadow_results,
)
from engine.job.phases import Phases
from engine.job.plans import JobPlan, PlanBook, Replanner
from engine.job.screening import (
    FUTURE_S,
    future_readings,
    late_readings,
    overfull_windows,
    screen_partials,
)
from engine.job.tally import (
    MONITOR_KEY,
    checked_pairs,
    count_own_pairs,
    kept_tally,
    observe_closed,
    saved_tally,
)
from engine.job.transforms import WindowSpec, batch_partials, rebuilt_partials
from engine.model.linear import LinearMap
from engine.planning.monitor import MonitorAlert, ViolationMonitor, newly_alerting
from engine.stream.readings import backup_rows
from engine.stream.source import LandingDirSource

Log = Callable[[dict[str, Any]], None]
KEPT_BATCHES = 1000  # micro-batches whose readings the progress line can still look up
TOTALS = ("batches", "readings", "windows", "misses", "pairs", "over_exposure",
          "crash_windows", "crash_misses")  # fmt: skip


@dataclass
class BatchWriter:
    """``foreachBatch`` of the job: backup, partial aggregates, shadow check, per batch.

    The executors filter and write the backup and reduce the batch to partials
    per (window, sensor); the driver merges those into ``WindowState`` and
    scores the windows that closed (``windows x sensors`` numbers, not readings).
    """

    spark: Any
    spec: WindowSpec
    paths: SinkPaths
    plans: PlanBook
    partitions: tuple[str, ...]
    log: Log
    source: LandingDirSource  # the landing directory: what a batch read, what it holds
    replanner: Replanner | None = None
    monitor: ViolationMonitor | None = None  # alerts on each version's live miss rate
    control: JobControl | None = None  # steers a crash plan's set from every closed window
    now: Callable[[], float] = time.time
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TOTALS, 0))

    def __post_init__(self) -> None:
        self.files = DurableFiles(self.spark)
        self.states = WindowStates(self.files, self.paths.state, self.spec.aggregate)
        self._maps: dict[int, LinearMap] = {}
        self.version: JobPlan = self.plans.in_force(0)
        self._resumed = False  # the monitor's tally of earlier runs, read on the first batch
        self._alerting: dict[int, set[str]] = {}  # version -> sensors an alert event named
        self._results_renamed = False
        self.landing = LandingWatch(str(self.source.directory))
        # readings of each recent micro-batch (the progress line's count; the last few only)
        self.batch_readings: dict[int, int] = {}
        self.full_batches: set[int] = set()  # of those, the ones over the plan's exposure

    @property
    def plan_version(self) -> int:
        return self.version.version

    @property
    def backup_sensors(self) -> tuple[str, ...]:
        return self.version.config.backup_sensors

    @property
    def linear_map(self) -> LinearMap:
        """The version in force's reconstruction map."""
        return self._map(self.version)

    def _map(self, plan: JobPlan) -> LinearMap:
        """``plan``'s reconstruction map, built once per version."""
        if plan.version not in self._maps:
            self._maps[plan.version] = plan.config.linear_map()
        return self._maps[plan.version]

    def _versions(self) -> dict[int, tuple[LinearMap, BackupConfig]]:
        """Every plan version's map and config: the crash check rebuilds each kept row
        under the version its batch was backed up under."""
        return {p.version: (self._map(p), p.config) for p in self.plans.versions}

    def __call__(self, batch: Any, batch_id: int) -> None:
        clock = Phases(self.now)
        group = f"lacuna-{id(self)}-{batch_id}"  # this writer's jobs only (ids repeat per run)
        self.spark.sparkContext.setJobGroup(group, f"lacuna micro-batch {batch_id}")
        if withdrawn := self.plans.withdraw_after(int(batch_id)):  # an uncommitted run's
            self.log(
                {"event": "plan_versions_withdrawn", "versions": withdrawn,
                 "batch_id": int(batch_id), "why": "written by a run of this micro-batch "
                 "that stopped before Spark committed it; the batch runs again and decides "
                 "afresh"}
            )  # fmt: skip
        self.version = self.plans.in_force(int(batch_id))
        state = self.states.before(int(batch_id))
        if not self._resumed:
            self._resume_monitor(state, int(batch_id))
            if self.control is not None:
                self.control.resume(state.extra.get(CONTROL_KEY))
        files = self._read_by(int(batch_id))
        readings = self.landing.readings(self.spark, batch, files, self._say_for(batch_id))
        self.landing.watch(self.now(), self._say_for(batch_id))
        partials, screened = self._screen(*self._outputs(readings, batch_id, group), batch_id)
        if screened["unusable_readings"] or screened["missing_values"]:
            self._check_landed_columns(int(batch_id))  # a file without a column: stop
        exposure = self._exposure(partials, batch_id)
        # rare: sensors the plan cannot rebuild, or a batch over the plan's exposure
        if more := [*screened["unplanned_sensors"], *exposure.added]:
            # readers take _SUCCESS as "the batch is complete": withdraw it until the
            # append commits (Spark writes it again), so no reader sees half a batch
            self.files.delete(join_uri(self.paths.backup_batch(batch_id), COMMIT_MARKER))
            self._write_backup(readings, more, batch_id, "append")
        screened["rows"], screened["over_exposure"] = exposure.rows, exposure.full
        screened["backup_files"] = self.files.tree(self.paths.backup_batch(batch_id))
        clock.mark("backup_and_partials")
        # what a recovery of this batch returns: the sensors it stored exact, the rest
        # rebuilt by its version's map; the windows' shadow check scores that
        stored = [*self.backup_sensors, *exposure.added]
        partials = recovered_partials(
            partials, stored, self.linear_map, self.spec.aggregate, self.plan_version
        )
        # readings stamped in the future would move the watermark past every later one
        cutoff = int((self.now() + FUTURE_S) * 1e6)
        partials, screened["future_readings"], event = future_readings(partials, cutoff)
        self._say(event, batch_id)
        crash = self.version.config.query.exposure is not None  # the shadow's contract
        sensors = self.version.config.sensors
        rows = (  # the windows' rows: the crash check and the online controller score them
            collect_rows(readings, sensors, exposure.full, self.plan_version)
            if crash or self.control is not None
            else None
        )
        latest = partials["max_event_us"].max()
        max_event = state.max_event_us if pd.isna(latest) else int(latest)
        late, event = late_readings(partials, state.watermark_us)  # before merge moves it
        self._say(event, batch_id)
        screened["late_readings"] = late
        closed = state.merge(partials[state.columns], max_event, self.spec.watermark_us)
        results = shadow_results(closed[closed["n"] > 0], self.spec.aggregate, self._eps())
        starts = results["window_start"].drop_duplicates().to_numpy(dtype="int64")
        misses, older = None, 0  # each closed window's crash miss, from its rows
        config, w_us = self.version.config, self.spec.window_us
        if rows is not None and crash:
            misses, rows = check_closed(
                state, rows, starts, w_us, config, self.linear_map, cutoff, self._versions()
            )
            # the version in force is judged on windows read under it alone: one holding
            # an older version's rows is that version's record (as the range results)
            own = window_versions(rows, starts, w_us) == self.plan_version
            misses, older = misses[own], int((~own).sum())
        elif rows is not None:
            rows = keep_rows(state, rows, sensors, w_us, cutoff)
        clock.mark("merge_and_shadow")
        screened["overfull_pairs"] = self._overfull(results, batch_id)
        self._write_results(results, batch_id)
        alert = self._watch(results, int(batch_id), misses)
        screened["alerting_sensors"] = 0 if alert is None else len(alert.sensors)
        screened["shadow"] = shadow_contract(misses, self.version.config, older)
        if self.control is not None and rows is not None:  # a set for the next batch on
            self.control.steer(int(batch_id), rows, starts, state.max_event_us, state.watermark_us)
            state.extra = {**state.extra, CONTROL_KEY: self.control.snapshot()}
        screened["control"] = None if self.control is None else self.control.status()
        state.batch_id = int(batch_id)
        if self.monitor is not None:  # the tally after this batch, kept with its state
            state.extra = {**state.extra, MONITOR_KEY: kept_tally(self.monitor, self.plan_version)}
        self.states.save(state)
        clock.mark("results_and_state")
        jobs = len(self.spark.sparkContext.statusTracker().getJobIdsForGroup(group))
        self._report(results, batch_id, jobs, clock, screened)
        if self.replanner is not None:  # a new version governs the next batch on
            self.replanner.after_batch(int(batch_id), state.watermark_us, alert)

    def _exposure(self, partials: pd.DataFrame, batch_id: int) -> BatchExposure:
        """The batch against the version's exposure (``engine.job.exposure``); said when over."""
        config = self.version.config
        found = check_batch(partials, config.query.exposure, config.sensors, config.backup_sensors)
        self._say(found.event, batch_id)
        return found

    def _eps(self) -> dict[str, float]:
        config = self.version.config
        return dict(zip(config.sensors, map(float, config.eps_vector()), strict=True))

    def _screen(
        self, partials: pd.DataFrame, unusable: int, batch_id: int
    ) -> tuple[pd.DataFrame, dict]:
        """The plan's sensors' partials and the batch's counts (``screening``)."""
        screened = screen_partials(partials, self.version.config.sensors, unusable)
        self._say(screened.event, batch_id)
        return screened.partials, {
            **screened.counts,
            "unplanned_sensors": screened.unplanned_sensors,
        }

    def _check_landed_columns(self, batch_id: int) -> None:
        """``PipelineError`` when a file of the batch lacks a landing column: Spark reads
        it as nulls, and its readings would be dropped or missing for good. Raised
        before the batch's results and state: the batch is not committed, and once the
        file is fixed or moved the job replays it (its backup directory rewritten)."""
        from engine.job.landed_files import lacking_columns

        bad = lacking_columns(self._read_by(batch_id))
        if bad:
            file, columns = bad[0]
            raise PipelineError(
                f"input file {file} has no column {', '.join(columns)} (a landing file needs "
                "event_time, sensor and value): its readings would be lost. Fix it or move it "
                "out of the source directory and start again: the job resumes from its "
                "checkpoint, and the micro-batch that failed was not committed"
            )

    def _read_by(self, batch_id: int) -> list[Path]:
        """The landing files micro-batch ``batch_id`` read (the source's log of it)."""
        return self.source.consumed(self.paths.query_checkpoint("job"), [batch_id])

    def _overfull(self, results: pd.DataFrame, batch_id: int) -> int:
        """Closed (window, sensor) pairs with more readings than time steps (``screening``)."""
        pairs, event = overfull_windows(results, self.version.config.query.window)
        self._say(event, batch_id)
        return pairs

    def _say_for(self, batch_id: int) -> Callable[[dict[str, Any]], None]:
        return lambda event: self._say(event, batch_id)

    def _say(self, event: dict[str, Any] | None, batch_id: int) -> None:
        if event is not None:
            self.log({**event, "batch_id": batch_id, "plan_version": self.plan_version})

    def _resume_monitor(self, state: WindowState, batch_id: int) -> None:
        """Start the monitor from the tally an earlier run kept with the state before
        ``batch_id`` (the version in force's rebuilt windows and misses).

        Without it a job restarted more often than it takes to see the monitor's
        ``min_windows`` per sensor would never alert. Kept with the window state,
        the tally of a replayed batch is counted once, by the replay.
        """
        self._resumed = True
        if self.monitor is None:
            return
        counts = saved_tally(state.extra.get(MONITOR_KEY), self.plan_version, self.monitor.contract)
        if counts is None:
            return
        self.monitor.resume(self.plan_version, counts)
        self.log(
            {
                "event": "monitor_resumed",
                "plan_version": self.plan_version,
                "before_batch": batch_id,
                # (window, rebuilt sensor) pairs, as the batches' metrics count them
                "rebuilt_pairs": sum(w for _, w in counts.values()),
                "misses": sum(v for v, _ in counts.values()),
            }
        )

    def _watch(
        self, results: pd.DataFrame, batch_id: int, misses: np.ndarray | None
    ) -> MonitorAlert | None:
        """Feed the closed windows to the monitor and return its alert (the re-planner's
        cue); log it when it names a sensor not yet said under the version. A crash plan's
        monitor counts ``misses`` ((W, n) crash-contract fractions, ``check_closed``), a
        range plan's the whole windows' errors."""
        if self.monitor is None or results.empty:
            return None
        alert = observe_closed(self.monitor, results, misses, self.version.config.sensors,
                               self.linear_map.targets, self.plan_version)  # fmt: skip
        if alert is None:
            return None
        # `status` counts alert events: one per sensor and version, not one per batch
        if new := newly_alerting(self._alerting, self.plan_version, alert.sensors):
            self.log(
                {
                    "event": "alert",
                    "batch_id": batch_id,
                    "plan_version": self.plan_version,
                    "sensors": list(alert.sensors),
                    "new_sensors": new,
                    "rates": alert.rates,
                    "reason": alert.reason,
                }
            )
        return alert

    def _outputs(self, readings: Any, batch_id: int, group: str) -> tuple[pd.DataFrame, int]:
        """Write the backup and collect the partials, as two Spark jobs at once.

        A landing file is one scan task, so one job alone keeps one core busy;
        run side by side the backup write and the aggregation use two. Each job
        scans the file itself: caching it first cost more than the second scan.
        """

        def write_backup() -> None:
            self.spark.sparkContext.setJobGroup(group, f"lacuna backup {batch_id}")
            self._write_backup(readings, self.backup_sensors, batch_id, "overwrite")

        with ThreadPoolExecutor(max_workers=1) as pool:
            backup = pool.submit(write_backup)
            partials = self._partials(readings)
            backup.result()
        return partials

    def _write_backup(
        self, readings: Any, sensors: Sequence[str], batch_id: int, mode: str
    ) -> None:
        """``sensors``' readings into micro-batch ``batch_id``'s directory.

        ``overwrite`` first (a replayed batch replaces its directory), then
        ``append`` for sensors outside the plan, found by the partials: naming
        every planned sensor in the first filter instead cost a 1,056-literal
        predicate in every batch's plan (0.2-0.6 s a batch at 1,056 sensors).
        """
        rows = backup_rows(readings, sensors, self.plan_version, self.partitions)
        rows.write.mode(mode).partitionBy(*self.partitions).parquet(
            self.paths.backup_batch(batch_id)
        )

    def _partials(self, readings: Any) -> tuple[pd.DataFrame, int]:
        """The batch's partials (``partials.collected_partials``) and its unusable readings.

        Collected as Arrow. At 1,056 sensors and 10,000 rows a file (440,000 partials),
        these slimmer partials (no ``window_end``, no constant columns, no sentinel
        sensor name) took 1.47 s a batch against 1.69 s before (medians, A/B).
        """
        frame = batch_partials(readings, self.spec)
        if not get_aggregate(self.spec.aggregate).linear:  # rebuilt from rebuilt readings
            rebuilt = rebuilt_partials(readings, self.linear_map, self.spec)
            frame = frame.unionByName(rebuilt, allowMissingColumns=True)
        return collected_partials(frame.toArrow(), self.spec.window_us, self.spec.aggregate)

    def _write_results(self, results: pd.DataFrame, batch_id: int) -> None:
        if results.empty:
            return
        frame = results.copy()
        for col in ("window_start", "window_end"):
            frame[col] = pd.to_datetime(frame[col].astype("int64"), unit="us", utc=True)
        # the window's oldest version; one a restored older state cannot say: in force
        known = frame["plan_version"] >= 0
        frame["plan_version"] = frame["plan_version"].where(known, int(self.plan_version))
        buf = io.BytesIO()
        # Microseconds, as Spark stores timestamps: Spark cannot read pandas' nanoseconds.
        pq.write_table(
            pa.Table.from_pandas(frame, preserve_index=False), buf, coerce_timestamps="us"
        )
        folder = join_uri(self.paths.results, f"batch_id={batch_id}")
        self.files.write(join_uri(folder, f"part-00000{RESULTS_SUFFIX}"), buf.getvalue())
        if not self._results_renamed:  # a replay of a batch an earlier version wrote
            self._results_renamed = True
            self.files.delete(join_uri(folder, "part-00000.parquet"))

    def _report(
        self, results: pd.DataFrame, batch_id: int, jobs: int, clock: Phases, counts: dict
    ) -> None:
        readings = int(counts["readings"])
        # checked windows: rebuilt and true aggregates both numbers (as the monitor counts)
        rebuilt = checked_pairs(results)
        windows, pairs = int(results["window_start"].nunique()), len(rebuilt)
        misses = int(rebuilt["miss"].sum())
        own, own_misses = count_own_pairs(results, self.plan_version)
        metrics = {
            "event": "shadow",
            "batch_id": int(batch_id),
            "plan_version": int(self.plan_version),
            "readings": readings,
            "rows": int(counts["rows"]),
            "over_exposure": bool(counts["over_exposure"]),
            "windows": windows,
            "rebuilt_pairs": pairs,
            "misses": misses,
            "miss_rate": misses / pairs if pairs else None,
            # of those, the version's own record (a window with readings of an older
            # version's batches is that version's): what its monitor counts
            "version_pairs": own,
            "version_misses": own_misses,
            **counts["shadow"],  # the contract the monitor measured
            "missing_values": int(counts["missing_values"]),
            "unusable_readings": int(counts["unusable_readings"]),
            "unplanned_readings": int(counts["unplanned_readings"]),
            "overfull_pairs": int(counts["overfull_pairs"]),
            "late_readings": int(counts["late_readings"]),
            "future_readings": int(counts["future_readings"]),
            "backup_files": counts["backup_files"],
            # sensors above delta under the version (the alert event names each once)
            "alerting_sensors": int(counts["alerting_sensors"]),
            # the online controller of a crash plan (None: not run; see engine.job.control)
            "control": counts["control"],
            "last_window_end": (
                str(pd.Timestamp(int(results["window_end"].max()), unit="us", tz="UTC"))
                if windows
                else None
            ),
            "spark_jobs": jobs,
            "seconds": round(clock.total(), 3),
            "phase_seconds": clock.phases,
        }
        uri = join_uri(self.paths.metrics, f"batch_id={batch_id}", "part-00000.json")
        self.files.write(uri, (json.dumps(metrics) + "\n").encode())
        adds = (
            ("batches", 1),
            ("readings", readings),
            ("windows", windows),
            ("misses", misses),
            ("pairs", pairs),
            ("over_exposure", int(metrics["over_exposure"])),
            ("crash_windows", int(metrics.get("crash_windows") or 0)),
            ("crash_misses", float(metrics.get("crash_misses") or 0.0)),
        )
        for key, add in adds:
            self.totals[key] += add
        self.batch_readings[int(batch_id)] = readings
        if metrics["over_exposure"]:
            self.full_batches.add(int(batch_id))
        while len(self.batch_readings) > KEPT_BATCHES:
            oldest = min(self.batch_readings)
            del self.batch_readings[oldest]
            self.full_batches.discard(oldest)
        self.log({k: v for k, v in metrics.items() if k != "backup_files"})  # in the file
