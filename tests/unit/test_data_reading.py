"""engine.data: how a file's text is read before it is a history: the delimiter, zones
DuckDB parses, numeric times, and reading only the sensors a caller uses."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from engine.data import LoadOptions, load_history
from engine.errors import DataError

T0 = pd.Timestamp("2024-03-01 00:00:00")


def _wide(names: list[str], rows: int = 30) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(np.round(rng.normal(20, 5, (rows, len(names))), 3), columns=names)
    frame.insert(0, "time", pd.date_range(T0, periods=rows, freq="h").astype(str))
    return frame


# --- the delimiter ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "names",
    [
        ["plant|hall|t1", "plant|hall|t2", "plant|hall|t3"],  # was: "duplicate column 'hall'"
        ["a;b;c", "d;e;f", "g;h;i"],  # was: "line 2 has 1 field(s) where the header has 10"
    ],
)
@pytest.mark.parametrize("quoted", [True, False])
def test_delimiters_inside_header_names_do_not_choose_the_delimiter(tmp_path, names, quoted):
    """The delimiter was the character most frequent in the header line, quotes and all:
    names holding pipes or semicolons chose them over the commas that split the file."""
    frame = _wide(names)
    path = tmp_path / "names.csv"
    frame.to_csv(path, index=False, quoting=1 if quoted else 0)  # 1: csv.QUOTE_ALL
    history = load_history(path)
    assert history.sensors == tuple(names)
    np.testing.assert_array_equal(history.values, frame[names].to_numpy())


@pytest.mark.parametrize("sep", [";", "|", "\t", ","])
def test_each_delimiter_is_still_found(tmp_path, sep):
    frame = _wide(["a,b", "c", "d"] if sep != "," else ["a;b", "c", "d"])
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False, sep=sep)
    assert load_history(path).sensors == tuple(frame.columns[1:])


# --- zones -----------------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["EST", "CET", "PST8PDT", "EST5EDT", "Etc/GMT+5", "est"])
def test_times_with_a_zone_abbreviation_beside_naive_ones_are_refused(tmp_path, zone):
    """The zone pattern missed abbreviations DuckDB parses: half a file moved by hours,
    silently (a gap note at most)."""
    frame = _wide(["a", "b"], rows=8)
    frame["time"] = [f"2024-03-05 0{h}:00:00" for h in range(4)] + [
        f"2024-03-05 0{h}:00:00 {zone}" for h in range(4, 8)
    ]
    frame.to_csv(tmp_path / "mixed.csv", index=False)
    with pytest.raises(
        DataError, match=rf"mixes times with a UTC offset \(row 5: .*{re.escape(zone)}"
    ):
        load_history(tmp_path / "mixed.csv")


def test_times_all_in_one_zone_abbreviation_are_converted_and_said(tmp_path):
    frame = _wide(["a", "b"], rows=8)
    frame["time"] = [f"2024-03-05 0{h}:00:00 EST" for h in range(8)]
    frame.to_csv(tmp_path / "est.csv", index=False)
    history = load_history(tmp_path / "est.csv")
    assert str(history.times[0]) == "2024-03-05T05:00:00.000000000"  # EST is UTC-5
    assert "times with a UTC offset were converted to UTC" in history.report.notes


# --- numeric times ---------------------------------------------------------------------


def _numeric(tmp_path, times) -> object:
    frame = _wide(["a", "b"], rows=len(times))
    frame["time"] = times
    path = tmp_path / "numeric.csv"
    frame.to_csv(path, index=False)
    return path


YYYYMMDD = pd.date_range("2023-01-01", periods=60, freq="D").strftime("%Y%m%d").astype(int)
EXCEL_HOURLY = np.round(45352 + np.arange(60) / 24, 6)  # 2024-03-01 00:00, 01:00, ...


@pytest.mark.parametrize(
    ("times", "looks"),
    [(YYYYMMDD, "YYYYMMDD dates"), (EXCEL_HOURLY, "Excel serial day numbers")],
)
def test_numeric_times_that_are_certainly_dates_are_refused(tmp_path, times, looks):
    """Were read as epoch seconds: a plan of 1970 dates, every 1 s or 0.04 s, exit 0."""
    path = _numeric(tmp_path, times)
    with pytest.raises(DataError, match=looks) as info:
        load_history(path)
    assert "--time-unit" in str(info.value) and "1970" in str(info.value)
    history = load_history(path, LoadOptions(numeric_time_unit="s"))  # a unit said: as said
    assert any(looks in n and "before 1980" in n for n in history.report.notes)
    assert history.report.early_times() is not None


@pytest.mark.parametrize(
    ("times", "looks"),
    [
        (np.arange(45352, 45412), "Excel serial day numbers"),  # daily: every "1 s"
        (np.arange(10, 610, 10), ""),  # relative seconds
    ],
)
def test_numeric_times_landing_before_1980_are_said(tmp_path, times, looks):
    history = load_history(_numeric(tmp_path, times))
    said = history.report.early_times()
    assert said is not None and "before 1980" in said and "--time-unit" in said
    assert looks in said
    assert said in history.report.notes


def test_epoch_seconds_of_this_century_are_not_questioned(tmp_path):
    history = load_history(_numeric(tmp_path, 1709251200 + 3600 * np.arange(60)))
    assert history.report.early_times() is None


# --- reading only the sensors a caller uses ---------------------------------------------


def test_load_sensors_reads_only_the_columns_named(tmp_path):
    from engine.data.history import load_sensors

    frame = _wide(["a", "b", "c"])
    frame["c"] = np.nan  # blank throughout: "has no values" if it were read
    frame["note"] = "ok"  # text: "cannot parse 'ok'" if it were read
    frame.loc[25:, "b"] = np.nan
    frame.to_csv(tmp_path / "w.csv", index=False)
    history, ignored = load_sensors(tmp_path / "w.csv", ("a", "zz"), LoadOptions(min_rows=2))
    assert history.sensors == ("a",) and len(history.times) == 30
    assert ignored == ("b", "c", "note")
    long = frame.melt(id_vars="time", value_vars=["a", "b", "c"], var_name="sensor")
    long.to_csv(tmp_path / "l.csv", index=False)
    history, ignored = load_sensors(tmp_path / "l.csv", ("b",), LoadOptions(min_rows=2))
    assert history.sensors == ("b",) and ignored == ("a", "c")


@pytest.mark.parametrize(("unit", "interval"), [(None, 3600.0), ("s", 1.0), ("min", 60.0)])
def test_a_time_unit_given_wins_over_an_hour_column_name(tmp_path, unit, interval):  # type: ignore[no-untyped-def]
    """A column named with 'hour' is read as hours only when no unit is given."""
    path = tmp_path / "hours.csv"
    start = 1_700_000_000 if unit != "min" else 28_000_000
    start = start if unit is not None else 472_000
    rows = [f"{start + i},{i * 0.5},{i * 0.25}" for i in range(12)]
    path.write_text("hours_since_start,a,b\n" + "\n".join(rows) + "\n")
    options = LoadOptions(numeric_time_unit=unit)
    assert load_history(path, options).report.sampling_interval_s == interval
