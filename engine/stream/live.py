"""Wire the live violation monitor and re-planning into a running pipeline.

The pipeline calls ``monitor.observe`` from inside ``foreachBatch``. A re-plan
must not block that call on the manager's lock (a caller holding it may be
waiting for the very batch that is running), so the new plan is handed to the
manager from a short-lived thread; it takes effect at a following batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from engine.data.history import SensorHistory
from engine.errors import EngineError
from engine.planning.plan import BackupPlan
from engine.planning.replan import ReplanningMonitor
from engine.stream.manager import PipelineManager
from engine.stream.spec import StreamSpec

RECENT_ROWS = 336  # rows the monitor re-learns from, like the planner's default history


def replanning_monitor(
    manager: PipelineManager,
    history: SensorHistory,
    plan: BackupPlan,
    *,
    recent_rows: int = RECENT_ROWS,
    on_error: Callable[[str], None] | None = None,
) -> ReplanningMonitor:
    """A ``ReplanningMonitor`` for the pipeline ``manager`` runs on ``history``.

    "Recent" is the last ``recent_rows`` history rows the query has processed:
    every sensor flows through the pipeline, so that is what it has seen.
    """

    def recent() -> SensorHistory:
        # What the query has processed (not what the feeder wrote ahead of it).
        seen = manager.status().input_rows // max(1, len(plan.sensors))
        fed = min(seen, len(history.times))
        return history.rows(max(0, fed - recent_rows), fed)

    latest = {"generation": 0}
    order = threading.Lock()

    def apply(new: BackupPlan, reason: str) -> None:
        latest["generation"] += 1
        generation = latest["generation"]

        def swap() -> None:
            # Holding ``order`` across the check and the swap: an older, narrower plan
            # whose thread runs late is skipped, never installed after a newer one.
            with order:
                if generation != latest["generation"]:
                    return
                try:
                    manager.set_spec(StreamSpec.from_plan(new), reason)
                except EngineError as err:  # the pipeline stopped meanwhile: say so
                    if on_error is not None:
                        on_error(f"re-plan not applied: {err}")

        threading.Thread(target=swap, name="lacuna-replan", daemon=True).start()

    return ReplanningMonitor(plan, recent, apply)
