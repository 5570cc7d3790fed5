"""Small helpers shared by the unit and Spark tests."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.model import LinearMap

if TYPE_CHECKING:
    import pandas as pd


def fit_map(values: np.ndarray, sensors: tuple[str, ...], backup: tuple[str, ...]) -> LinearMap:
    """Least-squares reconstruction of the other sensors from ``backup``.

    A stand-in for ``GaussianModel.linear_map`` so stream tests do not depend on
    the model: the intercept and coefficients of an ordinary regression, and
    the residual variance as the conditional variance.
    """
    b_idx = [sensors.index(s) for s in backup]
    targets = tuple(s for s in sensors if s not in backup)
    t_idx = [sensors.index(s) for s in targets]
    design = np.column_stack([np.ones(len(values)), values[:, b_idx]])
    sol, *_ = np.linalg.lstsq(design, values[:, t_idx], rcond=None)
    resid = values[:, t_idx] - design @ sol
    return LinearMap(sensors, backup, targets, sol[0], sol[1:].T, resid.var(axis=0))


ROOT = Path(__file__).resolve().parents[1]

# The small sample's six sensors and a two-sensor backup set, shared by the Spark
# fixtures and the production job's reference.
SMALL_SAMPLE = ROOT / "sample_data" / "beijing_aq_small.csv"
SMALL_SENSORS = (
    "Aotizhongxin_TEMP",
    "Changping_TEMP",
    "Dongsi_TEMP",
    "Aotizhongxin_PM2.5",
    "Changping_PM2.5",
    "Dongsi_PM2.5",
)
SMALL_BACKUP = ("Dongsi_TEMP", "Aotizhongxin_PM2.5")


def write_backup_batch(target: str, rows: pd.DataFrame, plan_version: int = 0) -> int:
    """Write backup ``rows`` (seq, event_time, sensor, value) to a batch directory in
    the layout Spark's ``partitionBy("date")`` gives, then its ``_SUCCESS``; the
    Parquet bytes. Stands in for Spark only in unit tests (tests/spark use Spark)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(target)
    if folder.exists():  # Spark's mode("overwrite") replaces the whole directory
        import shutil

        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    times = pd.to_datetime(rows["event_time"], utc=True)
    total = 0
    for day, part in rows.groupby(times.dt.strftime("%Y-%m-%d")):
        table = pa.table(
            {
                "event_time": pa.array(pd.to_datetime(part["event_time"], utc=True),
                                       pa.timestamp("us", tz="UTC")),
                "sensor": pa.array(part["sensor"].astype(str), pa.string()),
                "value": pa.array(part["value"], pa.float64()),
                "plan_version": pa.array([plan_version] * len(part), pa.int32()),
                "seq": pa.array(part["seq"], pa.int64()),
            }
        )  # fmt: skip
        out = folder / f"date={day}" / "part-00000.parquet"
        out.parent.mkdir()
        pq.write_table(table, out)
        total += out.stat().st_size
    (folder / "_SUCCESS").write_bytes(b"")
    return total


def run_engine(*argv: object) -> subprocess.CompletedProcess[str]:
    """``python -m engine ARGV`` run in this process from the repository root:
    ``engine.cli.main`` with stdout and stderr captured, returned as a finished process
    (``returncode``, ``stdout``, ``stderr``).

    The CLI's logic without a new interpreter's seconds of imports per call. Where the
    process boundary is the point (a signal, a closed pipe, warnings or a traceback that
    only a real interpreter prints) the tests start ``python -m engine`` instead."""
    from engine.cli import main

    args = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as stop:  # argparse's --help
            code = stop.code if isinstance(stop.code, int) else 1
    return subprocess.CompletedProcess(["python", "-m", "engine", *args], code, out.getvalue(),
                                       err.getvalue())  # fmt: skip
