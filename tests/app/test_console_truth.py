"""The console tells the truth: verdict states, eps in force, counters and inputs that keep."""

from __future__ import annotations

import pytest

from tests.app.apphelpers import settle, texts

pytestmark = pytest.mark.app


def test_an_unconfirmed_guarantee_is_not_shown_green(app):  # type: ignore[no-untyped-def]
    # The small sample's default plan: 3 folds, no rebuilt window missed, but too few
    # windows to bound the worst sensor under delta: not enough evidence, not "holds".
    settle(app.switch_page("pages/tune.py").run())
    assert not app.exception
    verdicts = [b.value for kind in ("success", "warning", "error") for b in app.get(kind)]
    verdict = next(v for v in verdicts if "Verdict:" in v)
    assert not [s.value for s in app.success if "Verdict:" in s.value]
    assert "Verdict: not enough evidence" in verdict
    assert "What would settle it:" in verdict and "rebuilt windows of" in verdict
    assert "missed 0 of" in verdict  # the worst sensor's rate says what it counts


def _per_unit_params():  # type: ignore[no-untyped-def]
    from engine.data import load_history
    from engine.planning import PlanParameters
    from tests.app.apphelpers import SMALL

    history = load_history(SMALL)
    per = tuple((s, 1.0 if s.endswith(("_TEMP", "_DEWP")) else 20.0) for s in history.sensors)
    return history, PlanParameters(eps=0.5, delta=0.05, window=24, eps_by_sensor=per)


def test_the_measured_tradeoff_scales_every_units_eps() -> None:
    from ui.plans import MEASURED_EPS_FACTORS, PlanCache, PlanningData, measure_whatif
    from ui.whatif import measured_table

    history, params = _per_unit_params()
    points = measure_whatif(PlanningData(history, "units"), params, PlanCache(), lambda *_: None)
    assert [p.factor for p in points] == list(MEASURED_EPS_FACTORS)
    fractions = [p.backup_fraction for p in points]
    assert fractions[0] > fractions[-1], fractions  # a looser eps everywhere backs up less
    table = measured_table(points, params)
    assert list(table["eps factor"]) == ["x 0.5", "x 0.7", "x 1 (now)", "x 1.4", "x 2"]
    assert "0.5 (now)" not in table.to_string()


def test_the_disorder_page_scores_each_sensor_against_its_units_eps(  # type: ignore[no-untyped-def]
    app, monkeypatch
):
    import engine.disorder
    from ui import disorder

    seen = {}
    real = engine.disorder.run_disorder_experiment

    def spy(history, delays, eps_thr, **kw):  # type: ignore[no-untyped-def]
        seen["values"], seen["eps_thr"], seen["sensors"] = history.values, eps_thr, history.sensors
        return real(history, delays, eps_thr, **kw)

    monkeypatch.setattr(disorder, "run_disorder_experiment", spy)
    app.button(key="w_group_all").click().run()
    settle(app.switch_page("pages/tune.py").run())
    app.number_input(key="w_eps_unit_ug/m3").set_value(20.0).run()
    settle(app.switch_page("pages/disorder.py").run())
    assert not app.exception
    shown = texts(app)
    assert "quality target eps degC" in shown and "ug/m3 20" in shown
    assert "eps 0.5" not in shown and "eps 1," not in shown
    assert seen["eps_thr"] == 1.0  # in eps units: every sensor's tolerance is 1
    history = app.session_state["dataset"].history
    j = list(seen["sensors"]).index("Dongsi_PM2.5")
    k = history.sensors.index("Dongsi_PM2.5")
    rows = seen["values"].shape[0]
    assert seen["values"][:, j] == pytest.approx(history.values[:rows, k] / 20.0)


def test_a_restored_session_names_each_units_eps(app):  # type: ignore[no-untyped-def]
    from streamlit.testing.v1 import AppTest

    from tests.app.apphelpers import ROOT

    app.button(key="w_group_all").click().run()
    settle(app.switch_page("pages/tune.py").run())
    app.number_input(key="w_eps_unit_ug/m3").set_value(20.0).run()
    fresh = AppTest.from_file(str(ROOT / "pages" / "graph.py"), default_timeout=60).run()
    # a refresh, on a page that says what it restored
    note = next(c.value for c in fresh.caption if c.value.startswith("Restored the last"))
    assert "eps degC" in note and "ug/m3 20" in note, note
