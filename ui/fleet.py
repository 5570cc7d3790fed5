"""The Plan page's fleet, store, job and compute inputs -> ``engine.costs.CostInputs``.

Every input keeps its value across page visits: Streamlit forgets a widget's
value when a page without it runs, so each one is seeded from the value kept
for it (``KEPT``), else its default; one the operator has not edited follows its
default when that changes (a new plan, data set or measurement: ``remembered``).
Prices and rates start at the published or measured figures (``engine.costs``), each
one's source in its help.
"""

from __future__ import annotations

from collections.abc import Iterable

import streamlit as st

from engine.costs import (
    BENCHMARK_POINTS,
    COMPUTE,
    PRODUCTION_SOURCE,
    REPLAN_SOURCE,
    STORES,
    BenchmarkPoint,
    ComputePrices,
    ComputeRates,
    Contracts,
    CostInputs,
    Fleet,
    JobShape,
    StorePrices,
    nearest_point,
)
from engine.planning import BackupPlan

KEPT = "_kept_"  # session key prefix of a widget's last value
SEEDED = "_seeded_"  # session key prefix of the default a widget was last seeded from
NEAREST = "nearest to this fleet's micro-batch"
JOB_TRIGGER_S = 1.0  # the production job's default --trigger
JOB_PARTITIONS = 4  # the production job's default shuffle partitions


def remembered(key: str, default: object) -> None:
    """Seed widget ``key`` with the value kept for it, else ``default``; an input the
    operator has not edited follows ``default`` when it changes (the plan, the data or a
    measurement it comes from: the sensors, the interval, the horizon, the bytes
    measured), so a figure priced on the page is never the last plan's. An edit stands."""
    seeded = st.session_state.get(SEEDED + key, default)
    shown = st.session_state.get(key, st.session_state.get(KEPT + key, seeded))
    if seeded != default and shown == seeded:  # not edited: it follows its source
        st.session_state[key] = st.session_state[KEPT + key] = default
    elif key not in st.session_state:
        st.session_state[key] = shown
    st.session_state[SEEDED + key] = default


def keep(keys: Iterable[str]) -> None:
    """Keep the widgets' values for the next visit."""
    for key in keys:
        if key in st.session_state:
            st.session_state[KEPT + key] = st.session_state[key]


STORE_KEYS = ("w_price", "w_cost_replication", "w_cost_put", "w_cost_bandwidth")


def _apply_store() -> None:
    """A store preset sets its prices (then each can be edited)."""
    store = STORES[st.session_state["w_cost_store"]]
    values = (store.storage_per_gb_month, store.replication, store.put_per_1000,
              store.bandwidth_per_mbps_month)  # fmt: skip
    for key, value in zip(STORE_KEYS, values, strict=True):
        st.session_state[key] = value


def _fleet(plan: BackupPlan, measured: tuple[float | None, float | None]) -> Fleet:
    written, at_rest = measured
    defaults = {
        "w_fleet_sensors": len(plan.sensors),
        "w_fleet_sites": 1,
        "w_fleet_interval": float(plan.sampling_interval_s),
        "w_bytes": float(round(written, 1)) if written else 16.0,
        "w_bytes_at_rest": float(round(at_rest or written or 16.0, 1)),
    }
    for key, value in defaults.items():
        remembered(key, value)
    c = st.columns(5)
    per_site = c[0].number_input("Sensors per site", min_value=1, step=1, key="w_fleet_sensors")
    sites = c[1].number_input("Sites", min_value=1, step=1, key="w_fleet_sites")
    interval = c[2].number_input(
        "Sampling interval (s)", min_value=0.001, key="w_fleet_interval",
        help="Seconds between two readings of one sensor (the data's own by default).",
    )  # fmt: skip
    size = c[3].number_input(
        "Bytes written per reading", min_value=1.0, step=1.0, key="w_bytes",
        help="Prices the write bandwidth. Measured by the live pipeline when it has run: "
        "the Parquet bytes Spark wrote per backed-up reading as each micro-batch "
        "committed (small files' overhead included); else an 8-byte timestamp and an "
        "8-byte value.",
    )  # fmt: skip
    rest = c[4].number_input(
        "Bytes at rest per reading", min_value=0.1, step=1.0, key="w_bytes_at_rest",
        help="Prices the storage held. Measured by the live pipeline when it has run: the "
        "Parquet bytes its backup holds per reading now, after compaction (about the "
        "values' 8 bytes a reading once 32 batches are compacted; more before); else as "
        "written: an uncompressed 8-byte timestamp and 8-byte value, about twice what a "
        "compacted backup keeps (bench_compaction).",
    )  # fmt: skip
    keep(defaults)
    return Fleet(int(per_site), int(sites), float(interval), float(size), float(rest))


