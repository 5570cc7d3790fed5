"""The cost model against hand computations, and its measured figures against the benchmarks."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from engine.costs import (
    BENCHMARK_POINTS,
    MEASURED_RECOVERY,
    REPLAN_CORE_S,
    SECONDS_PER_MONTH,
    STORES,
    ComputePrices,
    ComputeRates,
    Contracts,
    CostInputs,
    Fleet,
    JobShape,
    RecoveryRates,
    StorePrices,
    compare_costs,
    nearest_point,
    where_it_pays,
)
from engine.errors import ParameterError

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
MONTH = 365.25 / 12 * 86400  # seconds


def _inputs(sensors_per_site: int = 100, sites: int = 10, range_fraction: float = 0.25):
    # 100 sensors x 10 sites every 10 s: R = 100 readings/s
    return CostInputs(
        fleet=Fleet(sensors_per_site, sites, interval_s=10.0, bytes_per_reading=16.0),
        store=StorePrices("test store", 0.1, 3, 0.005, 0.04, "a test"),
        job=JobShape(trigger_s=10.0, partitions=2, retention_days=30.0, replan_every_s=86400.0),
        rates=ComputeRates(
            write_core_us=2.0, job_core_us=5.0, shadow_core_us=1.0, replan_core_s=10.0
        ),
        contracts=Contracts(crash_fraction=0.1, range_fraction=range_fraction),
        compute=ComputePrices(cores_per_executor=4, executor_per_hour=0.4),
    )


def test_full_backup_month_by_hand() -> None:
    report = compare_costs(_inputs())
    full = report.full
    core_second = 0.4 / 3600 / 4  # $ per core-second
    # 100 readings/s x 16 B = 1,600 B/s, 30 days kept, 3 copies
    assert full.stored_gb == pytest.approx(1600 * 30 * 86400 * 3 / 2**30)  # 11.587 GiB
    assert full.storage == pytest.approx(1600 * 30 * 86400 * 3 / 2**30 * 0.1)
    assert full.write_mb_per_s == pytest.approx(1600 * 3 / 2**20)
    assert full.bandwidth == pytest.approx(1600 * 3 / 2**20 * 0.04)
    assert full.files_per_month == pytest.approx(MONTH / 10 * 2)  # a file per batch, partition
    assert full.requests == pytest.approx(MONTH / 10 * 2 / 1000 * 0.005)
    assert full.cores == pytest.approx(100 * 2e-6)  # writing every reading, 2 core-us each
    assert full.compute == pytest.approx(2e-4 * core_second * MONTH)
    assert full.replan == 0.0
    assert full.total == pytest.approx(full.storage + full.bandwidth + full.requests + full.compute)
    assert report.executors(full) == pytest.approx(2e-4 / 4)
    assert pytest.approx(MONTH) == SECONDS_PER_MONTH


@pytest.mark.parametrize(
    ("sites", "interval_s", "trigger_s", "per_second"),
    [
        (1, 3600.0, 1.0, 1 / 3600),
        (3, 60.0, 1.0, 3 / 60),
        (10, 10.0, 0.5, 1.0),
        (10, 10.0, 10.0, 0.1),
    ],
)
def test_a_batch_runs_only_when_readings_landed(sites, interval_s, trigger_s, per_second) -> None:  # type: ignore[no-untyped-def]
    """24 hourly sensors under a 1 s trigger: a micro-batch an hour (what landed), not one a
    second, so 720 batches a month and a lost batch is the site's 24 readings."""
    inputs = _inputs()
    inputs = replace(
        inputs,
        fleet=Fleet(24, sites, interval_s=interval_s, bytes_per_reading=16.0),
        job=replace(inputs.job, trigger_s=trigger_s),
    )
    report = compare_costs(inputs)
    assert inputs.job.batches_per_second(inputs.fleet) == pytest.approx(per_second)
    assert report.full.files_per_month == pytest.approx(MONTH * per_second * 2)
    assert report.contracts["crash"].files_per_month == report.full.files_per_month
    for contract in ("crash", "range"):  # no exposure set: both take the job's trigger
        batch = report.readings_per_batch[contract]
        assert batch == pytest.approx(24 * sites / interval_s / per_second)
    if sites == 1:
        assert report.readings_per_batch["crash"] == pytest.approx(24.0)
        assert report.full.files_per_month == pytest.approx(MONTH / 3600 * 2)  # 1,461


