"""The production job: ``python -m engine run`` or ``spark-submit engine/job/run.py``.

One streaming query over the landing directory (Parquet files with
``event_time, sensor, value``; extra columns such as ``seq`` are ignored)
whose ``foreachBatch`` (``engine.job.sink.BatchWriter``), per micro-batch:

* writes the backup sensors' readings under ``--backup`` (exactly once: one
  directory per batch id, overwritten on replay, committed by ``_SUCCESS``);
* reduces the batch to partial window aggregates on the executors, merges
  them into the open windows on the driver, and shadow-checks the windows the
  watermark closed (what recovery from the backup would give), written as
  Parquet results and JSON-line metrics next to the backup.

The plan in force is a version of the backup's plan book
(``engine.job.plans``): after a batch whose watermark passed its
``valid_until``, the job plans again on the landed readings and the new
version governs the next batch on (``--no-replan``: keep it, say it expired).
The live monitor (``engine.planning.monitor``) tallies each version's misses
over its rebuilt windows; when a sensor's misses are above ``delta`` by its test
(valid however often it is checked) it logs an ``alert`` and the job re-plans at once
(once per version).

One query, not one per output: each landing file is read by one Spark job
for the backup and one for the partials, and a window closes in the batch
that passes it (no extra no-data batch). Resumes from ``--checkpoint``
(Spark's offsets plus the window state per batch id). SIGTERM stops the query
and exits 0.
Metrics go to stderr as JSON lines; the final report to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a file by spark-submit: make ``engine`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.errors import EngineError, ParameterError, PipelineError
from engine.job.flags import add_run_flags
from engine.job.run_lock import checkpoint_lock
from engine.job.watch import (
    log_json,
    quiet_a_dying_jvm,
    spark_errors_in_one_line,
    stop_on_sigterm,
    watch_queries,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.job.layout import SinkPaths
    from engine.job.sink import BatchWriter
    from engine.stream.source import LandingDirSource


MAX_SECONDS = 10 * 365 * 86400  # the longest --trigger or --watermark (ten years)


@dataclass(frozen=True)
class JobSettings:
    """What one run of the job needs besides the plan."""

    source: str
    backup: str
    checkpoint: str
    master: str | None = None
    available_now: bool = False
    watermark_s: float = 0.0
    replan: bool = True  # plan again when the version in force passes its valid_until
    control: bool = True  # steer a crash plan's set from every closed window (needs replan)
    trigger_s: float = 1.0
    max_files_per_trigger: int | None = None
    shuffle_partitions: int = 4
    # a re-plan inside the batch (True) or in the background (False); None: inside the
    # batch with --available-now (a catch-up), in the background for a stream
    replan_wait: bool | None = None

    def __post_init__(self) -> None:
        for name in ("source", "backup", "checkpoint"):
            if not str(getattr(self, name)).strip():
                raise ParameterError(f"--{name} must not be empty, got {getattr(self, name)!r}")
        if not 0 <= self.watermark_s <= MAX_SECONDS:  # NaN and inf too: Spark cannot take them
            raise ParameterError(
                f"--watermark must be 0 to {MAX_SECONDS:,} seconds (ten years), got "
                f"{self.watermark_s!r}"
            )
        if not 0 < self.trigger_s <= MAX_SECONDS:
            raise ParameterError(
                f"--trigger must be above 0 and at most {MAX_SECONDS:,} seconds (ten years), "
                f"got {self.trigger_s!r}"
            )
        if self.max_files_per_trigger is not None and self.max_files_per_trigger < 1:
            raise ParameterError(
                f"--max-files-per-trigger must be >= 1, got {self.max_files_per_trigger!r}"
            )


def _replan_waits(settings: JobSettings) -> bool:
    return settings.available_now if settings.replan_wait is None else settings.replan_wait


@dataclass(frozen=True)
class JobReport:
    """What a run did: totals over this process's micro-batches (``scope``; `status` has
    every run's), but ``plan_versions``, the backup's plan book."""

    stopped_by: str  # "available_now" (all landed files done) or "signal"
    batches: int
    input_rows: int
    windows: int
    rebuilt_pairs: int  # (window, rebuilt sensor) pairs checked, whole windows rebuilt
    misses: int
    batches_over_exposure: int  # batches that backed up every sensor (engine.job.exposure)
    plan_versions: int  # versions in the backup's plan book (1: never re-planned)
    seconds: float
    backup: str
    results: str
    scope: str = "this run"  # the counts above; plan_versions is the backup's
    contract: str = "range"  # the plan's: a crash plan's monitor counts crash_* below
    crash_windows: int = 0  # a crash plan's (window, rebuilt sensor) pairs checked
    crash_misses: float = 0.0  # their m-row losses that missed, a sum of fractions

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def landing_source(settings: JobSettings) -> LandingDirSource:
    """The landing directory as the job reads it: readings (``event_time, sensor,
    value``), at most ``--max-files-per-trigger`` files a micro-batch."""
    from engine.stream.readings import READING_SCHEMA
    from engine.stream.source import LandingDirSource

    return LandingDirSource(settings.source, settings.max_files_per_trigger, READING_SCHEMA)


def run_job(
    spark: Any,
    config: Any,
    settings: JobSettings,
    stop: threading.Event,
    log: Callable[[dict[str, Any]], None] = log_json,
    now: Callable[[], float] = time.time,
) -> JobReport:
    """Run the job's query until all landed files are done (``available_now``) or ``stop``.

    ``config`` is an ``engine.export.BackupConfig``.
    """
    from engine.backup.durable import DurableFiles

    started = now()
    files = DurableFiles(spark)  # a plain path goes where Hadoop's default file system is
    lock = checkpoint_lock(settings.checkpoint, files.default_local)
    errors = spark_errors_in_one_line(spark)
    with lock, errors, _session_conf(spark, JOB_CONF):
        return _run_query(spark, files, config, settings, stop, log, now, started)


# Parquet's standard UTC timestamps instead of Spark's legacy INT96: any reader agrees.
# A micro-batch's aggregation shuffles windows x sensors rows: adaptive re-planning and
# more than one reduce task cost more than they save (0.78 s instead of 1.15 s per
# 1.32 M readings, 0.43 s instead of 0.55 s per 13,200; README, production job).
JOB_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
}


@contextmanager
def _session_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """Set ``conf`` while the job runs, then put back what was there (a shared session)."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _run_query(
    spark: Any,
    files: Any,
    config: Any,
    settings: JobSettings,
    stop: threading.Event,
    log: Callable[[dict[str, Any]], None],
    now: Callable[[], float],
    started: float,
) -> JobReport:
    from engine.backup.dataset import BATCH_PREFIX, partition_columns
    from engine.job.events import DurableLog
    from engine.job.layout import SinkPaths
    from engine.job.plans import (
        PlanBook,
        Replanner,
        at_once,
        fit_again,
        in_background,
        plan_again,
        read_fit_period,
    )
    from engine.job.sink import BatchWriter
    from engine.job.transforms import WindowSpec
    from engine.planning.monitor import ViolationMonitor
    from engine.stream.checkpoint import clear_interrupted_first_batch

    _check_local_paths(settings, files.default_local)  # before anything is written
    # The two-query job (before one query) kept "backup" and "windows" here; resuming
    # would read every landed file again into the new layout and back it up twice.
    if {"backup", "windows"} & set(files.names(settings.checkpoint)):
        raise PipelineError(
            f"checkpoint {settings.checkpoint!r} was written by the two-query job of an "
            "earlier version: start with a new --checkpoint and --backup"
        )
    query, interval = config.query, config.sampling_interval_s
    spec = WindowSpec.from_query(query, interval, settings.watermark_s)
    paths = SinkPaths(settings.backup, settings.checkpoint)
    # A new checkpoint numbers its micro-batches from 0 again: over a backup that holds
    # batches it would overwrite them (and a compaction would hide the new ones).
    fresh = not files.names(paths.query_checkpoint("job"))
    if fresh and any(n.startswith(BATCH_PREFIX) for n in files.names(settings.backup)):
        raise PipelineError(
            f"backup {settings.backup!r} holds the micro-batches of another checkpoint: "
            f"resume with that --checkpoint, or start a new --backup (a new checkpoint "
            "numbers its batches from 0 and would overwrite them)"
        )
    if not fresh:
        _check_checkpoint_not_behind(files, paths, settings)
    log = DurableLog(files, paths.events, log)  # alerts etc. kept with the backup
    book = PlanBook(files, settings.backup)
    book.start(config)  # a --config the backup was not started with is refused first
    state_exposure(config, settings, files, paths, log)  # then run.json is this run's
    say_ignored(settings, log)
    trigger = (settings.available_now, settings.trigger_s)
    sensors = tuple(config.sensors)
    source = landing_source(settings)

    def read(start: int, end: int) -> Any:
        return read_fit_period(spark, source, sensors, start, end)

    # A stream re-plans in the background, so its batches keep their latency. A run
    # that processes what has landed (a catch-up) waits instead: racing ahead would
    # only back up more landed rows under the expired or alerting version.
    run = at_once if _replan_waits(settings) else in_background
    control = job_control(config, settings, book, read, log, spec, run)
    replanner = Replanner(
        book,
        read,
        log,
        interval,
        enabled=settings.replan,
        run=run,
        plan=plan_again if control is None else fit_again,
        adopt=None if control is None else control.adopt,
    )
    partitions = partition_columns(interval)
    # under the contract the plan promises, on its windows' disjoint share
    monitor = ViolationMonitor.for_query(sensors, config.eps_vector(), query)
    writer = BatchWriter(
        spark, spec, paths, book, partitions, log, source, replanner, monitor, control, now=now
    )
    cleared = clear_interrupted_first_batch(files, paths.query_checkpoint("job"))
    if cleared:  # a stop or kill during the first batch's log write (engine.stream.checkpoint)
        log({"event": "checkpoint_cleared", "removed": cleared})
    query = start_job_query(source.read_stream(spark), writer, paths, trigger)
    try:
        watch_queries([query], stop, log, writer.batch_readings, writer.full_batches)
    finally:
        replanner.close()  # a re-plan still computing is given up: the next run plans again
    return JobReport(
        stopped_by="signal" if stop.is_set() else "available_now",
        # the micro-batches the writer ran (and `status` lists), not Spark's progress
        # reports: an availableNow run over an empty directory reports one, runs none
        batches=int(writer.totals["batches"]),
        # not Spark's numInputRows: it counts each of the batch's two scans
        input_rows=int(writer.totals["readings"]),
        windows=int(writer.totals["windows"]),
        rebuilt_pairs=int(writer.totals["pairs"]),
        misses=int(writer.totals["misses"]),
        batches_over_exposure=int(writer.totals["over_exposure"]),
        plan_versions=len(book.versions),
        seconds=round(now() - started, 3),
        backup=paths.backup,
        results=paths.results,
        contract=config.query.contract,
        crash_windows=int(writer.totals["crash_windows"]),
        crash_misses=round(float(writer.totals["crash_misses"]), 6),
    )


