"""engine.data.history: parsing, layouts, missing values, report, fingerprint, bad input."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.data import (
    LoadOptions,
    SensorHistory,
    history_from_frame,
    load_history,
)
from engine.errors import DataError, ParameterError

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_data"
T0 = pd.Timestamp("2024-03-01 00:00:00")


def make_wide(
    n_rows: int = 10, n_sensors: int = 3, step: str = "1h", seed: int = 0
) -> pd.DataFrame:
    """Random wide frame with a ``time`` column; values rounded so CSV round-trips exactly."""
    rng = np.random.default_rng(seed)
    values = np.round(rng.normal(20.0, 5.0, (n_rows, n_sensors)), 3)
    frame = pd.DataFrame(values, columns=[f"s{i}" for i in range(n_sensors)])
    frame.insert(0, "time", pd.date_range(T0, periods=n_rows, freq=step))
    return frame


def to_long(wide: pd.DataFrame) -> pd.DataFrame:
    long = wide.melt(id_vars="time", var_name="sensor", value_name="value")
    return long.dropna().sort_values("time", kind="stable").reset_index(drop=True)


def load_module(name: str):
    spec = importlib.util.spec_from_file_location(name, SAMPLE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- formats and layouts -------------------------------------------------------------


def test_wide_csv_values_times_and_report(tmp_csv):
    frame = make_wide(12, 3)
    history = load_history(tmp_csv(frame))
    np.testing.assert_array_equal(history.values, frame[["s0", "s1", "s2"]].to_numpy())
    np.testing.assert_array_equal(history.times, frame["time"].to_numpy())
    assert history.times.dtype == np.dtype("datetime64[ns]")
    assert history.sensors == ("s0", "s1", "s2")
    report = history.report
    assert (report.source, report.layout, report.time_column) == ("data.csv", "wide", "time")
    assert (report.n_rows_raw, report.n_rows, report.n_gaps) == (12, 12, 0)
    assert report.sampling_interval_s == 3600.0
    assert report.missing_rate == {"s0": 0.0, "s1": 0.0, "s2": 0.0}
    assert report.n_duplicate_timestamps == 0 and report.missing_policy == "interpolate"


def test_long_csv_equals_wide(tmp_csv):
    wide = make_wide(8, 3)
    expected = load_history(tmp_csv(wide, "wide.csv"))
    history = load_history(tmp_csv(to_long(wide), "long.csv"))
    assert history.report.layout == "long"
    assert history.fingerprint() == expected.fingerprint()


def test_long_with_unnamed_roles_detected_by_sensor_ids(tmp_csv):
    long = to_long(make_wide(8, 2)).rename(columns={"sensor": "station", "value": "pm"})
    history = load_history(tmp_csv(long))
    assert history.report.layout == "long" and history.sensors == ("s0", "s1")


def test_a_text_status_beside_one_reading_per_time_is_not_a_long_file(tmp_csv):
    """time,status,temp with status OK/FAULT was pivoted into sensors 'OK' and 'FAULT'."""
    wide = make_wide(8, 1).rename(columns={"s0": "temp"})
    wide.insert(1, "status", ["OK", "FAULT"] * 4)
    path = tmp_csv(wide)
    with pytest.raises(DataError, match=r"column 'status' holds text.* every time appears once"):
        load_history(path)
    history = load_history(path, LoadOptions(layout="long"))  # the operator's word for it
    assert set(history.sensors) == {"FAULT", "OK"}


def test_times_with_and_without_a_utc_offset_in_one_column_are_refused(tmp_path):
    """Naive times were taken as UTC and sorted in between the offset ones, hours apart."""
    times = ["2024-03-01 00:00:00", "2024-03-01 01:00:00+02:00", "2024-03-01 02:00:00"]
    path = tmp_path / "mixed.csv"
    pd.DataFrame({"time": [*times, "2024-03-01 03:00:00"], "a": [1.0, 2, 3, 4]}).assign(
        b=[2.0, 1, 0, 3]
    ).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"mixes times with a UTC offset \(row 2: .*row 1: "):
        load_history(path)
    every = [t + "+02:00" for t in ("2024-03-01 00:00:00", "2024-03-01 01:00:00")]
    pd.DataFrame({"time": [*every, "2024-03-01T02:00:00Z", "2024-03-01T03:00:00.5-01"],
                  "a": [1.0, 2, 3, 4], "b": [2.0, 1, 0, 3]}).to_csv(path, index=False)  # fmt: skip
    history = load_history(path)  # every time has one: converted to UTC
    assert str(history.times[0]) == "2024-02-29T22:00:00.000000000"
    said = "times with a UTC offset were converted to UTC (UTC offset read: -01:00, +00:00, +02:00)"
    assert said in history.report.notes


def test_times_with_a_named_zone_beside_naive_ones_are_refused(tmp_path):
    """A named zone shifted those rows by hours beside the naive ones (taken as UTC): only
    a gap note said anything. Every time in a named zone is converted, and said so."""
    path = tmp_path / "named.csv"
    naive = [f"2024-06-01 0{h}:00:00" for h in range(4)]
    zoned = [f"2024-06-01 0{h}:00:00 America/New_York" for h in range(4, 8)]
    frame = pd.DataFrame({"time": naive + zoned, "a": np.arange(8.0), "b": np.arange(8.0) ** 2})
    frame.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"mixes times with a UTC offset \(row 5: .*New_York"):
        load_history(path)
    every = [f"2024-06-01 0{h}:00:00 America/New_York" for h in range(8)]
    frame.assign(time=every).to_csv(path, index=False)
    history = load_history(path)
    assert str(history.times[0]) == "2024-06-01T04:00:00.000000000"  # EDT is UTC-4
    said = "times with a UTC offset were converted to UTC (UTC offset read: -04:00)"
    assert said in history.report.notes


def test_parquet_wide_and_long(tmp_path):
    wide = make_wide(9, 4)
    wide.to_parquet(tmp_path / "wide.parquet", index=False)
    to_long(wide).to_parquet(tmp_path / "long.pq", index=False)
    a = load_history(tmp_path / "wide.parquet")
    b = load_history(tmp_path / "long.pq")
    np.testing.assert_array_equal(a.values, wide.iloc[:, 1:].to_numpy())
    assert (a.report.layout, b.report.layout) == ("wide", "long")
    assert a.fingerprint() == b.fingerprint()


def test_tsv_and_semicolon_csv(tmp_path):
    wide = make_wide(6, 2)
    wide.to_csv(tmp_path / "a.tsv", sep="\t", index=False)
    wide.to_csv(tmp_path / "b.txt", sep=";", index=False)
    a, b = load_history(tmp_path / "a.tsv"), load_history(tmp_path / "b.txt")
    assert a.fingerprint() == b.fingerprint()
    np.testing.assert_array_equal(a.values, wide[["s0", "s1"]].to_numpy())


def test_layout_auto_three_numeric_columns_is_wide(tmp_csv):
    history = load_history(tmp_csv(make_wide(6, 2)))
    assert history.report.layout == "wide" and history.sensors == ("s0", "s1")


def test_layout_forced_long_uses_column_order(tmp_csv):
    long = to_long(make_wide(6, 2))
    long["sensor"] = long["sensor"].map({"s0": 10, "s1": 20})  # numeric ids: ambiguous in auto
    path = tmp_csv(long.rename(columns={"sensor": "a", "value": "b"}))
    with pytest.raises(DataError, match="duplicate timestamp"):  # auto reads it as wide
        load_history(path)
    history = load_history(path, LoadOptions(layout="long"))
    assert history.report.layout == "long" and history.sensors == ("10", "20")


def test_layout_forced_wide_on_long_file_names_the_text_column(tmp_csv):
    path = tmp_csv(to_long(make_wide(6, 2)))
    with pytest.raises(DataError, match=r"data\.csv: column 'sensor' row 1: cannot parse 's0'"):
        load_history(path, LoadOptions(layout="wide"))


def test_layout_forced_long_needs_three_columns(tmp_csv):
    with pytest.raises(DataError, match=r"data\.csv: long layout needs exactly three columns"):
        load_history(tmp_csv(make_wide(6, 3)), LoadOptions(layout="long"))


def test_time_column_option_and_first_column_detection(tmp_csv):
    frame = make_wide(6, 2).rename(columns={"time": "when"})
    history = load_history(tmp_csv(frame))  # first column parses as datetimes
    assert history.report.time_column == "when"
    forced = load_history(tmp_csv(frame, "b.csv"), LoadOptions(time_column="when"))
    assert forced.fingerprint() == history.fingerprint()
    with pytest.raises(DataError, match=r"b\.csv: time column 'nope' not found"):
        load_history(tmp_csv(frame, "b.csv"), LoadOptions(time_column="nope"))


# --- time handling --------------------------------------------------------------------


def test_numeric_time_named_hours_is_read_as_hours(tmp_csv):
    path = tmp_csv("""
        hours_since_start,a,b
        0,1,2
        0.5,2,3
        1,3,5
        1.5,4,4
        """)
    history = load_history(path)
    expected = np.array([0, 1800, 3600, 5400], dtype="datetime64[s]").astype("datetime64[ns]")
    np.testing.assert_array_equal(history.times, expected)
    assert history.report.sampling_interval_s == 1800.0
    assert any("read as hours" in note and "hour" in note for note in history.report.notes)


@pytest.mark.parametrize(
    ("unit", "seconds"), [("s", 1.0), ("ms", 1e-3), ("min", 60.0), ("h", 3600.0)]
)
def test_numeric_time_unit_option(tmp_csv, unit, seconds):
    path = tmp_csv("time,a,b\n10,1,2\n20,2,3\n30,3,5\n40,4,4\n")
    history = load_history(path, LoadOptions(numeric_time_unit=unit))
    assert history.report.sampling_interval_s == pytest.approx(10 * seconds)
    assert history.times[0] == np.datetime64(0, "ns") + np.timedelta64(
        int(10 * seconds * 1e9), "ns"
    )


def test_unsorted_times_are_sorted_with_a_note(tmp_csv):
    frame = make_wide(8, 2)
    shuffled = frame.iloc[[3, 0, 7, 1, 2, 6, 4, 5]]
    history = load_history(tmp_csv(shuffled))
    np.testing.assert_array_equal(history.values, frame[["s0", "s1"]].to_numpy())
    assert any("sorted" in note for note in history.report.notes)
    assert not any("sorted" in n for n in load_history(tmp_csv(frame, "b.csv")).report.notes)


def test_utc_offsets_are_converted_to_utc(tmp_csv):
    path = tmp_csv("""
        time,a,b
        2024-01-01T08:00:00+08:00,1,2
        2024-01-01T01:00:00+00:00,2,3
        2024-01-01T03:00:00+01:00,3,5
        2024-01-01T03:00:00Z,4,4
        """)
    history = load_history(path)
    expected = pd.date_range("2024-01-01 00:00", periods=4, freq="1h").to_numpy()
    np.testing.assert_array_equal(history.times, expected)
    assert any("UTC" in note for note in history.report.notes)


def test_zone_aware_frame_times_become_utc():
    frame = make_wide(6, 2)
    frame["time"] = frame["time"].dt.tz_localize("Asia/Shanghai")
    history = history_from_frame(frame)
    expected = (make_wide(6, 2)["time"] - pd.Timedelta(hours=8)).to_numpy()
    np.testing.assert_array_equal(history.times, expected)
    assert any("UTC" in note for note in history.report.notes)


def test_categorical_long_frame():
    long = to_long(make_wide(6, 2)).astype({"sensor": "category"})
    assert history_from_frame(long).sensors == ("s0", "s1")


# --- missing values -------------------------------------------------------------------


def irregular_frame_with_gaps() -> pd.DataFrame:
    seconds = np.array([0, 60, 120, 300, 360, 600, 660, 720, 780, 900, 960, 1020] * 1)
    seconds = np.concatenate([seconds, 1080 + 60 * np.arange(28)])  # 40 rows
    rng = np.random.default_rng(3)
    values = np.round(rng.normal(0, 1, (seconds.size, 3)), 4)
    values[[3, 4, 9], 0] = np.nan  # interior gaps of s0
    values[0, 1] = np.nan  # leading run of 1 (<= 5% of 40 = 2): filled by nearest
    values[-3:, 2] = np.nan  # trailing run of 3 (> 2): rows dropped
    frame = pd.DataFrame(values, columns=["s0", "s1", "s2"])
    frame.insert(0, "time", T0 + pd.to_timedelta(seconds, unit="s"))
    return frame


def test_interpolation_matches_numpy_interp(tmp_csv):
    frame = irregular_frame_with_gaps()
    history = load_history(tmp_csv(frame))
    t = (frame["time"] - T0).dt.total_seconds().to_numpy()
    raw = frame[["s0", "s1", "s2"]].to_numpy()
    ok = ~np.isnan(raw[:, 0])
    expected_s0 = raw[:, 0].copy()
    expected_s0[~ok] = np.interp(t[~ok], t[ok], raw[ok, 0])
    np.testing.assert_allclose(history.values[:, 0], expected_s0[:-3], rtol=0, atol=1e-12)
    assert history.values[0, 1] == raw[1, 1]  # leading gap takes the nearest value
    report = history.report
    assert (report.n_rows_raw, report.n_rows, report.n_rows_dropped) == (40, 37, 3)
    assert report.n_values_filled == 4
    assert report.missing_rate == pytest.approx({"s0": 3 / 40, "s1": 1 / 40, "s2": 3 / 40})
    np.testing.assert_array_equal(history.times, frame["time"].to_numpy()[:-3])


def test_drop_policy_drops_every_row_with_a_gap(tmp_csv):
    frame = irregular_frame_with_gaps()
    history = load_history(tmp_csv(frame), LoadOptions(missing="drop"))
    keep = ~frame[["s0", "s1", "s2"]].isna().any(axis=1).to_numpy()
    np.testing.assert_array_equal(history.values, frame[["s0", "s1", "s2"]].to_numpy()[keep])
    report = history.report
    assert (report.n_rows_dropped, report.n_values_filled) == (int((~keep).sum()), 0)
    assert report.missing_policy == "drop"


def test_infinite_values_are_missing_with_a_note(tmp_csv):
    frame = make_wide(10, 2)
    frame.loc[4, "s1"] = np.inf
    history = load_history(tmp_csv(frame))
    expected = (frame.loc[3, "s1"] + frame.loc[5, "s1"]) / 2
    assert history.values[4, 1] == pytest.approx(expected)
    assert history.report.missing_rate["s1"] == pytest.approx(0.1)
    assert any("infinite" in note for note in history.report.notes)


def test_missing_markers_are_missing(tmp_csv):
    path = tmp_csv("""
        time,a,b
        2024-01-01,1,2
        2024-01-02,NA,3
        2024-01-03,3,
        2024-01-04,5,nan
        2024-01-05,6,N/A
        2024-01-06,7,8
        2024-01-07,9,10
        2024-01-08,11,12
        """)
    history = load_history(path, LoadOptions(missing="drop"))
    np.testing.assert_array_equal(history.values, [[1, 2], [7, 8], [9, 10], [11, 12]])


# --- report ---------------------------------------------------------------------------


def test_report_interval_gaps_constant_and_duplicates(tmp_csv):
    frame = make_wide(20, 3, step="10min")
    frame = frame.drop(index=[5, 6, 12]).reset_index(drop=True)  # two gaps: 30 and 20 min
    frame["flat"] = 7.5
    frame["copy"] = frame["s1"]
    history = load_history(tmp_csv(frame))
    report = history.report
    assert report.sampling_interval_s == 600.0
    assert report.n_gaps == 2
    assert report.constant_sensors == ("flat",)
    assert report.duplicate_sensors == (("s1", "copy"),)
    assert any("exactly by their mean" in note for note in report.notes)
    assert report.to_dict()["sensors"] == ("s0", "s1", "s2", "flat", "copy")


# --- SensorHistory --------------------------------------------------------------------


def test_fingerprint_is_stable_and_sensitive(tmp_csv):
    frame = make_wide(10, 3)
    base = load_history(tmp_csv(frame)).fingerprint()
    assert base.startswith("sha256:") and len(base) == len("sha256:") + 64
    assert load_history(tmp_csv(frame, "again.csv")).fingerprint() == base
    assert history_from_frame(frame).fingerprint() == base
    changed_value = frame.copy()
    changed_value.loc[3, "s2"] += 0.001
    changed_time = frame.copy()
    changed_time.loc[9, "time"] += pd.Timedelta(seconds=1)
    renamed = frame.rename(columns={"s0": "x0"})
    variants = [history_from_frame(f).fingerprint() for f in (changed_value, changed_time, renamed)]
    assert len({base, *variants}) == 4


def test_select_rows_and_to_frame(tmp_csv):
    frame = make_wide(10, 3)
    history = load_history(tmp_csv(frame))
    picked = history.select(["s2", "s0"])
    np.testing.assert_array_equal(picked.values, frame[["s2", "s0"]].to_numpy())
    assert picked.report.sensors == ("s2", "s0") and set(picked.report.missing_rate) == {"s2", "s0"}
    with pytest.raises(ParameterError, match="nope"):
        history.select(["s0", "nope"])
    part = history.rows(2, 6)
    np.testing.assert_array_equal(part.times, history.times[2:6])
    assert part.report.n_rows == 4
    with pytest.raises(ParameterError):
        history.rows(5, 5)
    out = history.to_frame()
    assert list(out.columns) == ["time", "s0", "s1", "s2"]
    assert history_from_frame(out).fingerprint() == history.fingerprint()


def test_history_arrays_are_read_only_and_validated(tmp_csv):
    history = load_history(tmp_csv(make_wide(6, 2)))
    with pytest.raises(ValueError):
        history.values[0, 0] = 1.0
    times = history.times[::-1].copy()
    with pytest.raises(DataError, match="strictly increasing"):
        SensorHistory(times, np.array(history.values), history.sensors, history.report)


def test_frame_with_datetime_index_and_bad_object_value():
    frame = make_wide(6, 2).set_index("time")
    assert history_from_frame(frame).report.time_column == "time"
    bad = make_wide(6, 2).astype({"s1": object})
    bad.loc[3, "s1"] = "oops"
    with pytest.raises(DataError, match=r"mine: column 's1' row 4: cannot parse 'oops'"):
        history_from_frame(bad, source="mine")


# --- bad input ------------------------------------------------------------------------


def error_of(path: Path, options: LoadOptions | None = None) -> str:
    with pytest.raises(DataError) as info:
        load_history(path, options or LoadOptions())
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_missing_file_and_bad_extension(tmp_path):
    assert "nothere.csv: file not found" in error_of(tmp_path / "nothere.csv")
    (tmp_path / "data.json").write_text("{}")
    assert "data.json: unsupported file extension '.json'" in error_of(tmp_path / "data.json")


def test_empty_and_header_only(tmp_csv):
    assert error_of(tmp_csv("", "e.csv")) == "e.csv: file is empty"
    assert "file is empty" in error_of(tmp_csv("\n\n", "blank.csv"))
    assert error_of(tmp_csv("time,a,b\n")) == "data.csv: has a header but no data rows"


def test_no_time_column_and_no_sensor_column(tmp_csv):
    message = error_of(tmp_csv("a,b\n1,2\n2,3\n"))
    assert message.startswith("data.csv: no time column") and "'a', 'b'" in message
    assert "no numeric sensor columns" in error_of(tmp_csv("time\n2024-01-01\n", "t.csv"))


def test_sensor_named_time_is_rejected(tmp_csv):
    frame = make_wide(6, 2).rename(columns={"time": "timestamp", "s1": "time"})
    assert "data.csv: a sensor is named 'time'" in error_of(tmp_csv(frame))


def test_unparsable_value_names_column_row_and_value(tmp_csv):
    frame = make_wide(30, 3).astype({"s2": object})
    frame.loc[16, "s2"] = "abc"  # 17th data row
    message = error_of(tmp_csv(frame))
    assert message == "data.csv: column 's2' row 17: cannot parse 'abc' as a number"


def test_unparsable_value_far_beyond_any_sniffing_sample(tmp_csv):
    frame = make_wide(25_000, 2, step="1min").astype({"s1": object})
    frame.loc[23_999, "s1"] = "1,5"
    assert (
        error_of(tmp_csv(frame))
        == "data.csv: column 's1' row 24000: cannot parse '1,5' as a number"
    )


def test_unparsable_and_missing_time(tmp_csv):
    bad = tmp_csv("time,a,b\n2024-01-01,1,2\n2024-01-02,1,2\nsoon,1,2\n")
    assert error_of(bad) == "data.csv: column 'time' row 3: cannot parse 'soon' as a time"
    gap = tmp_csv("time,a,b\n2024-01-01,1,2\n,1,2\n", "gap.csv")
    assert error_of(gap) == "gap.csv: column 'time' row 2: missing time"


def test_duplicate_timestamps_name_time_and_rows(tmp_csv):
    frame = make_wide(8, 2)
    frame.loc[6, "time"] = frame.loc[2, "time"]
    message = error_of(tmp_csv(frame))
    assert message.startswith("data.csv: column 'time': duplicate timestamp 2024-03-01 02:00:00")
    assert "(rows 3 and 7)" in message
    long = to_long(make_wide(6, 2))
    long.loc[len(long)] = [long.loc[0, "time"], "s0", 1.0]
    message = error_of(tmp_csv(long, "long.csv"))
    assert (
        "long.csv: sensor 's0' has two readings at 2024-03-01 00:00:00 (rows 1 and 13)" in message
    )


def test_duplicate_column_names(tmp_csv, tmp_path):
    assert error_of(tmp_csv("time,a,b,a\n2024-01-01,1,2,3\n")) == (
        "data.csv: duplicate column name 'a' (column 4)"
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table([pa.array([1.0, 2.0])] * 2, names=["x", "x"])
    pq.write_table(table, tmp_path / "dup.parquet")
    assert "dup.parquet: duplicate column name 'x'" in error_of(tmp_path / "dup.parquet")


def test_too_few_rows_for_the_sensors(tmp_csv):
    message = error_of(tmp_csv(make_wide(5, 4)))
    assert message.startswith("data.csv: 5 rows left") and "for 4 sensors" in message
    assert "need at least 6 rows" in message


def test_too_few_rows_after_dropping(tmp_csv):
    frame = make_wide(10, 4)
    frame.loc[[1, 3, 5, 7, 9], "s0"] = np.nan
    message = error_of(tmp_csv(frame), LoadOptions(missing="drop"))
    assert "data.csv: 5 rows left after missing-value handling (drop, 5 of 10 dropped)" in message


def test_all_missing_sensor_is_an_error(tmp_csv):
    frame = make_wide(10, 3)
    frame["s1"] = np.nan
    assert error_of(tmp_csv(frame)) == (
        "data.csv: sensor 's1' has no values (all 10 rows missing): leave it out (--sensors "
        "on the command line, Sensors to read on the Data page)"
    )


def test_non_csv_bytes_and_broken_rows(tmp_csv, tmp_path):
    (tmp_path / "bin.parquet").write_bytes(b"not a parquet file at all")
    assert error_of(tmp_path / "bin.parquet").startswith("bin.parquet: not a readable Parquet")
    ragged = tmp_csv("time,a,b\n2024-01-01,1,2\n2024-01-02,3\n")
    assert error_of(ragged).startswith(
        "data.csv: cannot read CSV: line 3 has 2 field(s) where the header line has 3: "
        "this does not look like a table of readings"
    )
    prose = tmp_csv("This is a note about the sensors\nnot a table\nat all, really\n")
    message = error_of(prose)
    assert "line 3 has 2 field(s) where the header line has 1" in message
    assert "CSV Error" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("layout", "tall"),
        ("missing", "zero"),
        ("numeric_time_unit", "days"),
        ("time_column", ""),
        ("clock_s", 0.0),
        ("clock_s", float("nan")),
        ("clock_s", 1e-10),
        ("clock_s", 400 * 86400.0),
        ("clock_s", "60"),
        ("clock_s", True),
    ],
)
def test_load_options_validate(field, value):
    with pytest.raises(ParameterError, match=repr(value)):
        LoadOptions(**{field: value})


# --- shipped samples ------------------------------------------------------------------


def test_main_sample_loads_with_real_gaps(sample_csv):
    history = load_history(sample_csv)
    report = history.report
    assert history.values.shape == (2880, 36)
    assert str(history.times[0]).startswith("2016-09-01T00:00")
    assert report.sampling_interval_s == 3600.0
    assert report.n_values_filled > 0 and 0 < max(report.missing_rate.values()) < 0.1
    assert ("Changping_TEMP", "Dingling_TEMP") in report.duplicate_sensors


def test_small_csv_and_long_parquet_samples_agree():
    small = load_history(SAMPLE_DIR / "beijing_aq_small.csv")
    long = load_history(SAMPLE_DIR / "beijing_aq_long.parquet")
    assert small.values.shape == (720, 12) and long.report.layout == "long"
    assert small.fingerprint() == long.fingerprint()


def test_synthetic_sample_is_what_the_generator_writes():
    generator = load_module("generate_synthetic")
    history = load_history(SAMPLE_DIR / "synthetic_drift.csv")
    expected = generator.generate(16, 2000, 4, 0.95, 0.6, 7)
    assert history.values.shape == (2000, 16) and history.report.sampling_interval_s == 60.0
    np.testing.assert_allclose(history.values, expected.iloc[:, 1:].to_numpy(), atol=5e-5)


def test_generator_is_seeded_and_drifts():
    generator = load_module("generate_synthetic")
    a = generator.generate(8, 3000, 2, 0.9, 0.5, 1)
    pd.testing.assert_frame_equal(a, generator.generate(8, 3000, 2, 0.9, 0.5, 1))
    x = a.iloc[:, 1:].to_numpy()
    before, after = np.corrcoef(x[:1500].T), np.corrcoef(x[1500:].T)
    # sensors 0 and 6 share cluster 0; 6 is in the half whose loading flips
    assert before[0, 6] > 0.5 and after[0, 6] < -0.5
    still = generator.generate(8, 3000, 2, 0.9, None, 1).iloc[:, 1:].to_numpy()
    assert np.corrcoef(still[1500:].T)[0, 6] > 0.5
    with pytest.raises(ValueError, match="drift_at"):
        generator.generate(8, 100, 2, 0.9, 1.5, 1)
