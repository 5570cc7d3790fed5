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
    said = "times with a UTC offset were converted to UTC (UTC offset read: -05:00)"
    assert said in history.report.notes  # the offset applied said, so a wrong zone shows


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


# --- audit: what loaded silently wrong, or was refused for the wrong reason ------------


def _rows(n: int, freq: str = "h") -> list[str]:
    return [str(t) for t in pd.date_range(T0, periods=n, freq=freq)]


def test_a_stored_pandas_index_is_not_a_sensor(tmp_path):
    """``to_parquet`` of a filtered frame stored its index as ``__index_level_0__``, read
    as a sensor counting rows. A named index is a column, as ``reset_index`` gives it,
    and said (a long file's ``sensor`` index is its ids)."""
    frame = _wide(["a", "b"], rows=40)
    frame["time"] = pd.to_datetime(frame["time"])
    frame[frame["a"] > 10].to_parquet(tmp_path / "filtered.parquet")
    history = load_history(tmp_path / "filtered.parquet")
    assert history.sensors == ("a", "b")
    assert any("'__index_level_0__' is the pandas index" in n for n in history.report.notes)
    frame.set_index(pd.Index(np.arange(40) % 7, name="station")).to_parquet(tmp_path / "n.pq")
    history = load_history(tmp_path / "n.pq")
    assert history.sensors == ("a", "b", "station")
    assert any("'station' is the pandas index saved" in n for n in history.report.notes)


@pytest.mark.parametrize("name", [None, "when", "time"])
def test_a_pandas_datetime_index_is_the_time_column(tmp_path, name):
    """A DatetimeIndex stored as ``__index_level_0__`` left the file without a time column
    ("no time column")."""
    frame = _wide(["a", "b"], rows=30)
    times = pd.DatetimeIndex(pd.to_datetime(frame.pop("time")).to_numpy(), name=name)
    frame.set_index(times).to_parquet(tmp_path / "indexed.parquet")
    history = load_history(tmp_path / "indexed.parquet")
    assert history.sensors == ("a", "b")
    np.testing.assert_array_equal(history.times, times.to_numpy())


def test_thousands_separators_in_a_semicolon_file_are_said(tmp_path):
    """686;837;1.401 in a ';' file is 1401 W written with a thousands separator, read as
    1.401: a plan on readings 1000x too small, with no word."""
    power = ["686", "837", "1.401", "1.182", "694", "1.033"] * 5
    lines = [
        f"{t};{p};{20 + i % 4}.5" for i, (t, p) in enumerate(zip(_rows(30), power, strict=True))
    ]
    path = tmp_path / "power.csv"
    path.write_text("time;power_W;temp_C\n" + "\n".join(lines) + "\n")
    history = load_history(path)  # a warning, not a refusal: 1.401 bar is a reading too
    said = [n for n in history.report.notes if "thousands separator" in n]
    assert len(said) == 1 and "'power_W'" in said[0] and "'1.401'" in said[0]
    path.write_text(path.read_text().replace(";", ","))  # ',' files: the '.' is decimal
    assert not any("thousands" in n for n in load_history(path).report.notes)


def test_a_date_column_beside_a_time_of_day_column_is_refused(tmp_path):
    """date,time,value was read long: one sensor per clock time ('00:00:00', ...)."""
    days = pd.date_range(T0, periods=40, freq="h")
    lines = [f"{t:%Y-%m-%d},{t:%H:%M:%S},{20 + i % 5}.5" for i, t in enumerate(days)]
    path = tmp_path / "split.csv"
    path.write_text("date,time,value\n" + "\n".join(lines) + "\n")
    with pytest.raises(DataError, match="combine the date and time columns into one timestamp"):
        load_history(path)
    path.write_text("day,clock,value\n" + "\n".join(lines) + "\n")  # by its values too
    with pytest.raises(DataError, match="column 'clock' holds times of day"):
        load_history(path, LoadOptions(time_column="day"))


