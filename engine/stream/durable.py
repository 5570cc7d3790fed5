"""Small files at any URI Spark can write (``file:``, ``hdfs:``, ``s3a:``), from the driver.

Through Hadoop's ``FileSystem`` of the running session, so the job's results,
metrics and window state go where its backup goes without a Spark job each:
a Spark job costs tens to hundreds of milliseconds, a small file write a few.
A write goes to a hidden temporary name first and is renamed into place, so a
reader never sees half a file.
"""

from __future__ import annotations

from typing import Any


class DurableFiles:
    """Whole-file writes, reads, listings and deletes through Hadoop's ``FileSystem``."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, uri: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path, path.getFileSystem(self._conf)

    def write(self, uri: str, data: bytes) -> None:
        """Replace ``uri`` with ``data`` (parents created)."""
        path, fs = self._path(uri)
        tmp = self._jvm.org.apache.hadoop.fs.Path(path.getParent(), "." + path.getName() + ".tmp")
        out = fs.create(tmp, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if fs.exists(path):
            fs.delete(path, False)
        if not fs.rename(tmp, path):
            raise OSError(f"could not rename {tmp.toString()} to {uri}")

    def read(self, uri: str) -> bytes:
        path, fs = self._path(uri)
        stream = fs.open(path)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def names(self, uri: str) -> list[str]:
        """Names directly under the directory ``uri`` (none if it does not exist)."""
        path, fs = self._path(uri)
        if not fs.exists(path):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(path))

    def delete(self, uri: str) -> None:
        path, fs = self._path(uri)
        fs.delete(path, True)

    def parquet_bytes(self, uri: str) -> int:
        """Bytes of the Parquet files under the directory ``uri`` (hidden names skipped)."""
        path, fs = self._path(uri)
        files = fs.listFiles(path, True)
        total = 0
        while files.hasNext():
            status = files.next()
            name = str(status.getPath().getName())
            if name.endswith(".parquet") and not name.startswith(("_", ".")):
                total += int(status.getLen())
        return total