def test_a_contract_month_and_its_saving_by_hand() -> None:
    report = compare_costs(_inputs())
    core_second = 0.4 / 3600 / 4
    plan = report.contracts["range"]
    assert plan.fraction == 0.25
    assert plan.stored_gb == pytest.approx(400 * 30 * 86400 * 3 / 2**30)
    assert plan.files_per_month == report.full.files_per_month  # requests do not shrink
    # the plan's writes (25 readings/s) and the shadow check on every reading (100/s)
    assert plan.cores == pytest.approx(25 * 2e-6 + 100 * 1e-6)
    # one re-plan per site and day: 10 sites x 30.44 re-plans x 10 core-seconds
    assert plan.replan == pytest.approx(10 * MONTH / 86400 * 10 * core_second)
    saving = report.full.total - plan.total
    assert report.saving("range") == pytest.approx(saving)
    by_hand = (
        (1600 - 400) * 30 * 86400 * 3 / 2**30 * 0.1  # storage
        + (1600 - 400) * 3 / 2**20 * 0.04  # write bandwidth
        + (100 * 2e-6 - 25 * 2e-6 - 100 * 1e-6) * core_second * MONTH  # compute
        - 10 * MONTH / 86400 * 10 * core_second  # re-plans
    )
    assert saving == pytest.approx(by_hand)
    assert report.contracts["crash"].fraction == 0.1
    assert report.saving("crash") > report.saving("range")  # a smaller backup saves more


def test_break_even_is_where_the_saving_crosses_zero() -> None:
    inputs = _inputs()
    even = compare_costs(inputs).break_even["range"]
    core_second = 0.4 / 3600 / 4
    fixed = 10 * MONTH / 86400 * 10 * core_second  # the re-plans
    per_reading = (
        16 * 0.75 * 30 * 86400 * 3 / 2**30 * 0.1
        + 16 * 0.75 * 3 / 2**20 * 0.04
        + (0.75 * 2e-6 - 1e-6) * core_second * MONTH
    )
    assert even.readings_per_second == pytest.approx(fixed / per_reading)
    assert even.sensors_per_site == pytest.approx(fixed / per_reading / 10 * 10.0)
    # at the break-even fleet the saving is zero
    at = _inputs(sensors_per_site=1, sites=10)
    at = CostInputs(
        Fleet(1, 10, interval_s=10.0 / (even.sensors_per_site), bytes_per_reading=16.0),
        at.store, at.job, at.rates, at.contracts, at.compute,
    )  # fmt: skip
    assert compare_costs(at).saving("range") == pytest.approx(0.0, abs=1e-9)


def test_where_lacuna_does_not_pay_it_says_so_and_gives_the_break_even() -> None:
    few = compare_costs(_inputs(sensors_per_site=2, sites=1))
    assert few.saving("range") < 0
    lines = where_it_pays(few, "range")
    assert lines[0].startswith("Range contract, 2 sensors every 10 s")
    assert "does not pay" in lines[0]
    assert lines[1].startswith("Break-even:") and "sensors per site" in lines[1]
    many = compare_costs(_inputs(sensors_per_site=10_000, sites=100))
    assert many.saving("range") > 0
    assert "saves $" in where_it_pays(many, "range")[0]
    # the closing rule of thumb speaks of slow sensors' cents only where it does not pay
    assert where_it_pays(few, "range")[-1].endswith("the saving is cents.")
    assert "cents" not in where_it_pays(many, "range")[-1]


def test_never_pays_when_lacunas_own_work_outweighs_each_saved_reading() -> None:
    free = StorePrices("free store", 0.0, 1, 0.0, 0.0, "nothing billed")
    base = _inputs()
    rates = ComputeRates(write_core_us=1.0, job_core_us=5.0, shadow_core_us=3.0)
    inputs = CostInputs(base.fleet, free, base.job, rates, base.contracts, base.compute)
    report = compare_costs(inputs)
    assert math.isinf(report.break_even["range"].readings_per_second)
    assert "never" in where_it_pays(report)[1]


