"""The production job's command-line flags (``python -m engine run``, ``compact``) and
their defaults: no import beyond argparse, so the CLI's parser stays light."""

from __future__ import annotations

import argparse

__all__ = ["KEEP", "add_run_flags"]

KEEP = 10  # newest micro-batches compaction leaves alone by default


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="exported backup config (.json/.yaml)")
    p.add_argument("--source", required=True, help="landing directory of Parquet readings")
    p.add_argument("--backup", required=True, help="backup dataset URI (file://, hdfs://, s3a://)")
    p.add_argument("--checkpoint", required=True, help="checkpoint URI (durable)")
    p.add_argument(
        "--master",
        default=None,
        help="Spark master (default: LACUNA_SPARK_MASTER, else spark-submit's --master when "
        "run by spark-submit, else local[*])",
    )
    p.add_argument("--available-now", action="store_true", help="process what landed, then stop")
    p.add_argument(
        "--watermark", type=float, default=0.0, help="allowed lateness, seconds (default 0)"
    )
    p.add_argument(
        "--no-replan",
        action="store_true",
        help="never plan again: keep the plan past its valid_until and on a monitor alert, "
        "and run no online control (default: plan again on the landed readings)",
    )
    p.add_argument(
        "--no-control",
        action="store_true",
        help="no online control of the backup set (default: every closed window's shadow "
        "check steers it, under the plan's contract; --no-replan turns it off too)",
    )
    p.add_argument(
        "--replan-in-batch",
        action="store_true",
        help="plan inside the micro-batch that finds the plan expired (the stream waits; "
        "default: in the background, except with --available-now)",
    )
    p.add_argument(
        "--trigger", type=float, default=1.0, help="micro-batch interval, seconds (default 1)"
    )
    p.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=None,
        help="landing files one micro-batch takes at most (default: every file landed)",
    )
