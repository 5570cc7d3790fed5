"""The crash contract in the production job: the exposure it gives a failure, and the
rule it keeps for a micro-batch over the plan's exposure. Pure (no Spark, no I/O).

A crash-contract plan (``query.exposure = m``) promises its miss rate for a failure
that loses at most ``m`` consecutive rows of the rebuilt sensors: the micro-batch in
flight, while the open windows' state (under ``--checkpoint``) and the batches'
backup survive. The job keeps that true:

* **a micro-batch holding more than ``m`` rows backs up every sensor** (a backlog
  after downtime, a catch-up run, a large landing file): a crash inside it would
  lose more rows than the plan covers. ``check_batch`` decides it per batch;
  the job logs ``over_exposure`` and counts such batches (progress line, metrics,
  ``status``).
* **the exposure a failure gets** is what one micro-batch carries: a
  ``--trigger`` of ``T`` seconds at ``dt`` seconds a reading carries
  ``ceil(T / dt)`` rows of a stream that lands as it is read, more when a landing
  file holds more rows; a catch-up run (``--available-now``) takes what landed.
  ``run_exposure`` states it when the job starts, and warns once when batches can
  exceed ``m``.
* **durability**: a checkpoint on a local disk survives a process crash, not the
  loss of the machine; a failure that loses the window state falls under the range
  contract (whole windows rebuilt, ``recover --from --to``).

A range-contract plan (``exposure`` None) is calibrated for whole windows rebuilt,
which covers any loss inside them: no batch needs more than the plan's set.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlparse

import pandas as pd

OVER_EXPOSURE = "over_exposure"
CRASH, RANGE = "crash", "range"


def batch_rows(partials: pd.DataFrame) -> int:
    """Rows one micro-batch carries: the most readings one sensor has in it.

    ``partials`` are the batch's partials per (window, sensor) with ``readings``
    (each reading counted once, in its latest window; rebuilt rows have none). A
    crash in the batch loses a rebuilt sensor's readings of it, so this is the
    stretch a failure there would lose: a row is one reading per sensor.
    """
    if partials.empty:
        return 0
    per_sensor = partials.groupby("sensor", sort=False)["readings"].sum()
    return int(per_sensor.max()) if len(per_sensor) else 0


def over_exposure(rows: int, exposure: int | None) -> bool:
    """Whether a batch of ``rows`` rows exceeds a crash-contract plan's ``exposure``."""
    return exposure is not None and rows > exposure


@dataclass(frozen=True)
class BatchExposure:
    """One micro-batch against the plan's exposure: its rows, and the sensors it backs
    up beyond the plan's set (all the plan's others when it is over the exposure)."""

    rows: int
    added: tuple[str, ...] = ()
    event: dict[str, Any] | None = None  # ``over_exposure``, logged and kept

    @property
    def full(self) -> bool:
        return self.event is not None


def check_batch(
    partials: pd.DataFrame,
    exposure: int | None,
    sensors: Sequence[str],
    backup_sensors: Collection[str],
) -> BatchExposure:
    """What the batch of ``partials`` must back up under a plan of ``sensors`` that backs
    up ``backup_sensors`` and covers ``exposure`` rows (None: the range contract)."""
    rows = batch_rows(partials)
    if not over_exposure(rows, exposure):
        return BatchExposure(rows)
    kept = set(backup_sensors)
    added = tuple(s for s in sensors if s not in kept)
    event = {
        "event": OVER_EXPOSURE,
        "rows": rows,
        "exposure_rows": exposure,
        "sensors_added": len(added),
        "what": (
            f"a micro-batch of {rows} rows exceeds the plan's exposure of {exposure} "
            f"row{'' if exposure == 1 else 's'}: every sensor backed up for it, so a "
            "crash inside it loses no reading the plan does not cover"
        ),
    }
    return BatchExposure(rows, added, event)