def test_a_contract_that_saves_nothing_per_reading_never_pays() -> None:
    """Backing up every sensor with no re-plan cost: no fixed cost (the saving at no
    readings is 0) and nothing saved per reading. It never pays; it does not pay at any
    size."""
    base = _inputs(range_fraction=1.0)
    report = compare_costs(replace(base, rates=replace(base.rates, replan_core_s=0.0)))
    assert report.saving("range") <= 0
    assert math.isinf(report.break_even["range"].readings_per_second)
    assert "never" in where_it_pays(report, "range")[1]


def test_recovery_times_follow_the_measured_line() -> None:
    rates = RecoveryRates.through((100, 1.0, 2.0), (1100, 2.0, 12.0))
    assert rates.seconds(100, "lacuna") == pytest.approx(1.0)
    assert rates.seconds(1100, "full") == pytest.approx(12.0)
    assert rates.lacuna_per_reading_s == pytest.approx(1 / 1000)
    report = compare_costs(_inputs())
    batch = 100 * 10  # readings in one 10 s micro-batch
    assert report.readings_per_batch["range"] == batch
    # the window is not given: a range failure is priced as its micro-batch
    assert report.readings_lost["range"] == batch
    full = MEASURED_RECOVERY.seconds(batch, "full")
    assert report.recovery_lost_s["range"]["full"] == pytest.approx(full)
    assert report.recovery_day_s["lacuna"] == pytest.approx(
        MEASURED_RECOVERY.seconds(100 * 86400, "lacuna")
    )
    with pytest.raises(ParameterError, match="strategy must be"):
        rates.seconds(1, "none")


def test_the_share_of_the_job_a_full_backup_takes() -> None:
    report = compare_costs(_inputs())
    assert report.full_backup_share == pytest.approx(2.0 / (5.0 + 2.0))


def test_measured_figures_are_the_benchmarks() -> None:
    production = json.loads((RESULTS / "production.json").read_text())
    case = production["local[2]"]["beijing_132"]
    for point in BENCHMARK_POINTS:
        size = case["sizes"][str(point.rows_per_file)]
        for kind in ("lacuna", "plain_full", "plain_approx", "plain_windows"):
            assert getattr(point, kind) == size[kind]["steady_readings_per_s"]
        assert point.sensors == case["sensors"] and point.backup_sensors == case["backup_sensors"]
        written = size["lacuna"]["rows_written"] / size["readings"]
        assert point.backup_fraction == pytest.approx(written)
    recovery = json.loads((RESULTS / "recovery.json").read_text())["cases"]["beijing_132"]
    ranges = recovery["recovery"]
    rows = {k: v["checks"]["rows"] * recovery["sensors"] for k, v in ranges.items()}
    for name in ("1_day", "12_weeks"):
        seconds = ranges[name]["seconds_median"]
        lacuna, full = (MEASURED_RECOVERY.seconds(rows[name], s) for s in ("lacuna", "full"))
        assert lacuna == pytest.approx(seconds["lacuna"])
        assert full == pytest.approx(seconds["full_duckdb"])
    # what the page says was measured: the two ranges' readings and the plan's backup
    assert MEASURED_RECOVERY.measured == (rows["1_day"], rows["12_weeks"])
    assert f"backing up {recovery['backup_sensors']} of {recovery['sensors']}" in (
        MEASURED_RECOVERY.source
    )
    assert f"{rows['12_weeks']:,} readings" in MEASURED_RECOVERY.source
    assert MEASURED_RECOVERY.beyond(10 * rows["12_weeks"]) == pytest.approx(10.0)
    replan = json.loads((RESULTS / "job_replan.json").read_text())
    assert pytest.approx(2 * replan["inside"]["replan_s"]) == REPLAN_CORE_S


