"""The app's home follows LACUNA_HOME as it is when asked, not as it was first read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ui import resources

pytestmark = pytest.mark.app


def test_the_work_dir_follows_lacuna_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LACUNA_HOME", str(tmp_path / "first"))
    assert resources.work_dir() == tmp_path / "first"
    # an earlier test (or process phase) read another home: this one must not inherit it
    monkeypatch.setenv("LACUNA_HOME", str(tmp_path / "second"))
    assert resources.work_dir() == tmp_path / "second"
    assert (tmp_path / "second").is_dir()


def test_a_home_that_cannot_be_written_is_said_on_every_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The app falls back to a temporary folder so it still starts; the operator must
    learn that uploads, the session and the backup will not outlive the server."""
    from streamlit.testing.v1 import AppTest

    blocker = tmp_path / "a_file"
    blocker.write_text("")  # a folder cannot be made inside a file, whoever runs the test
    monkeypatch.setenv("LACUNA_HOME", str(blocker / "home"))
    assert resources.home_fallback() is not None and "is not writable" in str(
        resources.home_fallback()
    )
    at = AppTest.from_file(str(Path(__file__).parents[2] / "app.py"))
    at.session_state["auto_backtest"] = False
    at.run(timeout=120)
    assert not at.exception
    said = [w.value for w in at.sidebar.warning]
    assert any("is not writable" in w and "lost when the server stops" in w for w in said)
    monkeypatch.setenv("LACUNA_HOME", str(tmp_path / "fine"))
    assert resources.home_fallback() is None