@dataclass(frozen=True)
class RunExposure:
    """What the job states when it starts: its plan's contract, the exposure the plan
    covers, the rows a micro-batch carries at the data's rate, and what survives."""

    contract: str  # "crash" or "range"
    exposure_rows: int | None  # the plan's m; None under the range contract
    rows_per_trigger: int | None  # None: a catch-up run takes what landed
    checkpoint_local: bool  # a plain path or file: URI
    backup_local: bool  # the backup's URI, the same way
    durability: str  # one sentence: which failure each contract covers here
    warning: str | None = None  # batches can exceed the exposure

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rows_per_trigger(trigger_s: float, sampling_interval_s: float) -> int:
    """Rows a ``trigger_s`` micro-batch carries of a stream that lands as it is read."""
    return max(1, math.ceil(trigger_s / sampling_interval_s - 1e-9))


def is_local(uri: str, default_local: bool = True) -> bool:
    """A ``file:`` URI (a drive letter is not a scheme), or a plain path when Hadoop's
    default file system is the local one (``default_local``; on a cluster whose
    ``fs.defaultFS`` is HDFS a plain path is on HDFS)."""
    scheme = urlparse(str(uri)).scheme
    if scheme == "":
        return default_local
    return scheme == "file" or len(scheme) == 1


def run_exposure(
    exposure: int | None,
    sampling_interval_s: float,
    trigger_s: float,
    available_now: bool,
    checkpoint: str,
    backup: str,
    default_local: bool = True,
) -> RunExposure:
    """The start line's facts for a plan covering ``exposure`` rows (None: the range
    contract), run with a ``trigger_s`` trigger (or ``available_now``), its window state
    under ``checkpoint`` and its backup under ``backup``. Both contracts rebuild from the
    backup: a backup on a local disk does not survive the machine's loss, whatever the
    checkpoint does, and the sentence says so."""
    rows = None if available_now else rows_per_trigger(trigger_s, sampling_interval_s)
    local, backup_local = is_local(checkpoint, default_local), is_local(backup, default_local)
    lost_with_machine = (
        "a lost machine takes the backup with it, and neither contract can rebuild what it "
        "held: put --backup on storage that survives the machine"
    )
    if exposure is None:
        durability = (
            "the plan's range contract covers whole windows rebuilt from the backup, "
            "whatever the failure lost"
        )
        if backup_local:
            durability += f"; the backup is on a local disk: {lost_with_machine}"
        return RunExposure(RANGE, None, rows, local, backup_local, durability)
    if local and backup_local:
        durability = (
            "the checkpoint and the backup are on a local disk: the crash contract covers a "
            f"process crash (both survive it); {lost_with_machine}"
        )
    elif backup_local:
        durability = (
            f"the checkpoint is on {_where(checkpoint)} but the backup is on a local "
            f"disk: the crash contract covers a process crash; {lost_with_machine}"
        )
    elif local:
        durability = (
            "the checkpoint is on a local disk: the crash contract covers a process crash "
            "(the window state survives); a lost machine takes the state with it and falls "
            f"under the range contract (rebuild whole windows from the backup on "
            f"{_where(backup)} with recover --from --to, which reads a local or mounted "
            "copy)"
        )
    else:
        durability = (
            f"the checkpoint is on {_where(checkpoint)}: the crash contract covers "
            "a failure that storage survives; one that loses the window state falls under "
            "the range contract (rebuild whole windows with recover --from --to, which "
            "reads a local or mounted copy of the backup)"
        )
    return RunExposure(
        CRASH, exposure, rows, local, backup_local, durability,
        _warning(exposure, rows, trigger_s),
    )  # fmt: skip


def _where(uri: str) -> str:
    """The file system a remote ``uri`` is on: its scheme, or Hadoop's default one."""
    return urlparse(str(uri)).scheme or "the cluster's default file system (fs.defaultFS)"


def _warning(exposure: int, rows: int | None, trigger_s: float) -> str | None:
    rule = f"micro-batches over {exposure} row{'' if exposure == 1 else 's'} back up every sensor"
    if rows is None:
        return (
            f"a catch-up run (--available-now) takes what landed, as many files a "
            f"micro-batch as --max-files-per-trigger allows (every file when it is not "
            f"given): {rule}"
        )
    if rows > exposure:
        return (
            f"a {trigger_s:g} s trigger carries about {rows} rows at the data's rate (more "
            f"after a slow batch), more than the plan's exposure of {exposure}: {rule} (a "
            "shorter --trigger keeps the plan's savings)"
        )
    return None
