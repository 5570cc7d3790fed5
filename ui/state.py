"""Session-state accessors: the current dataset, the sensors chosen, the parameters.

One browser session = one ``st.session_state``. Only plain data lives here
(histories, parameters); heavy shared resources live in ``ui.resources``. A bad
upload never replaces the last good dataset: ``set_dataset`` is only called
with a history that loaded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import streamlit as st

from engine.data import SensorHistory
from engine.data.units import sensor_units
from engine.errors import EngineError
from engine.live import default_exposure
from engine.planning import PlanParameters
from engine.query import WindowQuery
from ui import resources, session_store
from ui.format import eps_text
from ui.plans import PlanningData
from ui.session_store import SavedSession

DATASET, SELECTION, PARAMS, AUTO_BACKTEST = "dataset", "sensors", "params", "auto_backtest"
RESTORE_NOTE = "_restore_note"  # what a new session restored (or why it could not)
PLANNED = "_planned_for"  # the last choice of enough sensors the parameters were set for
DEFAULT_GROUPS = ("TEMP", "DEWP")  # on the shipped sample: both in degC
MIN_SENSORS = 2


@dataclass(frozen=True, eq=False)
class Dataset:
    """A loaded history and where it came from."""

    history: SensorHistory
    name: str
    fingerprint: str
    is_sample: bool


def make_dataset(history: SensorHistory, name: str, is_sample: bool = False) -> Dataset:
    return Dataset(history, name, history.fingerprint(), is_sample)


def current_dataset() -> Dataset:
    """The session's dataset. A new session restores the workspace's last state (one per
    server, shared by its browser sessions), else starts on the shipped sample; a session
    that has a dataset keeps it until its operator uploads or picks the sample."""
    if DATASET not in st.session_state and not restore_session():
        set_dataset(sample_dataset())
    return st.session_state[DATASET]


def sample_dataset() -> Dataset:
    path = resources.sample_path()
    history = resources.sample_history(str(path), path.stat().st_mtime_ns)
    return make_dataset(history, path.name, is_sample=True)


def set_dataset(dataset: Dataset) -> None:
    """Make ``dataset`` current, with a default sensor choice and parameters for it."""
    st.session_state[DATASET] = dataset
    st.session_state[SELECTION] = default_selection(dataset.history.sensors)
    st.session_state[PARAMS] = default_parameters(dataset.history, st.session_state[SELECTION])
    st.session_state[PLANNED] = list(st.session_state[SELECTION])
    save_session(write_data=not dataset.is_sample)


def session_dir() -> Path:
    return resources.work_dir() / "session"


def save_session(write_data: bool = False) -> None:
    """Keep the data set, sensors and parameters under LACUNA_HOME (survives a refresh)."""
    dataset = st.session_state[DATASET]
    saved = SavedSession(
        dataset.name,
        dataset.fingerprint,
        dataset.is_sample,
        tuple(st.session_state[SELECTION]),
        st.session_state[PARAMS],
    )
    try:
        session_store.save_session(session_dir(), dataset.history, saved, write_data)
    except OSError as err:  # a read-only home must not stop the app: say it once
        st.session_state[RESTORE_NOTE] = f"the session cannot be kept for a refresh: {err}"


def restore_session() -> bool:
    """Restore the app's last state into this new session; False if there is none."""
    saved = session_store.load_state(session_dir())
    if saved is None:
        return False
    try:
        history = session_store.load_saved_data(session_dir(), saved, resources.sample_path())
    except EngineError as err:
        st.session_state[RESTORE_NOTE] = str(err)
        return False
    chosen = [s for s in saved.selection if s in history.sensors]
    st.session_state[DATASET] = Dataset(history, saved.name, saved.fingerprint, saved.is_sample)
    st.session_state[SELECTION] = chosen or default_selection(history.sensors)
    st.session_state[PARAMS] = saved.params
    st.session_state[RESTORE_NOTE] = (
        f"Restored the last session: {saved.name}, {len(chosen)} sensors, "
        f"{eps_text(chosen or history.sensors, saved.params)}, delta {saved.params.delta:g}, "
        f"window {saved.params.window}."
    )
    return True


def suffix(sensor: str) -> str:
    """The quantity of a ``<station>_<quantity>`` name (the whole name otherwise)."""
    return sensor.rsplit("_", 1)[-1]


def sensor_groups(sensors: tuple[str, ...]) -> dict[str, list[str]]:
    """Sensors grouped by suffix, e.g. ``{"TEMP": [...], "PM2.5": [...]}``."""
    groups: dict[str, list[str]] = {}
    for s in sensors:
        groups.setdefault(suffix(s), []).append(s)
    return groups


def default_selection(sensors: tuple[str, ...]) -> list[str]:
    """TEMP and DEWP sensors when present (same unit), else every sensor."""
    chosen = [s for s in sensors if suffix(s) in DEFAULT_GROUPS]
    return chosen if len(chosen) >= MIN_SENSORS else list(sensors)


