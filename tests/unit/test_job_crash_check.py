"""The production job's crash-contract shadow check, without Spark: each closed window's
miss against a brute force over every failure position, the open windows' rows kept and
round-tripped with the window state, and the monitor's fractional tally and alert
against plain sums and the backtest verdict's binomial tail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.errors import ParameterError
from engine.export import BackupConfig
from engine.job.crash_check import (
    TIME,
    VERSION,
    WHOLE,
    check_closed,
    crash_misses,
    merge_rows,
    open_rows,
    shadow_contract,
    window_versions,
)
from engine.job.partials import WindowState
from engine.planning.monitor import CONFIDENCE, ViolationMonitor
from tests.production_reference import Rows, write_config

SENSORS = ("a", "b", "c", "d")
BACKUP = ("a",)
DT_US = 3_600_000_000  # one reading an hour


def _config(
    tmp: Path,
    aggregate: str,
    exposure: int,
    kept: tuple[str, ...] = (),
    backup: tuple[str, ...] = BACKUP,
) -> BackupConfig:
    """A crash plan of four sensors backed up by ``a`` (or ``backup``): b tracks a, c is
    noise, d (kept under max/min) too; window 6, tumbling, eps 0.5."""
    rng = np.random.default_rng(3)
    a = rng.normal(0, 1, 200)
    values = np.column_stack([a, 2 * a + rng.normal(0, 0.1, 200), *rng.normal(0, 1, (2, 200))])
    times = pd.date_range("2026-01-01", periods=200, freq="h").to_numpy()
    rows = Rows(times, values, SENSORS)
    path = tmp / f"plan-{'-'.join(backup)}.json"
    data = write_config(
        path, rows, backup, window=6, slide=6, aggregate=aggregate, eps=0.5, exposure=exposure
    )
    if kept:
        data["kept_readings"] = list(kept)
    return BackupConfig.from_dict(data)


def _frame(values: np.ndarray, first_us: int = 0) -> pd.DataFrame:
    frame = pd.DataFrame(values, columns=list(SENSORS))
    frame.insert(0, TIME, first_us + DT_US * np.arange(len(values), dtype=np.int64))
    return frame


def _brute(
    truth: np.ndarray, config: BackupConfig, start: int, whole: np.ndarray | None = None
) -> np.ndarray:
    """(n,) one window's miss: every failure position one by one, the lost rows of each
    rebuilt sensor replaced by the map's rebuild (a kept sensor's left out); lost rows of
    a batch that backed up every sensor (``whole``) come back exact."""
    exact = np.zeros(len(truth), bool) if whole is None else whole
    q, lm = config.query, config.linear_map()
    w, m = q.window, int(q.exposure)
    f = {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}[q.aggregate]
    block = truth[start : start + w]
    rebuilt = lm.apply(block[:, [SENSORS.index(b) for b in lm.backup]])
    eps = config.eps_vector()
    out = np.zeros(len(SENSORS))
    for j, s in enumerate(SENSORS):
        if s in config.backup_sensors:
            continue
        missed = 0
        for d in range(1 - m, w):
            lost = np.zeros(w, bool)
            lost[max(d, 0) : min(d + m, w)] = True
            lost &= ~exact[start : start + w]
            if s in config.kept_readings:
                value = f(block[~lost, j])
            else:
                value = f(np.where(lost, rebuilt[:, lm.sensors.index(s)], block[:, j]))
            missed += abs(value - f(block[:, j])) > eps[j]
        out[j] = missed / (w + m - 1)
    return out


@pytest.mark.parametrize(
    ("aggregate", "exposure", "kept"),
    [("avg", 2, ()), ("sum", 5, ()), ("max", 3, ("d",)), ("min", 1, ("c", "d"))],
)
def test_a_windows_crash_miss_is_the_fraction_of_failure_positions_that_missed(
    tmp_path: Path, aggregate: str, exposure: int, kept: tuple[str, ...]
) -> None:
    config = _config(tmp_path, aggregate, exposure, kept)
    rng = np.random.default_rng(11)
    a = rng.normal(0, 1, 30)
    truth = np.column_stack([a, 2 * a + rng.normal(0, 0.4, 30), *rng.normal(0, 3, (2, 30))])
    # far from the rebuild (about 0) on the side where a rebuilt reading would set the
    # window's extreme: left out, a lost stretch rarely misses; rebuilt, it always does
    truth[:, [SENSORS.index(s) for s in kept]] += 10.0 if aggregate == "min" else -10.0
    starts = np.array([0, 6, 18]) * DT_US  # windows 0, 1 and 3 close (2 later)
    got = crash_misses(_frame(truth), starts, 6 * DT_US, config, config.linear_map())
    want = np.vstack([_brute(truth, config, s) for s in (0, 6, 18)])
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert 0 < want[:, 1:].mean() < 1  # the brute force has both hits and misses to match


@pytest.mark.parametrize(("aggregate", "kept"), [("avg", ()), ("max", ("d",))])
def test_rows_of_a_batch_that_backed_up_every_sensor_are_recovered_exactly(
    tmp_path: Path, aggregate: str, kept: tuple[str, ...]
) -> None:
    config = _config(tmp_path, aggregate, 3, kept)
    rng = np.random.default_rng(23)
    truth = rng.normal(0, 3, (18, 4))  # far from any rebuild: most losses miss
    whole = np.zeros(18, bool)
    whole[4:12] = True  # a batch over the exposure: window 1 whole, window 0's last rows
    frame = _frame(truth)
    frame[WHOLE] = whole.astype(float)
    starts = np.array([0, 6, 12]) * DT_US
    got = crash_misses(frame, starts, 6 * DT_US, config, config.linear_map())
    want = np.vstack([_brute(truth, config, s, whole) for s in (0, 6, 12)])
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert (got[1] == 0).all() and got[2, 1:].min() > 0  # exact where whole, not elsewhere
    plain = crash_misses(_frame(truth), starts, 6 * DT_US, config, config.linear_map())
    assert plain[1, 2] > 0  # without the mark the same window counts as rebuilt
    assert (got[0] <= plain[0]).all()  # window 0: only failures that reach rows 0-3 can miss


def _brute_by_row(truth: np.ndarray, configs: list[BackupConfig], start: int) -> np.ndarray:
    """(n,) one window's miss when row ``t`` was backed up under ``configs[t]``: a lost
    reading comes back exact where its row's version backed the sensor up, else from
    that version's map."""
    q = configs[0].query
    w, m, eps = q.window, int(q.exposure), configs[0].eps_vector()
    f = {"avg": np.mean, "sum": np.sum, "max": np.max, "min": np.min}[q.aggregate]
    recovered = np.array(truth)
    for t, c in enumerate(configs):
        lm = c.linear_map()
        rebuilt = lm.apply(truth[t : t + 1, [SENSORS.index(b) for b in lm.backup]])[0]
        for s in lm.targets:
            recovered[t, SENSORS.index(s)] = rebuilt[lm.sensors.index(s)]
    out = np.zeros(len(SENSORS))
    for j in range(len(SENSORS)):
        missed = 0
        for d in range(1 - m, w):
            lost = np.zeros(len(truth), bool)
            lost[start + max(d, 0) : start + min(d + m, w)] = True
            value = np.where(lost, recovered[:, j], truth[:, j])[start : start + w]
            missed += abs(f(value) - f(truth[start : start + w, j])) > eps[j]
        out[j] = missed / (w + m - 1)
    return out


