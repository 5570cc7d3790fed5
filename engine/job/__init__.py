"""The production job (``python -m engine run``): Spark Structured Streaming that backs up
the plan's sensors, keeps its open windows' state under its checkpoint and re-plans.
PySpark is imported inside functions only.

``run``: the job's entry and settings; ``sink``: what each micro-batch writes, durably;
``plans``: its plan versions and re-planner; ``transforms``: thin Spark transforms;
``partials``: mergeable open-window state; ``screening``: what a batch held besides the
plan's readings; ``landed_files``: the files a batch read; ``events``: its notable events;
``status``: what a job has done, read with DuckDB; ``compaction``: merging its batch
directories; ``flags``: its command-line flags. The names below load their modules on
first use (``engine.lazy``), so the CLI's parser imports only ``flags``.
"""

from typing import TYPE_CHECKING

from engine.job.flags import KEEP, add_run_flags
from engine.lazy import exports

if TYPE_CHECKING:
    from engine.job.compaction import compact, uncompacted
    from engine.job.plans import Replanner, at_once
    from engine.job.run import JobSettings, run_from_args, run_job
    from engine.job.status import JobStatus, read_job_status

__all__ = [
    "KEEP",
    "JobSettings",
    "JobStatus",
    "Replanner",
    "add_run_flags",
    "at_once",
    "compact",
    "read_job_status",
    "run_from_args",
    "run_job",
    "uncompacted",
]

if not TYPE_CHECKING:  # type checkers read the imports above
    __getattr__, __dir__ = exports(
        __name__,
        {
            "compaction": ("compact", "uncompacted"),
            "plans": ("Replanner", "at_once"),
            "run": ("JobSettings", "run_from_args", "run_job"),
            "status": ("JobStatus", "read_job_status"),
        },
    )
