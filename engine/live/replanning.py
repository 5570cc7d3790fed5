"""Wire the live violation monitor, re-planning and online control into a running pipeline.

The pipeline calls ``monitor.observe`` from inside ``foreachBatch``. A re-plan
is computed on a worker thread (``ReplanningMonitor``), never on the batch
thread, and handed to the manager, which queues it in the pipeline: it takes
effect at a following micro-batch as a new plan version. With online control
(the default) the pipeline also calls ``observe_windows`` with every batch's closed
windows: the per-sensor controller decides the set on the batch thread (a few ms)
and a changed set is queued the same way (``engine.live.control_loop``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from engine.data.history import SensorHistory
from engine.errors import EngineError
from engine.live.control_loop import ControlledReplanning
from engine.live.manager import PipelineManager
from engine.live.spec import StreamSpec
from engine.planning.control import ControlConfig
from engine.planning.plan import BackupPlan
from engine.planning.replan import ReplanningMonitor, learning_rows, run_in_thread


def replanning_monitor(
    manager: PipelineManager,
    history: SensorHistory,
    plan: BackupPlan,
    *,
    first_row: int = 0,
    every_rows: int | None = None,
    on_error: Callable[[str], None] | None = None,
    run: Callable[[Callable[[], None]], None] = run_in_thread,
    control: ControlConfig | None | Literal["default"] = "default",
) -> ReplanningMonitor:
    """A ``ReplanningMonitor`` for the pipeline ``manager`` runs.

    ``history`` is the whole file; the stream replays it from ``first_row``
    (reading ``seq`` 0), after the rows ``plan`` was fitted on. A re-plan learns from
    the file's rows up to what the query has processed (every sensor flows through
    the pipeline, so that is what it has seen), as many as the first plan would learn
    from (``learning_rows``: the history it was made on plus the stream's rows, up to
    the same cost cap).
    ``every_rows`` is the horizon (re-plan on schedule; None: only on alerts).
    ``control``: the online controller's constants (``"default"``: ``ControlConfig`` at the
    plan's delta; None: no online control, the set changes only by re-plans); with it every
    closed window steers the backup set (``engine.live.control_loop``).
    """
    if control == "default":
        control = ControlConfig(delta=plan.parameters.delta)

    def rows_seen() -> int:
        return manager.rows_seen()

    def recent() -> SensorHistory:
        end = min(first_row + rows_seen(), len(history.times))
        return history.rows(end - learning_rows(plan, end), end)

    holder: dict[str, ReplanningMonitor] = {}

    def apply(new: BackupPlan, kind: str, reason: str) -> None:
        calibration = holder["monitor"].calibration_for(new)
        try:
            manager.set_spec(StreamSpec.from_plan(new), reason, kind=kind, calibration=calibration)
        except EngineError as err:  # the pipeline stopped meanwhile: say so
            if on_error is not None:
                on_error(f"re-plan not applied: {err}")
            raise

    def failed(message: str) -> None:  # the status shows it at the next poll
        manager.board.update(last_error=message)
        if on_error is not None:
            on_error(message)

    monitor = (
        ControlledReplanning(plan, recent, apply, control=control, every_rows=every_rows,
                             rows_seen=rows_seen, run=run, on_failure=failed)
        if control is not None
        else ReplanningMonitor(plan, recent, apply, every_rows=every_rows, rows_seen=rows_seen,
                               run=run, on_failure=failed)
    )  # fmt: skip
    holder["monitor"] = monitor
    return monitor