def nice_number(x: float) -> float:
    """``x`` rounded to 1, 2 or 5 times a power of ten."""
    if not np.isfinite(x) or x <= 0:
        return 1.0
    power = 10.0 ** np.floor(np.log10(x))
    step = min((1.0, 2.0, 5.0, 10.0), key=lambda m: abs(np.log(x / (m * power))))
    return float(step * power)


def group_default(history: SensorHistory, members: list[str]) -> float:
    """The default eps of a unit group: a tenth of its sensors' typical spread."""
    idx = [history.sensors.index(s) for s in members]
    return nice_number(float(np.median(history.values[:, idx].std(axis=0))) / 10)


def default_parameters(history: SensorHistory, sensors: list[str]) -> PlanParameters:
    """eps = a tenth of the typical sensor spread (1.0 degC on the sample), delta 0.05,
    window 24 readings (a day of hourly data) or less on short files, avg, the crash
    contract for the live replay's micro-batch (``engine.live.exposure.default_exposure``)."""
    window = int(max(1, min(24, history.values.shape[0] // 12)))
    eps = group_default(history, sensors) if sensors else nice_number(0.1)
    return PlanParameters(WindowQuery(eps, 0.05, window, exposure=default_exposure(window)))


def reselect_parameters(before: list[str], chosen: list[str]) -> bool:
    """Parameters for a new choice of sensors: the current ones where they still apply;
    eps is reset to the new choice's default when that brings a unit eps was not set
    for (True then). Unit corrections keep the chosen sensors'. With one eps per unit
    group, every chosen sensor has one: its own, else its unit group's, else (a unit new
    to the choice) that group's default (``group_default``): never the single eps, which
    that mode does not use."""
    old, dataset = params(), current_dataset()
    planned = before if len(before) >= MIN_SENSORS else st.session_state.get(PLANNED, before)
    was = _eps_by_unit(old, planned)
    units = set(sensor_units(chosen, old.units).values())
    applies = units <= set(was)
    if not applies:
        eps = default_parameters(dataset.history, chosen).eps
    else:  # one unit left: its own eps (set per unit group, or the single one)
        eps = was[next(iter(units))] if len(units) == 1 else old.eps
    keep, given = set(chosen), dict(old.eps_by_sensor)
    per = tuple((s, e) for s, e in old.eps_by_sensor if s in keep)
    if given and len(units) > 1:  # per unit group: a sensor added takes its group's eps
        unit_of = sensor_units(chosen, old.units)
        new = {u: [s for s in chosen if unit_of[s] == u] for u in units - set(was)}
        group = {**{u: group_default(dataset.history, m) for u, m in new.items()}, **was}
        per = tuple((s, given.get(s, group[unit_of[s]])) for s in chosen)
    query = old.with_query(eps=eps, eps_by_sensor=per)
    set_params(replace(query, units=tuple((s, u) for s, u in old.units if s in keep)))
    st.session_state[PLANNED] = list(chosen)
    return not applies


def _eps_by_unit(p: PlanParameters, sensors: list[str]) -> dict[str, float]:
    """unit -> the eps its sensors among ``sensors`` have (per unit group, else ``p.eps``)."""
    given = dict(p.eps_by_sensor)
    return {u: given.get(s, p.eps) for s, u in sensor_units(sensors, p.units).items()}


def selection() -> list[str]:
    current_dataset()
    return list(st.session_state[SELECTION])


def set_selection(sensors: list[str]) -> None:
    changed = st.session_state.get(SELECTION) != list(sensors)
    st.session_state[SELECTION] = list(sensors)
    if changed:
        save_session()


def params() -> PlanParameters:
    current_dataset()
    return st.session_state[PARAMS]


def set_params(value: PlanParameters) -> None:
    changed = st.session_state.get(PARAMS) != value
    st.session_state[PARAMS] = value
    if changed:
        save_session()


def auto_backtest() -> bool:
    """Whether pages backtest a changed plan by themselves (default on)."""
    return bool(st.session_state.get(AUTO_BACKTEST, True))


def planning_data() -> PlanningData:
    """The chosen sensors of the current dataset, with a key for the plan cache."""
    dataset, chosen = current_dataset(), tuple(selection())
    key = hashlib.sha256(f"{dataset.fingerprint}|{chosen!r}".encode()).hexdigest()[:24]
    cached = st.session_state.get("_planning_data")
    if cached is None or cached.key != key:
        history = dataset.history.select(list(chosen)) if chosen else _no_sensors(dataset)
        cached = PlanningData(history, key)
        st.session_state["_planning_data"] = cached
    return cached


def _no_sensors(dataset: Dataset) -> SensorHistory:
    """The dataset's times without a sensor: none chosen plans nothing (the pages stop at
    ``MIN_SENSORS``), never every sensor."""
    h = dataset.history
    report = replace(h.report, sensors=(), missing_rate={}, constant_sensors=(),
                     duplicate_sensors=())  # fmt: skip
    return SensorHistory(h.times, h.values[:, :0], (), report)


def upload_dir() -> Path:
    path = resources.work_dir() / "uploads"
    path.mkdir(parents=True, exist_ok=True)
    return path
