"""engine.live.exposure: which sensors a micro-batch backs up under the crash contract."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from engine.live.batch import WindowState
from engine.live.exposure import (
    AFTER_RECOVERY,
    OVER_EXPOSURE,
    feed_within_exposure,
    repair_window_end,
    stored_sensors,
)
from engine.live.recovery_report import covering_contract
from engine.live.spec import PipelineOptions, StreamSpec
from engine.query import WindowQuery
from tests.helpers import fit_map

SENSORS = ("a", "b", "c")


def spec(exposure: int | None, window: int = 6, slide: int = 6) -> StreamSpec:
    x = np.random.default_rng(0).normal(size=(50, 3))
    return StreamSpec(
        SENSORS, ("a",), fit_map(x, SENSORS, ("a",)),
        WindowQuery(1.0, 0.05, window, slide=slide, exposure=exposure),
    )  # fmt: skip


def batch(first: int, rows: int) -> pd.DataFrame:
    seq = np.repeat(np.arange(first, first + rows), 3)
    return pd.DataFrame({"seq": seq, "sensor": list(SENSORS) * rows, "value": 1.0})


EMPTY = WindowState.empty(3)


@pytest.mark.parametrize(("rows", "expected"), [(1, ("a",)), (4, ("a",)), (5, SENSORS)])
def test_a_batch_over_the_exposure_backs_up_every_sensor(rows: int, expected: tuple) -> None:
    choice = stored_sensors(batch(10, rows), spec(4), "approx", EMPTY)
    assert choice.sensors == expected and choice.rows == rows
    assert (choice.reason == OVER_EXPOSURE) == (rows > 4)


def test_a_range_plan_and_the_other_modes_keep_their_own_sets() -> None:
    big = batch(10, 50)
    assert stored_sensors(big, spec(None), "approx", EMPTY).sensors == ("a",)
    assert stored_sensors(big, spec(4), "full", EMPTY).sensors == SENSORS
    assert stored_sensors(big, spec(4), "full", EMPTY).reason is None
    assert stored_sensors(big, spec(4), "none", EMPTY).sensors == ()


def test_after_a_failure_every_sensor_until_the_windows_holding_its_rows_close() -> None:
    # rows up to 10 were lost: the windows [6, 12) holds row 10, it ends at row 11
    assert repair_window_end(10, 6, 6) == 11
    assert repair_window_end(11, 6, 6) == 11 and repair_window_end(12, 6, 6) == 17
    assert repair_window_end(10, 6, 2) == 15  # sliding: the last window holding row 10
    assert repair_window_end(-1, 6, 6) == -1
    state = replace(EMPTY, damaged_until=10)
    assert stored_sensors(batch(11, 2), spec(4), "approx", state).reason == AFTER_RECOVERY
    assert stored_sensors(batch(12, 2), spec(4), "approx", state).sensors == ("a",)
    # a range plan rebuilds whole windows anyway: no such rule
    assert stored_sensors(batch(11, 2), spec(None), "approx", state).sensors == ("a",)


def test_the_feed_is_cut_to_the_exposure() -> None:
    base = PipelineOptions(max_files_per_trigger=10)
    rows, opts = feed_within_exposure(spec(4, window=24, slide=24), None, base)
    assert rows == 4 and opts.max_files_per_trigger == 1  # default 13 rows cut to 4
    rows, opts = feed_within_exposure(spec(30, window=24, slide=24), None, base)
    assert rows == 13 and opts.max_files_per_trigger == 2
    rows, opts = feed_within_exposure(spec(None, window=24, slide=24), None, base)
    assert rows == 13 and opts is base


@pytest.mark.parametrize(
    ("failure", "lost", "exposure", "contract"),
    [("crash", 3, 4, "crash"), ("crash", 4, 4, "crash"), ("crash", 5, 4, "range"),
     ("machine", 1, 4, "range"), ("crash", 1, None, "range")],
)  # fmt: skip
def test_which_contract_covers_a_recovery(failure: str, lost: int, exposure, contract) -> None:
    assert covering_contract(failure, lost, exposure) == contract
