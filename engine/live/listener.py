"""The StreamingQueryListener that feeds a live pipeline's status board.

Spark's progress events give the batch rates and durations; a terminated
query with an exception marks the board failed (simulated) or in error.
PySpark is imported inside the function only.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from engine.live.status import StatusBoard
from engine.stream.query_errors import FAILURE_MARK, query_failure_line


class Listened(Protocol):
    """What the listener reads of a live pipeline: its query, run and status board."""

    query: Any
    run: int
    board: StatusBoard


def spark_rate(value: Any) -> float | None:
    """A progress event's rate; None when Spark gives none (the first batch's input rate:
    NaN or null), which is not a rate of 0."""
    if value is None:
        return None
    rate = float(value)
    return rate if math.isfinite(rate) else None


def make_listener(pipeline: Listened) -> Any:
    """A StreamingQueryListener feeding the pipeline's status board."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            if pipeline.query is None or str(p.id) != str(pipeline.query.id):
                return
            durations = dict(p.durationMs or {})
            arriving = spark_rate(p.inputRowsPerSecond)  # rows over the time between triggers
            processed = spark_rate(p.processedRowsPerSecond)
            rates = {"input_rows_per_second": arriving, "processed_rows_per_second": processed}
            pipeline.board.update(
                **{k: v for k, v in rates.items() if v is not None},  # none: keep the last
                batch_duration_ms=float(durations.get("triggerExecution", 0.0)),
            )
            if "triggerExecution" in durations:  # Spark's figures replace our own estimate
                patch: dict[str, float] = {"duration_ms": float(durations["triggerExecution"])}
                if arriving is not None:
                    # the input rate, as the estimate it replaces (rows over the gap since
                    # the batch before), not the rate one batch was processed at
                    patch["rows_per_second"] = arriving
                pipeline.board.patch_batch(pipeline.run, int(p.batchId), **patch)
            pipeline.board.add_profile({f"spark_{k}": v / 1000.0 for k, v in durations.items()})

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            if pipeline.query is None or str(event.id) != str(pipeline.query.id):
                return
            if event.exception:
                failed = FAILURE_MARK in str(event.exception)
                pipeline.board.update(
                    state="failed" if failed else "error",
                    last_error=query_failure_line(event.exception),
                )

    return _Listener()
