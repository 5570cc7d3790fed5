"""What a production job's record says of itself: the results of batches whose metrics
are not written yet, and the parts of the record found missing. Read by ``status``."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from engine.backup.dataset import RESULTS_SUFFIXES, batch_files, batch_range
from engine.errors import DataError

# a checked window: rebuilt and true aggregates both numbers (a NaN reading leaves its
# window unchecked), as the job's monitor counts them
CHECKED = "NOT backed_up AND error IS NOT NULL AND NOT isnan(error)"


def results_after(folder: Path, newest: int) -> tuple[int, int]:
    """(batches, checked pairs) of the results of batches after ``newest``, the newest
    batch with metrics: the results are written first, so one such batch is the one
    being written."""
    later = [
        f
        for name, f in batch_files(folder, RESULTS_SUFFIXES, marked=False)
        if (span := batch_range(name)) is not None and span[0] > newest
    ]
    if not later:
        return 0, 0
    con = duckdb.connect()
    try:
        (pairs,) = con.execute(
            f"SELECT count(*) FROM read_parquet(?) WHERE {CHECKED}", [[str(f) for f in later]]
        ).fetchone() or (0,)
    except duckdb.Error as err:
        raise DataError(f"the job's results under {folder} are unreadable: {err}") from None
    finally:
        con.close()
    return len({f.parent for f in later}), int(pairs)


def find_record_gaps(
    batches: pd.DataFrame, rates: pd.DataFrame, in_flight: tuple[int, int] = (0, 0)
) -> tuple[str, ...]:
    """What the metrics and the results say of each other: each batch's metrics count
    the (window, rebuilt sensor) pairs its results hold (``BatchWriter._report``), so their
    totals agree unless files are missing. The results are written before the metrics:
    ``in_flight`` (batches, pairs) are the results after the newest batch with metrics,
    one batch of them the one being written, left out of the comparison."""
    later, later_pairs = in_flight
    results = int(rates["windows"].sum()) - (later_pairs if later <= 1 else 0)
    pairs = pd.to_numeric(batches["rebuilt_pairs"], errors="coerce")
    if pairs.isna().any():  # a job before the count: nothing to compare
        return ()
    counted = int(pairs.sum())
    if results < counted:
        return (
            f"the job's metrics count {counted:,} checked (window, rebuilt sensor) pairs and "
            f"its results hold {results:,}: results under _lacuna/results are missing, and "
            "the live rates and the monitor's figures here leave their windows out",
        )
    if results > counted:
        return (
            f"the job's results hold {results:,} checked (window, rebuilt sensor) pairs and "
            f"its metrics count {counted:,}"
            + (" (no metrics at all)" if batches.empty else "")
            + ": metrics under _lacuna/metrics are missing, and the micro-batch and reading "
            "counts here leave those batches out",
        )
    return ()
