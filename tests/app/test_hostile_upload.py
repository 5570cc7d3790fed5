"""The hostile-input corpus through the app's upload widget: st.error or the data, never a crash."""

from __future__ import annotations

import errno

import pytest

from tests.app.apphelpers import texts
from tests.hostile_corpus import cases

pytestmark = pytest.mark.app


def _upload(app, name: str, data: bytes):  # type: ignore[no-untyped-def]
    return app.file_uploader(key="w_upload").set_value((name, data, "text/csv")).run()


def test_every_bad_file_in_the_corpus_is_one_error(app):  # type: ignore[no-untyped-def]
    bad = [c for c in cases() if c.error is not None and c.name != "sheet.xlsx"]
    for case in bad:
        _upload(app, case.name, case.data)
        assert not app.exception, (case.name, app.exception)
        assert len(app.error) == 1, (case.name, [e.value for e in app.error])
        message = app.error[0].value
        assert case.error in message and "still using beijing_aq_small.csv" in message, message
        assert "\n" not in message


def test_every_good_file_in_the_corpus_becomes_the_dataset(app):  # type: ignore[no-untyped-def]
    for case in [c for c in cases() if c.error is None]:
        _upload(app, case.name, case.data)
        assert not app.exception and not app.error, (case.name, [e.value for e in app.error])
        assert f"Dataset: {case.name}" in texts(app)
        assert app.session_state["dataset"].history.sensors == case.sensors


@pytest.mark.parametrize(
    ("name", "word"),
    [("x" * 300 + ".csv", "255 bytes"), ("é" * 130 + ".csv", "255 bytes"), ("a\x07b.csv", "NUL")],
    ids=["long", "long-utf8", "control"],
)
def test_an_impossible_file_name_is_a_message(app, name: str, word: str):  # type: ignore[no-untyped-def]
    good = next(c for c in cases() if c.name == "bom.csv")
    _upload(app, name, good.data)
    assert not app.exception
    assert len(app.error) == 1 and word in app.error[0].value


@pytest.mark.parametrize("name", ["a\x00b.csv", "y" * 256 + ".csv"], ids=["nul", "long"])
def test_load_upload_refuses_a_name_the_filesystem_cannot_hold(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Streamlit's uploader itself rejects a NUL before the page runs; the glue refuses it too."""
    from engine.data import LoadOptions
    from engine.errors import DataError
    from ui.upload import load_upload

    with pytest.raises(DataError, match="rename the file"):
        load_upload(name, b"time,a,b\n", LoadOptions(), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_filesystem_error_is_a_message_not_a_crash(app, monkeypatch):  # type: ignore[no-untyped-def]
    import ui.datasets

    def full(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ui.datasets, "load_upload", full)
    good = next(c for c in cases() if c.name == "bom.csv")
    _upload(app, "fine.csv", good.data)
    assert not app.exception
    assert len(app.error) == 1 and "No space left on device" in app.error[0].value


def test_epoch_milliseconds_load_once_the_unit_is_chosen(app):  # type: ignore[no-untyped-def]
    """Refused as seconds (the message says so); read as milliseconds when chosen."""
    case = next(c for c in cases() if c.name == "epoch_ms.csv")
    _upload(app, case.name, case.data)
    assert len(app.error) == 1 and "as seconds since 1970-01-01" in app.error[0].value
    app.selectbox(key="w_time_unit").set_value("ms").run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert "Dataset: epoch_ms.csv" in texts(app)
    history = app.session_state["dataset"].history
    assert str(history.times[0]) == "2024-03-01T00:00:00.000000000"
    assert history.report.sampling_interval_s == 3600.0


def test_an_unsteady_interval_is_a_warning_on_the_data_page(app):  # type: ignore[no-untyped-def]
    """The note was only in the loader's list: a horizon in rows spans another time."""
    import pandas as pd

    times = [*pd.date_range("2024-03-01", periods=300, freq="10min")]
    times += [*pd.date_range(times[-1] + pd.Timedelta("1min"), periods=150, freq="1min")]
    rows = [f"{t},{i % 7},{(i * 3) % 11}" for i, t in enumerate(times)]
    _upload(app, "rates.csv", ("time,a,b\n" + "\n".join(rows) + "\n").encode())
    assert not app.exception and not app.error
    said = [w.value for w in app.warning if "not steady" in w.value]
    assert len(said) == 1 and said[0].startswith("The sampling interval is not steady")


def test_an_hours_clock_loads_as_hours_unless_the_operator_says_otherwise(app):  # type: ignore[no-untyped-def]
    """The page chose seconds for every numeric time column, which switched off the
    loader's own rules: an hours clock loaded as one reading a second (the CLI reads it
    as hours). Auto-detect, the default, reads it as the CLI does."""
    rows = [f"{i},{i % 7},{(i * 3) % 11},{(i * 5) % 13}" for i in range(50)]
    _upload(app, "hours.csv", ("hours_since_start,a,b,c\n" + "\n".join(rows) + "\n").encode())
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert app.session_state["dataset"].history.report.sampling_interval_s == 3600.0
    app.selectbox(key="w_time_unit").set_value("s").run()
    assert app.session_state["dataset"].history.report.sampling_interval_s == 1.0


def test_loggers_on_their_own_clocks_load_onto_one_clock_step(app):  # type: ignore[no-untyped-def]
    """Two loggers a second apart share no rows: every sensor is half filled in, a warning.
    The upload options' clock step puts them on one clock; a step that is not one is an
    error that keeps the times as read."""
    import pandas as pd

    minutes = pd.date_range("2024-03-01", periods=120, freq="min")
    rows = [f"{t + pd.Timedelta(seconds=k % 2)},s{k},{(i * (k + 3)) % 11}"
            for i, t in enumerate(minutes) for k in range(4)]  # fmt: skip
    _upload(app, "loggers.csv", ("time,sensor,value\n" + "\n".join(rows) + "\n").encode())
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert any("missed 50 % of the rows or more" in w.value for w in app.warning)
    assert app.session_state["dataset"].history.values.shape == (240, 4)
    app.text_input(key="w_clock").set_value("1min").run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert not any("missed 50 %" in w.value for w in app.warning)
    history = app.session_state["dataset"].history
    assert history.values.shape == (120, 4) and history.report.n_values_filled == 0
    app.text_input(key="w_clock").set_value("a minute").run()
    assert len(app.error) == 1 and "a clock step is a number and a unit" in app.error[0].value
    assert app.session_state["dataset"].history.values.shape == (240, 4)  # as read
