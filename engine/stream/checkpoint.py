"""A query's checkpoint as a stop or a kill can leave it, made startable again.

Spark writes each entry of its offset and commit logs to a hidden temporary file
(``offsets/.0.<uuid>.tmp``) and renames it into place. A stop (``query.stop()``
interrupts the micro-batch thread) or a kill during the very first write leaves that
temporary file behind with no batch in the log. Spark 4 then refuses the checkpoint
for good: a query starting at batch 0 finds ``offsets`` (or ``commits``) not empty
and dies with ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``. Nothing was committed,
so nothing is lost by removing those files: the source's log (``sources/0``) keeps
the files the interrupted batch had listed and the restarted batch 0 reads them.

Works at any URI through an object with ``names(uri)`` and ``delete(uri)``
(``engine.backup.durable.DurableFiles``); the caller holds the checkpoint's lock.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["clear_interrupted_first_batch"]

LOGS = ("offsets", "commits")


class Listing(Protocol):
    def names(self, uri: str) -> list[str]: ...

    def delete(self, uri: str) -> None: ...


def clear_interrupted_first_batch(files: Listing, checkpoint: str) -> list[str]:
    """Remove the temporary files an interrupted first batch left in ``checkpoint``'s
    offset and commit logs; the names removed (none while the offset log holds a batch,
    or when there is nothing to remove)."""
    base = checkpoint.rstrip("/")
    if any(name.isdigit() for name in files.names(f"{base}/offsets")):
        return []  # a batch was logged: Spark resumes from it and ignores stray files
    removed = []
    for log in LOGS:
        for name in files.names(f"{base}/{log}"):
            if name.startswith("."):  # ".0.<uuid>.tmp" and its ".crc"
                files.delete(f"{base}/{log}/{name}")
                removed.append(f"{log}/{name}")
    return removed
