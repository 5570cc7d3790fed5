"""A stop during a micro-batch: Spark reads it as a stop, quietly and promptly."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engine.live.pipeline import LivePipeline
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from tests.spark.test_pipeline import feed

pytestmark = pytest.mark.spark

STREAM_EXECUTION = "org.apache.spark.sql.execution.streaming.runtime.StreamExecution"
# py4j's Java side wraps what a Python callback raised in this, then its traceback
PROXY = "An exception was raised by the Python Proxy. Return Message: "


@contextmanager
def jvm_stderr(spark: Any) -> Iterator[Callable[[], str]]:
    """What the JVM prints to ``System.err`` meanwhile (an uncaught error of a thread)."""
    system, io = spark._jvm.java.lang.System, spark._jvm.java.io
    buffer, before = io.ByteArrayOutputStream(), system.err
    system.setErr(io.PrintStream(buffer, True))
    try:
        yield lambda: str(buffer.toString())
    finally:
        system.setErr(before)


def _proxy_error(spark: Any) -> Any:
    """Spark's own pattern for "a stop interrupted the Python foreachBatch"."""
    return getattr(spark._jvm, STREAM_EXECUTION).PROXY_ERROR()


def test_spark_reads_an_interrupted_batch_as_a_stop_not_a_stack_overflow(spark: Any) -> None:
    from py4j.protocol import Py4JJavaError

    from engine.stream.query_errors import QueryStopped

    pattern = _proxy_error(spark)
    try:
        raise QueryStopped(3, 0) from None
    except QueryStopped as err:
        message = PROXY + "".join(traceback.format_exception(err))
    assert len(message) < 1000
    assert pattern.findFirstIn(message).isDefined()
    # What the interrupted call's own error carried (a Spark action's Java stack, here
    # 400 frames): the pattern's recursive loop overflows the stack on it.
    frame = "\tat org.apache.spark.sql.execution.datasources.FileFormatWriter$.write(x:1)\n"
    interrupted = (
        PROXY + "py4j.protocol.Py4JJavaError: An error occurred while calling o85.parquet.\n"
        ": org.apache.spark.SparkException: Job aborted.\n" + frame * 400
    )
    with pytest.raises(Py4JJavaError, match="StackOverflowError"):
        pattern.findFirstIn(interrupted)


def test_a_stop_during_a_batch_ends_the_query_as_stopped_and_promptly(
    spark: Any, spec: StreamSpec, history: Any, tmp_path: Path
) -> None:
    paths = PipelinePaths(tmp_path).ensure()
    feed(history, paths)
    started = threading.Event()

    def slow_writer(df: Any, target: str, sensors: Any, version: int) -> int:
        # a Spark action a stop interrupts, as it interrupts a batch's backup write
        started.set()
        df.sparkSession.range(0, 10**13, numPartitions=2).selectExpr("sum(id % 2)").collect()
        return 0

    with BackupStore(paths.store_file) as store, jvm_stderr(spark) as stderr:
        options = PipelineOptions(max_files_per_trigger=3, trigger_seconds=0.5)
        pipeline = LivePipeline(
            spark, spec, "full", paths, store, options=options, backup_writer=slow_writer
        ).start()
        try:
            assert started.wait(120), "no micro-batch started"
            time.sleep(1.0)  # the long Spark job runs
            t0 = time.perf_counter()
            pipeline.stop()
            took = time.perf_counter() - t0
        finally:
            pipeline.stop()
        assert not pipeline.query.isActive
        # the stream thread ended without an uncaught error (it printed ~1,000 lines of a
        # StackOverflowError to the JVM's stderr)
        assert "StackOverflowError" not in stderr(), stderr()[:300]
        assert took < 15, f"the stop took {took:.1f} s"
        # Spark took the interrupted batch for a stop: no error recorded for the query
        assert pipeline.query.exception() is None
        assert pipeline.board.snapshot().state != "error"
        assert store.committed_batches(pipeline.run) == []  # not committed: replayed later
