"""Behaviour through the pages: re-planning, uploads, errors at the edge, export."""

from __future__ import annotations

import json

import pytest
import yaml

from engine.export import recover_file, validate_config
from tests.app.apphelpers import ROOT, metric, settle, texts
from ui import exporting

pytestmark = pytest.mark.app
BAD_CSV = b"timestamp,a,b\n2016-01-01 00:00,1.0,2.0\n2016-01-01 01:00,1.5,oops\n"


def test_changing_eps_changes_the_plan(app):  # type: ignore[no-untyped-def]
    settle(app.switch_page("pages/tune.py").run())
    before = metric(app, "Backed up")
    assert "eps 0.5," in texts(app)
    settle(app.number_input(key="w_eps").set_value(2.0).run())
    assert not app.exception and not app.error
    assert "eps 2," in texts(app)
    assert metric(app, "Backed up") != before
    assert app.session_state["params"].eps == 2.0
    # the new plan is the one every other page uses
    settle(app.switch_page("pages/plan.py").run())
    assert metric(app, "Backed up") != before


def test_preview_says_plainly_that_it_is_not_backtested(app):  # type: ignore[no-untyped-def]
    app.switch_page("pages/tune.py").run()
    app.toggle(key="w_auto").set_value(False).run()
    app.number_input(key="w_eps").set_value(1.3).run()
    body = texts(app)
    assert "preview, not yet backtested" in body
    assert metric(app, "Backtest rate, worst sensor") == "not run"
    assert "model projection" in body
    settle(app.button(key="run_backtest").click().run())
    assert "Plan measured by a rolling-origin backtest" in texts(app)
    assert metric(app, "Backtest rate, worst sensor") != "not run"


def test_bad_upload_shows_an_error_and_keeps_the_old_data(app):  # type: ignore[no-untyped-def]
    app.file_uploader(key="w_upload").set_value(("bad.csv", BAD_CSV, "text/csv")).run()
    assert not app.exception
    assert len(app.error) == 1
    message = app.error[0].value
    assert message.startswith("bad.csv") and "still using beijing_aq_small.csv" in message
    assert "Dataset: beijing_aq_small.csv" in texts(app)
    app.switch_page("pages/tune.py").run()
    assert not app.error and metric(app, "Backed up").endswith("of 6")


def test_good_upload_replaces_the_data(app):  # type: ignore[no-untyped-def]
    data = (ROOT / "sample_data" / "beijing_aq_long.parquet").read_bytes()
    uploader = app.file_uploader(key="w_upload")
    uploader.set_value(("long.parquet", data, "application/octet-stream")).run()
    assert not app.exception and not app.error
    assert "Dataset: long.parquet" in texts(app)
    assert metric(app, "Format") == "long PARQUET"


def test_engine_error_is_one_line_at_the_page_edge(app):  # type: ignore[no-untyped-def]
    app.session_state["sensors"] = ["Aotizhongxin_TEMP", "no_such_sensor"]
    app.switch_page("pages/tune.py").run()
    assert not app.exception
    assert len(app.error) == 1 and "no_such_sensor" in app.error[0].value
    assert "\n" not in app.error[0].value


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_export_produces_a_valid_config_that_recover_accepts(app, fmt, tmp_path):  # type: ignore[no-untyped-def]
    app.switch_page("pages/export.py").run()
    app.radio(key="w_export_format").set_value(fmt).run()
    text = next(c.value for c in app.code if c.language == fmt)
    config = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    validate_config(config)
    assert config["parameters"]["eps"] == app.session_state["params"].eps
    # the exported script's commands name the file the page downloads, not plan.json
    production = config["production"]
    script = production["spark_filter"] + production["run_command"]
    assert f"--config lacuna_backup.{fmt}" in script and "plan.json" not in script
    path = tmp_path / f"lacuna_backup.{fmt}"
    path.write_text(text)
    plan_data = app.session_state["_planning_data"]
    backup = tmp_path / "backup.csv"
    plan = _plan_from_config(config)
    backup.write_bytes(exporting.backup_csv(plan_data.history, plan))
    result = recover_file(path, backup, tmp_path / "all.csv")
    assert result.rows == 720 and result.sensors == len(config["sensors"])
    assert result.backup_sensors == len(config["backup_sensors"])


class _Backup:
    def __init__(self, sensors: list[str]) -> None:
        self.backup_sensors = tuple(sensors)


def _plan_from_config(config):  # type: ignore[no-untyped-def]
    return _Backup(config["backup_sensors"])


def test_horizon_is_set_on_tune_and_reaches_the_plan_and_export(app):  # type: ignore[no-untyped-def]
    """The horizon is an operator's parameter in the UI, not only on the CLI."""
    settle(app.switch_page("pages/tune.py").run())
    horizon = app.number_input(key="w_horizon")
    assert horizon.value == 0
    default = int(horizon.label.rsplit("default, ", 1)[1].rstrip(")").replace(",", ""))
    assert default != 144 and f"kept for its horizon of {default} rows" in texts(app)
    settle(horizon.set_value(144).run())
    assert not app.exception and not app.error
    assert app.session_state["params"].horizon == 144
    assert "kept for its horizon of 144 rows" in texts(app)
    settle(app.switch_page("pages/export.py").run())
    assert "(horizon 144 rows)" in texts(app)
