"""The disorder stage inside a real Spark Structured Streaming query.

Parquet micro-files are written in arrival order, read by the file source and
handed to ``DisorderStage.process`` in ``foreachBatch``; the result must equal
one pass of the pure-Python processor over the same tuples, also across a
query restart that resumes the stage from its JSON state file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.disorder import DisorderProcessor
from engine.disorder.delays import ParetoDelays
from engine.disorder.stage import DisorderStage, order_arrivals, to_seconds
from engine.query import WindowQuery

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("arrival_time", pa.timestamp("us", tz="UTC")),
        ("sensor", pa.string()),
        ("value", pa.float64()),
    ]
)


def disordered(history: Any, rows: int = 72) -> pd.DataFrame:
    """Readings with heavy-tailed arrival delays (hours), in arrival order."""
    times = np.asarray(history.times[:rows])
    n = len(history.sensors)
    delays = ParetoDelays(1.2, 600.0).sample(rows * n, np.random.default_rng(11))
    event = pd.DatetimeIndex(np.repeat(times, n)).tz_localize("UTC")
    frame = pd.DataFrame(
        {
            "seq": np.repeat(np.arange(rows, dtype=np.int64), n),
            "event_time": event,
            "arrival_time": event + pd.to_timedelta(np.round(delays * 1e6), unit="us"),
            "sensor": np.tile(np.asarray(history.sensors, dtype=object), rows),
            "value": np.asarray(history.values[:rows], dtype=float).ravel(),
        }
    )
    return order_arrivals(frame).reset_index(drop=True)


def write_files(frame: pd.DataFrame, landing: Path, first: int, per_file: int = 60) -> int:
    """Micro-files in arrival order with strictly increasing modification times."""
    landing.mkdir(parents=True, exist_ok=True)
    number = first
    for lo in range(0, len(frame), per_file):
        path = landing / f"part-{number:05d}.parquet"
        table = pa.Table.from_pandas(
            frame.iloc[lo : lo + per_file], schema=SCHEMA, preserve_index=False
        )
        pq.write_table(table, path)
        stamp = 1_700_000_000_000_000_000 + number * 1_000_000_000
        os.utime(path, ns=(stamp, stamp))
        number += 1
    return number


def run_query(
    spark: Any, landing: Path, checkpoint: Path, stage: DisorderStage
) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("seq", T.LongType()),
            T.StructField("event_time", T.TimestampType()),
            T.StructField("arrival_time", T.TimestampType()),
            T.StructField("sensor", T.StringType()),
            T.StructField("value", T.DoubleType()),
        ]
    )
    outputs: list[tuple[pd.DataFrame, pd.DataFrame]] = []

    def on_batch(df: Any, batch_id: int) -> None:
        outputs.append(stage.process(df.toPandas(), batch_id))

    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 3).parquet(str(landing))
    query = (
        stream.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return outputs


def reference(frame: pd.DataFrame, stage: DisorderStage) -> DisorderProcessor:
    proc = DisorderProcessor(stage.config)
    columns = zip(
        to_seconds(frame["event_time"]).tolist(), frame["sensor"].tolist(), frame["value"].tolist(),
        to_seconds(frame["arrival_time"]).tolist(), frame["seq"].tolist(), strict=True,
    )  # fmt: skip
    for ts, sensor, value, arrival, seq in columns:
        proc.push(ts, sensor, value, arrival, seq)
    proc.flush()
    return proc


def make_stage(history: Any, **options: Any) -> DisorderStage:
    query = WindowQuery(2.0, 0.1, 8)
    return DisorderStage.for_history(np.asarray(history.times), query, control_tuples=40, **options)


def check_equal(
    outputs: list[tuple[pd.DataFrame, pd.DataFrame]], stage: DisorderStage, frame: pd.DataFrame
) -> None:
    released = pd.concat([o[0] for o in outputs], ignore_index=True)
    late = pd.concat([o[1] for o in outputs], ignore_index=True)
    ref = reference(frame, stage)
    ref_released, ref_late, ref_rows = ref.drain()
    key = ["seq", "sensor"]
    assert released[key].values.tolist() == [[r[6], r[3]] for r in ref_released]
    assert late[key].values.tolist() == [[x[7], x[4]] for x in ref_late]
    assert len(late) > 0  # the sample really is out of order
    event = to_seconds(released["event_time"])
    assert np.all(np.diff(event) >= 0)
    np.testing.assert_array_equal(event, [r[0] for r in ref_released])
    results = stage.pop_results()
    assert results[["window_id", "sensor", "kind", "version"]].values.tolist() == [
        [r[0], r[3], r[5], r[6]] for r in ref_rows
    ]
    np.testing.assert_array_equal(results["value"].to_numpy(), [r[4] for r in ref_rows])
    assert ref.buffer.snapshot() == stage.processor.buffer.snapshot()


def test_spark_stream_through_the_stage_equals_the_pure_run(
    spark: Any, history: Any, tmp_path: Path
) -> None:
    frame = disordered(history)
    write_files(frame, tmp_path / "landing", 0)
    stage = make_stage(history)
    outputs = run_query(spark, tmp_path / "landing", tmp_path / "chk", stage)
    assert len(outputs) > 1  # several micro-batches
    outputs.append(stage.flush())
    check_equal(outputs, stage, frame)


def test_restarted_query_resumes_the_buffer_from_its_state_file(
    spark: Any, history: Any, tmp_path: Path
) -> None:
    frame = disordered(history)
    half = len(frame) // 2
    landing, checkpoint, state = (
        tmp_path / "landing",
        tmp_path / "chk",
        tmp_path / "chk" / "disorder.json",
    )
    number = write_files(frame.iloc[:half], landing, 0)
    first = make_stage(history, state_path=state)
    outputs = run_query(spark, landing, checkpoint, first)
    assert len(first.processor.buffer._heap) > 0  # tuples were still buffered at the stop
    write_files(frame.iloc[half:], landing, number)
    resumed = DisorderStage.load(state)
    outputs += run_query(spark, landing, checkpoint, resumed)
    outputs.append(resumed.flush())
    check_equal(outputs, resumed, frame)
