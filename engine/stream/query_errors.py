"""How a streaming query's failure reads on one line, for the job and the live pipeline.

Spark wraps every error in py4j and Java text; an operator needs the cause: the
input file that cannot be read and why, our own error raised inside a
micro-batch, or the simulated failure's mark.
"""

from __future__ import annotations

import re

__all__ = [
    "FAILURE_MARK",
    "STOPPED_CAUSE",
    "STOPPED_PREFIX",
    "QueryStopped",
    "SimulatedFailure",
    "query_failure_line",
]

FAILURE_MARK = "lacuna simulated failure"


class SimulatedFailure(RuntimeError):
    """Raised inside ``foreachBatch`` to kill the query on purpose."""


# Spark's StreamExecution tells a Python foreachBatch that a stop interrupted from a
# real failure by this text followed by the name of a Java interruption (its
# PROXY_ERROR: "...while calling((.|\r\n|\r|\n)*)(java.lang.InterruptedException|...)").
# It matches that pattern against the whole message of the py4j error. The message of
# an interrupted Spark action carries its Java stack, tens of kilobytes, and the
# pattern's recursive loop then overflows the thread's stack: the stream thread died
# with a StackOverflowError, about 1,000 lines on stderr, at every stop that came
# during a micro-batch. A short message in that form ends the query as stopped.
STOPPED_PREFIX = "py4j.protocol.Py4JJavaError: An error occurred while calling"
STOPPED_CAUSE = "java.lang.InterruptedException"


class QueryStopped(RuntimeError):
    """A micro-batch that a deliberate stop interrupted: raised (without its cause) in
    place of the interrupted call's error, so Spark reads it as a stop, briefly."""

    def __init__(self, batch_id: int, run: int) -> None:
        super().__init__(
            f"{STOPPED_PREFIX} foreachBatch of batch {batch_id} of run {run}: "
            f"{STOPPED_CAUSE}: the query was stopped; the batch is not committed and "
            "the next run replays it"
        )


# Spark's reason for an unreadable input file, and Python's for our own errors raised
# inside foreachBatch (the proxy's traceback is in the exception's text).
_READ_FILE = re.compile(
    r"\[FAILED_READ_FILE\.(?P<kind>[A-Z_]+)\] Encountered error while reading file "
    r"(?P<file>\S+?)\.\s+(?P<why>[^\n]*?)(?:\s*SQLSTATE[^\n]*)?$",
    re.MULTILINE,
)
_OWN_ERROR = re.compile(r"^engine\.errors\.\w+: (?P<message>.+)$", re.MULTILINE)
_NANOS = "actual Parquet type INT64"
# Two runs on one checkpoint: Spark's check when the second starts while the first runs,
# or the loser of a race to write the same offsets (SparkConcurrentModificationException).
_CONCURRENT = re.compile(
    r"ConcurrentModificationException|CONCURRENT_QUERY|CONCURRENT_STREAM_LOG_UPDATE|"
    r"Multiple streaming queries are concurrently using"
)
CONCURRENT_RUNS = (
    "another run of the job is using this --checkpoint (two runs cannot share one): stop "
    "the other run, or give this one its own --checkpoint and --backup"
)
# Storage refusing a write, as Python (our files, written from the driver) or Java (the
# backup's Parquet, Spark's logs) says it; the cause is deep inside Spark's wrapping.
_STORAGE = re.compile(
    r"(?P<line>[^\n]*?(?P<cause>Permission denied|No space left on device|Read-only file "
    r"system|Disk quota exceeded|AccessDeniedException|Mkdirs failed to create)[^\n]*)"
)
_PATH = re.compile(r"(?:'(?P<quoted>/[^']+)'|(?P<uri>(?:file:)?/[^\s,;:'\]]+))")


def query_failure_line(err: object) -> str:
    """A streaming query's failure as one line an operator can act on.

    An input file Spark cannot read names the file, says why (pandas' default
    nanosecond timestamps, a column of the wrong type, not Parquet) and what to
    do; an error of ours raised inside a micro-batch gives its own message;
    otherwise the line with ``FAILURE_MARK`` or the first line.
    """
    text = str(err).strip()
    bad = _READ_FILE.search(text)
    if bad is not None:
        return _unreadable_file(bad)
    own = _OWN_ERROR.findall(text)
    if own:
        return str(own[-1]).strip()
    if _CONCURRENT.search(text):
        return CONCURRENT_RUNS
    storage = _storage_cause(text)
    if storage is not None:
        return storage
    for line in text.splitlines():
        if FAILURE_MARK in line:
            return line.strip()
    return text.splitlines()[0] if text else type(err).__name__


def _unreadable_file(bad: re.Match[str]) -> str:
    why = bad["why"].strip().rstrip(".") or "not a readable Parquet file"
    if bad["kind"] == "PARQUET_COLUMN_DATA_TYPE_MISMATCH" and _NANOS in why and "timestamp" in why:
        why += (
            " (nanosecond timestamps, pandas' default, or integers such as epoch seconds: "
            "Spark reads timestamps in microseconds; write the file with "
            "coerce_timestamps='us', integers converted with pd.to_datetime(..., unit=...))"
        )
    return (
        f"input file {bad['file']} cannot be read: {why}. Fix it or move it out "
        "of the source directory and start again: the job resumes from its checkpoint, "
        "and the micro-batch that failed was not committed, so nothing is lost"
    )


def _storage_cause(text: str) -> str | None:
    """ "cannot write <path>: permission denied" from the first line naming such a cause."""
    found = _STORAGE.search(text)
    if found is None:
        return None
    cause = found["cause"]
    cause = "permission denied" if cause == "AccessDeniedException" else cause.lower()
    where = _PATH.search(found["line"])
    path = "" if where is None else f" {where['quoted'] or where['uri']}"
    if cause.startswith("mkdirs"):
        cause = "cannot create the directory (permission denied or no space left?)"
    return (
        f"the storage refused a write{path}: {cause}. Fix the backup or checkpoint location "
        "(permissions, free space) and start again: the job resumes from its checkpoint, "
        "and the micro-batch that failed was not committed"
    )