def test_derived_rates_by_hand_and_the_nearest_benchmark() -> None:
    point = BENCHMARK_POINTS[-1]  # 10,000 rows x 132 sensors
    per = {k: 2e6 / getattr(point, k) for k in ("lacuna", "plain_full", "plain_approx",
                                               "plain_windows")}  # fmt: skip
    write = (per["plain_full"] - per["plain_approx"]) / (1 - 20 / 132)
    assert point.write_core_us == pytest.approx(write)
    assert point.job_core_us == pytest.approx(per["plain_windows"])
    assert point.shadow_core_us == pytest.approx(
        max(0.0, per["lacuna"] - per["plain_windows"] - write * 20 / 132)
    )
    assert nearest_point(2_000_000).rows_per_file == 10_000
    assert nearest_point(10_000).rows_per_file == 100
    assert nearest_point(150_000).rows_per_file == 1_000
    rates = ComputeRates.from_point(point)
    assert rates.write_core_us == point.write_core_us and "10,000 rows" in rates.source


def test_bad_inputs_name_the_bad_value() -> None:
    with pytest.raises(ParameterError, match="sites must be an integer >= 1, got 0"):
        Fleet(10, 0)
    with pytest.raises(ParameterError, match="interval_s must be a finite number > 0, got -1"):
        Fleet(10, 1, -1.0)
    with pytest.raises(ParameterError, match="replication must be an integer >= 1, got 0"):
        StorePrices("x", 0.1, 0, 0.0, 0.0, "")
    with pytest.raises(ParameterError, match="crash_fraction must be a fraction in"):
        Contracts(1.5, 0.2)
    with pytest.raises(ParameterError, match="trigger_s"):
        JobShape(trigger_s=0.0)
    with pytest.raises(ParameterError, match="readings per micro-batch must be > 0"):
        nearest_point(0.0)
    assert set(STORES) and all(s.source for s in STORES.values())
    hdfs = next(s for s in STORES.values() if s.replication == 3)
    # gp3 includes 125 MiB/s a volume, far above a backup's writes: no throughput price
    assert hdfs.storage_per_gb_month == 0.08 and hdfs.bandwidth_per_mbps_month == 0.0


def test_storage_is_priced_at_the_bytes_at_rest_and_bandwidth_at_the_bytes_written() -> None:
    base = _inputs()
    fleet = Fleet(100, 10, interval_s=10.0, bytes_per_reading=16.0, stored_bytes_per_reading=8.5)
    report = compare_costs(CostInputs(fleet, base.store, base.job, base.rates, base.contracts,
                                      base.compute))  # fmt: skip
    same = compare_costs(base)
    assert report.full.stored_gb == pytest.approx(same.full.stored_gb * 8.5 / 16)
    assert report.full.write_mb_per_s == pytest.approx(same.full.write_mb_per_s)
    crash = report.contracts["crash"]
    assert crash.stored_gb == pytest.approx(100 * 0.1 * 8.5 * 30 * 86400 * 3 / 2**30)
    assert Fleet(1).bytes_at_rest == 16.0  # none given: as written
    with pytest.raises(ParameterError, match="stored_bytes_per_reading"):
        Fleet(1, stored_bytes_per_reading=0.0)


def test_slow_fleets_state_their_rate_not_zero() -> None:
    inputs = replace(_inputs(), fleet=Fleet(24, 1, interval_s=3600.0))
    first = where_it_pays(compare_costs(inputs), "range")[0]
    assert "every 3600 s (0.0067 readings/s)" in first
    assert "(100 readings/s)" in where_it_pays(compare_costs(_inputs()), "range")[0]