def job_control(
    config: Any,
    settings: JobSettings,
    book: Any,
    read: Callable[[int, int], Any],
    log: Callable[[dict[str, Any]], None],
    spec: Any,
    run: Any,
) -> Any:
    """The online controller of the plan's set (``engine.job.control``), or None; said at
    start either way (a ``control_mode`` line)."""
    from engine.job.control import JobControl

    why_not = (
        "turned off (--no-control)" if not settings.control
        else "re-planning is off (--no-replan): the plan never changes" if not settings.replan
        else None
    )  # fmt: skip
    contract = config.query.contract
    steers = f"every closed window's shadow check ({contract} contract) steers the set"
    log({"event": "control_mode", "online_control": why_not is None, "reason": why_not or steers})
    if why_not is not None:
        return None
    return JobControl(
        book, read, log, config.sampling_interval_s, spec.window_us, spec.slide_us, run=run
    )


def state_exposure(
    config: Any, settings: JobSettings, files: Any, paths: SinkPaths, log: Callable
) -> None:
    """Say at start which contract the plan carries, its exposure, the rows a micro-batch
    carries and what survives a failure (``engine.job.exposure``); warn once when batches
    can exceed the exposure. Kept as ``_lacuna/run.json`` for ``status``."""
    from engine.job.exposure import run_exposure

    facts = run_exposure(
        config.query.exposure,
        config.sampling_interval_s,
        settings.trigger_s,
        settings.available_now,
        settings.checkpoint,
        settings.backup,
        files.default_local,
    ).to_dict()
    files.write(paths.run, (json.dumps(facts) + "\n").encode())
    log({"event": "contract", **facts})
    if facts["warning"]:
        log({"event": "exposure_warning", "warning": facts["warning"]})


