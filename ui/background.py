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

__all__ = ["Progress", "drawn", "forget_if_done", "job_panel", "rerun_app", "runner"]
POLL_SECONDS = 1.0
RERUN_RETRY_S = 4.0
_ASKED = "_rerun_asked"  # watch name -> when a fragment last asked for a full rerun


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


def job_panel(key: Hashable, what: str, cancellable: bool = True) -> None:
    """Progress, Cancel and the outcome of job ``key``; reruns the page when it is done.

    Called by a page only while the job's result is not on it (the result is
    not in its cache), so a done job means the page is stale.
    """
    drawn(("job", key))
    _job_fragment(key, what, cancellable)


@st.fragment(run_every=POLL_SECONDS)
def _job_fragment(key: Hashable, what: str, cancellable: bool) -> None:
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
        rerun_app(("job", key))
        return
    label = "cancelled" if view.state == "cancelled" else "failed"
    (st.info if label == "cancelled" else st.warning)(f"{what} {label}: {view.error}")
    st.button("Run it again", key=f"retry_{abs(hash(key))}", on_click=_retry, args=(key,))


def drawn(watch: Hashable) -> None:
    """A full run of the page is drawing ``watch``'s state: reruns asked for it came."""
    st.session_state.setdefault(_ASKED, {}).pop(watch, None)


def rerun_app(watch: Hashable, now: float | None = None) -> None:
    """From a fragment: rerun the whole page for ``watch``, and ask again every
    ``RERUN_RETRY_S`` until a full run (``drawn``) shows it came.

    A request can be lost (a fragment rerun racing a full one; seen under load
    in the browser tests, the page then kept its old state for good), so it is
    not asked once and forgotten.
    """
    asked = st.session_state.setdefault(_ASKED, {})
    t = time.monotonic() if now is None else now
    if t - asked.get(watch, -RERUN_RETRY_S) < RERUN_RETRY_S:
        return
    asked[watch] = t
    st.rerun(scope="app")


def submit(key: Hashable, label: str, work: Callable[[Progress], object]) -> Job:
    return get_runner().submit(key, label, work)
