"""Is every batch the production job committed still whole? One check for every reader.

``recover``, ``status``, ``compact`` and the app's console read the job's backup
(``engine.backup.dataset``). A reader that only took the directories holding
``_SUCCESS`` would skip a committed batch whose marker, or one of whose part
files, is gone, and answer with the rest as if it were all (1,470 of 1,500
rows, exit 0). So each of them asks here first, and a damaged batch is refused
by name, with the dates of the readings it held, unless the caller asks to read
around it (``recover --allow-incomplete``), which then says so.

What the job records (``engine.job.sink``): after a micro-batch's backup is
written, its metrics line (``_lacuna/metrics/batch_id=N/part-00000.json``)
lists the batch's part files and their sizes (``backup_files``); a compaction
lists the files of ``batch_id=A-B`` in its ``_SUCCESS``. A batch is damaged when

* its directory has no ``_SUCCESS`` although a later batch has one, or although
  its metrics line says it was written (batches commit in order, one at a time);
* its directory is gone although its metrics line says it was written;
* a file its record lists is gone, or is not the size it was written at
  (truncated, or replaced by another file).

A compacted batch range is checked against its own list, not the per-batch
ones it replaced. A backup written before batches recorded their files is
checked for markers only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from engine.backup.dataset import (
    BATCH_PREFIX,
    COMMIT_MARKER,
    TimeRange,
    batch_files,
    batch_range,
    is_compacted,
)
from engine.errors import DataError

METRICS_DIR = ("_lacuna", "metrics")
MANIFEST_KEY = "backup_files"  # in a batch's metrics line: {relative path: bytes}


@dataclass(frozen=True)
class BatchGap:
    """A committed batch that is not whole: which, what is wrong, the readings it held."""

    batch: str  # its directory name, ``batch_id=N`` or ``batch_id=A-B``
    problem: str
    partitions: tuple[str, ...]  # e.g. ("date=2016-09-02",): where its readings were
    skip: tuple[Path, ...] = ()  # a file not as written: left out when reading around it

    def describe(self) -> str:
        held = (
            f"readings of {_span(self.partitions)}"
            if self.partitions
            else "readings of unknown dates (the batch recorded no files)"
        )
        return f"{self.batch} {self.problem} ({held})"

    def warning(self, span: TimeRange | None = None) -> str:
        """What reading around the batch means for a rebuild of ``span``: its time steps
        are missing, unless every partition it held lies outside ``span``."""
        if (
            span is not None
            and self.partitions
            and not any(span.keeps(_keys(p)) for p in self.partitions)
        ):
            return f"backup {self.describe()}: outside the range rebuilt, which misses nothing"
        return f"backup {self.describe()}: rebuilt around it, its time steps are missing"


def _keys(partition: str) -> dict[str, str]:
    """``date=2016-09-02/hour=03`` as ``{"date": ..., "hour": ...}`` (parts without ``=``
    skipped: a stray directory keeps the batch in range, as ``TimeRange.keeps`` does)."""
    return dict(kv.split("=", 1) for kv in partition.split("/") if "=" in kv)


def find_gaps(root: Path) -> list[BatchGap]:
    """Every damaged committed batch of the job's backup at ``root``, in batch order."""
    if not root.is_dir():
        return []
    spans = {d.name: batch_range(d.name) for d in os.scandir(root) if d.is_dir()}
    found = {name: span for name, span in spans.items() if span is not None}
    marked = {n for n in found if (root / n / COMMIT_MARKER).exists()}
    covers = {n: found[n] for n in marked if is_compacted(n)}  # committed compactions
    records = _records(root)
    newest = max([found[n][1] for n in marked] + list(records), default=-1)
    gaps = [_gap_of_compaction(root, n) for n in sorted(covers, key=covers.__getitem__)]
    plain = {span[0]: n for n, span in found.items() if not is_compacted(n)}
    for b in sorted(set(plain) | set(records)):
        if any(lo <= b <= hi for lo, hi in covers.values()):
            continue  # read from its compaction, checked against the compaction's list
        name = plain.get(b, f"{BATCH_PREFIX}{b}")
        gaps.append(_gap_of_batch(root, name, b in plain, name in marked, b < newest,
                                  records.get(b)))  # fmt: skip
    return [g for g in gaps if g is not None]


