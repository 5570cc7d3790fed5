"""The production job (``python -m engine run``): Spark Structured Streaming that backs up
the plan's sensors, keeps its open windows' state under its checkpoint and re-plans.
PySpark is imported inside functions only.

``run``: the job's entry and settings; ``sink``: what each micro-batch writes, durably;
``plans``: its plan versions and re-planner; ``transforms``: thin Spark transforms;
``partials``: mergeable open-window state; ``screening``: what a batch held besides the
plan's readings; ``landed_files``: the files a batch read; ``events``: its notable events;
``status``: what a job has done, read with DuckDB; ``compaction``: merging its batch
directories.
"""

from engine.job.compaction import KEEP, compact, uncompacted
from engine.job.plans import Replanner, at_once
from engine.job.run import JobSettings, add_run_flags, run_from_args, run_job
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
