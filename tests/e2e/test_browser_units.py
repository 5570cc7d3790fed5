"""One eps per unit group in a real browser, on the mixed-unit sample (degC and ug/m3)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.e2e.harness import SLOW, open_page, running_app, wait_idle

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A server of its own: the app restores the last session's data set and parameters
    (kept under LACUNA_HOME), so after the journey in test_browser.py a shared server
    would open on that data, not on the mixed-unit sample this test is about."""
    home = tmp_path_factory.mktemp("lacuna_home_units")
    with running_app(home, {"LACUNA_MAX_FOLDS": "6"}) as url:
        yield url


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (1024, 768)])
def test_group_eps_on_all_sample_sensors(  # type: ignore[no-untyped-def]
    browser, app_url, shots_dir, width, height
):
    page = browser.new_page(viewport={"width": width, "height": height})
    # Every action may wait for a plan of all 36 sensors beside the Spark suite's first
    # JVMs: in two clean-clone CI runs one step took over a minute (the eps box, once not
    # back within 30 s after the page went idle, once not shown within 60 s of opening
    # Tune; the test took 65 s and 99 s there, 22 s on a quiet machine).
    page.set_default_timeout(SLOW)
    try:
        page.goto(app_url)
        page.get_by_text("Sensors to plan for").wait_for()
        page.get_by_role("button", name="all", exact=True).click()
        wait_idle(page)
        open_page(page, "Tune")
        box = page.get_by_role("spinbutton", name="eps for ug/m3 (12 sensors)")
        box.wait_for()
        assert page.get_by_role("spinbutton", name="eps for degC (24 sensors)").is_visible()
        note = page.get_by_role("textbox", name="eps: tolerance (unit of the aggregate)")
        assert note.is_disabled() and note.input_value() == "one eps per unit group, below"
        # Type only once the page's script run has finished: a value typed while the run
        # still renders the widgets can be replaced by that run's own output. On a busy
        # machine a run can start between the wait and the typing (once in CI the caption
        # never came): type again, up to three times, if the value did not take.
        caption = page.get_by_text(re.compile(r"eps degC [0-9.]+, ug/m3 20, delta")).first
        for attempt in range(3):
            wait_idle(page, SLOW)
            box.fill("20")
            box.press("Enter")
            try:
                caption.wait_for(timeout=60_000)  # a lost value is typed again
                break
            except PlaywrightTimeout:
                if attempt == 2:
                    raise
        wait_idle(page, SLOW)
        page.screenshot(path=str(shots_dir / f"tune_units_{width}.png"))
        page.get_by_text("One eps per unit group").click()
        page.get_by_text(re.compile("Mixed units: the sensors have 2 units")).first.wait_for()
        assert page.get_by_role(
            "spinbutton", name="eps: tolerance (unit of the aggregate)"
        ).is_enabled()
        wait_idle(page, SLOW)
        page.screenshot(path=str(shots_dir / f"tune_one_eps_{width}.png"))
    finally:
        page.close()