def check_batches(root: Path, allow_incomplete: bool = False) -> tuple[BatchGap, ...]:
    """Refuse a backup with a damaged committed batch (``DataError`` naming it); with
    ``allow_incomplete`` return the damaged batches instead (``BatchGap.warning``)."""
    gaps = find_gaps(root)
    if not gaps or allow_incomplete:
        return tuple(gaps)
    more = f" and {len(gaps) - 1} more damaged batch(es)" if len(gaps) > 1 else ""
    raise DataError(
        f"backup {gaps[0].describe()}{more}: reading the rest would silently leave its "
        "readings out. Restore the missing files from a copy (or re-run the job over that "
        "input with a new --backup and --checkpoint), or pass --allow-incomplete to rebuild "
        "around the gap"
    )


def manifest(folder: Path) -> dict[str, int]:
    """``{relative path: bytes}`` of the data files under ``folder`` (hidden names, such as
    ``_SUCCESS`` and Hadoop's ``.crc`` files, skipped)."""
    found = {}
    for parent, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for f in files:
            if not f.startswith(("_", ".")):
                path = Path(parent) / f
                found[path.relative_to(folder).as_posix()] = path.stat().st_size
    return found


def _records(root: Path) -> dict[int, dict]:
    """The job's metrics line of each batch it wrote (the last, for a replayed batch)."""
    out: dict[int, dict] = {}
    for _, f in batch_files(root.joinpath(*METRICS_DIR), ".json", marked=False):
        try:
            lines = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        except (OSError, ValueError) as err:
            raise DataError(f"job metrics file {f} is unreadable: {err}") from None
        for line in lines:
            if isinstance(line, dict) and isinstance(line.get("batch_id"), int):
                out[line["batch_id"]] = line
    return out


def _gap_of_batch(
    root: Path, name: str, exists: bool, marked: bool, older: bool, record: dict | None
) -> BatchGap | None:
    listed = (record or {}).get(MANIFEST_KEY)
    if not exists:
        if record is None:
            return None
        return BatchGap(name, "is gone, although the job recorded writing it", _parts(listed))
    if not marked:
        if record is not None:
            problem = (
                f"has no {COMMIT_MARKER}, although the job recorded writing it (if the job is "
                "replaying this batch right now, try again once it is done)"
            )
        elif older:
            problem = f"has no {COMMIT_MARKER}, although later batches have theirs"
        else:
            return None  # the newest batch, still being written: not committed yet
        return BatchGap(name, problem, _parts(listed) or _parts(manifest(root / name)))
    return _missing_files(root / name, name, listed)


def _gap_of_compaction(root: Path, name: str) -> BatchGap | None:
    try:
        text = (root / name / COMMIT_MARKER).read_text()
        listed = json.loads(text).get("files") if text.strip() else None
    except (OSError, ValueError, AttributeError):
        listed = None  # a marker without a list: written before compactions listed files
    return _missing_files(root / name, name, listed)


def _missing_files(folder: Path, name: str, listed: object) -> BatchGap | None:
    if not isinstance(listed, dict):
        return None
    for rel, size in sorted(listed.items()):
        path = folder / rel
        if not path.is_file():
            return BatchGap(name, f"lacks its file {rel} ({size:,} bytes)", _parts(listed))
        if path.stat().st_size != size:
            return BatchGap(
                name,
                f"has {rel} at {path.stat().st_size:,} bytes, but it was written at {size:,} "
                "(truncated or replaced)",
                _parts(listed),
                (path,),
            )
    return None


def _parts(listed: object) -> tuple[str, ...]:
    """The partitions (``date=D[/hour=H]``) of a file list."""
    if not isinstance(listed, dict):
        return ()
    return tuple(sorted({rel.rpartition("/")[0] for rel in listed if "/" in rel}))


def _span(partitions: tuple[str, ...]) -> str:
    """``2016-09-01 to 2016-09-03`` (hours kept when the backup is partitioned by hour)."""
    keys = sorted(p.replace("date=", "").replace("/hour=", " hour ") for p in partitions)
    return keys[0] if len(keys) == 1 else f"{keys[0]} to {keys[-1]}"
