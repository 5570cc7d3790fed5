"""The app's last state on disk, so a browser refresh keeps the data set, sensors and plan.

No Streamlit here. Under ``<LACUNA_HOME>/session`` the app keeps ``state.json``
(dataset name, fingerprint, chosen sensors, plan parameters) and, for an
uploaded data set, ``dataset.parquet`` (wide: a ``time`` column and one float
column per sensor). A restore checks the fingerprint of what it loads: data
that differs from what was saved is never restored silently.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from engine.data import SensorHistory, load_history
from engine.errors import DataError, EngineError
from engine.planning import PlanParameters

STATE_FILE, DATA_FILE = "state.json", "dataset.parquet"


@dataclass(frozen=True)
class SavedSession:
    """What a new browser session restores."""

    name: str
    fingerprint: str
    is_sample: bool
    selection: tuple[str, ...]
    params: PlanParameters


def save_session(
    folder: Path, history: SensorHistory, saved: SavedSession, write_data: bool
) -> None:
    """Write the state (and, when ``write_data``, the data set) atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    if write_data:
        frame = pd.DataFrame(history.values, columns=list(history.sensors))
        frame.insert(0, "time", pd.to_datetime(history.times))
        _atomic(folder / DATA_FILE, lambda tmp: frame.to_parquet(tmp, index=False))
    state = {
        "name": saved.name,
        "fingerprint": saved.fingerprint,
        "is_sample": saved.is_sample,
        "selection": list(saved.selection),
        "params": saved.params.to_dict(),
    }
    _atomic(folder / STATE_FILE, lambda tmp: tmp.write_text(json.dumps(state, indent=1)))


def load_state(folder: Path) -> SavedSession | None:
    """The saved state, or None when there is none or it is not readable."""
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        known = set(PlanParameters.KEYS)
        params = PlanParameters.from_dict({k: v for k, v in raw["params"].items() if k in known})
        return SavedSession(
            str(raw["name"]),
            str(raw["fingerprint"]),
            bool(raw["is_sample"]),
            tuple(raw["selection"]),
            params,
        )
    except (OSError, ValueError, KeyError, TypeError, EngineError):
        return None


def load_saved_data(folder: Path, saved: SavedSession, sample: Path) -> SensorHistory:
    """The saved data set (the sample, or the saved upload), checked against its fingerprint.

    Raises ``DataError`` when it is gone or differs from what was saved.
    """
    path = sample if saved.is_sample else folder / DATA_FILE
    if not path.exists():
        raise DataError(f"the last data set ({saved.name}) is no longer at {str(path)!r}")
    history = load_history(path)
    if history.fingerprint() != saved.fingerprint:
        raise DataError(
            f"the data at {str(path)!r} differs from the last session's {saved.name} "
            "(fingerprint changed): not restored"
        )
    return history


def _atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)
