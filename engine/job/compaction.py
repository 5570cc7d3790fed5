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
batches or their compaction, never both and never neither. The superseded
directories are deleted after that; a crash in between leaves them hidden, and
the next compaction deletes them. A crash before the marker leaves an unmarked
directory that readers ignore and the next compaction replaces.

Spark's own Parquet reader does not know the rule: pointed at the backup while
the superseded directories still exist (seconds), it would read both.

Only batches below the newest ``keep`` are touched: the job may be replaying
its latest batch, and a replay rewrites ``batch_id=N`` (hidden once compacted,
with the same rows). No Spark: PyArrow reads and writes, like ``recover``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
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
    committed_files,
    is_compacted,
    live_batches,
    local_path,
    remove_superseded,
    replace_file,
    write_compacted,
)
from engine.errors import DataError, ParameterError
from engine.export.plan_book import PLANS_DIR
from engine.job.flags import KEEP

RESULTS = ("_lacuna", "results")
METRICS = ("_lacuna", "metrics")
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
    removed_dirs: int  # superseded directories deleted (all kinds)
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
    _remove_superseded(root)  # what a crashed compaction left behind
    renamed = rename_old_results(root)
    # a committed batch that is not whole would be folded in as it is, its loss then
    # hidden for good: the same check (and refusal) as every reader's
    check_batches(root)
    plain = _plain_batches(root)
    ids = sorted(plain)
    fold = ids[: max(0, len(ids) - keep)]
    if not fold:
        return CompactionReport(None, None, 0, 0, 0, 0, 0, renamed)
    first, last = fold[0], fold[-1]
    name = f"{BATCH_PREFIX}{first}-{last}"
    rows, before, written = _compact_backup(root, [plain[i] for i in fold], root / name)
    for kind, suffix in ((RESULTS, RESULTS_SUFFIXES), (METRICS, ".json")):
        _compact_small(root.joinpath(*kind), first, last, suffix, name)
    _mark(root / name, listed=True)
    removed = _remove_superseded(root)
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


def _compact_backup(root: Path, batches: list[Path], target: Path) -> tuple[int, int, int]:
    """Rows of ``batches`` into ``target``, one file per partition; (rows, files read, written)."""
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
    """The results or metrics files of batches ``first..last`` as one file."""
    if not folder.is_dir():
        return
    files = [
        f
        for batch, f in batch_files(folder, suffix, marked=False)
        if not is_compacted(batch) and first <= int(batch.removeprefix(BATCH_PREFIX)) <= last
    ]
    target = folder / name
    if target.exists():
        shutil.rmtree(target)
    if suffix == RESULTS_SUFFIXES:
        if files:
            _write_parquet(target / f"{PART}{RESULTS_SUFFIX}", _read_all(files))
    else:
        lines = [line for f in files for line in f.read_text().splitlines() if line.strip()]
        for line in lines:
            json.loads(line)  # a metrics file that is not JSON lines stops the compaction
        text = "".join(line + "\n" for line in lines)
        replace_file(target / f"{PART}.json", text.encode())
    _mark(target)


def _read_all(files: list[Path]) -> pa.Table:
    """The files' rows as one table, each file with its own schema (a column one file
    lacks is null there), read on a few threads: thousands of small files a run."""
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        tables = list(pool.map(pq.read_table, files))
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
