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


def _production_headline(contract: str, over: int = 0) -> str:
    """The Production page's headline for a status summary under ``contract``, with
    ``over`` micro-batches over the plan's exposure."""
    from streamlit.testing.v1 import AppTest

    def script(contract: str, over: int) -> None:
        import pandas as pd

        from ui import production

        class Status:
            gaps, written_at = (), None

            def version_rates(self) -> pd.DataFrame:
                return pd.DataFrame({"sensor": ["b"], "windows": [12], "misses": [12],
                                     "rate": [1.0]})  # fmt: skip

            def summary(self) -> dict:  # type: ignore[type-arg]
                base = {"batches": 40, "readings": 960, "plan_version": 1, "versions": 1,
                        "backup_sensors": 0, "sensors": 2, "alerts": 0, "valid_until": None,
                        "delta": 0.05, "last_window_end": "2026-01-03T00:00:00",
                        "misses": 12, "rebuilt_pairs": 12, "miss_rate": 1.0,
                        "exposure_rows": 4, "shadow_contract": contract,
                        "batches_over_exposure": over}  # fmt: skip
                if contract == "crash":  # whole windows all miss; m-row losses never do
                    crash = {"crash_windows": 12, "crash_miss_rate": 0.0}
                    return base | crash | {"sensors_above_delta": 0}
                return base | {"sensors_above_delta": 1}

        production.headline(Status())

    at = AppTest.from_function(script, args=(contract, over)).run(timeout=60)  # a cold import
    assert not at.exception
    return texts(at) + "\n" + "\n".join(f"{m.label}: {m.value} ({m.delta})" for m in at.metric)


def test_the_production_headline_judges_a_crash_plan_by_its_own_contract() -> None:
    crash = _production_headline("crash")
    assert "No alert under version 1" in crash and "m-row losses" in crash
    assert "Live miss rate (this version, pooled): 0" in crash
    assert "4-row failures touching 12 (window, rebuilt sensor) pairs (crash contract)" in crash
    assert "backed up every sensor" not in crash
    whole = _production_headline("range")
    assert "missed eps more often than delta" in whole
    assert "12 of 12 (window, rebuilt sensor) pairs; worst sensor b 100.0 % (12 of 12)" in whole
    # batches over the exposure stored every sensor: the page says so, not only the events
    over = _production_headline("crash", over=13)
    assert "13 of 40 micro-batches held more rows than the plan's exposure (4 rows)" in over
