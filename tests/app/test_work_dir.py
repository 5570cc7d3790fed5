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