@pytest.mark.parametrize("change", ["b backed up from row 4", "b released from row 4"])
def test_each_row_is_lost_as_the_version_that_backed_it_up_rebuilds_it(
    tmp_path: Path, change: str
) -> None:
    narrow = _config(tmp_path, "avg", 3)
    wide = _config(tmp_path, "avg", 3, backup=("a", "b"))
    before, after = (narrow, wide) if change.startswith("b backed") else (wide, narrow)
    rng = np.random.default_rng(5)
    a = rng.normal(0, 1, 12)
    truth = np.column_stack([a, 2 * a + 3.0, *rng.normal(0, 1, (2, 12))])  # b's map: 3 off
    frame = _frame(truth)
    frame[VERSION] = np.where(np.arange(12) < 4, 1.0, 2.0)  # the change took effect at row 4
    versions = {1: (before.linear_map(), before), 2: (after.linear_map(), after)}
    starts = np.array([0, 6]) * DT_US
    got = crash_misses(frame, starts, 6 * DT_US, after, after.linear_map(), versions)
    rows = [before] * 4 + [after] * 8
    want = np.vstack([_brute_by_row(truth, rows, s) for s in (0, 6)])
    np.testing.assert_allclose(got, want, atol=1e-12)
    b = SENSORS.index("b")
    # window 0 straddles the change: only the losses reaching b's rebuilt rows miss
    assert 0 < got[0, b] < 1
    newest = crash_misses(frame, starts, 6 * DT_US, after, after.linear_map())
    assert newest[0, b] != got[0, b]  # scored under the newest version alone: not so


