"""Watching the production job's query: progress and events as JSON lines on stderr,
its failure in one line (the query's, the driver JVM's death, a write refused by the
storage; never py4j's tracebacks), SIGTERM and SIGINT as a clean stop.

PySpark is imported inside functions only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from engine.errors import EngineError, PipelineError

# Spark's numInputRows (and processedRowsPerSecond) count every scan of a batch, and the
# job scans each batch twice (backup, partial aggregates): the progress line says the
# readings the batch carried, as the job counted them, and their rate instead.
PROGRESS_KEYS = ("batchId", "durationMs")


def log_json(record: dict[str, Any]) -> None:
    print(json.dumps(record, default=str), file=sys.stderr, flush=True)


def watch_queries(
    queries: list[Any],
    stop: threading.Event,
    log: Callable[[dict[str, Any]], None],
    readings: Mapping[int, int] | None = None,
    full: Collection[int] = (),
) -> None:
    """Log each new progress; stop every query on ``stop``; raise if one failed.

    ``readings``: batch id -> the readings the job counted; ``full``: the batches that
    backed up every sensor (over the plan's exposure).

    A failed query is a ``PipelineError`` whose one line says what to do
    (``query_failure_line``), never Spark's exception and its stack.
    """
    from pyspark.errors import StreamingQueryException

    from engine.stream import query_failure_line

    seen: dict[str, int] = {}
    try:
        while any(q.isActive for q in queries) and not stop.is_set():
            for q in queries:
                # a failure is reported from q.exception() below, after every query stopped
                with contextlib.suppress(StreamingQueryException):
                    q.awaitTermination(0.2)
                _log_progress(q, seen, log, readings, full)
    finally:
        for q in queries:
            q.stop()
    for q in queries:
        _log_progress(q, seen, log, readings, full)
        err = q.exception()
        if err is not None:
            raise PipelineError(f"query {q.name} failed: {query_failure_line(err)}")


def _log_progress(
    q: Any,
    seen: dict[str, int],
    log: Callable[[dict], None],
    readings: Mapping[int, int] | None = None,
    full: Collection[int] = (),
) -> None:
    """One line per new micro-batch that ran: its id, Spark's phase durations, the readings it
    carried (``readings``: batch id -> the job's own count; None for a batch without)
    and whether it backed up every sensor (``full``: over the plan's exposure)."""
    for progress in q.recentProgress:
        batch = int(progress["batchId"])
        # a trigger that found nothing new reports progress too, under the id of the batch
        # that has not run yet, with no addBatch phase: not that batch's line
        if "addBatch" not in (progress.get("durationMs") or {}):
            continue
        if batch <= seen.get(q.name, -1):
            continue
        seen[q.name] = batch
        record = {k: progress.get(k) for k in PROGRESS_KEYS}
        count = (readings or {}).get(batch)
        seconds = float((progress.get("durationMs") or {}).get("triggerExecution", 0)) / 1e3
        record["readings"] = count
        record["readings_per_second"] = (
            round(count / seconds, 1) if count is not None and seconds > 0 else None
        )
        record["over_exposure"] = batch in full
        log({"event": "progress", "query": q.name, **record})


def stop_on_sigterm(stop: threading.Event) -> None:
    """SIGTERM (and SIGINT) ask the job to stop its queries cleanly."""

    def handler(signum: int, _frame: Any) -> None:
        log_json({"event": "signal", "signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


JVM_DIED = (
    "the Spark driver JVM died ({why}): the job stopped. Start it again: it resumes from "
    "its checkpoint, and a micro-batch that was not committed is replayed"
)


@contextmanager
def spark_errors_in_one_line(spark: Any) -> Iterator[None]:
    """What escapes the job from Spark or the storage as one ``PipelineError`` line: the
    driver JVM gone (killed, out of memory), a write refused (permission, no space), a
    second run on the same checkpoint; never py4j's tracebacks and Java's frames."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from engine.stream.query_errors import query_failure_line

    try:
        yield
    except EngineError:
        raise
    except (Py4JError, ConnectionError, EOFError) as err:
        if not _jvm_alive(spark):
            raise PipelineError(JVM_DIED.format(why=type(err).__name__)) from None
        raise PipelineError(query_failure_line(err)) from None
    except (PySparkException, OSError) as err:
        raise PipelineError(query_failure_line(err)) from None


def _jvm_alive(spark: Any) -> bool:
    """Whether the driver JVM still answers (a dead one fails every call at once)."""
    try:
        spark.sparkContext._jvm.java.lang.System.currentTimeMillis()
    except Exception:  # any failure to answer means it is gone
        return False
    return True


def quiet_a_dying_jvm() -> None:
    """py4j logs every call that fails on a dead JVM with its traceback (on its own
    loggers and, ``Exception while sending command.``, on the root one), and pyspark
    warns about the Arrow transfer it broke: ten tracebacks before the job's own line,
    which says what happened (``JVM_DIED``). This process's logging only."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    logging.getLogger().addFilter(
        lambda record: not str(record.msg).startswith(
            ("Exception while sending command", "KeyboardInterrupt while sending command")
        )
    )
    warnings.filterwarnings("ignore", category=UserWarning, module=r"pyspark\.")
