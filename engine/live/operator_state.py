"""The live pipeline's operator state and its disorder stage's frames, pure pandas.

The state a batch commits is the reading-indexed windows' ``WindowState`` and the
disorder stage's snapshot, packed together (``pack_state``): a replayed or restarted
batch starts from both. A stage's late readings still complete the reading-indexed
windows (``late_as_released``), its versioned results are stored beside the live
ones (``with_stage_results``), and after a failure a new stage reports no window begun
before the restart (``resume_stage``).
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pandas as pd

from engine.live.batch import WindowState
from engine.live.spec import HistoryLike, Stage

__all__ = ["late_as_released", "pack_state", "resume_stage", "unpack_state", "with_stage_results"]


def pack_state(state: WindowState, stage: Any | None) -> bytes:
    """``state`` and ``stage``'s snapshot (None: no stage) as one blob for the store."""
    snapshot = json.dumps(stage.snapshot() if stage is not None else None).encode()
    buf = io.BytesIO()
    np.savez(
        buf,
        window=np.frombuffer(state.to_bytes(), np.uint8),
        stage=np.frombuffer(snapshot, np.uint8),
    )
    return buf.getvalue()


def unpack_state(blob: bytes, stage: Any | None) -> WindowState:
    """The window state of ``pack_state``'s blob; ``stage`` restored to its snapshot."""
    with np.load(io.BytesIO(blob)) as data:
        snapshot = json.loads(data["stage"].tobytes().decode())
        state = WindowState.from_bytes(data["window"].tobytes())
    if stage is not None and snapshot is not None:
        stage.restore(snapshot)
    return state


def late_as_released(late: pd.DataFrame, released: pd.DataFrame) -> pd.DataFrame:
    """Late readings in the released frame's columns and time zone handling."""
    out = late[["seq", "event_time", "sensor", "value"]].copy()
    times = pd.to_datetime(out["event_time"], utc=True)
    tz = getattr(released["event_time"].dtype, "tz", None)
    out["event_time"] = times.dt.tz_convert(tz) if tz is not None else times.dt.tz_localize(None)
    return out


def with_stage_results(live: pd.DataFrame, staged: pd.DataFrame) -> pd.DataFrame:
    """The live results and the stage's (provisional, correction, final) as one frame,
    times as naive UTC (the store's TIMESTAMP columns)."""
    staged = staged[list(live.columns)].copy()
    live = live.copy()
    for name in ("window_start", "window_end"):
        staged[name] = _naive_utc(staged[name])
        live[name] = _naive_utc(live[name])
    frames = [f for f in (live, staged) if not f.empty]  # an empty frame's dtypes: none
    if len(frames) < 2:
        return (frames or [live])[0].reset_index(drop=True)
    return pd.concat(frames, ignore_index=True)


def _naive_utc(times: pd.Series) -> pd.Series:
    return pd.to_datetime(times, utc=True).dt.tz_localize(None)


def resume_stage(stage: Stage, history: HistoryLike | None, row: int) -> None:
    """A restarted pipeline's disorder stage reports no window begun before ``row``.

    (``DisorderStage.resume_at``: the failure discarded the readings it held of them.)
    """
    resume = getattr(stage, "resume_at", None)
    if resume is None or history is None:
        return
    times = np.asarray(history.times).astype("datetime64[ns]")  # as the stage's origin
    if 0 <= row < len(times):
        resume(int(times[row].astype(np.int64)) / 1e9)
    else:
        resume(float("inf"))  # the restart starts past the history: nothing to report


def batch_results(live: pd.DataFrame, stage: Any | None) -> tuple[pd.DataFrame, dict[str, int]]:
    """A batch's live window results plus, with a disorder stage, its versioned results
    (provisional, then corrections once late tuples span Gamma, then final), and the
    count of the stage's rows by kind."""
    pop = getattr(stage, "pop_results", None)  # a stage may keep no results
    if pop is None:
        return live, {}
    staged = pop()
    if not len(staged):
        return live, {}
    return with_stage_results(live, staged), staged["kind"].value_counts().to_dict()
