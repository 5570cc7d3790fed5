"""Time-consistent replay: plan on a prefix of the file, stream the rows after it.

A plan is fitted on past rows and governs the rows that come after its fit
period. The live pipeline (app and ``simulate``) therefore plans on rows
``[0, fit_rows)`` and replays ``[fit_rows, total_rows)``: the stream a plan is
measured on never lies before (or inside) the rows it learnt from. The replayed
stream numbers its readings from 0 (``seq``); file row = ``seq + fit_rows``.

Pure Python, no PySpark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.data import SensorHistory
from engine.errors import ParameterError
from engine.planning.folds import MIN_HISTORY_ROWS

DEFAULT_FIT_FRACTION = 0.5  # plan (and backtest) on the first half, replay the second


@dataclass(frozen=True)
class ReplaySplit:
    """Rows ``[0, fit_rows)`` plan the stream; rows ``[fit_rows, total_rows)`` are replayed."""

    total_rows: int
    fit_rows: int

    def __post_init__(self) -> None:
        if not 0 < self.fit_rows < self.total_rows:
            raise ParameterError(
                f"the plan's rows must leave rows to replay: need 0 < fit_rows < "
                f"{self.total_rows}, got {self.fit_rows!r}"
            )

    @property
    def replay_rows(self) -> int:
        return self.total_rows - self.fit_rows

    def fit(self, history: SensorHistory) -> SensorHistory:
        """The rows the plan is fitted (and backtested) on."""
        self._check(history)
        return history.rows(0, self.fit_rows)

    def replay(self, history: SensorHistory) -> SensorHistory:
        """The rows the live pipeline streams (reading ``seq`` 0 = file row ``fit_rows``)."""
        self._check(history)
        return history.rows(self.fit_rows, self.total_rows)

    def describe(self, history: SensorHistory, fitted_rows: int | None = None) -> str:
        """One line for a page or a report: which rows plan, which are replayed.
        ``fitted_rows``: the rows the plan itself learnt from (``BackupPlan.history_rows``,
        the last of the prefix), when fewer than the prefix its backtest runs over."""
        t, last = history.times, self.fit_rows - 1
        first = 0 if fitted_rows is None else max(0, self.fit_rows - fitted_rows)
        fitted = f"plan fitted on rows {first}-{last} ({_day(t[first])} to {_day(t[last])})"
        if first > 0:
            fitted += f", backtested on rows 0-{last}"
        return (
            f"{fitted}; replay of the {self.replay_rows} rows after it "
            f"({_day(t[self.fit_rows])} to {_day(t[-1])})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_rows": self.total_rows,
            "fit_rows": self.fit_rows,
            "replay_rows": self.replay_rows,
            "first_replay_row": self.fit_rows,
        }

    def _check(self, history: SensorHistory) -> None:
        if len(history.times) != self.total_rows:
            raise ParameterError(
                f"the split is for {self.total_rows} rows, the history has {len(history.times)}"
            )


def split_for_replay(
    total_rows: int, replay_rows: int | None = None, fit_fraction: float = DEFAULT_FIT_FRACTION
) -> ReplaySplit:
    """Replay the last ``replay_rows`` rows (default: all after ``fit_fraction`` of the file)."""
    if not 0.0 < fit_fraction < 1.0:
        raise ParameterError(f"fit_fraction must be in (0, 1), got {fit_fraction!r}")
    most = total_rows - MIN_HISTORY_ROWS
    if replay_rows is not None and not 0 < replay_rows <= most:
        raise ParameterError(
            f"rows to replay must be in [1, {most}] (at least {MIN_HISTORY_ROWS} rows before "
            f"them plan the stream), got {replay_rows!r}"
        )
    fit = total_rows - replay_rows if replay_rows else int(total_rows * fit_fraction)
    return ReplaySplit(total_rows, fit)


def _day(t: Any) -> str:
    return str(t)[:10]
