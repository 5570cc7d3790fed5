"""Which folds a rolling-origin backtest scores: its settings, their origins and the
fold cap a plan uses by default. NumPy only, so the CLI's parser can read the cap."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import ParameterError

__all__ = ["DEFAULT_BACKTEST_FOLDS", "MIN_HISTORY_ROWS", "BacktestSettings", "fold_origins"]

MIN_HISTORY_ROWS = 4  # the fewest rows a plan (or a backtest's fit) learns from

# Backtest folds when the caller sets no cap (cost): 40 horizons of rebuilt windows, and
# a default plan of 132 sensors x 35,000 rows in ~10 s of CPU (Beijing, bench protocol).
DEFAULT_BACKTEST_FOLDS = 40


@dataclass(frozen=True)
class BacktestSettings:
    """Rolling origin: fit on the rows before ``t``, test the next ``step`` rows.

    The first origin has ``history`` rows before it. With ``max_history`` the fit
    grows with ``t`` (all earlier rows, at most ``max_history``), as a plan made
    at ``t`` with the default history would; without it every fit has ``history``.
    """

    history: int = 336
    step: int | None = None  # None: the spec's horizon
    max_folds: int | None = None  # None: every fold; else evenly spaced, ending at the last
    max_history: int | None = None

    def __post_init__(self) -> None:
        if self.history < MIN_HISTORY_ROWS:
            raise ParameterError(
                f"history must be >= {MIN_HISTORY_ROWS} rows, got {self.history!r}"
            )
        if self.step is not None and self.step < 1:
            raise ParameterError(f"step must be >= 1 row, got {self.step!r}")
        if self.max_folds is not None and self.max_folds < 1:
            raise ParameterError(f"max_folds must be >= 1, got {self.max_folds!r}")
        if self.max_history is not None and self.max_history < self.history:
            raise ParameterError(
                f"max_history must be >= history ({self.history}), got {self.max_history!r}"
            )

    def fit_rows(self, t: int) -> int:
        """Rows before origin ``t`` the fold's plan learns from."""
        return min(t, self.max_history) if self.max_history else self.history


def fold_origins(
    n_rows: int, window: int, settings: BacktestSettings, horizon: int | None = None
) -> np.ndarray:
    """Start rows ``t`` of the test slices: (F,) int."""
    step = settings.step or horizon or window
    if step < window:
        raise ParameterError(f"step ({step}) must be at least one window ({window})")
    origins = np.arange(settings.history, n_rows - step + 1, step)
    if settings.max_folds is not None and origins.size > settings.max_folds:
        pick = np.linspace(0, origins.size - 1, settings.max_folds).round().astype(int)
        origins = origins[np.unique(pick)]
    return origins
