"""Compaction of the live pipeline's Parquet backup (layout: ``engine.backup.runs``).

Spark writes small Parquet files for every micro-batch, in the long layout: each
file pays a fixed size (footer, schema, statistics) and repeats every reading's
index and time for each sensor, so a plan that backs up a quarter of the sensors
stored almost half the full backup's bytes. ``compact_run`` rewrites
store-committed batches of one run as one directory,
``run=R/batch_id=A-B/date=D/part-00000.parquet`` (``engine.backup.dataset.
write_compacted``: about the values' bytes a reading),
with each row's batch as the column ``source_batch`` (the path says ``run``, and
names the span ``batch_id=A-B``: a file column of either name would clash with
it for any reader that takes partitions from paths).

Crash safety (the production job's rule, ``engine.job.compaction``): the new
directory's files are written first, then its ``_SUCCESS`` listing them and their
sizes (the commit point), then the directories it supersedes are deleted. A crash
before the marker leaves an unmarked directory every reader ignores and the next
compaction replaces; a crash after it leaves superseded directories that readers
no longer take (``engine.backup.runs.batch_files``) and the next compaction
deletes. Only batches the store has committed may be given (a batch in flight is
never one: the pipeline skips a replayed batch the store has committed before
writing its backup, so a compacted batch is never written again).

No Spark: DuckDB reads (``engine.backup.runs.read_rows``) and PyArrow writes.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from engine.backup.dataset import (
    BATCH_PREFIX,
    COMMIT_MARKER,
    batch_range,
    remove_superseded,
    replace_file,
    write_compacted,
)
from engine.backup.integrity import manifest
from engine.backup.runs import (
    RUN_PREFIX,
    SOURCE_BATCH,
    batch_files,
    compactions,
    file_bytes,
    parquet_under,
    read_rows,
)
from engine.errors import StoreError

PART = "part-00000.parquet"
_TYPES = {
    "batch_id": pa.int64(),
    "seq": pa.int64(),
    "sensor": pa.string(),
    "value": pa.float64(),
    "plan_version": pa.int32(),
}


@dataclass(frozen=True)
class RunCompaction:
    """One compaction: batches ``first..last`` of ``run`` (``batches`` of them committed
    with rows) now in one directory; Parquet files and bytes before and after."""

    run: int
    first: int
    last: int
    batches: int
    rows: int
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int


def compact_run(root: Path, run: int, batch_ids: Sequence[int]) -> RunCompaction:
    """Rewrite the committed batches ``batch_ids`` of ``run`` under ``root`` as one
    compacted directory (the marked compactions among them folded in); ``StoreError``
    when a batch's files are missing or unreadable, with nothing changed."""
    if not batch_ids:
        raise StoreError(f"no batch of run {run} to compact")
    run_dir = root / f"{RUN_PREFIX}{run}"
    first, last = min(batch_ids), max(batch_ids)
    folded: list[Path] = []
    grown = True
    while grown:  # a compaction the span touches is folded in, with all it holds
        grown = False
        for a, b, folder in compactions(run_dir):
            if a <= last and first <= b and folder not in folded:
                first, last = min(first, a), max(last, b)
                folded.append(folder)
                grown = True
    given = set(batch_ids)
    for entry in run_dir.iterdir():  # the span hides every batch in it: each must be given
        span = batch_range(entry.name)
        if span is None or span[0] != span[1] or not first <= span[0] <= last:
            continue
        batch = span[0]
        held = batch in given or any(_holds(d, batch) for d in folded)
        if not held and (entry / COMMIT_MARKER).exists():
            raise StoreError(
                f"compacting batches {first}-{last} of run {run} would hide batch {batch}, "
                "which was not given: pass every committed batch of the span"
            )
    files = batch_files(root, [(run, b) for b in batch_ids])
    files = list(dict.fromkeys(files + [f for d in folded for f in parquet_under(d)]))
    target = run_dir / f"{BATCH_PREFIX}{first}-{last}"
    if (target / COMMIT_MARKER).exists():  # it holds every batch given: nothing to fold
        raise StoreError(f"batches {first}-{last} of run {run} are compacted already")
    if target.exists():
        shutil.rmtree(target)  # an unmarked leftover of a crashed compaction
    by_date: dict[tuple[str, ...], list[Path]] = defaultdict(list)
    for f in files:
        by_date[_partition(root, f)].append(f)
    rows = 0
    for parts, group in sorted(by_date.items()):
        table = read_rows(root, group)
        table = table.cast(pa.schema([_field(f) for f in table.schema]))
        table = table.rename_columns(
            [SOURCE_BATCH if c == "batch_id" else c for c in table.column_names]
        )
        write_compacted(target.joinpath(*parts) / PART, table.drop_columns(["run"]))
        rows += table.num_rows
    target.mkdir(parents=True, exist_ok=True)
    listed = manifest(target)
    replace_file(target / COMMIT_MARKER, json.dumps({"files": listed}).encode())
    before = file_bytes(files)
    remove_superseded(run_dir, marked=True)
    return RunCompaction(
        run=run,
        first=first,
        last=last,
        batches=len(set(batch_ids)),
        rows=rows,
        files_before=len(files),
        files_after=len(listed),
        bytes_before=before,
        bytes_after=sum(listed.values()),
    )


def _holds(folder: Path, batch_id: int) -> bool:
    span = batch_range(folder.name)
    return span is not None and span[0] <= batch_id <= span[1]


def _partition(root: Path, file: Path) -> tuple[str, ...]:
    """The ``key=value`` directories of ``file`` below its batch directory."""
    return tuple(p for p in file.relative_to(root).parts[2:-1] if "=" in p)


def _field(field: pa.Field) -> pa.Field:
    return pa.field(field.name, _TYPES.get(field.name, field.type))
