"""The whole story end to end, for ``python -m engine simulate`` and the tests:
feed, stream, fail inside an open window, recover, finish, report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from engine.errors import ParameterError
from engine.live.failure import check_failure_kind
from engine.live.launch import Disorder, start_live
from engine.live.manager import PipelineManager
from engine.live.recovery_report import RecoveryReport
from engine.live.spec import (
    HistoryLike,
    Monitor,
    PipelineOptions,
    PipelinePaths,
    StreamSpec,
    check_mode,
)
from engine.stream.session import SparkSettings


def run_simulation(
    history: HistoryLike,
    spec: StreamSpec,
    mode: str,
    fail_at: float,
    paths: PipelinePaths,
    settings: SparkSettings | None = None,
    *,
    speed: float = 0.0,
    rows_per_file: int | None = None,
    options: PipelineOptions | None = None,
    timeout: float = 900.0,
    monitor_factory: Callable[[PipelineManager], Monitor] | None = None,
    disorder: Disorder | None = None,
    failure: str = "machine",
    started: Callable[[], None] | None = None,
) -> RecoveryReport:
    """Feed, stream, fail at ``fail_at`` of the feed, recover, finish; return the report.

    The failure strikes before ``failure_row`` (inside an open window): the feed
    stops there, the query processes every row before it, then it is killed. So
    the same arguments lose the same rows however batches are cut or the machine
    is loaded. An earlier run's files in ``paths`` are archived, never deleted.
    The report is taken after the restarted query has processed the whole feed.
    ``monitor_factory`` builds the live monitor (e.g. scheduled re-planning);
    ``disorder``: readings arrive late and the disorder stage runs (``start_live``).
    ``failure``: ``"machine"`` loses the window state (every open window rebuilt);
    ``"crash"`` keeps it and loses the first micro-batch after ``failure_row``, in flight
    (its rows rebuilt from its backup; ``engine.live.failure``). ``started`` is called
    once the arguments are accepted, before the run (the CLI says its warnings there).
    """
    check_failure_kind(failure)
    if not 0.0 < fail_at < 1.0:
        raise ParameterError(f"fail_at must be a fraction in (0, 1), got {fail_at!r}")
    check_mode(mode)
    fail_row = failure_row(int(np.asarray(history.values).shape[0]), spec, fail_at)
    if started is not None:
        started()
    base = options or PipelineOptions(trigger_seconds=0.0)
    opts = replace(base, fail_after_readings=None, available_now=False)
    manager = PipelineManager(settings)
    monitor = monitor_factory(manager) if monitor_factory is not None else None
    try:
        start_live(
            manager, history, spec, mode, paths, disorder=disorder, monitor=monitor, speed=speed,
            rows_per_file=rows_per_file, options=opts, leftovers="archive", stop_row=fail_row,
        )  # fmt: skip
        manager.drain(timeout)
        if failure == "crash":  # the first batch after ``fail_row`` dies once backed up
            manager.arm_failure("crash")
            manager.feed_rest()
            manager.simulate_failure(grace_seconds=timeout, kind="crash")
            manager.recover()
        else:
            manager.simulate_failure(grace_seconds=0.5)
            manager.recover()
            manager.feed_rest()
        manager.drain(timeout)
        report = manager.report()
    except BaseException as err:
        _close_keeping(manager, err)
        raise
    manager.close()
    return report


def _close_keeping(manager: PipelineManager, err: BaseException) -> None:
    """Close after ``err`` without letting a second failure replace it.

    After Ctrl-C or SIGTERM the py4j gateway may itself be interrupted, so closing
    can raise too; the operator must still see the interrupt (exit 130), with the
    closing failure attached as a note, not a traceback of the cleanup instead.
    """
    try:
        manager.close()
    except Exception as close_err:  # attached to ``err``, which is re-raised
        err.add_note(f"closing the pipeline also failed: {type(close_err).__name__}: {close_err}")


def failure_row(rows: int, spec: StreamSpec, fail_at: float) -> int:
    """The row a simulated failure strikes before: mid-slide near ``fail_at * rows``.

    Half a slide past a slide boundary, so a window always has some rows
    processed and some not (unless window = slide = 1, where none can be open).
    """
    step = spec.slide
    row = (int(fail_at * rows) // step) * step + max(1, step // 2)
    if row >= rows:
        row -= step
    if row <= 0 or row >= rows:
        raise ParameterError(
            f"fail_at {fail_at!r} leaves no open window to fail inside {rows} rows "
            f"(slide {step}); replay more rows"
        )
    return row