def test_a_time_step_is_whole_only_when_every_part_of_it_was() -> None:
    kept = _frame(np.arange(12.0).reshape(3, 4))  # a job's rows from before the column
    batch = _frame(np.array([[np.nan, 50.0, np.nan, 51.0], [60.0, 61.0, 62.0, 63.0]]), 2 * DT_US)
    batch[WHOLE] = 1.0
    merged = merge_rows(kept, batch, SENSORS, cutoff_us=10 * DT_US)
    assert merged[WHOLE].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_a_time_step_has_a_plan_version_only_when_one_version_brought_all_of_it() -> None:
    kept = _frame(np.arange(12.0).reshape(3, 4))
    kept[VERSION] = [-1.0, 2.0, 2.0]  # the first from a job before the column
    batch = _frame(np.array([[np.nan, 50.0, np.nan, 51.0], [60.0, 61.0, 62.0, 63.0]]), 2 * DT_US)
    batch[VERSION] = 3.0
    merged = merge_rows(kept, batch, SENSORS, cutoff_us=10 * DT_US)
    # time 2: parts under versions 2 and 3, so no one set backed it up
    assert merged[VERSION].tolist() == [-1.0, 2.0, -1.0, 3.0]
    older = merge_rows(kept.drop(columns=VERSION), batch, SENSORS, cutoff_us=10 * DT_US)
    assert older[VERSION].tolist() == [-1.0, -1.0, -1.0, 3.0]


def test_a_windows_record_is_the_oldest_version_among_its_rows() -> None:
    """Rows 0-5 under version 1, 6-11 under 2, row 9 brought by both (-1): windows of 4
    rows are version 1's while they hold a version-1 row, version 2's when they hold only
    its rows, and no version's when a row has none (the job's monitor skips them)."""
    rows = _frame(np.zeros((12, 4)))
    rows[VERSION] = [1.0] * 6 + [2.0] * 3 + [-1.0] + [2.0] * 2
    starts = np.array([0, 2, 4, 6, 8], dtype=np.int64) * DT_US
    assert window_versions(rows, starts, 4 * DT_US).tolist() == [1, 1, 1, -1, -1]
    rows[VERSION] = [1.0] * 6 + [2.0] * 6
    assert window_versions(rows, starts, 4 * DT_US).tolist() == [1, 1, 1, 2, 2]
    assert window_versions(rows, np.array([20 * DT_US]), 4 * DT_US).tolist() == [-1]  # no row


def test_a_window_without_every_row_or_number_is_not_measured(tmp_path: Path) -> None:
    config = _config(tmp_path, "avg", 2)
    truth = np.ones((18, 4))
    truth[8, 2] = np.nan  # window 1: c unknown
    truth[14, 0] = np.nan  # window 2: the backup unknown, so every rebuilt sensor
    frame = _frame(truth).drop(index=3)  # window 0: a time step missing
    got = crash_misses(frame, np.array([0, 6, 12]) * DT_US, 6 * DT_US, config, config.linear_map())
    assert np.isnan(got[0]).all()
    assert np.isnan(got[1, 2]) and np.isfinite(got[1, [0, 1, 3]]).all()
    assert np.isnan(got[2, 1:]).all()


def test_rows_merge_later_readings_over_earlier_and_keep_only_what_open_windows_need() -> None:
    kept = _frame(np.arange(12.0).reshape(3, 4))
    batch = _frame(np.array([[np.nan, 50.0, np.nan, 51.0], [60.0, 61.0, 62.0, 63.0]]), 2 * DT_US)
    merged = merge_rows(kept, batch, SENSORS, cutoff_us=4 * DT_US)
    # time 2: the batch's numbers win, its NaN leaves the earlier reading; time 3 is new
    np.testing.assert_array_equal(
        merged[list(SENSORS)].to_numpy(),
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 50, 10, 51], [60, 61, 62, 63]],
    )
    assert merged[TIME].tolist() == [0, DT_US, 2 * DT_US, 3 * DT_US]
    assert len(merge_rows(kept, batch, SENSORS, cutoff_us=3 * DT_US)) == 3  # future: dropped
    # windows of 2 steps: with the watermark at 3, only the window from 2 is still open
    assert open_rows(merged, 3 * DT_US, 2 * DT_US)[TIME].tolist() == [2 * DT_US, 3 * DT_US]


