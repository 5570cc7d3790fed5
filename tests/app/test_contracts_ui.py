"""Which contract a number belongs to: the exposure on Tune, the contract on Plan and Live."""

from __future__ import annotations

import pytest

from tests.app.apphelpers import settle, texts

pytestmark = pytest.mark.app


def test_the_app_plans_for_a_crash_of_one_replay_batch_and_says_so(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/tune.py").run())
    # window 24 on the hourly sample: the replay commits a micro-batch every 6 rows
    assert app.number_input(key="w_exposure").value == 6
    body = texts(app)
    assert "Crash contract: the figures are for a failure that loses at most 6" in body
    assert "Range contract (whole windows rebuilt):" in body  # the other figure beside it
    settle(app.switch_page("pages/live.py").run())
    assert "Crash contract, exposure 6 rows" in texts(app)
    kinds = next(r for r in app.get("radio") if r.key == "w_failure_kind")
    assert kinds.value.startswith("crash")  # the crash plan's own failure by default
    settle(app.switch_page("pages/plan.py").run())
    crash, whole = (app.number_input(key=k).value for k in ("w_cost_crash", "w_cost_range"))
    # each contract's own plan: losing one batch never needs more sensors here
    assert 0 < crash <= whole <= 1


def test_exposure_zero_is_the_range_contract(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/tune.py").run())
    app.number_input(key="w_exposure").set_value(0).run()
    settle(app)
    body = texts(app)
    assert "Range contract: the figures are for whole windows rebuilt" in body
    assert "Range contract (whole windows rebuilt):" not in body
    settle(app.switch_page("pages/live.py").run())
    assert "Range contract: this plan's figures are for whole windows rebuilt" in texts(app)
    kinds = next(r for r in app.get("radio") if r.key == "w_failure_kind")
    assert kinds.value.startswith("machine")
    settle(app.switch_page("pages/plan.py").run())
    crash, whole = (app.number_input(key=k).value for k in ("w_cost_crash", "w_cost_range"))
    assert crash == whole  # a range plan has only its own fraction