def say_ignored(settings: JobSettings, log: Callable) -> None:
    """One line per flag this run takes but does not use, so none is silently dropped."""
    ignored = []
    if settings.available_now and settings.trigger_s != JobSettings.trigger_s:
        ignored.append("--trigger (a catch-up run with --available-now takes what landed)")
    if not settings.replan and settings.replan_wait:
        ignored.append("--replan-in-batch (--no-replan: no re-plan runs)")
    for what in ignored:
        log({"event": "flag_ignored", "flag": what})


def start_job_query(
    readings: Any, writer: BatchWriter, paths: SinkPaths, trigger: tuple[bool, float]
) -> Any:
    """The one streaming query: each micro-batch handed to ``writer`` once per attempt."""
    stream = (
        readings.writeStream.queryName("lacuna_job")
        .foreachBatch(writer)
        .option("checkpointLocation", paths.query_checkpoint("job"))
    )
    available_now, interval_s = trigger
    if available_now:
        return stream.trigger(availableNow=True).start()
    return stream.trigger(processingTime=f"{interval_s:g} seconds").start()


def newest_batch_behind(commits: Sequence[str], backup: Sequence[str]) -> tuple[int, int] | None:
    """(the checkpoint's last committed micro-batch, the backup's newest batch) when the
    checkpoint is behind the backup: a restart replays at most the batch after its last
    commit, so a backup batch beyond that was written by a later state of this checkpoint
    or by another one. None when they agree. ``commits``: the names in the query
    checkpoint's ``commits`` directory (one per committed batch id); ``backup``: the names
    at the top of the backup (``batch_id=N``, a compaction's ``batch_id=A-B``)."""
    from engine.backup.dataset import batch_range

    last = max((int(n) for n in commits if n.isdigit()), default=-1)
    spans = [span for n in backup if (span := batch_range(n)) is not None]
    newest = max((hi for _, hi in spans), default=-1)
    return (last, newest) if newest > last + 1 else None


