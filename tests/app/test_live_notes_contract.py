"""The Live page's contract note says which contract holds where the state really lives.

When ``LACUNA_HOME`` is not writable the app works in a fresh temporary folder
(``ui.resources.home_fallback``); a restarted server makes another and cannot find the
window state, so a crash plan's crash-contract figure does not hold there: the note said
it did ("a crash of the pipeline keeps them").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.app


def note(exposure: int | None) -> None:
    from types import SimpleNamespace

    from ui import live

    live.contract_note(SimpleNamespace(parameters=SimpleNamespace(exposure=exposure)))  # type: ignore[arg-type]


def captions(monkeypatch: pytest.MonkeyPatch, home: Path, exposure: int | None) -> str:
    monkeypatch.setenv("LACUNA_HOME", str(home))
    at = AppTest.from_function(note, args=(exposure,), default_timeout=30).run()
    assert not at.exception
    return " ".join(c.value for c in at.caption)


def test_a_temporary_home_puts_a_crash_plan_under_the_range_contract(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")  # a folder cannot be made inside a file, whoever runs the test
    text = captions(monkeypatch, blocker / "home", 6)
    assert text.startswith(
        "Range contract for a restart: this plan is for the crash contract (exposure 6 rows)"
    )
    assert "temporary folder" in text and "restarted server does not find" in text
    # a crash the server survives keeps the state; one that ends it does not
    assert "Simulate failure: crash) keeps them, and the crash contract's figure holds" in text
    assert "only the range contract's figure holds" in text
    assert str(blocker) not in text  # the folder it works in is named, not the one it wanted


def test_a_writable_home_keeps_the_crash_contract_note(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    text = captions(monkeypatch, tmp_path / "home", 1)
    assert text.startswith("Crash contract, exposure 1 row:")
    assert f"live under {str(tmp_path / 'home' / 'pipeline')!r}" in text
    assert "the crash contract's figure holds" in text
    assert captions(monkeypatch, tmp_path / "home", None).startswith("Range contract: this plan's")
