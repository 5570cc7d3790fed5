"""Compaction of a production job's per-micro-batch directories (local or mounted paths).

The job (``engine.job.sink``) writes one directory per micro-batch for its
backup rows, its results and its metrics: a month of one-minute batches is
43,000 directories of each, which every reader (``recover``, ``status``, the
console) lists. ``compact`` rewrites the committed batches ``A`` to ``B`` (all
but the newest ``keep``) as one directory of each kind:

``<backup>/batch_id=A-B/date=D[/hour=H]/part-00000.parquet``
    the backup rows, one file per partition (``engine.backup.dataset.write_compacted``:
    sorted by sensor and time, about the values' bytes a reading);
``<backup>/_lacuna/results/batch_id=A-B/part-00000.pq``
    the closed windows' shadow checks (Parquet; results named ``.parquet`` by
    jobs before are read and folded in as well);
``<backup>/_lacuna/metrics/batch_id=A-B/part-00000.json``
    the metrics lines.

A compacted directory counts once its ``_SUCCESS`` is written (last, after its
files are on disk; the backup's lists its files and their sizes, so a reader can
tell when one is lost: ``engine.backup.integrity``), and from then on it hides
every ``batch_id=N`` within ``A..B`` from the readers
(``backup_dataset.live_batches``): the switch is one file, so a reader sees the
batches or their compaction, never both and never neither. The three kinds are
written first, unmarked; the backup's marker is the compaction's commit point,
and the results' and metrics' markers follow it. The superseded directories are
deleted last. A crash before the commit point leaves unmarked directories that
readers ignore and the next compaction replaces; a crash after it leaves the
results or metrics unmarked (their batches still read) or the superseded
directories hidden, and the next compaction first finishes that one: it marks
the results and metrics of every committed backup compaction (written again from
their batches, which no marked compaction has hidden), then deletes what is
superseded. A results or metrics compaction that is marked is never rewritten,
and one that spans a smaller marked one folds its rows in.

One compaction of a backup runs at a time (a lock file, ``_lacuna/compact.lock``):
two at once could each replace what the other wrote.

Spark's own Parquet reader does not know the rule: pointed at the backup while
the superseded directories still exist (seconds), it would read both.

Only batches below the newest ``keep`` are touched: the job may be replaying
its latest batch, and a replay rewrites ``batch_id=N`` (hidden once compacted,
with the same rows). No Spark: PyArrow reads and writes, like ``recover``.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engine.backup import check_batches, manifest
from engine.backup.dataset import (
    BATCH_PREFIX,
    COMMIT_MARKER,
    RESULTS_SUFFIX,
    RESULTS_SUFFIXES,
    batch_files,
    batch_range,
    committed_files,
    is_compacted,
    live_batches,
    local_path,
    remove_superseded,
    replace_file,
    write_compacted,
)
from engine.errors import DataError, ParameterError, StoreError
from engine.export.plan_book import PLANS_DIR
from engine.job.flags import KEEP

RESULTS = ("_lacuna", "results")
METRICS = ("_lacuna", "metrics")
SMALL_KINDS = ((RESULTS, RESULTS_SUFFIXES), (METRICS, ".json"))
LOCK = ("_lacuna", "compact.lock")
PART = "part-00000"
READERS = 8  # threads reading the small files (I/O and decompression release the GIL)


@dataclass(frozen=True)
class CompactionReport:
    """What one ``compact`` did (``first``/``last``: the batches now in one directory)."""

    first: int | None
    last: int | None
    batch_dirs: int  # backup batch directories folded in
    rows: int  # backup rows written
    files_before: int  # backup Parquet files read
    partitions: int  # backup files written (one per partition)
    # superseded directories deleted (backup, results and metrics), those a crashed
    # compaction left included
    removed_dirs: int
    renamed_results: int = 0  # results files of an earlier version renamed .parquet -> .pq

    def to_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def compact(backup: str | Path, keep: int = KEEP) -> CompactionReport:
    """Fold every committed micro-batch but the newest ``keep`` into one directory per kind.

    Nothing to fold (no batch old enough) is not an error: the report says 0.
    """
    if keep < 1:
        raise ParameterError(
            f"--keep must be at least 1 (the job may replay its newest batch), got {keep}"
        )
    root = local_path(backup)
    if not root.joinpath(*PLANS_DIR).is_dir():
        raise DataError(
            f"{str(backup)!r} holds no production job's backup (_lacuna/plans): point at "
            "the --backup of `python -m engine run`"
        )
    with _exclusive(root):
        return _compact_locked(root, keep)


@contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """Hold the backup's compaction lock; a second compaction is refused, not queued."""
    path = root.joinpath(*LOCK)
    with open(path, "a+b") as held:
        try:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                f"another compaction of {str(root)!r} is running (it holds {path}): wait for "
                "it to finish, then compact again"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(held.fileno(), fcntl.LOCK_UN)


