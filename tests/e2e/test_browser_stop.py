"""Stop and Start again in a real browser: a quiet, prompt stop; Start at once; Resume counts on."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.e2e.harness import SLOW, metric, metric_value, open_page, running_app, wait_idle

pytestmark = pytest.mark.e2e


def state_is(page, state: str, timeout: float = SLOW) -> None:  # type: ignore[no-untyped-def]
    metric(page, "State").get_by_text(state).first.wait_for(timeout=timeout)


def batches(page) -> int:  # type: ignore[no-untyped-def]
    return int(metric_value(page, "Micro-batches").replace(",", ""))


def test_stop_is_quiet_and_prompt_and_start_resumes_the_counters(  # type: ignore[no-untyped-def]
    browser, tmp_path_factory, shots_dir
):
    home = tmp_path_factory.mktemp("lacuna_home_stop")
    with running_app(home, {"LACUNA_MAX_FOLDS": "3"}) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 2000})
        page.set_default_timeout(120_000)
        try:
            page.goto(url)
            page.get_by_text("Sensors to plan for").wait_for()
            open_page(page, "Live pipeline")
            page.get_by_role("button", name="Start").click()
            state_is(page, "running")
            # Stop during the first micro-batches (the stop interrupts one)
            page.get_by_role("button", name="Stop").click()
            t0 = time.monotonic()
            state_is(page, "stopped", timeout=60_000)
            took = time.monotonic() - t0
            start = page.get_by_role("button", name="Start")
            deadline = time.monotonic() + 10
            while start.is_disabled():  # enabled in the run that stopped it: no reload
                assert time.monotonic() < deadline, "Start stayed disabled after Stop"
                page.wait_for_timeout(250)
            assert took < 30, f"the stop took {took:.0f} s"
            before = batches(page)
            start.click()  # an earlier run's files are there: resume it
            page.get_by_text("What to do with it").wait_for()
            page.get_by_role("button", name="Continue").click()
            state_is(page, "running")
            deadline = time.monotonic() + 180
            while batches(page) <= before:
                assert time.monotonic() < deadline, "no micro-batch after the resume"
                state = metric_value(page, "State")
                assert "error" not in state, page.get_by_test_id(
                    "stAlertContentError"
                ).all_inner_texts()
                page.wait_for_timeout(1000)
            page.get_by_text(re.compile(r"Latest restore")).first.wait_for()
            page.get_by_role("button", name="Stop").click()
            state_is(page, "stopped", timeout=60_000)
            page.get_by_text(re.compile(r"readings replayed \(stopped\)")).first.wait_for()
            wait_idle(page, 60_000)
            page.screenshot(path=str(shots_dir / "live_stopped.png"), full_page=True)
        finally:
            page.close()
    log = (Path(home) / "streamlit.log").read_text(errors="replace")
    assert "StackOverflowError" not in log, log[log.find("StackOverflowError") - 300 :][:600]
