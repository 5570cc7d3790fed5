"""Recovery's numpy pivot and rebuild against the pandas and ``LinearMap.apply`` references,
and ``recover_dataset`` end to end against the pipeline it replaced."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.recovery_core import write_dataset
from engine.backup.dataset import TimeRange, read_backup
from engine.errors import DataError
from engine.export import BackupConfig, load_config
from engine.export.recover import recover_dataset, recover_file
from engine.export.wide import conflicting_readings, overlay, rebuild, widen
from tests.production_reference import Rows, long_readings, sample_rows, write_config

WANTED = ("a", "b", "c")


def pivot_reference(long: pd.DataFrame, sensors: tuple[str, ...]) -> pd.DataFrame:
    """What ``recover_dataset`` did before: pandas' pivot, reindexed to ``sensors``."""
    wide = long.pivot_table(index="event_time", columns="sensor", values="value", aggfunc="last")
    return wide.reindex(columns=list(sensors))


def _table(long: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(long, preserve_index=False)


READINGS = st.lists(
    st.tuples(
        st.integers(0, 5),  # hour
        st.sampled_from(["a", "b", "c", "d", None]),  # d: a sensor not wanted
        st.one_of(st.floats(-1e6, 1e6), st.just(float("nan"))),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(READINGS)
def test_widen_equals_pandas_pivot(readings: list[tuple[int, str | None, float]]) -> None:
    """Duplicates (last non-NaN kept), NaN readings, unwanted and null sensors."""
    long = pd.DataFrame(readings, columns=["hour", "sensor", "value"])
    long.insert(
        0, "event_time", pd.Timestamp("2024-01-01") + pd.to_timedelta(long.pop("hour"), "h")
    )
    long["event_time"] = long["event_time"].astype("datetime64[us]")
    times, wide = widen(_table(long), WANTED)
    expected = pivot_reference(long, WANTED)
    np.testing.assert_array_equal(times, expected.index.to_numpy())
    np.testing.assert_array_equal(wide, expected.to_numpy(dtype=float).reshape(wide.shape))


def test_widen_of_nothing_is_empty() -> None:
    columns = {"event_time": pd.Series([], dtype="datetime64[us]")}
    columns |= {"sensor": pd.Series([], dtype=str), "value": pd.Series([], dtype=float)}
    none = pd.DataFrame(columns)
    for long in (None, _table(none)):
        times, wide = widen(long, WANTED)
        assert times.shape == (0,) and wide.shape == (0, 3)


def test_two_different_readings_of_one_sensor_at_one_time_are_said() -> None:
    """``widen`` keeps the last; a copy with the same value (a replayed batch) is no
    conflict, a different value is, and a missing one is neither."""
    t = pd.Timestamp("2024-01-01")
    long = pd.DataFrame(
        {
            "event_time": [t, t, t, t + pd.Timedelta(hours=1), t, t + pd.Timedelta(hours=1)],
            "sensor": ["a", "a", "b", "b", "c", "b"],
            "value": [1.0, 1.0, 2.0, 3.0, float("nan"), 3.0],
        }
    ).astype({"event_time": "datetime64[us]"})
    assert conflicting_readings(_table(long)) is None
    assert conflicting_readings(None) is None
    long.loc[len(long)] = [t, "c", 4.0]
    long.loc[len(long)] = [t + pd.Timedelta(hours=1), "b", 103.0]
    said = conflicting_readings(_table(long))
    assert said is not None and said.startswith("1 (time, sensor) pair(s) hold two different")
    assert "e.g. b at 2024-01-01 01:00:00" in said


def test_rebuild_equals_apply(tmp_path: Path) -> None:
    rows = sample_rows(48)
    write_config(tmp_path / "plan.json", rows)
    lm = load_config(tmp_path / "plan.json").linear_map()
    x = rows.values[:, [rows.sensors.index(s) for s in lm.backup]]
    got, expected = rebuild(lm, x), lm.apply(x)
    assert got.shape == expected.shape and got.flags.f_contiguous
    backup = [lm.sensors.index(s) for s in lm.backup]
    np.testing.assert_array_equal(got[:, backup], expected[:, backup])  # copies, exactly
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)  # the product, transposed


def backup_readings(path: Path, rows: Rows, **plan: Any) -> tuple[BackupConfig, pd.DataFrame]:
    """The config ``write_config`` writes to ``path`` for ``rows`` (``plan``: its options),
    and the long readings of its backup sensors: a job's backup of those rows."""
    write_config(path, rows, **plan)
    config = load_config(path)
    long = long_readings(rows)
    return config, long[long["sensor"].isin(config.backup_sensors)].reset_index(drop=True)


def old_recover(config_path: Path, backup: Path, out: Path, span: TimeRange) -> pd.DataFrame:
    """``recover_dataset`` by the pandas path: read_backup, pivot, apply where every backup
    sensor was read; a step lacking one keeps its readings, the rebuilt sensors empty."""
    lm = load_config(config_path).linear_map()
    read = pivot_reference(read_backup(backup, span), lm.backup)
    frame = pd.DataFrame(np.nan, index=read.index, columns=list(lm.sensors))
    complete = read.dropna()
    frame.loc[complete.index] = lm.apply(complete.to_numpy(dtype=float))
    incomplete = read.index.difference(complete.index)
    frame.loc[incomplete, list(lm.backup)] = read.loc[incomplete].to_numpy()
    frame = frame.reset_index(names="time")
    frame.to_parquet(out, index=False)
    return frame


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, Path, pd.Timestamp]:
    """A 4-day backup dataset with a gap, a NaN reading and a reading written twice.

    The repeated reading has the same value: which of two different values for one
    (time, sensor) is kept depends on the order rows are read in, which neither
    ``read_backup`` (ties of its sort) nor ``read_backup_arrow`` fixes.
    """
    rows = sample_rows(96)
    _, long = backup_readings(tmp_path / "plan.json", rows)
    long.loc[5, "value"] = np.nan  # that time step becomes incomplete
    long = long.drop(index=40)  # and so does this one
    long = pd.concat([long, long.iloc[[60]]], ignore_index=True)
    write_dataset(long, tmp_path / "backup")
    return tmp_path / "plan.json", tmp_path / "backup", pd.Timestamp(rows.times[0])


@pytest.mark.parametrize("days", [(0, 1), (0, 4), (1, 3)])
def test_recover_dataset_equals_the_pandas_pipeline(dataset, tmp_path: Path, days) -> None:
    config_path, backup, first = dataset
    t1, t2 = (first.floor("D") + pd.Timedelta(days=d) for d in days)
    span = TimeRange.parse(t1.isoformat(), t2.isoformat())
    expected = old_recover(config_path, backup, tmp_path / "old.parquet", span)
    result = recover_dataset(config_path, backup, tmp_path / "new.parquet", t1.isoformat(),
                             t2.isoformat())  # fmt: skip
    got = pd.read_parquet(tmp_path / "new.parquet")
    assert result.rows == len(expected) == len(got)
    assert list(got.columns) == list(expected.columns)
    assert got["time"].equals(pd.read_parquet(tmp_path / "old.parquet")["time"])
    np.testing.assert_allclose(got.iloc[:, 1:].to_numpy(), expected.iloc[:, 1:].to_numpy(),
                               rtol=1e-12, atol=1e-12)  # fmt: skip
    old_schema = pq.read_schema(tmp_path / "old.parquet").remove_metadata()
    assert pq.read_schema(tmp_path / "new.parquet").equals(old_schema)
    if days == (0, 4):
        assert result.incomplete_rows == 2 and result.plan_versions == (1,)
        assert sum(w.startswith("2 time step(s) lack a reading") for w in result.warnings) == 1
        lm = load_config(config_path).linear_map()
        torn = got[got[list(lm.targets)].isna().all(axis=1)]  # the two steps, readings kept
        read = int(torn[list(lm.backup)].notna().sum().sum())
        assert len(torn) == 2 and read == 2 * len(lm.backup) - 2  # one reading gone at each


def test_nothing_to_recover_is_an_error_not_an_empty_answer(dataset, tmp_path: Path) -> None:
    """An empty output would look like a recovery: a range without readings, an empty
    directory and a backup whose only batch lost its marker are each refused in one line
    (exit 2 on the CLI), and no output is written."""
    from engine.cli import main

    config_path, backup, _ = dataset
    with pytest.raises(DataError, match=r"holds no reading from 2020-01-01.*run from 2016-"):
        recover_dataset(config_path, backup, tmp_path / "a.csv", "2020-01-01", "2020-02-01")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="holds no committed backup batch"):
        recover_dataset(config_path, empty, tmp_path / "b.csv")
    unmarked = tmp_path / "unmarked"  # one micro-batch whose _SUCCESS never came
    shutil.copytree(backup, unmarked / "batch_id=0")
    argv = ["recover", "--config", str(config_path), "--backup", str(unmarked)]
    assert main([*argv, "--out", str(tmp_path / "c.csv")]) == 2
    assert not any((tmp_path / n).exists() for n in ("a.csv", "b.csv", "c.csv"))


