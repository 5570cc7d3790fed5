"""The app's last state on disk: an uploaded data set and its parameters round-trip exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.data import load_history
from engine.errors import DataError
from engine.planning import PlanParameters
from engine.query import WindowQuery
from tests.app.apphelpers import SMALL
from ui.session_store import SavedSession, load_saved_data, load_state, save_session


def test_an_upload_and_its_parameters_round_trip_with_the_same_fingerprint(tmp_path: Path) -> None:
    history = load_history(SMALL).select(["Aotizhongxin_TEMP", "Changping_PM2.5", "Dongsi_TEMP"])
    params = PlanParameters(WindowQuery(0.4, 0.02, 12, slide=6, aggregate="max"))
    saved = SavedSession("mine.csv", history.fingerprint(), False, history.sensors[:2], params)
    save_session(tmp_path, history, saved, write_data=True)
    state = load_state(tmp_path)
    assert state == saved
    again = load_saved_data(tmp_path, state, SMALL)
    assert again.fingerprint() == history.fingerprint() and again.sensors == history.sensors
    assert again.report == history.report  # what the loader found, not the saved copy's


def test_missing_or_changed_data_is_not_restored(tmp_path: Path) -> None:
    history = load_history(SMALL)
    saved = SavedSession(
        "mine.csv", "sha256:other", False, (), PlanParameters(WindowQuery(1.0, 0.05, 24))
    )
    assert load_state(tmp_path) is None
    with pytest.raises(DataError, match="no longer"):
        load_saved_data(tmp_path, saved, SMALL)
    save_session(tmp_path, history, saved, write_data=True)
    with pytest.raises(DataError, match="fingerprint changed"):
        load_saved_data(tmp_path, saved, SMALL)
    (tmp_path / "state.json").write_text("{not json")
    assert load_state(tmp_path) is None
