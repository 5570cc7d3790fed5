"""A small background job runner: heavy work off the script thread, with progress and cancel.

No Streamlit here, and the worker threads never call ``st.*``: a page starts a
job (``JobRunner.submit``), a fragment polls ``Job.snapshot()`` and reruns the
page when the job is done. Cancel is cooperative: the engine's progress
callback (``Job.progress``) raises ``Cancelled`` at its next call once
``cancel()`` was asked for. Jobs are process-wide and keyed, so two sessions
asking for the same backtest share one thread, and a finished result stays
until it is forgotten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from engine.errors import Cancelled, EngineError

Progress = Callable[[float, str], None]
log = logging.getLogger(__name__)
STATES = ("running", "done", "failed", "cancelled")


@dataclass(frozen=True)
class JobView:
    """What a poller sees of a job at one moment."""

    key: Hashable
    label: str
    state: str
    fraction: float
    message: str
    seconds: float
    error: str | None
    cancel_requested: bool


class Job:
    """One unit of work on its own daemon thread."""

    def __init__(
        self,
        key: Hashable,
        label: str,
        work: Callable[[Progress], Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key, self.label, self._work, self._clock = key, label, work, clock
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._state, self._fraction, self._message = "running", 0.0, "starting"
        self._error: str | None = None
        self.result: Any = None
        self._started = clock()
        self._ended: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"lacuna-job-{label}", daemon=True)

    def start(self) -> Job:
        self._thread.start()
        return self

    def progress(self, fraction: float, message: str) -> None:
        """The engine's progress callback; raises ``Cancelled`` once cancel was asked."""
        if self._cancel.is_set():
            raise Cancelled(f"{self.label} cancelled at {100 * self._fraction:.0f} %")
        with self._lock:
            self._fraction, self._message = min(1.0, max(0.0, float(fraction))), message

    def cancel(self) -> None:
        self._cancel.set()

    def _run(self) -> None:
        try:
            result = self._work(self.progress)
        except Cancelled as err:
            self._finish("cancelled", str(err))
        except EngineError as err:
            self._finish("failed", str(err))
        except Exception as err:  # a bug: keep the thread's traceback in the log
            log.exception("background job %s failed", self.label)
            self._finish("failed", f"{type(err).__name__}: {err}")
        else:
            self.result = result
            self._finish("done", None)

    def _finish(self, state: str, error: str | None) -> None:
        with self._lock:
            self._state, self._error, self._ended = state, error, self._clock()
            if state == "done":
                self._fraction, self._message = 1.0, "done"

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def snapshot(self) -> JobView:
        with self._lock:
            end = self._ended if self._ended is not None else self._clock()
            return JobView(
                self.key, self.label, self._state, self._fraction, self._message,
                end - self._started, self._error, self._cancel.is_set(),
            )  # fmt: skip

    @property
    def state(self) -> str:
        return self.snapshot().state


class JobRunner:
    """Keyed jobs shared by every session; at most one live job per key. Only the
    newest ``keep`` finished jobs are remembered (their results live in caches)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, keep: int = 64) -> None:
        self._clock, self.keep = clock, keep
        self._lock = threading.Lock()
        self._jobs: dict[Hashable, Job] = {}

    def submit(self, key: Hashable, label: str, work: Callable[[Progress], Any]) -> Job:
        """Start ``work(progress)`` unless a job with ``key`` exists (then return that one)."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                self._prune()
                job = self._jobs[key] = Job(key, label, work, self._clock).start()
            return job

    def _prune(self) -> None:
        """Forget the oldest finished jobs beyond ``keep`` (the dict keeps start order)."""
        finished = [k for k, j in self._jobs.items() if j.state != "running"]
        for k in finished[: max(0, len(finished) - self.keep + 1)]:
            del self._jobs[k]

    def get(self, key: Hashable) -> Job | None:
        with self._lock:
            return self._jobs.get(key)

    def forget(self, key: Hashable) -> None:
        """Drop a job (a running one is cancelled first)."""
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is not None:
            job.cancel()

    def running(self) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs.values() if j.state == "running"]

    def wait_all(self, timeout: float = 300.0) -> bool:
        """Join every running job (tests); True if all ended in time."""
        deadline = self._clock() + timeout
        return all(job.join(max(0.0, deadline - self._clock())) for job in self.running())


_RUNNER: JobRunner | None = None
_RUNNER_LOCK = threading.Lock()


def get_runner() -> JobRunner:
    """The process-wide runner (one per server, like the pipeline manager)."""
    global _RUNNER
    with _RUNNER_LOCK:
        if _RUNNER is None:
            _RUNNER = JobRunner()
        return _RUNNER
