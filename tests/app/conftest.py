"""AppTest fixtures: the small sample, few backtest folds, a private LACUNA_HOME."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.apphelpers import ROOT, SMALL
from ui.jobs import get_runner


@pytest.fixture(autouse=True)
def fast_app(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("LACUNA_SAMPLE", str(SMALL))
    monkeypatch.setenv("LACUNA_MAX_FOLDS", "3")
    home = tmp_path_factory.getbasetemp() / "lacuna_home"
    monkeypatch.setenv("LACUNA_HOME", str(home))
    shutil.rmtree(home / "session", ignore_errors=True)  # each test starts as a first visit


@pytest.fixture(autouse=True)
def no_jobs_left_behind() -> Iterator[None]:
    """Cancel the background jobs (backtests, what-ifs) a test started, and wait for them.

    They run on threads of this process: left running, they took the CPU from the
    browser tests' app server that runs next, whose waits then timed out.
    """
    yield
    runner = get_runner()
    left = runner.running()
    for job in left:
        job.cancel()
    runner.wait_all(timeout=120)
    for job in left:  # else the next test of the same data finds the job "cancelled"
        runner.forget(job.key)


@pytest.fixture
def app() -> AppTest:
    """The whole app (``app.py``), run once: the Data page with the sample."""
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()


@pytest.fixture
def page() -> Callable[[str], AppTest]:
    """``page("tune")``: one page file opened on its own (not yet run)."""

    def open_page(name: str) -> AppTest:
        return AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=60)

    return open_page