def test_a_crash_contract_pays_the_micro_batches_its_exposure_allows() -> None:
    """One sensor site every second, a 60 s trigger: a micro-batch holds 60 rows, but a
    crash plan for 2 rows must commit at least every 2 s: 30x the requests of full
    backup (whose trigger stays), counted in its bill and its break-even."""
    base = _inputs(sensors_per_site=100, sites=1)
    inputs = replace(
        base,
        fleet=Fleet(100, 1, interval_s=1.0, bytes_per_reading=16.0),
        job=replace(base.job, trigger_s=60.0),
        contracts=Contracts(0.1, 0.25, crash_exposure_rows=2),
    )
    report = compare_costs(inputs)
    assert report.full.files_per_month == pytest.approx(MONTH / 60 * 2)
    assert report.contracts["crash"].files_per_month == pytest.approx(MONTH / 2 * 2)
    assert report.contracts["range"].files_per_month == report.full.files_per_month
    extra = (MONTH / 2 - MONTH / 60) * 2 / 1000 * 0.005
    unlimited = compare_costs(replace(inputs, contracts=Contracts(0.1, 0.25)))
    assert report.saving("crash") == pytest.approx(unlimited.saving("crash") - extra)
    assert any(line.startswith("Requests cost more") for line in where_it_pays(report, "crash"))
    # what a crash loses is one of those batches: 2 rows of 100 sensors, not the trigger's 60
    assert report.readings_per_batch == {"crash": 200.0, "range": 6000.0}
    for who in ("lacuna", "full"):
        crash = MEASURED_RECOVERY.seconds(200.0, who)
        assert report.recovery_lost_s["crash"][who] == pytest.approx(crash)
        assert report.recovery_lost_s["range"][who] == pytest.approx(
            MEASURED_RECOVERY.seconds(6000.0, who)
        )
    with pytest.raises(ParameterError, match="crash_exposure_rows must be an integer >= 1"):
        Contracts(0.1, 0.2, crash_exposure_rows=0)


def test_a_range_failure_loses_the_open_windows_not_one_micro_batch() -> None:
    """Under the range contract the open windows' state is lost with the failure: what it
    loses, and its recovery, is a whole window of every sensor (an hour of rows at one
    second: 360,000 readings), not the 60 s micro-batch in flight; the crash contract
    still loses its micro-batch. A micro-batch longer than the window is what is lost."""
    base = _inputs(sensors_per_site=100, sites=1)
    inputs = replace(
        base,
        fleet=Fleet(100, 1, interval_s=1.0, bytes_per_reading=16.0),
        job=replace(base.job, trigger_s=60.0),
        contracts=Contracts(0.1, 0.25, crash_exposure_rows=2, window_rows=3600),
    )
    report = compare_costs(inputs)
    assert report.readings_per_batch == {"crash": 200.0, "range": 6000.0}
    assert report.readings_lost == {"crash": 200.0, "range": 360_000.0}
    for who in ("lacuna", "full"):
        assert report.recovery_lost_s["range"][who] == pytest.approx(
            MEASURED_RECOVERY.seconds(360_000.0, who)
        )
    short = compare_costs(replace(inputs, contracts=Contracts(0.1, 0.25, window_rows=10)))
    assert short.readings_lost["range"] == 6000.0
    with pytest.raises(ParameterError, match="window_rows must be an integer >= 1"):
        Contracts(0.1, 0.2, window_rows=0)


def test_a_benchmark_point_says_when_lacunas_own_work_is_below_its_noise() -> None:
    """At 132,000 readings a batch the job with Lacuna ran faster than plain windows with
    its backup: the shadow check's cost is counted 0 there, and the point says so."""
    small, middle, large = BENCHMARK_POINTS
    assert middle.shadow_core_us == 0.0 and middle.own_work_unresolved
    assert small.shadow_core_us > 0 and not small.own_work_unresolved
    assert large.shadow_core_us > 0 and not large.own_work_unresolved


def test_a_contract_that_backs_up_nothing_is_not_said_to_pay_the_same_requests() -> None:
    """A plan backing up no sensor writes no file: its requests are 0, so the sentence that
    requests cost the same either way would contradict its own table."""
    report = compare_costs(_inputs(range_fraction=0.0))
    assert report.contracts["range"].requests == 0.0 < report.full.requests
    lines = where_it_pays(report, "range")
    assert not any("cost the same" in line for line in lines)
    assert any(line.startswith("Requests: none") for line in lines)
    same = where_it_pays(compare_costs(_inputs(range_fraction=0.25)), "range")
    assert any(line.startswith("Requests cost the same either way") for line in same)
