"""The UI audit's defects, each through the pages (or the ui/ function behind them)."""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from engine.costs import (
    COMPUTE,
    STORES,
    ComputeRates,
    Contracts,
    CostInputs,
    Fleet,
    JobShape,
    compare_costs,
)
from engine.data import LoadOptions, load_history
from engine.errors import DataError
from engine.planning import PlanParameters, make_plan
from engine.query import WindowQuery
from tests.app.apphelpers import ROOT, SMALL, metric, texts
from ui import plans, savings, upload

pytestmark = pytest.mark.app
RATE = "backtest miss rate (rebuilt windows)"


def _session() -> AppTest:
    """A new browser session on the whole app, backtests by button only (previews)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["auto_backtest"] = False
    return at.run()


def _wide(n: int = 240, sensors: tuple[str, ...] = ("w", "x", "y", "z")) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(np.round(rng.normal(20, 5, (n, len(sensors))), 3), columns=sensors)
    frame.insert(0, "time", pd.date_range("2024-03-01", periods=n, freq="h"))
    return frame


def _upload(at: AppTest, name: str, frame: pd.DataFrame) -> AppTest:
    data = frame.to_csv(index=False).encode()
    return at.file_uploader(key="w_upload").set_value((name, data, "text/csv")).run()


def _press_sample(at: AppTest) -> AppTest:
    return next(b for b in at.button if b.label == "Use the shipped sample").click().run()


# 1. "Use the shipped sample" loads the sample, whatever was uploaded or saved


def test_the_sample_button_returns_to_the_sample_after_an_upload() -> None:
    at = _upload(_session(), "mine.csv", _wide())
    assert at.session_state["dataset"].name == "mine.csv"
    _press_sample(at)
    assert not at.exception and not at.error
    dataset = at.session_state["dataset"]
    assert dataset.is_sample and dataset.name == SMALL.name
    assert f"Dataset: {SMALL.name}" in texts(at)


def test_the_sample_button_never_loads_another_sessions_upload() -> None:
    """The saved session is the server's one workspace (README): a new session restores the
    last data set, but an explicit choice in an open session wins over it."""
    other = _session()
    assert other.session_state["dataset"].is_sample
    _upload(_session(), "alice_private.csv", _wide())
    assert _session().session_state["dataset"].name == "alice_private.csv"  # the restore rule
    _press_sample(other)
    assert other.session_state["dataset"].is_sample
    assert "alice_private.csv" not in texts(other)
    assert _session().session_state["dataset"].is_sample  # the last choice is what is kept


# 2. the preview plan is the plan for every parameter asked, the horizon included


STRUCTURE_CHANGES = {
    "horizon": {"horizon": 144},
    "delta": {"delta": 0.1},
    "window": {"window": 12},
    "slide": {"slide": 12},
    "aggregate": {"aggregate": "max"},
    "exposure": {"exposure": 2},
}


@pytest.mark.parametrize("change", list(STRUCTURE_CHANGES), ids=list(STRUCTURE_CHANGES))
def test_a_preview_is_planned_for_every_parameter_asked(change: str) -> None:
    history = load_history(SMALL)
    data = plans.PlanningData(history.select([s for s in history.sensors if "TEMP" in s]), "k")
    cache = plans.PlanCache()
    first = PlanParameters(WindowQuery(0.5, 0.05, 24, exposure=6))
    plans.preview_plan(data, first, cache)
    asked = first.with_query(**STRUCTURE_CHANGES[change])
    assert plans.preview_plan(data, asked, cache).parameters == asked
    for knob in ({"history": 400}, {"calibration": "none"}):
        other = replace(first, **knob)
        assert plans.preview_plan(data, other, cache).parameters == other


def test_the_exported_preview_has_the_horizon_set_on_tune() -> None:
    at = _session()
    at.switch_page("pages/tune.py").run()  # an eps no other test backtests (one plan cache)
    at.number_input(key="w_eps").set_value(0.43).run()
    at.number_input(key="w_horizon").set_value(144).run()
    assert at.session_state["params"].horizon == 144
    at.switch_page("pages/export.py").run()
    config = json.loads(next(c.value for c in at.code if c.language == "json"))
    assert config["validity"]["horizon_rows"] == 144
    assert "(horizon 144 rows)" in texts(at)


# 3. no sensor chosen stops every planning page, as one sensor does


@pytest.mark.parametrize("page", ["tune", "plan", "graph", "live", "export", "disorder"])
def test_no_sensor_chosen_plans_nothing(page: str) -> None:
    at = _session()
    at.multiselect(key="w_sensors").set_value([]).run()
    assert "Choose at least 2 sensors" in texts(at)
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception and not at.error
    assert "Choose at least 2 sensors on the Data page (got 0)" in texts(at)
    assert not at.metric and not at.code


# 4. a smaller window clamps the exposure; the crash contract stays


def test_a_smaller_window_clamps_the_exposure_and_says_so() -> None:
    at = _session()
    at.switch_page("pages/tune.py").run()
    at.number_input(key="w_exposure").set_value(80).run()
    assert at.session_state["params"].exposure == 80
    at.number_input(key="w_window").set_value(12).run()
    assert not at.exception and not at.error
    assert at.session_state["params"].exposure == 48  # 4 windows of 12 rows
    assert at.number_input(key="w_exposure").value == 48
    assert "Crash contract" in texts(at)
    assert any("Exposure lowered from 80 to 48 rows" in i.value for i in at.info)


# 5. the Disorder page needs 10 windows of rows: a message, not a crash


def test_disorder_says_it_needs_ten_windows_of_rows() -> None:
    at = _session()
    at.switch_page("pages/tune.py").run()
    at.number_input(key="w_window").set_value(100).run()
    at.switch_page("pages/disorder.py").run()
    assert not at.exception and not at.error
    assert any("at least 10 windows" in w.value and "1,000 rows" in w.value for w in at.warning)


# 6. zero compute rates are a valid input: no division by zero


def test_zero_compute_rates_cost_nothing_and_do_not_crash() -> None:
    at = _session()
    at.switch_page("pages/plan.py").run()
    at.number_input(key="w_cost_write_us").set_value(0.0).run()
    at.number_input(key="w_cost_job_us").set_value(0.0).run()
    assert not at.exception and not at.error
    assert "no compute" in texts(at)
    fleet, job = Fleet(10, 2, 60.0, 16.0, 8.0), JobShape(1.0, 4, 30.0, 86400.0)
    store, zero = next(iter(STORES.values())), ComputeRates(0.0, 0.0, 0.0, 0.0)
    report = compare_costs(CostInputs(fleet, store, job, zero, Contracts(0.5, 0.6), COMPUTE))
    assert report.full_backup_share == 0.0 and report.full.compute == 0.0


# 7. a restored upload shows what the loader found in the file, not in its cleaned copy


def test_a_refresh_keeps_the_uploads_loader_report() -> None:
    frame = _wide(48, ("a", "b", "c"))
    frame.loc[5:9, "b"] = np.nan
    frame = frame.drop(index=[30, 31, 32])
    frame = pd.concat([frame.iloc[:40].sample(frac=1, random_state=3), frame.iloc[40:]])
    at = _upload(_session(), "gappy.csv", frame)
    shown = {m.label: (m.value, m.delta) for m in at.metric}
    notes = [c.value for c in at.caption if c.value.startswith("•")]
    assert any("sorted by time" in n for n in notes)
    again = _session()  # a refresh: a new session restores the saved one
    assert again.session_state["dataset"].name == "gappy.csv"
    assert {m.label: (m.value, m.delta) for m in again.metric} == shown
    assert [c.value for c in again.caption if c.value.startswith("•")] == notes
    assert (
        again.session_state["dataset"].history.report == at.session_state["dataset"].history.report
    )


# 8. the Plan table says "not run" for an unbacktested plan


def test_the_plan_table_says_not_run_before_a_backtest() -> None:
    at = _session()
    at.switch_page("pages/tune.py").run()  # an eps no other test backtests (one plan cache)
    at.number_input(key="w_eps").set_value(0.37).run()
    at.switch_page("pages/plan.py").run()
    assert metric(at, "Backtest rate, worst sensor") == "not run"
    table = at.dataframe[0].value
    assert set(table[RATE]) == {"not run"}


def test_never_rebuilt_only_for_a_measured_plan() -> None:
    history = load_history(SMALL)
    data = plans.PlanningData(history.select([s for s in history.sensors if "TEMP" in s]), "k")
    params = PlanParameters(WindowQuery(0.5, 0.05, 24))
    preview = make_plan(data.history, params, run_backtest_now=False)
    shown = savings.display_table(plans.backup_table(preview), plans.unmeasured_label(preview))
    assert set(shown[RATE]) == {"not run"}
    measured = plans.measure_plan(data, params, plans.PlanCache())
    assert measured.measured and plans.unmeasured_label(measured) is None
    shown = savings.display_table(plans.backup_table(measured), None)
    assert "not run" not in set(shown[RATE])


# 10. files that are not CSV text say what they look like; a one-sensor file says so


def _xlsx() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook>" + "y" * 2000 + "</workbook>")
    return out.getvalue()


def _parquet() -> bytes:
    out = io.BytesIO()
    _wide(48).to_parquet(out)
    return out.getvalue()


CSV_TEXT = _wide(24).to_csv(index=False)
NOT_CSV = {
    "parquet": (_parquet(), "looks like a Parquet file"),
    "xlsx": (_xlsx(), "looks like a ZIP archive"),
    "gzip": (gzip.compress(CSV_TEXT.encode()), "looks like gzip-compressed data"),
    "utf16": (CSV_TEXT.encode("utf-16"), "looks like UTF-16 text"),
    "utf16-no-bom": (CSV_TEXT.encode("utf-16-le"), "looks like UTF-16 text"),
    "nul": (b"\x00" * 5000, "looks like a binary file"),
}


@pytest.mark.parametrize("kind", list(NOT_CSV), ids=list(NOT_CSV))
def test_a_csv_that_is_not_text_says_what_it_looks_like(kind: str, tmp_path: Path) -> None:
    data, words = NOT_CSV[kind]
    with pytest.raises(DataError) as caught:
        upload.load_upload("readings.csv", data, LoadOptions(), tmp_path)
    message = str(caught.value)
    assert message.startswith("readings.csv: ") and words in message, message
    assert len(message) < 300 and "\n" not in message


def test_a_long_error_is_shortened_on_the_page() -> None:
    at = _session()
    data = ("x" * 3000 + ",a,b\n" + "".join(f"abc{i},1,2\n" for i in range(10))).encode()
    at.file_uploader(key="w_upload").set_value(("odd.csv", data, "text/csv")).run()
    assert not at.exception and len(at.error) == 1
    assert len(at.error[0].value) < 700 and "still using" in at.error[0].value


def test_a_one_sensor_file_says_it_has_one_sensor() -> None:
    at = _upload(_session(), "single.csv", _wide(96, ("only",)))
    assert not at.exception and not at.error
    assert any("single.csv has only one sensor" in w.value for w in at.warning)
    at.switch_page("pages/tune.py").run()
    assert not at.exception and not at.metric
    assert any("single.csv has only one sensor" in w.value for w in at.warning)


# 9. a new sensor choice keeps the tuned parameters that still apply


def test_a_new_sensor_choice_keeps_the_tuned_parameters() -> None:
    at = _session()
    at.switch_page("pages/tune.py").run()
    at.number_input(key="w_eps").set_value(2.0).run()
    at.number_input(key="w_window").set_value(48).run()
    at.select_slider(key="w_delta").set_value(0.01).run()
    tuned = at.session_state["params"]
    at.switch_page("pages/data.py").run()
    temp = at.multiselect(key="w_sensors").value
    at.multiselect(key="w_sensors").set_value(temp[:-1]).run()  # same unit: all kept
    assert at.session_state["params"] == tuned
    assert not any("eps reset" in i.value for i in at.info)
    pm = [s for s in at.session_state["dataset"].history.sensors if s.endswith("PM2.5")]
    at.multiselect(key="w_sensors").set_value(pm).run()  # another unit: eps reset, said so
    params = at.session_state["params"]
    assert params.eps != 2.0 and (params.window, params.delta) == (48, 0.01)
    assert any(f"eps reset to {params.eps:g}" in i.value for i in at.info)
    at.switch_page("pages/tune.py").run()
    assert not at.exception and not at.error
    assert at.number_input(key="w_window").value == 48


def _tuned_per_unit(eps: dict[str, float]) -> tuple[AppTest, list[str], list[str]]:
    """A session with two temperatures and two PM2.5 sensors chosen and ``eps`` (unit ->
    eps) set on Tune, one per unit group, back on the Data page; and those sensors."""
    at = _session()
    sensors = at.session_state["dataset"].history.sensors
    temp, pm = [s for s in sensors if "TEMP" in s], [s for s in sensors if "PM2.5" in s]
    at.multiselect(key="w_sensors").set_value(temp[:2] + pm[:2]).run()
    at.switch_page("pages/tune.py").run()
    for unit, value in eps.items():
        at.number_input(key=f"w_eps_unit_{unit}").set_value(value).run()
    at.switch_page("pages/data.py").run()
    return at, temp, pm


def test_one_unit_left_keeps_its_own_eps() -> None:
    """With one eps per unit group, the group left alone keeps the eps it was given."""
    at, _, pm = _tuned_per_unit({"ug/m3": 7.0})
    assert dict(at.session_state["params"].eps_by_sensor)[pm[0]] == 7.0
    at.multiselect(key="w_sensors").set_value(pm).run()
    assert at.session_state["params"].eps == 7.0
    assert not any("eps reset" in i.value for i in at.info)
    at.switch_page("pages/tune.py").run()
    assert not at.exception and not at.error and "eps 7," in texts(at)


def test_a_sensor_added_to_a_unit_group_takes_its_groups_eps() -> None:
    """With one eps per unit group, a sensor added on the Data page took the single eps,
    which that mode does not use (a temperature planned at 5 where its group asked 0.2,
    exported so); it takes its group's."""
    at, temp, pm = _tuned_per_unit({"degC": 0.2, "ug/m3": 20.0})
    at.multiselect(key="w_sensors").set_value(temp[:3] + pm[:3]).run()
    params = at.session_state["params"]
    by_sensor = dict(params.eps_by_sensor)
    assert {by_sensor[s] for s in temp[:3]} == {0.2} and {by_sensor[s] for s in pm[:3]} == {20.0}
    assert not any("reset" in i.value or "no eps was set" in i.value for i in at.info)
    at.switch_page("pages/tune.py").run()
    assert not at.exception and at.number_input(key="w_eps_unit_degC").value == 0.2


def test_a_dead_sensor_is_left_out_with_sensors_to_read() -> None:
    """A sensor with no reading at all refuses the whole file; the CLI reads it with
    --sensors, and the Data page had no way to: its 'Sensors to read' leaves it out."""
    frame = _wide(96)
    frame["dead"] = np.nan
    at = _upload(_session(), "dead.csv", frame)
    assert len(at.error) == 1 and "'dead' has no values" in at.error[0].value
    assert "Sensors to read on the Data page" in at.error[0].value
    at.text_input(key="w_read_sensors").set_value("w, x,y*").run()
    assert not at.exception and not at.error
    assert at.session_state["dataset"].history.sensors == ("w", "x", "y")
    assert any("selected 3 of 5 sensors" in c.value for c in at.caption)
