"""The Data page's glue: accept an upload, describe a dataset."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.data import LoadOptions
from engine.errors import EngineError
from ui import state
from ui.format import shorten
from ui.panels import QUIET
from ui.upload import load_upload

UPLOAD_TYPES = ["csv", "txt", "tsv", "parquet", "pq"]
_LAST = "_upload_last"  # (file id, options) of the last upload handled
_ERROR = "_upload_error"


def accept_upload(uploaded: object, options: LoadOptions) -> None:
    """Load a new upload once; on error keep the last good dataset and say why."""
    if uploaded is None:
        st.session_state.pop(_LAST, None)
        st.session_state.pop(_ERROR, None)
        return
    marker = (getattr(uploaded, "file_id", None) or uploaded.name, uploaded.size, options)
    if st.session_state.get(_LAST) != marker:
        st.session_state[_LAST] = marker
        st.session_state.pop(_ERROR, None)
        with st.status(
            f"Loading {uploaded.name} ({uploaded.size / 1e6:.1f} MB)...", expanded=True
        ) as box:
            bar = st.progress(0.0, text="receiving")
            try:
                history = load_upload(
                    uploaded.name,
                    uploaded.getvalue(),
                    options,
                    state.upload_dir(),
                    lambda f, m: bar.progress(min(1.0, f), text=m),
                )
            except EngineError as err:
                st.session_state[_ERROR] = shorten(f"{err}")
                box.update(label=f"Could not load {uploaded.name}", state="error")
            except OSError as err:  # the disk, not the data: full, read-only, permissions
                st.session_state[_ERROR] = (
                    f"{uploaded.name}: cannot store the upload: {err.strerror or err}"
                )
                box.update(label=f"Could not store {uploaded.name}", state="error")
            else:
                state.set_dataset(state.make_dataset(history, uploaded.name))
                st.session_state.pop("w_sensors", None)
                box.update(label=f"Loaded {uploaded.name}", state="complete", expanded=False)
    if st.session_state.get(_ERROR):
        kept = state.current_dataset().name
        st.error(f"{st.session_state[_ERROR]} (still using {kept})")


def use_sample() -> None:
    """Back to the shipped sample (a button callback): loaded here, not left to
    ``state.current_dataset``, which would restore the saved session (the last upload)."""
    for key in ("w_sensors", _ERROR):
        st.session_state.pop(key, None)
    state.set_dataset(state.sample_dataset())


def interval_text(seconds: float) -> str:
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}" + ("s" if unit == "day" and n > 1 else "")
    return f"{seconds:g} s"


def report_summary(dataset: state.Dataset) -> None:
    """Format, sensors, sampling, gaps and missing values, as the loader found them."""
    r = dataset.history.report
    missing = sum(r.missing_rate.values()) / max(len(r.missing_rate), 1)
    c = st.columns(5)
    c[0].metric("Format", f"{r.layout} {dataset.name.rsplit('.', 1)[-1].upper()}")
    c[1].metric("Sensors", len(r.sensors))
    c[2].metric(
        "Rows",
        f"{r.n_rows:,}",
        f"{r.n_rows_raw - r.n_rows:,} dropped",
        **QUIET,
    )
    c[3].metric(
        "Sampling interval",
        interval_text(r.sampling_interval_s),
        f"{r.n_gaps} gaps",
        **QUIET,
    )
    c[4].metric(
        "Missing values",
        f"{100 * missing:.2f} %",
        f"{r.n_values_filled:,} filled ({r.missing_policy})",
        **QUIET,
    )
    first, last = dataset.history.times[0], dataset.history.times[-1]
    st.caption(
        f"{dataset.name}: time column {r.time_column!r}, {str(first)[:19]} .. "
        f"{str(last)[:19]} UTC (times without a zone are read as UTC)"
        + (" (the shipped sample)" if dataset.is_sample else "")
    )
    with st.expander(f"What the loader did ({len(r.notes)} notes)"):
        for note in r.notes:
            st.caption(f"• {note}")
    if r.constant_sensors:
        st.warning(f"Constant sensors (no information): {', '.join(r.constant_sensors)}")
    for said in r.warning_notes():
        st.warning(said[0].upper() + said[1:] + ".")
    if (filled := r.mostly_filled()) is not None:
        st.warning(f"Mostly filled in: {filled}.")
    if r.duplicate_sensors:
        st.info(
            f"{len(r.duplicate_sensors)} sensors repeat another one exactly (e.g. "
            f"{r.duplicate_sensors[0][0]} = {r.duplicate_sensors[0][1]}): the plan rebuilds "
            "such copies for free."
        )


def missing_table(dataset: state.Dataset) -> pd.DataFrame:
    r = dataset.history.report
    return pd.DataFrame(
        {"sensor": list(r.missing_rate), "missing %": [100 * v for v in r.missing_rate.values()]}
    )