def _check_checkpoint_not_behind(files: Any, paths: Any, settings: JobSettings) -> None:
    """``PipelineError`` when the checkpoint resumes behind the backup (``newest_batch_behind``):
    it would write its next batches over the backup's (or beside a compaction that hides
    them), counting readings twice."""
    from engine.job.layout import join_uri

    commits = files.names(join_uri(paths.query_checkpoint("job"), "commits"))
    behind = newest_batch_behind(commits, files.names(settings.backup))
    if behind is not None:
        last, newest = behind
        raise PipelineError(
            f"checkpoint {settings.checkpoint!r} has committed micro-batches up to {last}, "
            f"but backup {settings.backup!r} holds batches up to {newest}: the checkpoint "
            "is older than the backup (a restored copy, or another run's). Resume with the "
            "checkpoint that wrote this backup, or start a new --checkpoint and --backup"
        )


def _check_local_paths(settings: JobSettings, default_local: bool = True) -> None:
    """``PipelineError`` in one line for the plain mistakes with local paths: a
    ``--source`` that is not a directory, a ``--backup`` or ``--checkpoint`` that is a
    file. (Spark's own errors for them are a page of Java; a cluster filesystem's
    paths, plain ones too where Hadoop's default file system is not local, are left to
    Spark.)"""
    from engine.backup.dataset import local_path
    from engine.errors import DataError
    from engine.job.exposure import is_local

    for flag, uri in (
        ("--source", settings.source),
        ("--backup", settings.backup),
        ("--checkpoint", settings.checkpoint),
    ):
        if not is_local(uri, default_local):
            continue  # s3a://, hdfs://, a plain path on HDFS: Spark's to check
        try:
            path = local_path(uri)
        except DataError:
            continue
        if flag == "--source" and not path.is_dir():
            raise PipelineError(
                f"--source {uri!r} is not a directory: point it at the directory the "
                "Parquet files land in (it must exist before the job starts)"
            )
        if path.exists() and not path.is_dir():
            raise PipelineError(f"{flag} {uri!r} is a file: it must be a directory")


def settings_from_args(args: argparse.Namespace) -> JobSettings:
    return JobSettings(
        source=args.source,
        backup=args.backup,
        checkpoint=args.checkpoint,
        master=args.master,
        available_now=args.available_now,
        watermark_s=args.watermark,
        replan=not args.no_replan,
        control=not args.no_control,
        replan_wait=True if args.replan_in_batch else None,
        trigger_s=args.trigger,
        max_files_per_trigger=args.max_files_per_trigger,
    )


def run_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Load the plan, build the session, run until done or SIGTERM."""
    from engine.export import load_config
    from engine.stream.session import SparkSettings, get_spark

    settings = settings_from_args(args)
    config = load_config(args.config)
    _check_local_paths(settings)  # in one line, before a JVM starts
    quiet_a_dying_jvm()
    spark = get_spark(
        SparkSettings(
            master=settings.master,
            app_name="lacuna-job",
            shuffle_partitions=settings.shuffle_partitions,
        )
    )
    stop = threading.Event()
    stop_on_sigterm(stop)
    return run_job(spark, config, settings, stop).to_dict()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark-submit engine/job/run.py --config ... --source ...``."""
    parser = argparse.ArgumentParser(prog="lacuna-job", description=__doc__)
    add_run_flags(parser)
    args = parser.parse_args(argv)
    from engine.job.plans import leave

    try:
        report = run_from_args(args)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return leave(2)
    print(json.dumps(report, indent=2))
    return leave(0)


if __name__ == "__main__":
    sys.exit(main())
