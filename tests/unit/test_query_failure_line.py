"""A failed streaming query as one line an operator can act on (texts as Spark 4 writes them)."""

from __future__ import annotations

from engine.stream.query_errors import query_failure_line

HEAD = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in "
    "foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: "
    'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
)


def _spark(reason: str) -> str:
    return HEAD + "py4j.protocol.Py4JJavaError: An error occurred\n" + reason + "\n\tat org.x\n"


def test_a_pandas_nanosecond_file_is_named_with_the_fix() -> None:
    text = _spark(
        "org.apache.spark.SparkException: [FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] "
        "Encountered error while reading file file:///land/zz-nanos.parquet. Data type "
        "mismatches when reading Parquet column [event_time]. Expected Spark type timestamp, "
        "actual Parquet type INT64. SQLSTATE: KD001"
    )
    line = query_failure_line(text)
    assert "\n" not in line
    assert line.startswith("input file file:///land/zz-nanos.parquet cannot be read: ")
    assert "column [event_time]" in line and "coerce_timestamps='us'" in line
    assert "SQLSTATE" not in line and "INT64. (" not in line
    assert "resumes from its checkpoint" in line


def test_a_wrong_column_type_and_a_file_that_is_not_parquet() -> None:
    text = _spark(
        "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Encountered error while reading "
        "file file:///land/zz-bad.parquet. Data type mismatches when reading Parquet column "
        "[value]. Expected Spark type double, actual Parquet type BINARY. SQLSTATE: KD001"
    )
    line = query_failure_line(text)
    assert "zz-bad.parquet" in line and "actual Parquet type BINARY" in line
    assert "nanosecond" not in line
    junk = query_failure_line(
        _spark(
            "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
            "file:///land/zz-junk.parquet.  SQLSTATE: KD001"
        )
    )
    assert junk.startswith("input file file:///land/zz-junk.parquet cannot be read: not a")


def test_our_own_error_inside_a_micro_batch_gives_its_message() -> None:
    text = HEAD + "engine.errors.PipelineError: no plan version covers micro-batch 7\n"
    assert query_failure_line(text) == "no plan version covers micro-batch 7"


def test_anything_else_is_its_first_line() -> None:
    assert query_failure_line("boom\nstack") == "boom"
    assert query_failure_line(ValueError()) == "ValueError"
