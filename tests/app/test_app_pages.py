"""Every page renders with the sample data, through the app and opened on its own."""

from __future__ import annotations

import pytest

from tests.app.apphelpers import PAGES, metric, settle, texts

pytestmark = pytest.mark.app

TITLES = {
    "data": "Data",
    "tune": "Tune",
    "graph": "Correlation graph",
    "plan": "Backup plan and savings",
    "live": "Live pipeline",
    "disorder": "Out-of-order streams",
    "export": "Export",
    "production": "Production job",
}


def assert_clean(at) -> None:  # type: ignore[no-untyped-def]
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("name", PAGES)
def test_page_through_app(app, name):  # type: ignore[no-untyped-def]
    app.switch_page(f"pages/{name}.py").run()
    assert_clean(app)
    assert app.title[0].value == TITLES[name]


@pytest.mark.parametrize("name", PAGES)
def test_page_opened_directly(page, name):  # type: ignore[no-untyped-def]
    at = page(name).run()
    assert_clean(at)
    assert at.title[0].value == TITLES[name]


def test_first_visit_loads_the_sample_and_plans_for_temperature(app):  # type: ignore[no-untyped-def]
    assert "Dataset: beijing_aq_small.csv" in texts(app)
    assert metric(app, "Sensors") == "12"
    chosen = app.multiselect(key="w_sensors").value
    assert chosen and all(s.endswith("_TEMP") for s in chosen)
    assert len(app.get("plotly_chart")) == 1


def test_plan_page_shows_measured_guarantee_and_savings(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/plan.py").run())
    body = texts(app)
    # each fold's plan is kept for the horizon: hourly data, window 24 -> 4 windows, 96 rows
    lead = "Plan measured by a rolling-origin backtest (3 folds, each plan kept for its horizon"
    assert f"{lead} of 96 rows" in body
    assert "re-plan on that cadence" in body
    assert metric(app, "Backtest rate, worst sensor").endswith("%")
    assert metric(app, "Model P(miss), worst").endswith("%")
    assert "$" in metric(app, "Range contract, per month")
    table = app.dataframe[0].value
    assert set(table["status"]) == {"backed up", "reconstructed"}
    rebuilt = table[table["status"] == "reconstructed"]
    assert (rebuilt["reconstructed from (top 3 by weight, coef)"].str.len() > 0).all()


def test_disorder_page_compares_all_four_buffers(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/disorder.py").run())
    assert_clean(app)
    table = app.dataframe[0].value
    assert list(table["method"]) == [
        "ours (adaptive K)",
        "MP-K-slack",
        "fixed watermark",
        "no buffer",
    ]
    assert (table["final accuracy"] == 1.0).all()
    assert "MP-K-slack's" in texts(app)
    assert len(app.get("plotly_chart")) == 4


def test_graph_edge_controls_change_the_graph(app):  # type: ignore[no-untyped-def]
    app.switch_page("pages/graph.py").run()
    app.slider(key="w_top_k").set_value(1).run()
    assert_clean(app)
    app.radio(key="w_edge_mode").set_value("above a threshold").run()
    app.slider(key="w_threshold").set_value(0.999).run()
    assert_clean(app)
    assert len(app.get("plotly_chart")) == 2


def test_graph_of_two_sensors_has_no_empty_slider(app):  # type: ignore[no-untyped-def]
    """Top-k of two sensors is 1..1: Streamlit refuses such a slider (the page crashed)."""
    sensors = app.multiselect(key="w_sensors")
    sensors.set_value(list(sensors.options)[:2]).run()
    app.switch_page("pages/graph.py").run()
    assert_clean(app)
    assert "each one's only edge is shown" in texts(app)
    assert len(app.get("plotly_chart")) == 2


def test_quick_group_changes_the_sensors_and_their_defaults(app):  # type: ignore[no-untyped-def]
    app.button(key="w_group_PM2.5").click().run()
    chosen = app.multiselect(key="w_sensors").value
    assert len(chosen) == 6 and all(s.endswith("_PM2.5") for s in chosen)
    assert app.session_state["sensors"] == chosen
    assert app.session_state["params"].eps > 1.0  # PM2.5 spreads are tens of ug/m3
    settle(app.switch_page("pages/tune.py").run())
    # A red verdict is content, not a failure: 3 folds of the small sample can miss.
    assert not app.exception
    assert all(e.value.startswith("Plan measured by a rolling-origin") for e in app.error)
    assert app.number_input(key="w_eps").value == app.session_state["params"].eps


def test_production_page_says_a_path_it_cannot_read_in_one_line(app, tmp_path):  # type: ignore[no-untyped-def]
    """A name longer than the file system allows raised OSError through the page."""
    app.switch_page("pages/production.py").run()
    for path, says in (
        (str(tmp_path / ("a" * 300)), "File name too long"),
        (str(tmp_path / "nothing_here"), "no backup directory"),
    ):
        app.text_input(key="w_prod_backup").set_value(path).run()
        assert not app.exception, path
        assert len(app.error) == 1 and says in app.error[0].value, path