def test_an_infinite_backup_reading_leaves_its_time_step_unrebuilt_with_a_warning(
    tmp_path: Path,
) -> None:
    """A sensor cannot read inf: recovery does not rebuild that time step, as for a step
    with a missing reading (the other readings kept, the rebuilt sensors empty), and says
    so, instead of refusing the whole range."""
    rows = sample_rows(48)
    config, long = backup_readings(tmp_path / "plan.json", rows)
    write_dataset(long, tmp_path / "clean")
    long.loc[7, "value"] = np.inf
    write_dataset(long, tmp_path / "odd")
    clean = recover_dataset(tmp_path / "plan.json", tmp_path / "clean", tmp_path / "a.csv")
    odd = recover_dataset(tmp_path / "plan.json", tmp_path / "odd", tmp_path / "b.csv")
    assert (clean.rows, odd.rows, odd.incomplete_rows) == (48, 48, 1)
    new = [w for w in odd.warnings if w not in clean.warnings]
    assert len(new) == 2 and new[0].startswith("1 backup reading(s) are infinite")
    assert new[1].startswith("1 time step(s) lack a reading of a backup sensor")
    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    at = pd.to_datetime(a["time"]) == pd.Timestamp(long.loc[7, "event_time"])
    pd.testing.assert_frame_equal(a[~at], b[~at])  # every other time step as from the clean one
    lm = config.linear_map()
    odd_one = str(long.loc[7, "sensor"])
    read = [s for s in lm.backup if s != odd_one]  # the step's other readings, as read
    pd.testing.assert_frame_equal(a.loc[at, read], b.loc[at, read])
    assert b.loc[at, [*lm.targets, odd_one]].isna().all(axis=None)


