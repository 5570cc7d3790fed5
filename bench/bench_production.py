"""Production job against the plain Spark jobs a user would write, same landing files.

One run, side by side, on the same landing files per (data set, file size):

* ``beijing_132``: the 132 channels of the Beijing file (real readings,
  35,064 hourly rows, standardised with the first half's mean and standard
  deviation), tiled in time when a run needs more rows;
* ``gaussian_1056`` (unless ``--quick``): **synthetic**, 8 independent networks
  of 132 sensors, each Gaussian with the Beijing correlation matrix
  (``bench.bench_recovery.block_gaussian``); used only for how the job scales
  with the number of sensors.

A landing file holds ``--sizes`` ROWS (time steps of all sensors): 100, 1,000
and 10,000 rows, so 13,200 / 132,000 / 1.32 M readings at 132 sensors. Rows
are ``--interval`` seconds apart (default one minute, the plan's sampling
interval too): at the Beijing file's hourly clock 10,000 rows span 417 days,
417 ``date`` partitions per batch for every job, which measures Hadoop's
per-file cost rather than the jobs (README). Each
job reads one file per micro-batch (``maxFilesPerTrigger=1``, ``availableNow``):

* ``lacuna``: ``engine.job.run.run_job``: backup of the plan's sensors,
  window aggregates, shadow check, results and metrics;
* ``plain_full``: every reading through Spark's Parquet file sink (by date);
* ``plain_approx``: the same, filtered to the backup sensors;
* ``plain_windows``: Spark's own windowed avg per sensor with a watermark (0 s,
  as ours), appended to a Parquet file sink: the window aggregates without a
  backup or a shadow check. ``lacuna_over_approx_plus_windows`` compares ours
  with running ``plain_approx`` and ``plain_windows`` one after the other (the
  pair a user needs for the same outputs less the shadow check).

Per job: ``readings_per_s`` end to end (readings / wall time from start to
termination, start-up included) and ``steady_readings_per_s`` (readings /
Spark's ``triggerExecution`` time summed over the micro-batches after the
first), the median over ``--repeats`` runs (the jobs take turns within a
repeat). Backup bytes = Parquet bytes written. Every run is checked against a
pure-Python count on the same data (``tests/production_reference.py``: backup
rows, closed windows, rebuilt pairs, shadow misses). ``--cluster 1,2``
repeats the four jobs on a standalone cluster of 1 and 2 one-core workers, at
the largest size; ``--cluster-files-per-trigger 2`` gives each micro-batch two
files, so two scan tasks a second worker can share (``--only-cluster`` skips
the local runs).

Prints one JSON object. ``python bench/bench_production.py`` (about 9 min on
this machine), ``--quick`` (132 sensors, one repeat, about 2 min).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_recovery import block_gaussian  # noqa: E402
from bench.common import beijing_wide, print_json  # noqa: E402
from bench.production_core import run_lacuna, run_plain, tiled_rows, write_landing  # noqa: E402
from tests.production_reference import Rows, reference_results  # noqa: E402

DATA = beijing_wide()
SIZES = (100, 1_000, 10_000)
# files per run by rows per file: enough micro-batches that steady state dominates
FILES = {100: 12, 1_000: 10, 10_000: 6}
KINDS = ("lacuna", "plain_full", "plain_approx", "plain_windows")


def beijing() -> Rows:
    from engine.data.history import load_history

    h = load_history(DATA)
    train = h.values[: len(h.times) // 2]
    scale = train.std(axis=0)
    scale[scale == 0] = 1.0
    return Rows(h.times, (h.values - train.mean(axis=0)) / scale, h.sensors)


def load_avg() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def make_plan(rows: Rows, path: Path, args: argparse.Namespace) -> Any:
    """Fit on the first half, model-only target for (eps, 0.05, window, avg), greedy."""
    from engine.export import load_config
    from engine.model.gaussian import GaussianModel
    from engine.planning.guarantee import variance_target
    from engine.selection.greedy import select_backups
    from tests.production_reference import write_config

    half = len(rows.times) // 2
    train = Rows(rows.times[:half], rows.values[:half], rows.sensors)
    model = GaussianModel().fit(train.values, train.sensors)
    target = variance_target(args.eps, 0.05, args.window, "avg")
    lm = model.linear_map(sorted(select_backups(model.cov_, target, "greedy").backup))
    write_config(path, train, window=args.window, slide=args.window, eps=args.eps, lm=lm,
                 sampling_interval_s=args.interval)  # fmt: skip
    return load_config(path)


def one_size(spark: Any, rows: Rows, config: Any, per_file: int, files: int, root: Path,
             kinds: tuple[str, ...], repeats: int, per_trigger: int = 1) -> dict:  # fmt: skip
    interval = config.sampling_interval_s
    landing = root / f"landing_{per_file}"
    readings = write_landing(rows, per_file, files, landing, interval)
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for r in range(repeats):
        for kind in kinds:
            target = root / f"{kind}_{per_file}_{r}"
            window_s = config.query.window * interval
            run = (
                run_lacuna(spark, config, landing, target, per_trigger)
                if kind == "lacuna"
                else run_plain(
                    spark, kind, landing, target, config.backup_sensors, window_s, per_trigger
                )
            )
            run["readings_per_s"] = round(readings / run["seconds"], 1)
            runs[kind].append(run)
    out: dict[str, Any] = {
        "rows_per_file": per_file,
        "files": files,
        "files_per_trigger": per_trigger,
        "readings": readings,
    }
    for kind, rs in runs.items():
        out[kind] = {**_median(rs), "runs": len(rs)}
    out["checks"] = check(runs, rows, config, per_file * files)
    out["ratios"] = ratios(out)
    out["uptime_after"] = load_avg()
    return out


def _median(runs: list[dict]) -> dict:
    """Median of each number over the runs; everything else from the median-time run."""
    mid = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    out = dict(mid)
    for key in ("seconds", "readings_per_s", "steady_readings_per_s"):
        vals = [r[key] for r in runs if r.get(key) is not None]
        out[key] = round(statistics.median(vals), 3) if vals else None
    return out


def check(runs: dict[str, list[dict]], rows: Rows, config: Any, steps: int) -> dict[str, bool]:
    """Each Spark result against a pure-Python count on the same readings."""
    fed = tiled_rows(rows, steps, config.sampling_interval_s)
    n = len(rows.sensors)
    backup = len(config.backup_sensors)
    q, dt = config.query, config.sampling_interval_s
    ref = reference_results(
        fed, config.linear_map(), q.window * dt, q.effective_slide * dt, "avg", q.eps
    )
    rebuilt = ref[~ref["sensor"].isin(config.backup_sensors)]
    checks = {}
    for r in runs.get("lacuna", []):
        ok = {
            "lacuna_backup_rows": r["rows_written"] == steps * backup,
            "lacuna_windows": r["windows"] == ref["start_s"].nunique(),
            "lacuna_rebuilt_pairs": r["rebuilt_pairs"] == len(rebuilt),
            "lacuna_misses": r["misses"] == int(rebuilt["miss"].sum()),
        }
        checks = {k: checks.get(k, True) and v for k, v in ok.items()}
    for r in runs.get("plain_full", []):
        checks["plain_full_rows"] = checks.get("plain_full_rows", True) and (
            r["rows_written"] == steps * n
        )
    for r in runs.get("plain_approx", []):
        checks["plain_approx_rows"] = checks.get("plain_approx_rows", True) and (
            r["rows_written"] == steps * backup
        )
    for r in runs.get("plain_windows", []):  # the windows that closed, every sensor's
        checks["plain_windows_rows"] = checks.get("plain_windows_rows", True) and (
            r["rows_written"] == ref["start_s"].nunique() * n
        )
    return checks


def ratios(size: dict) -> dict[str, float]:
    out = {}
    both = [size.get(k, {}).get("steady_readings_per_s") for k in ("plain_approx", "plain_windows")]
    if all(both):  # a user's pair of jobs for the same outputs, one after the other
        pair = 1.0 / sum(1.0 / r for r in both)  # type: ignore[operator]
        out["lacuna_over_approx_plus_windows_steady"] = round(
            size["lacuna"]["steady_readings_per_s"] / pair, 3
        )
    for k in ("plain_full", "plain_approx", "plain_windows"):
        if k not in size:
            continue
        for label, rate in (("end_to_end", "readings_per_s"), ("steady", "steady_readings_per_s")):
            ours, theirs = size["lacuna"].get(rate), size[k].get(rate)
            if ours and theirs:
                out[f"lacuna_over_{k}_{label}"] = round(ours / theirs, 3)
        if k == "plain_full":
            out["backup_bytes_over_full"] = round(size["lacuna"]["bytes"] / size[k]["bytes"], 4)
    return out


def data_sets(args: argparse.Namespace) -> dict[str, Rows]:
    base = beijing()
    sets = {"beijing_132": base}
    if not args.quick:
        sets[f"gaussian_{132 * args.blocks}"] = block_gaussian(base, args.blocks)
    return sets


def run_local(args: argparse.Namespace, sets: dict[str, Rows], root: Path) -> dict:
    from engine.stream import SparkSettings, get_spark

    spark = get_spark(SparkSettings(master="local[2]", shuffle_partitions=2))
    out: dict[str, Any] = {}
    try:
        for name, rows in sets.items():
            config = make_plan(rows, root / f"{name}.json", args)
            warm = root / f"{name}_warm"
            one_size(spark, rows, config, 100, 2, warm, KINDS, 1)  # JIT, class loading
            sizes = {}
            for s in args.sizes:
                files = _files(args, s, rows)
                sizes[str(s)] = one_size(
                    spark, rows, config, s, files, root / name, KINDS, args.repeats
                )
            out[name] = {
                "backup_sensors": len(config.backup_sensors),
                "sensors": len(rows.sensors),
                "sizes": sizes,
            }
    finally:
        spark.stop()
    return out


def _files(args: argparse.Namespace, per_file: int, rows: Rows) -> int:
    files = FILES.get(per_file, 6)
    if args.quick:
        files = max(3, files // 2)
    if len(rows.sensors) > 500 and per_file >= 10_000:
        files = 3  # 10.6 M readings a file: three files already take minutes
    return files


def run_clusters(args: argparse.Namespace, rows: Rows, root: Path) -> dict:
    if not args.cluster:
        return {"skipped": "run with --cluster 1,2"}
    from engine.stream import SparkSettings, get_spark
    from tests.cluster.standalone import ClusterError, StandaloneCluster

    config = make_plan(rows, root / "cluster_plan.json", args)
    out: dict[str, Any] = {}
    for workers in (int(w) for w in args.cluster.split(",")):
        try:
            cluster = StandaloneCluster(root / f"cluster{workers}", workers=workers).start()
        except ClusterError as err:
            out[f"{workers}_workers"] = {"error": str(err).splitlines()[0]}
            continue
        try:
            spark = get_spark(SparkSettings(master=cluster.url, shuffle_partitions=2))
            kinds = KINDS
            work = root / f"c{workers}"
            per_file, per_trigger = max(args.sizes), args.cluster_files_per_trigger
            files = max(FILES.get(per_file, 6), 3 * per_trigger)
            out[f"{workers}_workers"] = one_size(
                spark, rows, config, per_file, files, work, kinds, args.repeats, per_trigger
            )
            spark.stop()
        finally:
            cluster.stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="rows per landing file")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--window", type=int, default=24)
    p.add_argument("--eps", type=float, default=0.25, help="in standard deviations")
    p.add_argument(
        "--interval",
        type=float,
        default=60.0,
        help="seconds between rows in the landing files (the readings' clock)",
    )
    p.add_argument("--blocks", type=int, default=8, help="networks of the synthetic case")
    p.add_argument("--quick", action="store_true", help="132 sensors, one repeat, fewer files")
    p.add_argument("--cluster", default="", help="e.g. 1,2: also on a standalone cluster")
    p.add_argument(
        "--cluster-files-per-trigger",
        type=int,
        default=1,
        help="landing files per micro-batch on the cluster (one file is one scan task)",
    )
    p.add_argument("--only-cluster", action="store_true", help="skip the local[2] runs")
    args = p.parse_args()
    args.sizes = [int(s) for s in str(args.sizes).split(",")]
    if args.quick:
        args.repeats = 1
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    before = load_avg()
    sets = data_sets(args)
    with tempfile.TemporaryDirectory(prefix="bench_production_") as tmp:
        root = Path(tmp)
        local = {} if args.only_cluster else run_local(args, sets, root)
        clusters = run_clusters(args, sets["beijing_132"], root)
    print_json(
        {
            "command": "python " + " ".join(sys.argv),
            "uptime_before": before,
            "uptime_after": load_avg(),
            "interval_s": args.interval,
            "window": args.window,
            "eps": args.eps,
            "micro_batch": "one landing file per micro-batch (maxFilesPerTrigger=1), availableNow",
            "local[2]": local,
            "standalone": clusters,
        }
    )


if __name__ == "__main__":
    main()