def test_closing_windows_scores_them_and_the_state_keeps_the_rest(tmp_path: Path) -> None:
    config = _config(tmp_path, "avg", 2)
    rng = np.random.default_rng(5)
    truth = rng.normal(0, 1, (16, 4))
    state = WindowState("avg", rows=_frame(truth[:4]))
    state.watermark_us = 12 * DT_US  # windows 0 and 1 closed; the window from 12 is open
    got, merged = check_closed(
        state, _frame(truth[4:], 4 * DT_US), np.array([0, 6]) * DT_US, 6 * DT_US,
        config, config.linear_map(), cutoff_us=100 * DT_US,
    )  # fmt: skip
    want = np.vstack([_brute(truth, config, 0), _brute(truth, config, 6)])
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert state.rows[TIME].tolist() == [t * DT_US for t in range(7, 16)]
    assert merged[TIME].tolist() == [t * DT_US for t in range(16)]  # the closed ones too


def test_the_open_windows_rows_round_trip_and_an_older_state_restores_without_them() -> None:
    rows = _frame(np.arange(8.0).reshape(2, 4))
    state = WindowState("max", batch_id=4, rows=rows, extra={"monitor": [1, {"b": [0.5, 3]}]})
    back = WindowState.restore(state.snapshot())
    pd.testing.assert_frame_equal(back.rows, rows)
    assert back.extra == state.extra and back.batch_id == 4
    older = WindowState("max", batch_id=4)  # a range plan's, or a job's before the rows
    assert older.snapshot().count(b"lacuna_rows") == 0
    assert WindowState.restore(older.snapshot()).rows.empty


def test_the_shadow_metrics_say_which_contract_was_measured(tmp_path: Path) -> None:
    config = _config(tmp_path, "avg", 2)
    assert shadow_contract(None, config) == {"contract": "range"}
    misses = np.array([[0.0, 0.5, np.nan, 0.25], [0.0, 0.0, 1.0, np.nan]])
    said = shadow_contract(misses, config)
    assert said == {
        "contract": "crash",
        "exposure_rows": 2,
        "crash_windows": 4,
        "crash_misses": 1.75,
        "crash_miss_rate": 1.75 / 4,
        "crash_windows_older_version": 0,
    }
    json.dumps(said)
    assert shadow_contract(misses, config, 3)["crash_windows_older_version"] == 3


# ------------------------------------------------------------------ the monitor


def _evidence_by_quadrature(k: float, w: int, delta: float) -> float:
    """The mixture likelihood ratio against "rate <= delta" by numerical integration:
    ``int_delta^1 (p / delta)^k ((1 - p) / (1 - delta))^(w - k) dp / (1 - delta)``."""
    from scipy.integrate import quad

    def ratio(p: float) -> float:
        return float((p / delta) ** k * ((1 - p) / (1 - delta)) ** (w - k))

    return quad(ratio, delta, 1.0, points=[k / w] if 0 < k < w else None, limit=200)[0] / (
        1 - delta
    )


def _alerts_by_hand(fractions: np.ndarray, rebuilt: np.ndarray, delta: float) -> list[bool]:
    """Per batch of 5 windows: does some rebuilt sensor's summed fraction, over at least
    10 windows so far, give a mixture likelihood ratio (by quadrature) of at least
    (rebuilt sensors) / 5 %, the monitor's test valid however often it is checked?"""
    out, sums, counts = [], np.zeros(fractions.shape[1]), np.zeros(fractions.shape[1], int)
    for start in range(0, len(fractions), 5):
        for row in fractions[start : start + 5]:
            for j, f in enumerate(row):
                if rebuilt[j] and not np.isnan(f):
                    sums[j] += f
                    counts[j] += 1
        out.append(
            any(
                counts[j] >= 10
                and _evidence_by_quadrature(sums[j], counts[j], delta)
                >= rebuilt.sum() / (1 - CONFIDENCE)
                for j in range(len(sums))
            )
        )
    return out


