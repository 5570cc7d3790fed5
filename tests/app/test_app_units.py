"""One eps per unit group on the Tune page, on the mixed-unit sample (degC and ug/m3)."""

from __future__ import annotations

from tests.app.apphelpers import metric, texts


def _all_sensors_on_tune(app):  # type: ignore[no-untyped-def]
    app.button(key="w_group_all").click().run()
    app.switch_page("pages/tune.py").run()
    assert not app.exception
    return app


def test_two_group_eps_are_carried_into_the_plan(app):  # type: ignore[no-untyped-def]
    app = _all_sensors_on_tune(app)
    labels = [n.label for n in app.number_input]
    assert "eps for degC (6 sensors)" in labels and "eps for ug/m3 (6 sensors)" in labels
    # the single eps is not in force: its input is gone, never showing a stale value
    assert "w_eps" not in [n.key for n in app.number_input]
    note = app.text_input(key="w_eps_per_unit_note")
    assert note.disabled and note.value == "one eps per unit group, below"
    app.number_input(key="w_eps_unit_degC").set_value(1.0).run()
    app.number_input(key="w_eps_unit_ug/m3").set_value(20.0).run()
    assert not app.exception
    params = app.session_state["params"]
    eps = dict(params.eps_by_sensor)
    assert {e for s, e in eps.items() if s.endswith("_TEMP")} == {1.0}
    assert {e for s, e in eps.items() if s.endswith("_PM2.5")} == {20.0}
    shown = texts(app)
    assert "eps degC 1, ug/m3 20" in shown  # the status line names each group's eps
    assert "Mixed units" not in shown
    # a tight PM2.5 eps backs up more sensors than a loose one; degC is left alone
    loose = int(metric(app, "Backed up").split(" of ")[0])
    app.number_input(key="w_eps_unit_ug/m3").set_value(0.05).run()
    tight = int(metric(app, "Backed up").split(" of ")[0])
    assert tight > loose
    assert app.number_input(key="w_eps_unit_degC").value == 1.0


def test_one_eps_over_mixed_units_is_warned_about(app):  # type: ignore[no-untyped-def]
    app = _all_sensors_on_tune(app)
    app.toggle(key="w_eps_per_unit").set_value(False).run()
    assert not app.exception
    assert app.session_state["params"].eps_by_sensor == ()
    assert not app.number_input(key="w_eps").disabled
    assert app.number_input(key="w_eps").value == app.session_state["params"].eps
    warnings = [w.value for w in app.warning if "Mixed units" in w.value]
    assert len(warnings) == 1 and "degC (6)" in warnings[0] and "ug/m3 (6)" in warnings[0]
    app.switch_page("pages/plan.py").run()  # the plan's warning follows it to other pages
    assert [w.value for w in app.warning if "Mixed units" in w.value] == warnings


def test_unit_corrections_regroup_the_sensors(app):  # type: ignore[no-untyped-def]
    app = _all_sensors_on_tune(app)
    app.text_area(key="w_unit_lines").set_value("*_PM2.5 = degC").run()
    assert not app.exception
    assert "w_eps_unit_ug/m3" not in [n.key for n in app.number_input]
    assert app.session_state["params"].eps_by_sensor == ()  # one unit left: one eps
    app.text_area(key="w_unit_lines").set_value("nonsense").run()
    assert any("unit line 1" in e.value for e in app.error)


def test_export_states_schema_v3_validity_and_group_eps(app):  # type: ignore[no-untyped-def]
    app = _all_sensors_on_tune(app)
    app.number_input(key="w_eps_unit_ug/m3").set_value(20.0).run()
    app.switch_page("pages/export.py").run()
    assert not app.exception
    shown = texts(app)
    assert "schema v3" in shown and "valid until" in shown
    # what the default crash plan asks of a job built from the snippets
    assert "loses at most 6 rows (21600 s of readings)" in shown
    preview = next(c.value for c in app.code if '"eps_by_sensor"' in c.value)
    assert '"Dongsi_PM2.5": 20.0' in preview


def test_whatif_eps_scales_every_groups_eps() -> None:
    from engine.data import load_history
    from engine.planning import PlanParameters, make_plan, scaled_eps, whatif_eps
    from engine.query import WindowQuery
    from tests.app.apphelpers import SMALL
    from ui.plans import WhatIf, eps_axis

    history = load_history(SMALL)
    per = tuple((s, 1.0 if s.endswith("_TEMP") else 20.0) for s in history.sensors)
    params = PlanParameters(WindowQuery(1.0, 0.05, 24, eps_by_sensor=per))
    plan = make_plan(history, params, run_backtest_now=False)
    doubled = scaled_eps(plan, 2.0)
    assert doubled.eps_per_sensor.tolist() == (2 * plan.eps_per_sensor).tolist()
    fractions = whatif_eps(plan, [0.1, 1.0, 10.0])
    assert fractions[0] > fractions[1] > fractions[2]  # not flat: every group moves
    curves = WhatIf((0.5, 1.0, 2.0), (1.0, 0.5, 0.2), (0.05,), (0.5,), "greedy", now=0.5)
    assert eps_axis(curves, params) == ((0.5, 1.0, 2.0), 1.0, "eps factor (all unit groups)")
