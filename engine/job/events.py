"""The job's notable events, kept beside the backup where a console can read them.

Every event is a JSON line on stderr (``engine.job.run``). Those an operator
must be able to find after the fact (an alert, a re-plan, an expired plan, a
failed re-plan, a resumed monitor, input it could not use, a micro-batch over the
plan's exposure, plan versions an interrupted run wrote and its rerun withdrew) are also written to
``<backup>/_lacuna/events/<batch:012d>-<event>.json``, through Hadoop's
FileSystem like the job's other small files. Named by the micro-batch that
raised them, a replayed batch rewrites its own events rather than adding more; each
carries ``logged_at`` (UTC), which orders one batch's events.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from engine.backup.durable import DurableFiles

NOTABLE = (
    "alert", "replan_started", "replan", "replan_abandoned", "plan_expired", "replan_failed",
    "monitor_resumed", "input_anomaly", "overfull_windows", "late_readings",
    "future_readings", "nanosecond_timestamps", "unread_landing_files", "over_exposure",
    "control_started",
    "control_waiting", "control", "control_failed", "plan_versions_withdrawn",
)  # fmt: skip
EVENTS_DIR = ("_lacuna", "events")


def event_batch(record: Mapping[str, Any]) -> int:
    """The micro-batch an event belongs to (a re-plan: the batch before its first)."""
    if "batch_id" in record:
        return int(record["batch_id"])
    if "before_batch" in record:
        return int(record["before_batch"])
    return int(record["first_batch"]) - 1


def event_file(record: Mapping[str, Any]) -> str:
    return f"{event_batch(record):012d}-{record['event']}.json"


class DurableLog:
    """``log`` that also keeps the ``NOTABLE`` events under ``root``."""

    def __init__(
        self, files: DurableFiles, root: str, log: Callable[[dict[str, Any]], None]
    ) -> None:
        self.files, self.root, self.log = files, root.rstrip("/"), log

    def __call__(self, record: dict[str, Any]) -> None:
        if record.get("event") in NOTABLE:
            # when it was kept: a console orders one batch's events by it (file names
            # only order the batches)
            record = {**record, "logged_at": datetime.now(UTC).isoformat(timespec="microseconds")}
            line = json.dumps(record, default=str) + "\n"
            self.files.write(f"{self.root}/{event_file(record)}", line.encode())
        self.log(record)