def test_a_crash_monitor_tallies_fractions_and_alerts_as_the_mixture_ratio_says() -> None:
    rng = np.random.default_rng(2)
    # sensor b: small fractions (about 3 % of positions, under delta); c: about 24 %,
    # spread as a crash's misses are (a few windows with many positions missing)
    fractions = np.zeros((200, 4))
    fractions[:, 1] = rng.binomial(7, 0.03, 200) / 7
    fractions[:, 2] = np.where(rng.random(200) < 0.4, rng.uniform(0.3, 0.9, 200), 0.0)
    fractions[rng.random((200, 4)) < 0.05] = np.nan
    rebuilt = np.array([False, True, True, True])
    monitor = ViolationMonitor(SENSORS, eps=1.0, delta=0.05, contract="crash")
    got = [
        monitor.observe_misses(fractions[s : s + 5], ("b", "c", "d")) is not None
        for s in range(0, 200, 5)
    ]
    assert got == _alerts_by_hand(fractions, rebuilt, 0.05)
    assert any(got) and not all(got)
    counted = ~np.isnan(fractions[:, 2])
    v, w = monitor.rates()["c"]
    assert w == counted.sum() and v == pytest.approx(fractions[counted, 2].sum())
    alert = monitor.observe_misses(np.zeros((1, 4)), ("b", "c", "d"))
    assert alert is not None and alert.sensors == ("c",)
    assert "crash miss rate of c" in alert.reason


def test_whole_misses_alert_alike_under_either_contract() -> None:
    """A window whose every failure position missed counts 1, one that none did 0: the
    crash monitor then alerts exactly when the range monitor does on the same windows."""
    rng = np.random.default_rng(9)
    hit = (rng.random((120, 4)) < np.array([0.02, 0.04, 0.15, 0.3])).astype(float)
    crash = ViolationMonitor(SENSORS, eps=1.0, delta=0.05, contract="crash")
    range_ = ViolationMonitor(SENSORS, eps=1.0, delta=0.05)
    for s in range(0, 120, 6):
        a = crash.observe_misses(hit[s : s + 6], SENSORS)
        b = range_.observe(2.0 * hit[s : s + 6], SENSORS)
        assert (a is None) == (b is None)
        assert a is None or b is None or a.sensors == b.sensors
    assert crash.rates() == range_.rates()


def test_a_resumed_crash_tally_keeps_its_fractions() -> None:
    whole = ViolationMonitor(SENSORS, eps=1.0, delta=0.05, contract="crash")
    misses = np.tile([0.0, 0.4, 0.0, 0.0], (8, 1))
    whole.observe_misses(misses, SENSORS, version=2)
    resumed = ViolationMonitor(SENSORS, eps=1.0, delta=0.05, contract="crash")
    resumed.resume(2, json.loads(json.dumps(whole.rates(2))))
    assert resumed.rates(2) == whole.rates(2) and resumed.rates(2)["b"][0] == pytest.approx(3.2)
    a = whole.observe_misses(misses[:4], SENSORS, version=2)
    b = resumed.observe_misses(misses[:4], SENSORS, version=2)
    assert a is not None and b is not None and a.reason == b.reason


def test_each_contract_takes_its_own_input() -> None:
    crash = ViolationMonitor(SENSORS, eps=1.0, delta=0.05, contract="crash")
    with pytest.raises(ParameterError, match="observe_misses"):
        crash.observe(np.zeros((2, 4)), SENSORS)
    with pytest.raises(ParameterError, match=r"\[0, 1\]"):
        crash.observe_misses(np.full((2, 4), 1.5), SENSORS)
    with pytest.raises(ParameterError, match="observe"):
        ViolationMonitor(SENSORS, eps=1.0, delta=0.05).observe_misses(np.zeros((2, 4)), SENSORS)
    with pytest.raises(ParameterError, match="'whole'"):
        ViolationMonitor(SENSORS, eps=1.0, delta=0.05, contract="whole")


def test_a_kept_tally_resumes_only_under_its_version_and_contract() -> None:
    from engine.job.tally import saved_tally

    crash = [3, {"b": [1.25, 7]}, "crash"]
    assert saved_tally(crash, 3, "crash") == {"b": (1.25, 7)}
    assert saved_tally(crash, 4, "crash") is None  # a new version starts afresh
    assert saved_tally(crash, 3, "range") is None
    older = [3, {"b": [2, 7]}]  # kept before the contract was: whole windows counted
    assert saved_tally(older, 3, "range") == {"b": (2.0, 7)}
    assert saved_tally(older, 3, "crash") is None
    assert saved_tally(None, 3, "crash") is None
