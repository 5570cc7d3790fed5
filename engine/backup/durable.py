"""Small files at any URI Spark can write (``file:``, ``hdfs:``, ``s3a:``), from the driver.

Through Hadoop's ``FileSystem`` of the running session, so the job's results,
metrics and window state go where its backup goes without a Spark job each:
a Spark job costs tens to hundreds of milliseconds, a small file write a few.
A write goes to a hidden temporary name first and is renamed into place, so a
reader never sees half a file.

Whole-file writes and reads of a local path (``file:``, or no scheme while
Hadoop's default file system is local) go through Python instead: py4j sends
bytes as text, and the 4 MB results of a micro-batch at 1,056 sensors took
0.15 s to write that way. Same bytes, same place, and the rename is atomic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from engine.backup.dataset import replace_file
from engine.backup.integrity import manifest


class DurableFiles:
    """Whole-file writes, reads, listings and deletes through Hadoop's ``FileSystem``."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._default_local = str(self._conf.get("fs.defaultFS", "file:///")).startswith("file:")

    @property
    def default_local(self) -> bool:
        """Whether Hadoop takes a path without a scheme to the local disk (its
        ``fs.defaultFS`` is ``file:``): on a cluster whose default is HDFS it does not."""
        return self._default_local

    def local(self, uri: str) -> Path | None:
        """The local path of ``uri``, or None when Hadoop would take it elsewhere."""
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            return Path(parsed.path)  # as Hadoop takes it: literally, no percent-decoding
        return Path(uri) if parsed.scheme == "" and self._default_local else None

    def _path(self, uri: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path, path.getFileSystem(self._conf)

    def write(self, uri: str, data: bytes) -> None:
        """Replace ``uri`` with ``data`` (parents created)."""
        local = self.local(uri)
        if local is not None:
            replace_file(local, data)
            return
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
        local = self.local(uri)
        if local is not None:
            return local.read_bytes()
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

    def tree(self, uri: str) -> dict[str, int]:
        """``{relative path: bytes}`` of the files under the directory ``uri``, hidden names
        (``_SUCCESS``, ``.crc``) and what is under them skipped; {} when it does not exist."""
        local = self.local(uri)
        if local is not None:
            return manifest(local) if local.is_dir() else {}
        path, fs = self._path(uri)
        if not fs.exists(path):
            return {}
        base = str(fs.makeQualified(path).toUri().getPath()).rstrip("/") + "/"
        found, files = {}, fs.listFiles(path, True)
        while files.hasNext():
            status = files.next()
            rel = str(status.getPath().toUri().getPath()).removeprefix(base)
            if not any(part.startswith(("_", ".")) for part in rel.split("/")):
                found[rel] = int(status.getLen())
        return found

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