def test_a_step_whose_every_backup_reading_is_missing_is_written_and_counted(
    tmp_path: Path,
) -> None:
    """A plan with one backup sensor whose reading is NaN, null or inf at three steps: the
    steps were dropped from the output unsaid (45 rows of 48, 0 incomplete), as was a step
    where every backup sensor of a larger plan read nothing. Each is written, its sensors
    empty, and counted; the Parquet output holds null there, as the CSV's empty cell."""
    rows = sample_rows(48)
    one = (rows.sensors[0],)
    _, long = backup_readings(tmp_path / "one.json", rows, backup=one)
    long["value"] = long["value"].astype(object)
    long.loc[[5, 17, 30], "value"] = [np.nan, None, np.inf]
    long["value"] = long["value"].astype(float)
    write_dataset(long, tmp_path / "one")
    got = recover_dataset(tmp_path / "one.json", tmp_path / "one", tmp_path / "one.csv")
    assert (got.rows, got.incomplete_rows) == (48, 3)
    assert any(
        w.startswith("3 time step(s) lack a reading of a backup sensor") for w in got.warnings
    )
    csv = pd.read_csv(tmp_path / "one.csv")
    assert len(csv) == 48 and csv.iloc[[5, 17, 30], 1:].isna().all(axis=None)
    recover_dataset(tmp_path / "one.json", tmp_path / "one", tmp_path / "one.parquet")
    table = pq.read_table(tmp_path / "one.parquet")
    assert table.num_rows == 48
    assert sum(c.null_count for c in table.columns[1:]) == int(csv.iloc[:, 1:].isna().sum().sum())

    _, every = backup_readings(tmp_path / "plan.json", rows)
    every.loc[every["event_time"] == rows.times[10], "value"] = np.nan  # every backup sensor
    write_dataset(every, tmp_path / "all")
    got = recover_dataset(tmp_path / "plan.json", tmp_path / "all", tmp_path / "all.csv")
    assert (got.rows, got.incomplete_rows) == (48, 1)