def test_long_sensor_names_that_differ_only_in_case_are_refused(tmp_path):
    """T1 and t1 loaded and planned, but the backup and recovered files (a column per
    sensor) could not be read back."""
    lines = [f"{t},{s},{i}.5" for i, t in enumerate(_rows(20)) for s in ("T1", "t1", "p")]
    path = tmp_path / "long.csv"
    path.write_text("time,sensor,value\n" + "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"sensor 2 \('t1'\) differs from sensor 'T1' only in"):
        load_history(path)
    # sensors left out (--sensors) are no column of any file: no clash
    assert load_history(path, LoadOptions(sensors=("p", "t1"))).sensors == ("p", "t1")


@pytest.mark.parametrize(
    ("zone", "read_as"), [("BST", "Bangladesh"), ("IST", "India"), ("cst", "US Central")]
)
def test_ambiguous_zone_abbreviations_are_refused(tmp_path, zone, read_as):
    """BST was read as Bangladesh (+06:00), IST as India: a UK file moved by 5 h, and its
    change from GMT to BST a false duplicate timestamp."""
    frame = _wide(["a", "b"], rows=12)
    frame["time"] = [f"2024-03-31 {h:02d}:00:00 {'GMT' if h < 1 else zone}" for h in range(12)]
    frame.to_csv(tmp_path / "zoned.csv", index=False)
    with pytest.raises(DataError, match=rf"row 2: .*{zone.upper()}.* read as {read_as}") as info:
        load_history(tmp_path / "zoned.csv")
    assert "numeric offset (+01:00) or an IANA zone name" in str(info.value)


def test_a_change_of_sampling_rate_is_said(tmp_path):
    """400 rows every 10 min then 200 every minute: interval 600 s and no word, so a
    horizon in seconds was wrong for the last third."""
    times = [*pd.date_range(T0, periods=400, freq="10min")]
    times += [*pd.date_range(times[-1] + pd.Timedelta("1min"), periods=200, freq="1min")]
    frame = _wide(["a", "b"], rows=600).assign(time=[str(t) for t in times])
    frame.to_csv(tmp_path / "rates.csv", index=False)
    history = load_history(tmp_path / "rates.csv")
    assert history.report.sampling_interval_s == 600.0
    said = [n for n in history.report.notes if "sampling interval is not steady" in n]
    assert len(said) == 1 and "600 s" in said[0] and "60 s" in said[0]
    frame.assign(time=_rows(600, "10min")).to_csv(tmp_path / "steady.csv", index=False)
    assert not any("steady" in n for n in load_history(tmp_path / "steady.csv").report.notes)


@pytest.mark.parametrize("layout", ["wide", "long"])
def test_a_digit_separator_underscore_is_not_a_number(tmp_path, layout):
    """DuckDB read '41_25' as 4125, in the DOUBLE read of a wide file and in the cast of a
    text column alike."""
    frame = _wide(["a", "b"] if layout == "long" else ["a_1", "b", "c"], rows=12)
    frame = frame.astype({frame.columns[1]: object})
    frame.iloc[5, 1] = "41_25"
    if layout == "long":
        frame = frame.melt(id_vars="time", var_name="sensor")
    frame.to_csv(tmp_path / "sep.csv", index=False)
    with pytest.raises(DataError, match=r"row 6: cannot parse '41_25' as a number"):
        load_history(tmp_path / "sep.csv")


def test_too_few_rows_names_the_sensor_whose_gaps_dropped_them(tmp_path):
    frame = _wide(["a", "b", "c"], rows=40)
    frame["c"] = np.nan
    frame.loc[20, "c"] = 1.5  # one reading: its edges are too long to fill
    frame.to_csv(tmp_path / "sparse.csv", index=False)
    with pytest.raises(DataError, match=r"1 rows left .* readings of 'c' \(39 rows\)"):
        load_history(tmp_path / "sparse.csv")


def test_a_sensor_named_na_is_said_to_be_read_as_missing(tmp_path):
    lines = [f"{t},{s},{i}.5" for i, t in enumerate(_rows(20)) for s in ("K", "NA", "Cl")]
    path = tmp_path / "ions.csv"
    path.write_text("time,sensor,value\n" + "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"row 2: missing sensor id .*'NA'.* rename a sensor"):
        load_history(path)


def test_repeated_times_beside_numeric_station_ids_suggest_the_long_layout(tmp_path):
    """time,station,value with ids 101, 102, 103 was read wide: "duplicate timestamp" and
    nothing about the layout."""
    lines = [f"{t},{s},{i}.5" for i, t in enumerate(_rows(20)) for s in (101, 102, 103)]
    path = tmp_path / "stations.csv"
    path.write_text("time,station,value\n" + "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"duplicate timestamp .*column 'station'.*--layout long"):
        load_history(path)
    assert load_history(path, LoadOptions(layout="long")).sensors == ("101", "102", "103")


@pytest.mark.parametrize("index", [["time", "sensor"], ["sensor"]])
def test_a_long_frame_saved_with_a_named_index_loads(tmp_path, index):
    """``set_index(["time", "sensor"]).to_parquet()`` is a long file: a named index is a
    column like any other (only an unnamed index, a frame's row numbers, is left out)."""
    times = pd.date_range("2024-01-01", periods=50, freq="h")
    rng = np.random.default_rng(3)
    long = pd.DataFrame(
        {"time": np.repeat(times, 3), "sensor": ["a", "b", "c"] * 50, "value": rng.normal(size=150)}
    )
    long.set_index(index).to_parquet(tmp_path / "long.parquet")
    history = load_history(tmp_path / "long.parquet")
    assert history.sensors == ("a", "b", "c") and len(history.times) == 50