def _store() -> StorePrices:
    first = next(iter(STORES))
    remembered("w_cost_store", first)
    preset = STORES[st.session_state["w_cost_store"]]
    defaults = dict(zip(STORE_KEYS, (preset.storage_per_gb_month, preset.replication,
                                     preset.put_per_1000, preset.bandwidth_per_mbps_month),
                        strict=True))  # fmt: skip
    for key, value in defaults.items():
        remembered(key, value)
    c = st.columns([2, 1, 1, 1, 1])
    name = c[0].selectbox("Backup store", list(STORES), key="w_cost_store",
                          on_change=_apply_store, help=preset.source)  # fmt: skip
    price = c[1].number_input("$ per GB-month", min_value=0.0, step=0.001, format="%.4f",
                              key="w_price", help="A GB is 2^30 bytes, as the clouds bill it. "
                              + preset.source)  # fmt: skip
    copies = c[2].number_input("Replication", min_value=1, step=1, key="w_cost_replication",
                               help="Copies the store keeps of every byte (HDFS: 3)")  # fmt: skip
    put = c[3].number_input("$ per 1,000 PUTs", min_value=0.0, step=0.001, format="%.4f",
                            key="w_cost_put", help=preset.source)  # fmt: skip
    bandwidth = c[4].number_input(
        "$ per MB/s-month", min_value=0.0, step=0.01, format="%.3f", key="w_cost_bandwidth",
        help="Sustained durable write bandwidth (provisioned throughput beyond what the "
        "store includes; an MB is 2^20 bytes). " + preset.source,
    )  # fmt: skip
    keep(("w_cost_store", *STORE_KEYS))
    edited = (float(price), int(copies), float(put), float(bandwidth)) != tuple(defaults.values())
    source = preset.source + ("; prices edited on this page" if edited else "")
    return StorePrices(name, float(price), int(copies), float(put), float(bandwidth), source)


def _job(plan: BackupPlan) -> JobShape:
    horizon_h = plan.horizon_rows * plan.sampling_interval_s / 3600 or 24.0
    defaults = {
        "w_cost_trigger": JOB_TRIGGER_S,
        "w_cost_partitions": JOB_PARTITIONS,
        "w_retention": 30,
        "w_cost_replan_h": float(round(horizon_h, 3)),
    }
    for key, value in defaults.items():
        remembered(key, value)
    c = st.columns(4)
    trigger = c[0].number_input("Micro-batch every (s)", min_value=0.001, key="w_cost_trigger",
                                help="The job's trigger: one backup file per micro-batch "
                                "and partition; a batch runs only when readings landed, "
                                "so at most one a trigger and one per site and reading "
                                "interval")  # fmt: skip
    parts = c[1].number_input("Partitions (files per batch)", min_value=1, step=1,
                              key="w_cost_partitions")  # fmt: skip
    days = c[2].number_input("Retention (days kept)", min_value=1, step=1, key="w_retention")
    replan = c[3].number_input("Re-plan every (h)", min_value=0.001, key="w_cost_replan_h",
                               help="The plan's horizon: one re-plan per site each")  # fmt: skip
    keep(defaults)
    return JobShape(float(trigger), int(parts), float(days), float(replan) * 3600.0)


def _point(choice: str, fleet: Fleet, job: JobShape) -> BenchmarkPoint:
    if choice == NEAREST:
        return nearest_point(job.readings_per_batch(fleet))
    return next(p for p in BENCHMARK_POINTS if p.describe() == choice)


RATE_KEYS = ("w_cost_write_us", "w_cost_shadow_us", "w_cost_job_us", "w_cost_replan_cs")


