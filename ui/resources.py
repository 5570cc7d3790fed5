"""Heavy, process-wide resources, created once per server process.

Everything here is shared by every browser session (``st.cache_resource``):
the live pipeline manager, the work directory, the plan cache and the shipped
sample. Never keep these in ``st.session_state``.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import streamlit as st

from engine.data import SensorHistory, load_history
from engine.live import PipelineManager, get_manager
from ui.plans import PlanCache

HOME_ENV = "LACUNA_HOME"
SAMPLE_ENV = "LACUNA_SAMPLE"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SAMPLE = REPO_ROOT / "sample_data" / "beijing_aq_sample.csv"


def sample_path() -> Path:
    """The dataset a first-time visitor sees (``LACUNA_SAMPLE`` overrides it)."""
    return Path(os.environ.get(SAMPLE_ENV) or DEFAULT_SAMPLE)


def work_dir() -> Path:
    """``LACUNA_HOME`` (default ``~/.lacuna``), or a temp dir when that is not writable.

    Read at every call and kept per value: a process whose ``LACUNA_HOME`` changes (the
    test suite gives each test its own) must not go on writing to the first one."""
    return _work_dir(os.environ.get(HOME_ENV) or "")


def home_fallback() -> str | None:
    """What to tell the operator when ``LACUNA_HOME`` was not writable and the app
    works in a temporary folder (everything there is lost when the server stops)."""
    home = os.environ.get(HOME_ENV) or ""
    wanted = _wanted(home)
    used = _work_dir(home)
    if used == wanted:
        return None
    return (
        f"{HOME_ENV} {str(wanted)!r} is not writable: the app works in the temporary folder "
        f"{str(used)!r}, so uploads, the saved session and the live pipeline's backup are "
        f"lost when the server stops. Set {HOME_ENV} to a writable folder and restart."
    )


def _wanted(home: str) -> Path:
    return Path(home or Path.home() / ".lacuna").expanduser()


@st.cache_resource(show_spinner=False)
def _work_dir(home: str) -> Path:
    wanted = _wanted(home)
    try:
        wanted.mkdir(parents=True, exist_ok=True)
        probe = wanted / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
        return wanted
    except OSError:
        # A read-only home must not stop the app: fall back to a private temp dir.
        return Path(tempfile.mkdtemp(prefix="lacuna-"))


@st.cache_resource(show_spinner=False)
def pipeline_manager() -> PipelineManager:
    """The process-wide live pipeline manager (one pipeline for every session)."""
    return get_manager()


@st.cache_resource(show_spinner=False)
def plan_cache() -> PlanCache:
    """Plans shared by every session, keyed by data, sensors and parameters."""
    return PlanCache(capacity=64)


@st.cache_resource(show_spinner=False)
def sample_history(path: str, mtime_ns: int) -> SensorHistory:
    """The shipped sample, loaded once (``mtime_ns`` reloads it when the file changes)."""
    del mtime_ns  # only part of the cache key
    return load_history(path)


class PipelineLog:
    """What the UI remembers about the shared pipeline: who started it, past reports."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: str | None = None
        self.started: dict[str, str] = {}
        self.reports: dict[str, dict] = {}  # mode -> last recovery report (to_dict)
        self.history: Any = None  # the SensorHistory the pipeline replays
        self.plan: Any = None  # the BackupPlan it started with
        self.monitor: Any = None  # its ReplanningMonitor: ``monitor.plan`` is the plan in force
        self.data_key: str | None = None  # the PlanningData key it was started from


@st.cache_resource(show_spinner=False)
def pipeline_log() -> PipelineLog:
    return PipelineLog()
