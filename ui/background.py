"""Streamlit side of background jobs: start them, poll them in a fragment, cancel them.

The work runs on a ``ui.jobs`` thread that never calls ``st.*``; the fragment
below polls the job and reruns the whole page once it is done, so the page
shows the result (a measured plan, measured what-if points) without ever
blocking while it is computed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import streamlit as st

from ui.jobs import Job, JobRunner, Progress, get_runner

__all__ = ["Progress", "job_panel", "runner"]
POLL_SECONDS = 1.0
_SEEN = "_jobs_seen_done"  # job keys whose completion already reran the page


def runner() -> JobRunner:
    return get_runner()


def _cancel(key: Hashable) -> None:
    job = get_runner().get(key)
    if job is not None:
        job.cancel()


def _retry(key: Hashable) -> None:
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
    if view.state == "done":
        seen = st.session_state.setdefault(_SEEN, set())
        if key not in seen:  # once per session: the page now finds the result in its cache
            seen.add(key)
            st.rerun(scope="app")
        return
    label = "cancelled" if view.state == "cancelled" else "failed"
    (st.info if label == "cancelled" else st.warning)(f"{what} {label}: {view.error}")
    st.button("Run it again", key=f"retry_{abs(hash(key))}", on_click=_retry, args=(key,))


def submit(key: Hashable, label: str, work: Callable[[Progress], object]) -> Job:
    return get_runner().submit(key, label, work)