def _compact_locked(root: Path, keep: int) -> CompactionReport:
    finished = _finish_committed(root)  # what a crashed compaction left behind
    renamed = rename_old_results(root)
    # a committed batch that is not whole would be folded in as it is, its loss then
    # hidden for good: the same check (and refusal) as every reader's
    check_batches(root)
    plain = _plain_batches(root)
    ids = sorted(plain)
    fold = ids[: max(0, len(ids) - keep)]
    if not fold:
        return CompactionReport(None, None, 0, 0, 0, 0, finished, renamed)
    first, last = fold[0], fold[-1]
    name = f"{BATCH_PREFIX}{first}-{last}"
    rows, before, written = _compact_backup(root, [plain[i] for i in fold], root / name)
    for kind, suffix in SMALL_KINDS:
        _compact_small(root.joinpath(*kind), first, last, suffix, name)
    _mark(root / name, listed=True)  # the commit point
    for kind, _ in SMALL_KINDS:
        _mark_small(root.joinpath(*kind) / name)
    removed = finished + _remove_superseded(root)
    return CompactionReport(first, last, len(fold), rows, before, written, removed, renamed)


def old_results(root: Path) -> list[Path]:
    """Results files an earlier version of the job named ``*.parquet`` (``RESULTS_SUFFIX``)."""
    return [f for _, f in batch_files(root.joinpath(*RESULTS), ".parquet", marked=False)]


def rename_old_results(root: Path) -> int:
    """Rename the results files of an earlier version to ``.pq``, so that
    ``read_parquet('<backup>/**/*.parquet', hive_partitioning=true)`` reads the backup
    rows alone; how many. Each rename is atomic and readers take either name."""
    found = old_results(root)
    for f in found:
        if f.with_suffix(RESULTS_SUFFIX).exists():  # a replay by this version wrote it anew
            f.unlink()
        else:
            os.replace(f, f.with_suffix(RESULTS_SUFFIX))
    return len(found)


def uncompacted(backup: str | Path) -> int:
    """How many committed micro-batch directories of the backup no compaction holds."""
    return len(_plain_batches(local_path(backup)))


def _plain_batches(root: Path, marked: bool = True) -> dict[int, Path]:
    """``batch_id=N`` backup directories no compaction holds, by ``N``: the committed ones
    (with their marker), or with ``marked=False`` every one."""
    names = [d.name for d in os.scandir(root) if d.is_dir()]
    return {
        int(name.removeprefix(BATCH_PREFIX)): root / name
        for name in live_batches(root, names, marked=marked)
        if not is_compacted(name)
    }


def _finish_committed(root: Path) -> int:
    """Finish the compactions a crash cut short after their commit point: the results and
    metrics of every marked backup compaction marked (written again first if they are
    not marked: their batches are all still there), then the superseded directories
    deleted; how many."""
    names = [d.name for d in os.scandir(root) if d.is_dir()]
    for name in live_batches(root, names, marked=True):
        span = batch_range(name)
        if not is_compacted(name) or span is None:
            continue
        for kind, suffix in SMALL_KINDS:
            folder = root.joinpath(*kind)
            if folder.is_dir() and not (folder / name / COMMIT_MARKER).exists():
                _compact_small(folder, span[0], span[1], suffix, name)
                _mark_small(folder / name)
    return _remove_superseded(root)