def test_recover_from_a_file_warns_what_plan_warns_of_its_readings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ';' file whose every decimal has three digits (1.401: a thousands separator in
    some locales) is read with a `warning:` by `plan`; `recover` of the same file kept it
    among its notes and said nothing, so every sensor could be rebuilt from readings 1000x
    too small unsaid."""
    from engine.cli import main

    rows = sample_rows(48)
    write_config(tmp_path / "plan.json", rows)
    config = load_config(tmp_path / "plan.json")
    lines = ["time;" + ";".join(config.backup_sensors)]
    picked = [rows.sensors.index(s) for s in config.backup_sensors]
    for t, v in zip(rows.times, rows.values[:, picked], strict=True):
        lines.append(f"{pd.Timestamp(t)};" + ";".join(f"{1 + abs(x):.3f}" for x in v))
    (tmp_path / "eu.csv").write_text("\n".join(lines) + "\n")
    got = recover_file(tmp_path / "plan.json", tmp_path / "eu.csv", tmp_path / "all.csv")
    assert any("as a thousands separator writes them" in w for w in got.warnings)
    argv = [
        "recover",
        "--config",
        str(tmp_path / "plan.json"),
        "--backup",
        str(tmp_path / "eu.csv"),
    ]
    assert main([*argv, "--out", str(tmp_path / "again.csv")]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "as a thousands separator writes them" in err


def test_recover_says_what_of_the_range_the_backup_does_not_cover(tmp_path: Path) -> None:
    """A range a day wider than the backup on each side, with a day of readings lost in
    the middle: 144 hourly steps asked, 72 written, exit 0 and no word. Each stretch is
    said, with its count of steps."""
    rows = sample_rows(96)
    _, long = backup_readings(tmp_path / "plan.json", rows)
    write_dataset(long, tmp_path / "whole")
    whole = recover_dataset(tmp_path / "plan.json", tmp_path / "whole", tmp_path / "a.csv")
    assert not [w for w in whole.warnings if "hold no" in w or "hold none" in w]
    lost = long["event_time"].isin(rows.times[36:60])
    write_dataset(long[~lost], tmp_path / "holed")
    first, last = pd.Timestamp(rows.times[0], tz="UTC"), pd.Timestamp(rows.times[-1], tz="UTC")
    start, end = first - pd.Timedelta(hours=24), last + pd.Timedelta(hours=25)
    got = recover_dataset(tmp_path / "plan.json", tmp_path / "holed", tmp_path / "b.csv",
                          start.isoformat(), end.isoformat())  # fmt: skip
    assert got.rows == 72
    said = " | ".join(got.warnings)
    assert f"first reading in the range is at {first.isoformat()}: about 24 time step(s)" in said
    assert f"last reading in the range is at {last.isoformat()}: about 24 time step(s)" in said
    assert "about 24 time step(s) inside the range hold no backup reading" in said
    # ends between two steps: --to half a step after the last reading leaves none out, one
    # and a half steps after it leaves one (the step one interval after the last)
    for hours, missed in ((0.5, 0), (1.5, 1), (2.5, 2)):
        end = (last + pd.Timedelta(hours=hours)).isoformat()
        got = recover_dataset(tmp_path / "plan.json", tmp_path / "whole", tmp_path / "c.csv",
                              None, end)  # fmt: skip
        ends = [w for w in got.warnings if "before --to hold none" in w]
        said = f"is at {last.isoformat()}: about {missed} time step(s) before --to hold none"
        assert [said in w for w in ends] == ([True] if missed else [])


def test_an_infinite_reading_written_as_read_is_written_empty_with_a_warning(
    tmp_path: Path,
) -> None:
    """Readings the backup holds of a sensor the plan rebuilds (a micro-batch over the
    exposure stored every sensor) and of a sensor outside the plan are written as read:
    an infinite one is missing (a stored one leaves the rebuilt value, an outside one is
    written empty), and said, never written as inf."""
    rows = sample_rows(48)
    write_config(tmp_path / "plan.json", rows)
    config = load_config(tmp_path / "plan.json")
    long = long_readings(rows)  # every sensor: the rebuilt ones' readings are stored
    extra = long[long["sensor"] == long["sensor"].iloc[0]].assign(sensor="outside_1")
    long = pd.concat([long, extra], ignore_index=True)
    target = config.linear_map().targets[0]
    at = long.index[long["sensor"] == target][5]
    out_at = long.index[long["sensor"] == "outside_1"][9]
    long.loc[at, "value"], long.loc[out_at, "value"] = np.inf, -np.inf
    write_dataset(long, tmp_path / "odd")
    result = recover_dataset(tmp_path / "plan.json", tmp_path / "odd", tmp_path / "b.csv")
    b = pd.read_csv(tmp_path / "b.csv")
    assert np.isfinite(
        b.drop(columns="time").to_numpy(dtype=float)[~b.drop(columns="time").isna().to_numpy()]
    ).all()
    stamp = pd.to_datetime(b["time"])
    # the stored reading is missing there: the rebuilt value stands
    assert np.isfinite(b.loc[stamp == pd.Timestamp(long.loc[at, "event_time"]), target]).all()
    assert b.loc[stamp == pd.Timestamp(long.loc[out_at, "event_time"]), "outside_1"].isna().all()
    said = [w for w in result.warnings if "written as read are infinite" in w]
    assert len(said) == 1 and said[0].startswith("2 reading(s)") and "read as missing" in said[0]


def test_recover_says_when_the_backup_holds_two_different_readings(tmp_path: Path) -> None:
    """The same reading written twice (a replayed batch) is said nowhere; a second, different
    one (another writer) is one warning: recovery used the last it read."""
    rows = sample_rows(48)
    _, long = backup_readings(tmp_path / "plan.json", rows)
    twice = pd.concat([long, long.iloc[[3]]], ignore_index=True)
    write_dataset(twice, tmp_path / "twice")
    clash = twice.copy()
    clash.loc[len(clash) - 1, "value"] += 100.0
    write_dataset(clash, tmp_path / "clash")
    same = recover_dataset(tmp_path / "plan.json", tmp_path / "twice", tmp_path / "a.csv")
    other = recover_dataset(tmp_path / "plan.json", tmp_path / "clash", tmp_path / "b.csv")
    assert not [w for w in same.warnings if "different readings" in w]
    (said,) = [w for w in other.warnings if "different readings" in w]
    assert said.startswith("1 (time, sensor) pair(s) hold two different readings")


def test_recover_never_writes_over_or_into_its_backup(dataset, tmp_path: Path) -> None:
    config_path, backup, _ = dataset
    inside = backup / "date=2016-09-01" / "rebuilt.parquet"
    with pytest.raises(DataError, match="would overwrite the backup"):
        recover_dataset(config_path, backup, inside)
    wide = tmp_path / "wide.csv"
    pd.DataFrame({"time": ["2016-09-01T00:00:00Z"], "x": [1.0]}).to_csv(wide, index=False)
    with pytest.raises(DataError, match="would overwrite the backup"):
        recover_file(config_path, wide, wide)
    assert not inside.exists() and pd.read_csv(wide).shape == (1, 2)


def test_a_rebuilt_sensors_reading_the_backup_holds_is_written_as_read(tmp_path: Path) -> None:
    """A micro-batch over a crash-contract plan's exposure backs up every sensor: over
    its rows recovery gives the readings themselves, elsewhere the map's rebuild."""
    rows = sample_rows(48)
    write_config(tmp_path / "plan.json", rows)
    lm = load_config(tmp_path / "plan.json").linear_map()
    long = long_readings(rows)
    at = pd.Timestamp(rows.times[24])
    full = long["sensor"].isin(lm.backup) | (long["event_time"] >= at)
    write_dataset(long[full].reset_index(drop=True), tmp_path / "backup")
    result = recover_dataset(tmp_path / "plan.json", tmp_path / "backup", tmp_path / "a.parquet")
    got = pd.read_parquet(tmp_path / "a.parquet")[list(lm.sensors)].to_numpy()
    truth = rows.values[:, [rows.sensors.index(s) for s in lm.sensors]]
    rebuilt = lm.apply(rows.values[:, [rows.sensors.index(b) for b in lm.backup]])
    np.testing.assert_allclose(got[:24], rebuilt[:24], rtol=1e-12)
    np.testing.assert_array_equal(got[24:], truth[24:])
    assert not np.allclose(rebuilt[24:], truth[24:])  # the map alone would not give them
    assert result.stored_readings == 24 * len(lm.targets) and result.rows == 48
    # every reading the range holds, a count (it was the stored readings' matrix, which
    # the Production page's rebuild could not format)
    assert result.backup_readings == int(full.sum())
    assert isinstance(result.to_dict()["backup_readings"], int)
    assert result.contract == "range" and result.guarantee.startswith("range contract")


