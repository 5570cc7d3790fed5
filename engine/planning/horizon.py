"""Forward-horizon calibration: how a plan kept for ``horizon`` rows really errs.

Why: a plan is fitted once and then used for the whole horizon before it is
re-planned. Errors grow with the distance from the fit (drift, seasons,
incidents), so a calibration that scores each held-out stretch with a model
that saw the data around it (cross-validation) is optimistic. Here every
scored stretch is scored as it will be used: the model is fitted on all rows
*before* an origin ``o`` and scores every window of ``[o, o + horizon)``.

Origins are ``T - j * horizon`` (j = 1, 2, ...) down to ``first_fit_rows``: the
most recent horizons, as many as the history holds. The per-sensor quantile is
split-conformal: with ``N`` scored windows the ``ceil((N + 1)(1 - a))``-th
smallest error; when that rank exceeds ``N`` the quantile is infinite, the
sensor's miss rate cannot be measured at level ``a``, and it is backed up.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import stdtrit

from engine.errors import ParameterError
from engine.model import GaussianModel, MomentStats

HISTORY_READINGS_CAP = 1_000_000  # rows x sensors learnt from by default (cost, not accuracy)
HORIZON_MIN_WINDOWS = 4  # a default horizon spans at least this many windows
HORIZON_MAX_FRACTION = 4  # ... and at most 1/4 of the history
SECONDS_PER_DAY = 86_400.0
# Calibration scores at most the most recent 16 horizons (cost): every fit still uses
# all rows before its origin, only the oldest horizons are not scored.
MAX_SCORED_HORIZONS = 16


def default_horizon(n_rows: int, window: int, sampling_interval_s: float) -> int:
    """Rows a plan is used before re-planning when not told: about one day.

    Whole windows covering one day of readings, at least ``HORIZON_MIN_WINDOWS``
    windows, at most a quarter of the history (so calibration can score several
    horizons), never less than one window. Derived from the data's sampling
    interval and the window only.
    """
    per_day = SECONDS_PER_DAY / sampling_interval_s if sampling_interval_s > 0 else n_rows
    windows = max(math.ceil(per_day / window), HORIZON_MIN_WINDOWS)
    fraction_cap = (n_rows // HORIZON_MAX_FRACTION) // window
    return int(window * max(1, min(windows, fraction_cap)))


def first_fit_rows(n_sensors: int, window: int, horizon: int) -> int:
    """Rows the earliest calibration model is fitted on: a horizon, and enough for a model."""
    return max(horizon, n_sensors + 2, 2 * window)


def scored_horizons(window: int, horizon: int, level: float = 0.965) -> int:
    """Fewest horizons calibration scores for a finite split-conformal ``level`` quantile:
    ``N >= level / (1 - level)`` windows sliding by one reading, ``horizon - window + 1``
    a horizon. Calibration scores at least this many, ``MAX_SCORED_HORIZONS`` when more
    (a small delta, or a horizon of about one window, needs more)."""
    windows = math.ceil(level / (1.0 - level) - 1e-9)
    per_horizon = max(horizon - window + 1, 1)
    return max(1, math.ceil(windows / per_horizon))


def calibration_rows(n_sensors: int, window: int, horizon: int, level: float = 0.965) -> int:
    """Fewest history rows forward-horizon calibration needs: a first fit
    (``first_fit_rows``) and ``scored_horizons`` horizons."""
    horizons = scored_horizons(window, horizon, level)
    return first_fit_rows(n_sensors, window, horizon) + horizons * horizon


def default_history(n_rows: int, n_sensors: int, window: int, horizon: int) -> int:
    """Rows to learn from when not told: all of them, up to the cost cap.

    The cap is ``HISTORY_READINGS_CAP`` readings (rows x sensors), never below
    what calibration needs for the window and horizon (so a wide network keeps a
    calibratable history), never above the file.
    """
    need = calibration_rows(n_sensors, window, horizon)
    cap = max(HISTORY_READINGS_CAP // max(n_sensors, 1), need)
    return int(min(n_rows, cap))


def horizon_origins(n_rows: int, first_fit: int, horizon: int) -> list[int]:
    """Ascending origins ``T - j * horizon >= first_fit``; empty when none fits.

    Horizons do not overlap: overlapping origins (every quarter horizon) were
    measured on the benchmark's "choose" half and did not pay (savings 31 % -> 31 %).
    """
    if horizon < 1:
        raise ParameterError(f"horizon must be >= 1 row, got {horizon!r}")
    return sorted(range(n_rows - horizon, first_fit - 1, -horizon))


def forward_models(
    x: np.ndarray, origins: list[int], sensors: tuple[str, ...]
) -> list[GaussianModel]:
    """For each origin ``o`` the model fitted on ``x[:o]`` (merged moment statistics)."""
    models = []
    stats, start = None, 0
    for o in origins:
        part = MomentStats.from_array(x[start:o])
        stats = part if stats is None else stats.merge(part)
        models.append(GaussianModel().fit_stats(stats, sensors))
        start = o
    return models


def conformal_quantile(errors: np.ndarray, level: float) -> np.ndarray:
    """(n,) split-conformal ``level`` quantile of ``errors`` (N, n); inf when N is too small."""
    n_scores = errors.shape[0]
    rank = math.ceil((n_scores + 1) * level)
    if rank > n_scores or n_scores == 0:
        return np.full(errors.shape[1], np.inf)
    out = np.empty(errors.shape[1])
    for j in range(errors.shape[1]):  # a column at a time: 2.5x faster than axis=0 on (N, n)
        out[j] = np.partition(errors[:, j], rank - 1)[rank - 1]
    return out


def prediction_bound(errors: np.ndarray, independent: int, level: float) -> np.ndarray:
    """(n,) Gaussian ``level`` prediction bound on the next |error| from ``errors`` (N, n).

    ``rms * t_{p}(m - 1) * sqrt(1 + 1 / m)`` with ``p = (1 + level) / 2`` (two-sided)
    and ``m = independent`` the number of effectively independent errors among the
    N (sliding windows overlap, so m is about the disjoint windows' count). For a
    zero-mean Gaussian error of unknown scale it is the exact bound; with thin
    evidence (small m) it widens, and below m = 2 it is infinite (backed up).
    """
    if independent < 2 or errors.shape[0] == 0:
        return np.full(errors.shape[1], np.inf)
    rms = np.sqrt(np.mean(np.square(errors), axis=0))
    m = float(independent)
    return rms * float(stdtrit(m - 1, 0.5 + level / 2) * np.sqrt(1 + 1 / m))