def _compact_backup(root: Path, batches: list[Path], target: Path) -> tuple[int, int, int]:
    """Rows of ``batches`` into ``target``, one file per partition; (rows, files read, written)."""
    if (target / COMMIT_MARKER).exists():  # only a second compaction at once could get here
        raise StoreError(f"{target} is already a committed compaction; compact again")
    if target.exists():
        shutil.rmtree(target)  # an unmarked leftover of a crashed compaction
    by_partition: dict[tuple[str, ...], list[Path]] = defaultdict(list)
    read = 0
    for batch in batches:
        for f in committed_files(batch):
            by_partition[f.parent.relative_to(batch).parts].append(f)
            read += 1
    rows = 0
    for rel, parts in sorted(by_partition.items()):
        table = _read_all(parts)
        write_compacted(target.joinpath(*rel) / f"{PART}.parquet", table)
        rows += table.num_rows
    target.mkdir(parents=True, exist_ok=True)  # batches without rows: the directory still says so
    return rows, read, len(by_partition)


def _compact_small(
    folder: Path, first: int, last: int, suffix: str | tuple[str, ...], name: str
) -> None:
    """The results or metrics files of batches ``first..last`` as one file in ``name``,
    unmarked (``_mark_small`` commits it after the backup's marker). What a reader
    counts within the span is folded in: the plain batches and any marked compaction
    inside it. A marked ``name`` is left as it is."""
    target = folder / name
    if not folder.is_dir() or (target / COMMIT_MARKER).exists():
        return
    files = [
        f for batch, f in batch_files(folder, suffix, marked=False) if _within(batch, first, last)
    ]
    if target.exists():
        shutil.rmtree(target)  # an unmarked leftover of a crashed compaction
    if suffix == RESULTS_SUFFIXES:
        if files:
            _write_parquet(target / f"{PART}{RESULTS_SUFFIX}", _read_results(files))
    else:
        lines = [line for f in files for line in f.read_text().splitlines() if line.strip()]
        for line in lines:
            json.loads(line)  # a metrics file that is not JSON lines stops the compaction
        text = "".join(line + "\n" for line in lines)
        replace_file(target / f"{PART}.json", text.encode())
    target.mkdir(parents=True, exist_ok=True)  # no files: the directory still says so


def _within(batch: str, first: int, last: int) -> bool:
    span = batch_range(batch)
    return span is not None and first <= span[0] and span[1] <= last


def _mark_small(target: Path) -> None:
    """Commit a results or metrics compaction ``_compact_small`` wrote (if its folder exists)."""
    if target.is_dir():
        _mark(target)


def _read_all(files: list[Path]) -> pa.Table:
    """The files' rows as one table, each file with its own schema (a column one file
    lacks is null there), read on a few threads: thousands of small files a run."""
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        tables = list(pool.map(pq.read_table, files))
    return pa.concat_tables(tables, promote_options="default")


def _read_results(files: list[Path]) -> pa.Table:
    """Results files as one table: a batch's take its ``batch_id`` from the directory's
    name (dictionary-encoded), a compaction's hold theirs already (its directory's name,
    ``A-B``, is no batch id), and are given the same type."""
    tables = []
    for f in files:
        if not is_compacted(f.parent.name):
            tables.append(pq.read_table(f))
            continue
        table = pq.read_table(f, partitioning=None)
        at = table.schema.get_field_index("batch_id")
        if at >= 0 and not pa.types.is_dictionary(table.schema.field(at).type):
            table = table.set_column(at, "batch_id", table.column(at).dictionary_encode())
        tables.append(table)
    return pa.concat_tables(tables, promote_options="default")


def _remove_superseded(root: Path) -> int:
    """Delete the batch directories a marked compaction holds (all kinds); how many."""
    folders = (root, root.joinpath(*RESULTS), root.joinpath(*METRICS))
    return sum(remove_superseded(folder, marked=folder == root) for folder in folders)


def _write_parquet(path: Path, table: pa.Table) -> None:
    """As the job's Spark writes: timestamps in microseconds (Spark refuses nanoseconds)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, coerce_timestamps="us")
    replace_file(path, buf.getvalue())


def _mark(folder: Path, listed: bool = False) -> None:
    """The commit point: ``_SUCCESS`` once every file of ``folder`` is on disk; with
    ``listed``, holding those files and their sizes."""
    text = json.dumps({"files": manifest(folder)}) if listed else ""
    replace_file(folder / COMMIT_MARKER, text.encode())
