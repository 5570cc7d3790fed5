"""The job's small files: local paths are written by Python, others through Hadoop,
and either can read what the other wrote (Spark included)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.backup.durable import DurableFiles

pytestmark = pytest.mark.spark


def _parquet(values: list[float]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"value": values}), buf)
    return buf.getvalue()


def test_a_local_file_hadoop_wrote_is_replaced_and_spark_still_reads_it(
    spark: Any, tmp_path: Path
) -> None:
    files = DurableFiles(spark)
    uri = (tmp_path / "results" / "part-00000.parquet").as_uri()
    through_hadoop = DurableFiles(spark)
    through_hadoop.local = lambda uri: None  # type: ignore[method-assign]
    through_hadoop.write(uri, _parquet([1.0]))  # as an earlier version of the job did
    assert (tmp_path / "results" / ".part-00000.parquet.crc").exists()

    files.write(uri, _parquet([2.0, 3.0]))

    # a stale checksum beside the file would make Hadoop refuse it
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["part-00000.parquet"]
    got = spark.read.parquet(str(tmp_path / "results")).toPandas()
    assert sorted(got["value"]) == [2.0, 3.0]
    assert through_hadoop.read(uri) == files.read(uri) == _parquet([2.0, 3.0])
    assert files.names((tmp_path / "results").as_uri()) == ["part-00000.parquet"]


def test_only_local_paths_take_the_python_route(spark: Any, tmp_path: Path) -> None:
    files = DurableFiles(spark)
    assert files.local((tmp_path / "a").as_uri()) == tmp_path / "a"
    assert files.local(str(tmp_path / "a")) == tmp_path / "a"  # default FS is local here
    assert files.local("hdfs://namenode:8020/lacuna/a") is None
    assert files.local("s3a://bucket/lacuna/a") is None
    # Hadoop takes a file: URI's path literally: "%20" is part of the name
    assert files.local("file:///tmp/a%20b") == Path("/tmp/a%20b")
