"""A window's mergeable partial state (river-style), field by field.

An aggregate (``engine.aggregates``) names the numbers it keeps of a window's
readings: its ``fields``, besides the count ``n`` every state keeps. Each field is
folded over readings and merged between partials by a sum, a max or a min of a power
of the value (``Field``). Pandas, NumPy and Spark all speak those three reductions,
so the production job's executors (Spark) and driver (pandas), the live pipeline and
the disorder ledger keep any aggregate's state without knowing which it is; here are
the fields and the pandas folds and merges of states kept as frame columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COUNT", "Field", "HasState", "Reduce", "State", "grouped_partials", "merged_partials"]

Reduce = Literal["sum", "max", "min"]
State = dict[str, Any]  # field name -> a number, or an array/Series of them (one per window)


@dataclass(frozen=True)
class Field:
    """One number of a partial state: each reading adds ``value ** power`` to it by
    ``reduce`` (``power`` 0: one per reading, a count), and two partials merge by
    ``reduce`` too. Readings without a value (NaN) are left out."""

    name: str
    reduce: Reduce
    power: int = 1

    def fold(self, x: np.ndarray, axis: int = 0) -> np.ndarray:
        """This field of the readings ``x`` along ``axis``; NaN for a max/min of none."""
        present = ~np.isnan(x)
        if self.reduce == "sum":
            if self.power == 0:
                return present.sum(axis=axis).astype(float)
            return np.where(present, x**self.power, 0.0).sum(axis=axis)
        lifted = x if self.power == 1 else x**self.power
        if self.reduce == "max":
            out = np.where(present, lifted, -np.inf).max(axis=axis, initial=-np.inf)
        else:
            out = np.where(present, lifted, np.inf).min(axis=axis, initial=np.inf)
        return np.where(present.any(axis=axis), out, np.nan)

    @property
    def empty(self) -> float:
        """This field of no reading: 0 for a sum, NaN for a max or a min."""
        return 0.0 if self.reduce == "sum" else math.nan

    def add(self, old: float, value: float) -> float:
        """``old`` with one more reading ``value`` (NaN: none); ``fold`` of one reading at
        a time, in plain floats (the disorder ledger adds late readings one by one)."""
        if math.isnan(value):
            return old
        lifted = 1.0 if self.power == 0 else value**self.power
        if self.reduce == "sum":
            return old + lifted
        if math.isnan(old):
            return lifted
        return max(old, lifted) if self.reduce == "max" else min(old, lifted)

    def merge(self, a: Any, b: Any) -> Any:
        """Two partials' values of this field as one (NaN-skipping for max/min)."""
        if self.reduce == "sum":
            return a + b
        return np.fmax(a, b) if self.reduce == "max" else np.fmin(a, b)


COUNT = Field("n", "sum", 0)  # readings with a value: part of every aggregate's state


class HasState(Protocol):
    """What the frame helpers ask of an aggregate: its state's fields, ``n`` first."""

    @property
    def state_fields(self) -> tuple[Field, ...]: ...


def grouped_partials(
    frame: pd.DataFrame, keys: list[str], value: str, aggregate: HasState
) -> pd.DataFrame:
    """The partial state of each group of readings: ``keys`` and one column per state
    field, from ``frame[value]`` (NaN: no reading)."""
    import pandas as pd  # here, not at import: the CLI's parser reads ``engine.aggregates``

    x = frame[value].astype(float)
    lifted = {
        f.name: x.notna().astype(np.int64) if f.power == 0 else x**f.power
        for f in aggregate.state_fields
    }
    parts = pd.DataFrame({**{k: frame[k] for k in keys}, **lifted})
    return merged_partials(parts, keys, aggregate)


def merged_partials(
    frame: pd.DataFrame,
    keys: list[str],
    aggregate: HasState,
    prefixes: tuple[str, ...] = ("",),
    more: Mapping[str, Reduce] | None = None,
) -> pd.DataFrame:
    """One row per ``keys`` of partial-state rows: each field merged by its reduction.

    ``prefixes``: the state's columns appear once per prefix (``rebuilt_n``, ...);
    ``more``: other columns, each with its reduction. Max and min skip NaN; a sum of
    none is 0.
    """
    spec = {
        prefix + f.name: (prefix + f.name, f.reduce)
        for prefix in prefixes
        for f in aggregate.state_fields
    }
    spec |= {c: (c, reduce) for c, reduce in (more or {}).items()}
    return frame.groupby(keys, as_index=False, sort=True).agg(**spec)
