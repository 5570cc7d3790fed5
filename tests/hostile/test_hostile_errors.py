"""Spark's and Hadoop's failures as the job's one line, from the texts Spark 4 writes (the
real query raises them in ``test_hostile_job``); and the CLI never ends on a traceback."""

from __future__ import annotations

import pytest

from engine.stream.query_errors import CONCURRENT_RUNS, query_failure_line

HEAD = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in "
    "foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: "
    'Traceback (most recent call last):\n  File "sink.py", line 1, in __call__\n'
)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (HEAD + "PermissionError: [Errno 13] Permission denied: "
         "'/b/_lacuna/results/batch_id=3/.part-00000.pq.tmp'\n",
         "/b/_lacuna/results/batch_id=3/.part-00000.pq.tmp: permission denied"),
        (HEAD + "OSError: [Errno 28] No space left on device\n", "no space left on device"),
        ("org.apache.spark.SparkException: Job aborted.\nCaused by: java.io.IOException: "
         "Mkdirs failed to create file:/ro/backup/batch_id=0/_temporary/0 (exists=false)\n\tat x",
         "file:/ro/backup/batch_id=0/_temporary/0: cannot create the directory"),
        ("java.nio.file.AccessDeniedException: /ro/ck/job/offsets/.0.tmp\n\tat org.x",
         "/ro/ck/job/offsets/.0.tmp: permission denied"),
        ("org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device\n\tat x",
         "no space left on device"),
        ("java.io.IOException: Read-only file system\n\tat x", "read-only file system"),
    ],
)  # fmt: skip
def test_storage_refusing_a_write_names_the_cause_not_the_traceback(text: str, said: str) -> None:
    line = query_failure_line(text)
    assert "\n" not in line and said in line and "Traceback" not in line
    assert "resumes from its checkpoint" in line


@pytest.mark.parametrize(
    "text",
    [
        "org.apache.spark.SparkConcurrentModificationException: [CONCURRENT_STREAM_LOG_UPDATE] "
        "Concurrent update to the log. Multiple streaming jobs detected for 0.\n\tat x",
        "java.util.ConcurrentModificationException: Multiple streaming queries are concurrently "
        "using file:/ck/job/offsets\n\tat x",
        "[CONCURRENT_QUERY] Another instance of this query was just started by a concurrent "
        "session. SQLSTATE: 0A000",
    ],
)
def test_two_runs_on_one_checkpoint_are_one_line_however_spark_says_it(text: str) -> None:
    assert query_failure_line(text) == CONCURRENT_RUNS


def test_integers_in_an_unreadable_remote_file_are_not_called_nanoseconds_alone() -> None:
    line = query_failure_line(
        "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Encountered error while reading "
        "file s3a://land/x.parquet. Data type mismatches when reading Parquet column "
        "[event_time]. Expected Spark type timestamp, actual Parquet type INT64. SQLSTATE: KD001"
    )
    assert "s3a://land/x.parquet" in line and "integers such as epoch seconds" in line


@pytest.mark.parametrize(
    "argv",
    [
        ("status", "--backup", "/nonexistent/backup"),
        ("recover", "--config", "/nonexistent.json", "--backup", "/tmp", "--out", "/tmp/x.csv"),
        ("compact", "--backup", "/nonexistent/backup"),
        ("plan", "--data", "/dev/null", "--eps", "1", "--delta", "0.1", "--window", "2"),
    ],
)
def test_the_cli_ends_on_one_line_for_paths_that_are_not_there(run_cli, argv) -> None:
    from tests.hostile.conftest import one_line_error

    one_line_error(*run_cli(*argv)[::2])
