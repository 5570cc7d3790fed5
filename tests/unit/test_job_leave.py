"""A job that leaves while a background plan runs exits with its own code, not SIGABRT."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from engine.job.plans import in_background, leave, settle_background

ROOT = Path(__file__).resolve().parents[2]

# A background "plan" inside DuckDB (native code) when the process leaves: killed there
# as the interpreter finalises, the process aborted ("terminate called without an active
# exception", a fatal-error dump, -6), as a job whose JVM was killed during its first
# model fit did in CI.
SCRIPT = """
import sys, time
import duckdb
from engine.job.plans import in_background, leave

in_background(lambda: duckdb.connect().execute(
    "SELECT sum(i) FROM range(4000000000) t(i)").fetchall())
time.sleep(0.5)
print("leaving", flush=True)
sys.exit(leave(2, grace_s=0.2))
"""


def test_a_job_leaving_during_a_background_plan_exits_with_its_own_code() -> None:
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", SCRIPT], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == "leaving\n"
    assert "Fatal Python error" not in done.stderr and "terminate called" not in done.stderr


def test_a_plan_that_finishes_within_the_grace_is_waited_for() -> None:
    release, finished = threading.Event(), []

    def work() -> str:
        release.wait(5)
        finished.append(True)
        return "plan"

    future = in_background(work)
    assert not settle_background(0.05)  # still running
    threading.Timer(0.1, release.set).start()
    assert leave(0, grace_s=5.0) == 0  # it waited
    assert finished == [True] and future.result(timeout=0) == "plan"
    assert settle_background(0.0)
