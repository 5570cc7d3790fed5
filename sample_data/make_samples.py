"""Rebuild the Beijing air-quality samples shipped in ``sample_data/``.

Source: the hourly wide table of the UCI "Beijing Multi-Site Air Quality" data
(Zhang et al., Proc. R. Soc. A 2017; CC BY 4.0), kept outside the repository in
``../shared/datasets/beijing_multisite_aq/wide.csv``. Only a subset of columns
and rows is shipped; the values themselves are copied unchanged (missing values
stay missing). See ``sample_data/README.md``.

Usage::

    python sample_data/make_samples.py [--source PATH] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = HERE.parents[1] / "shared" / "datasets" / "beijing_multisite_aq" / "wide.csv"
VARIABLES = ("TEMP", "PM2.5", "DEWP")
# Autumn into winter: temperature falls ~20 degC and the heating season starts
# (mid-November), so the correlation structure changes inside the sample.
MAIN_START, MAIN_DAYS = "2016-09-01", 120
SMALL_DAYS, SMALL_PER_VARIABLE = 30, 6


def select_columns(columns: list[str], variables: tuple[str, ...], per_variable: int) -> list[str]:
    """Columns ``<station>_<variable>`` grouped by variable, the first ``per_variable`` of each."""
    chosen: list[str] = []
    for variable in variables:
        chosen += [c for c in columns if c.endswith("_" + variable)][:per_variable]
    return chosen


def slice_days(frame: pd.DataFrame, start: str, days: int) -> pd.DataFrame:
    """Rows with ``start <= timestamp < start + days``."""
    begin = pd.Timestamp(start)
    end = begin + pd.Timedelta(days=days)
    return frame[(frame["timestamp"] >= begin) & (frame["timestamp"] < end)].reset_index(drop=True)


def to_long(wide: pd.DataFrame) -> pd.DataFrame:
    """(time, sensor, value) rows; a missing reading is simply absent, as in a real feed."""
    long = wide.melt(id_vars="timestamp", var_name="sensor", value_name="value")
    long = long.rename(columns={"timestamp": "time"}).dropna(subset=["value"])
    return long.sort_values("time", kind="stable").reset_index(drop=True)  # keeps column order


def make_samples(source: Path, out: Path) -> dict[str, tuple[int, int]]:
    """Write the three Beijing samples into ``out``; returns {file: (rows, columns)}."""
    frame = pd.read_csv(source, parse_dates=["timestamp"])
    main_cols = select_columns(list(frame.columns), VARIABLES, 12)
    main = slice_days(frame[["timestamp", *main_cols]], MAIN_START, MAIN_DAYS)
    small_cols = select_columns(main_cols, ("TEMP", "PM2.5"), SMALL_PER_VARIABLE)
    small = slice_days(main[["timestamp", *small_cols]], MAIN_START, SMALL_DAYS)
    long = to_long(small)
    out.mkdir(parents=True, exist_ok=True)
    stamp = "%Y-%m-%d %H:%M:%S"
    main.to_csv(out / "beijing_aq_sample.csv", index=False, float_format="%.10g", date_format=stamp)
    small.to_csv(out / "beijing_aq_small.csv", index=False, float_format="%.10g", date_format=stamp)
    long.to_parquet(out / "beijing_aq_long.parquet", index=False)
    return {
        "beijing_aq_sample.csv": main.shape,
        "beijing_aq_small.csv": small.shape,
        "beijing_aq_long.parquet": long.shape,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    for name, shape in make_samples(args.source, args.out).items():
        print(f"{name}: {shape[0]} rows x {shape[1]} columns")


if __name__ == "__main__":
    main()
