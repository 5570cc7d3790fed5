"""Real-browser fixtures: Debian's Chromium via Playwright, the app via ``streamlit run``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.harness import CHROMIUM, launch_browser, running_app


@pytest.fixture(scope="session")
def browser():  # type: ignore[no-untyped-def]
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = launch_browser(pw)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def app_url(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    home = tmp_path_factory.mktemp("lacuna_home")
    with running_app(home, {"LACUNA_MAX_FOLDS": "6"}) as url:
        yield url


@pytest.fixture(scope="session")
def shots_dir() -> Path:
    path = Path(os.environ.get("LACUNA_SHOTS", "/tmp/lacuna_shots"))
    path.mkdir(parents=True, exist_ok=True)
    return path
