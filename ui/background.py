"""Streamlit side of background jobs: start them, poll them in a fragment, cancel them.

The work runs on a ``ui.jobs`` thread that never calls ``st.*``; the fragment
below polls the job and reruns the whole page once it is done, so the page
shows the result (a measured plan, measured what-if points) without ever
blocking while it is computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

import streamlit as st

from ui.jobs import Job, JobRunner, Progress, get_runner

__all__ = ["Progress", "forget_if_done", "job_panel", "runner"]
POLL_SECONDS = 1.0
_RERUNS = "_jobs_reruns"  # job serial -> (reruns asked for, when the last was asked)
RERUN_TRIES, RERUN_RETRY_S = 3, 4.0


def runner() -> JobRunner:
    return get_runner()


def _cancel(key: Hashable) -> None:
    job = get_runner().get(key)
    if job is not None:
        job.cancel()


def _retry(key: Hashable) -> None:
    get_runner().forget(key)


def forget_if_done(key: Hashable, found: Callable[[], bool]) -> None:
    """Forget job ``key`` if it is done but ``found()`` does not find its result (it fell
    out of the cache): the job is to run again, not be shown as done forever.

    ``found`` is asked after the job's state: a job that finished since the caller
    looked has put its result first, and its panel reruns the page."""
    job = get_runner().get(key)
    if job is not None and job.state == "done" and not found():
        get_runner().forget(key)


@st.fragment(run_every=POLL_SECONDS)
def job_panel(key: Hashable, what: str, cancellable: bool = True) -> None:
    """Progress, Cancel and the outcome of job ``key``; reruns the page when it is done."""
    job: Job | None = get_runner().get(key)
    if job is None:
        return
    view = job.snapshot()
    if view.state == "running":
        text = f"{what}: {view.message} ({view.seconds:.0f} s)"
        if view.cancel_requested:
            text += " — cancelling at the next step"
        left, right = st.columns([6, 1])
        left.progress(view.fraction, text=text)
        if cancellable:
            right.button(
                "Cancel", key=f"cancel_{abs(hash(key))}", on_click=_cancel, args=(key,),
                disabled=view.cancel_requested, width="stretch",
            )  # fmt: skip
        return
    if view.state == "done":  # the page finds the result in its cache on a full rerun
        if _rerun_due(job.serial, time.monotonic()):
            st.rerun(scope="app")
        return
    label = "cancelled" if view.state == "cancelled" else "failed"
    (st.info if label == "cancelled" else st.warning)(f"{what} {label}: {view.error}")
    st.button("Run it again", key=f"retry_{abs(hash(key))}", on_click=_retry, args=(key,))


def _rerun_due(serial: int, now: float) -> bool:
    """Whether to ask for a full rerun for the done job ``serial`` now.

    A full rerun draws the result and no longer this panel. If the panel still
    polls, the request was lost (a fragment rerun that raced a full one; seen
    under load), so ask again after ``RERUN_RETRY_S``, at most ``RERUN_TRIES``
    times: never a stuck page, never a rerun loop.
    """
    asked = st.session_state.setdefault(_RERUNS, {})
    count, last = asked.get(serial, (0, -RERUN_RETRY_S))
    if count >= RERUN_TRIES or now - last < RERUN_RETRY_S:
        return False
    asked[serial] = (count + 1, now)
    return True


def submit(key: Hashable, label: str, work: Callable[[Progress], object]) -> Job:
    return get_runner().submit(key, label, work)