def _rates(fleet: Fleet, job: JobShape) -> tuple[ComputeRates, ComputePrices]:
    """The measured rates of the chosen benchmark point (editable), and executor prices."""
    remembered("w_cost_point", NEAREST)
    options = [NEAREST, *(p.describe() for p in BENCHMARK_POINTS)]
    choice = st.selectbox("Benchmark figures", options, key="w_cost_point", help=PRODUCTION_SOURCE)
    point = _point(choice, fleet, job)
    measured = ComputeRates.from_point(point)
    values = (measured.write_core_us, measured.shadow_core_us, measured.job_core_us,
              measured.replan_core_s)  # fmt: skip
    for key, value in zip(RATE_KEYS, values, strict=True):  # a new point's, when it changes
        remembered(key, float(round(value, 4)))
    c = st.columns(6)
    write = c[0].number_input("Write, core-us/reading", min_value=0.0, format="%.4f",
                              key="w_cost_write_us", help=measured.source)  # fmt: skip
    shadow = c[1].number_input("Shadow check, core-us/reading", min_value=0.0, format="%.4f",
                               key="w_cost_shadow_us", help=measured.source)  # fmt: skip
    work = c[2].number_input("Job (windows), core-us/reading", min_value=0.0, format="%.4f",
                             key="w_cost_job_us", help=measured.source)  # fmt: skip
    replan = c[3].number_input("Re-plan, core-s", min_value=0.0, key="w_cost_replan_cs",
                               help=REPLAN_SOURCE)  # fmt: skip
    remembered("w_cost_cores", COMPUTE.cores_per_executor)
    remembered("w_cost_executor", COMPUTE.executor_per_hour)
    cores = c[4].number_input("Cores per executor", min_value=1, step=1, key="w_cost_cores",
                              help=COMPUTE.source)  # fmt: skip
    price = c[5].number_input("$ per executor-hour", min_value=0.0, format="%.3f",
                              key="w_cost_executor", help=COMPUTE.source)  # fmt: skip
    keep(("w_cost_point", *RATE_KEYS, "w_cost_cores", "w_cost_executor"))
    if point.own_work_unresolved and float(shadow) == 0.0:  # not an operator's own figure
        st.caption(
            f"At {point.describe()} the production job with Lacuna ran as fast as plain "
            "windows with its backup: its own work (the shadow check) is below the "
            "benchmark's noise there and counts 0 here; enter your own figure to price it."
        )
    rates = ComputeRates(float(write), float(work), float(shadow), float(replan),
                         source=measured.source)  # fmt: skip
    return rates, ComputePrices(int(cores), float(price), COMPUTE.source)


def _contracts(plan: BackupPlan, range_fraction: float) -> Contracts:
    """One backup fraction per contract, each from its own plan; both follow a new plan.

    A crash-contract plan's own fraction is the crash figure and ``range_fraction`` (the
    same query planned for whole windows) the range one; a range plan has only its own.
    """
    crash_plan = plan.parameters.exposure is not None
    seeds = {"w_cost_crash": plan.backup_fraction, "w_cost_range": range_fraction}
    for key, value in seeds.items():  # a new plan's, when it changes
        remembered(key, float(value))
    c = st.columns(2)
    crash = c[0].number_input(
        "Crash contract: fraction backed up", min_value=0.0, max_value=1.0, step=0.01,
        format="%.4f",
        key="w_cost_crash", help=(
            f"A failure loses at most one micro-batch ({plan.parameters.exposure} rows): "
            "this plan's own fraction, priced with a trigger of at most "
            f"{plan.parameters.exposure} intervals (the job backs up every sensor for a "
            "bigger batch), which the requests count." if crash_plan
            else "This plan is made for the range "
            "contract: set an exposure on Tune for a crash-contract plan's own fraction; "
            "until then this starts at the range plan's."
        ),
    )  # fmt: skip
    whole = c[1].number_input(
        "Range contract: fraction backed up", min_value=0.0, max_value=1.0, step=0.01,
        format="%.4f",
        key="w_cost_range", help="Whole windows are rebuilt: the fraction the same query "
        "backs up when planned for whole windows.",
    )  # fmt: skip
    keep(("w_cost_crash", "w_cost_range"))
    return Contracts(float(crash), float(whole), plan.parameters.exposure, plan.parameters.window)


def cost_inputs(
    plan: BackupPlan,
    measured_bytes: tuple[float | None, float | None],
    range_fraction: float | None = None,
) -> CostInputs:
    """Fleet, store, job, compute and contract inputs for ``plan`` (kept across visits);
    ``range_fraction``: what the same query backs up planned for whole windows (default:
    the plan's own)."""
    fleet = _fleet(plan, measured_bytes)
    store = _store()
    with st.expander("Micro-batches, retention, re-plans and contracts"):
        job = _job(plan)
        contracts = _contracts(
            plan, plan.backup_fraction if range_fraction is None else range_fraction
        )
    with st.expander("Compute: measured rates (edit to use your own) and executor price"):
        rates, compute = _rates(fleet, job)
    return CostInputs(fleet, store, job, rates, contracts, compute)