def test_overlay_writes_each_reading_over_its_sensors_column() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=(6, 3))
    readings = np.where(rng.random((6, 2)) < 0.5, np.nan, rng.normal(size=(6, 2)))
    got, count = overlay(values, ("a", "b", "c"), readings, ("c", "a"))
    want = pd.DataFrame(values, columns=["a", "b", "c"])
    for j, s in enumerate(("c", "a")):
        want[s] = pd.Series(readings[:, j]).fillna(want[s])
    np.testing.assert_array_equal(got, want.to_numpy())
    assert count == int((~np.isnan(readings)).sum())
    assert not np.shares_memory(got, values)


def test_a_plan_that_backs_up_no_sensor_says_a_lost_range_cannot_be_rebuilt(
    tmp_path: Path,
) -> None:
    """With no backup sensor the backup holds no reading, so a range rebuild finds no time
    step: the plan says so when it is made, and ``recover`` names it when it refuses."""
    from engine.data import load_history
    from engine.planning import PlanParameters, make_plan
    from engine.planning.plan import NO_BACKUP
    from engine.query import WindowQuery
    from tests.production_reference import SAMPLE, SENSORS

    history = load_history(SAMPLE).select(SENSORS)
    loose = make_plan(history, PlanParameters(WindowQuery(1e6, 0.05, 8)))
    tight = make_plan(history, PlanParameters(WindowQuery(1.0, 0.05, 8)))
    assert loose.backup_sensors == () and NO_BACKUP in loose.warnings
    assert tight.backup_sensors and NO_BACKUP not in tight.warnings
    write_config(tmp_path / "plan.json", sample_rows(48), backup=())
    empty = tmp_path / "backup"
    empty.mkdir()
    with pytest.raises(DataError, match="the plan backs up no sensor"):
        recover_dataset(tmp_path / "plan.json", empty, tmp_path / "out.csv")
    # from a wide file too: the map alone would write its means at every time step, and
    # nothing would say that nothing had been recovered
    from engine.export import recover_file

    with pytest.raises(DataError, match=r"nothing to recover from .*backs up no sensor"):
        recover_file(tmp_path / "plan.json", SAMPLE, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()
