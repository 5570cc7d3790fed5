"""Numeric times that read as 1970: said, or refused when they are certainly dates.

A time column of plain numbers is read as a count of a unit since 1970-01-01
(``LoadOptions.numeric_time_unit``, ``--time-unit``; seconds unless said). Two
spreadsheet habits read so give a plan with exit 0 and nothing right in it:

- Excel serial day numbers (45352.041667 is 2024-03-01 01:00): as seconds they are
  1970-01-01 12:35, one reading every 0.04 s;
- YYYYMMDD dates (20230101): as seconds 1970-08-23 03:28, a reading every 1 s with
  jumps of 70 s at a month's end.

Every numeric time column whose times all fall before 1980 gets a note (the CLI prints
it as a ``warning:`` line, ``DataReport.early_times``): a relative clock (seconds since
the start of a test) is read correctly as to its intervals, but its dates are 1970's.
When the unit was not said, numbers that are certainly dates are refused instead: every
value a valid YYYYMMDD date (no unit reads them: months would be 100 apart), or Excel's
day numbers of 1954..2119 read at less than a second apart. A unit said
(``--time-unit s``) is taken as meant: the note, no refusal.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.errors import DataError

EARLY_TIMES = "before 1980"  # the note's words, by which ``DataReport.early_times`` finds it
YEAR_1980_NS = 315_532_800 * 10**9
EXCEL_DAYS = (20_000.0, 80_000.0)  # Excel's day numbers of 1954-10-03 .. 2119-01-10
EXCEL_DAY_ZERO = pd.Timestamp("1899-12-30")  # Excel's day 0 (it counts 1900-02-29)
YYYYMMDD = (19_000_101, 21_001_231)


def check_numeric_times(
    source: str, name: str, times: np.ndarray, unit_ns: int, words: str, stated: bool
) -> str | None:
    """The note for numeric times read as ``words`` since 1970 (``times`` (T,) int64 ns,
    each ``unit_ns`` ns a unit) that all fall before 1980, else None; ``DataError`` when
    the unit was not ``stated`` and the numbers are certainly dates."""
    if not times.size or int(times.max()) >= YEAR_1980_NS:
        return None
    numbers = times / unit_ns
    looks, certain = _looks_like_dates(numbers, times)
    first, last = _iso(times.min()), _iso(times.max())
    if certain and not stated:
        raise DataError(
            f"{source}: column {name!r} holds numbers that look like {looks}, not "
            f"{words} since 1970-01-01 (read so, they fall on {first} .. {last}): write the "
            "times as dates, or set the numeric time unit (--time-unit on the command line) "
            "to read them as numbers anyway"
        )
    said = f"; they look like {looks}" if looks else ""
    return (
        f"numeric time column {name!r} read as {words} since 1970-01-01 puts the readings "
        f"at {first} .. {last}, {EARLY_TIMES}{said}: if they are not {words} since "
        "1970-01-01, set their unit (--time-unit on the command line, the numeric time unit "
        "option) or write the times as dates"
    )


def _looks_like_dates(numbers: np.ndarray, times: np.ndarray) -> tuple[str, bool]:
    """What the numbers look like ("" when nothing) and whether reading them as a count
    of the unit is certainly wrong."""
    distinct = np.unique(numbers)
    if _all_yyyymmdd(distinct):
        first = int(distinct[0])
        return f"YYYYMMDD dates ({first} is {_yyyymmdd(first).date()})", distinct.size > 1
    low, high = EXCEL_DAYS
    if low <= distinct[0] and distinct[-1] <= high:
        day = EXCEL_DAY_ZERO + pd.Timedelta(days=float(distinct[0]))
        step = np.median(np.diff(np.unique(times))) / 1e9 if distinct.size > 1 else np.inf
        looks = f"Excel serial day numbers ({distinct[0]:g} is {day.isoformat(sep=' ')})"
        return looks, bool(step < 1.0)
    return "", False


def _all_yyyymmdd(distinct: np.ndarray) -> bool:
    """Every value a whole number that is a calendar date written YYYYMMDD."""
    low, high = YYYYMMDD
    if not (low <= distinct[0] and distinct[-1] <= high and np.all(distinct == np.round(distinct))):
        return False
    whole = distinct.astype(np.int64)
    month, day = whole // 100 % 100, whole % 100
    if not (np.all((month >= 1) & (month <= 12)) and np.all((day >= 1) & (day <= 31))):
        return False
    parsed = pd.to_datetime(pd.Series(whole.astype(str)), format="%Y%m%d", errors="coerce")
    return not parsed.isna().any()  # no 20230231


def _yyyymmdd(value: int) -> pd.Timestamp:
    return pd.Timestamp(year=value // 10_000, month=value // 100 % 100, day=value % 100)


def _iso(ns: object) -> str:
    return pd.Timestamp(int(ns)).isoformat()  # type: ignore[call-overload]
