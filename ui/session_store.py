"""The app's last state on disk, so a browser refresh keeps the data set, sensors and plan.

No Streamlit here. Under ``<LACUNA_HOME>/session`` the app keeps ``state.json``
(dataset name, fingerprint, chosen sensors, plan parameters) and, for an
uploaded data set, ``dataset.parquet`` (wide: a ``time`` column and one float
column per sensor) with ``report.json``, what the loader found in the uploaded
file (the cleaned copy has no missing values, unsorted rows or notes left to
find). A restore checks the fingerprint of what it loads: data that differs
from what was saved is never restored silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from engine.atomic import write_atomically
from engine.data import DataReport, SensorHistory, load_history
from engine.errors import DataError, EngineError
from engine.planning import PlanParameters

STATE_FILE, DATA_FILE, REPORT_FILE = "state.json", "dataset.parquet", "report.json"


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
        write_atomically(folder / DATA_FILE, lambda tmp: frame.to_parquet(tmp, index=False))
        report = {"fingerprint": saved.fingerprint, "report": history.report.to_dict()}
        write_atomically(folder / REPORT_FILE, lambda tmp: tmp.write_text(json.dumps(report)))
    state = {
        "name": saved.name,
        "fingerprint": saved.fingerprint,
        "is_sample": saved.is_sample,
        "selection": list(saved.selection),
        "params": saved.params.to_dict(),
    }
    write_atomically(folder / STATE_FILE, lambda tmp: tmp.write_text(json.dumps(state, indent=1)))


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
    report = None if saved.is_sample else load_report(folder, saved.fingerprint)
    return history if report is None else replace(history, report=report)


def load_report(folder: Path, fingerprint: str) -> DataReport | None:
    """The saved upload's loader report, or None when there is none for that data set or
    it is not readable (the report of the saved copy is shown then)."""
    path = folder / REPORT_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        if raw["fingerprint"] != fingerprint:
            return None
        return _report_from_dict(raw["report"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _report_from_dict(data: dict[str, Any]) -> DataReport:
    """The inverse of ``DataReport.to_dict`` (JSON turned its tuples into lists)."""
    names = {f.name for f in fields(DataReport)}
    if set(data) != names:
        raise KeyError(f"report fields differ: {sorted(set(data) ^ names)}")
    tuples = {
        "sensors": tuple(data["sensors"]),
        "constant_sensors": tuple(data["constant_sensors"]),
        "duplicate_sensors": tuple(tuple(pair) for pair in data["duplicate_sensors"]),
        "notes": tuple(data["notes"]),
        "missing_rate": {str(k): float(v) for k, v in data["missing_rate"].items()},
    }
    return DataReport(**{**data, **tuples})
