"""Closed windows' shadow check as the controller's feedback (``ShadowFeedback``).

Pure NumPy: the live pipeline (``engine.live.control_loop``) and any other loop that
sees every sensor's readings turn a block of closed windows into one
``ShadowFeedback`` per window. Window ``ids[k]`` starts at block row
``(ids[k] - ids[0]) * slide``; windows are ``window`` rows long.

A window's miss of a sensor is the contract's:

* range contract (``exposure`` None): ``|A(truth) - A(recovered)| > eps``, the whole
  window rebuilt (an indicator);
* crash contract (``exposure`` = m): a failure loses m consecutive rows; of the
  ``window + m - 1`` failure positions touching the window (``Aggregate.exposure_errors``)
  the fraction whose error exceeds eps.

``recovered`` is the block as recovery would rebuild it: the backed-up readings
(``backed``) exact, the others from the reconstruction map in force at their row. The
counterfactual of a backed-up sensor is the same miss with its readings rebuilt from
the rest of the set (``drop_one_rebuild``): the evidence the controller needs before
it releases the sensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engine.aggregates import get_aggregate, leave_out
from engine.errors import ParameterError
from engine.model import GaussianModel
from engine.model.linear import LinearMap, column_indices
from engine.planning.control import ShadowFeedback
from engine.windows import count_unheld


def window_misses(
    truth: np.ndarray,
    recovered: np.ndarray,
    count: int,
    window: int,
    slide: int,
    aggregate: str,
    eps: np.ndarray,
    exposure: int | None,
) -> np.ndarray:
    """(count, n) each window's miss in [0, 1] under the contract (see the module).

    ``truth``, ``recovered``: (B, n) rows of the block; ``eps``: (n,) > 0.
    """
    agg = get_aggregate(aggregate)
    starts = np.arange(count, dtype=np.int64) * slide
    if count and int(starts[-1]) + window > truth.shape[0]:
        raise ParameterError(
            f"the block holds {truth.shape[0]} rows, {count} windows need "
            f"{int(starts[-1]) + window}"
        )
    if exposure is None:
        whole = agg.over_windows(truth, starts, window)
        error = whole - agg.over_windows(recovered, starts, window)
        return (np.abs(error) > eps).astype(float)
    errors = agg.exposure_errors(truth, recovered, starts, window, exposure)  # (W, K, n)
    return np.asarray((np.abs(errors) > eps).mean(axis=1), dtype=float)


def shadow_feedback(
    ids: np.ndarray,
    truth: np.ndarray,
    recovered: np.ndarray,
    backed: np.ndarray,
    *,
    window: int,
    slide: int,
    aggregate: str,
    eps: np.ndarray,
    exposure: int | None,
    measured: np.ndarray | None = None,
    dropped: np.ndarray | None = None,
    kept: np.ndarray | None = None,
) -> list[ShadowFeedback]:
    """One ``ShadowFeedback`` per closed window.

    Parameters
    ----------
    ids : (W,) consecutive window ids; the block starts at window ``ids[0]``.
    truth : (B, n) the windows' readings.
    recovered : (B, n) the rows as recovery rebuilds them (backed-up readings exact).
    backed : (B, n) bool, True where the reading is in the backup.
    measured : (W,) False for a window whose truth is not known (it holds rebuilt rows):
        its misses and counterfactuals are NaN (the controller counts a rebuilt sensor's
        unmeasured window as a miss). None: all measured.
    dropped : (B, n) each backed-up reading as the rest of the set rebuilds it; None: no
        counterfactual.
    kept : (n,) bool, the plan's kept-readings sensors (crash contract, max/min): a crash
        leaves their lost readings out of the window instead of rebuilding them, so their
        misses (and counterfactuals) are scored that way. None: none.
    """
    count = int(np.asarray(ids).size)
    n = truth.shape[1]
    if recovered.shape != truth.shape or backed.shape != truth.shape:
        raise ParameterError(
            f"truth, recovered and backed must share a shape, got {truth.shape}, "
            f"{recovered.shape}, {backed.shape}"
        )
    if count == 0:
        return []
    if kept is not None and exposure is not None and np.any(kept):
        recovered = leave_out(recovered, kept, aggregate)
        dropped = None if dropped is None else leave_out(dropped, kept, aggregate)
    exact = np.where(backed, truth, recovered)
    miss = window_misses(truth, exact, count, window, slide, aggregate, eps, exposure)
    rebuilt = _rebuilt_in_window(backed, count, window, slide)
    counter = None
    if dropped is not None:
        alone = np.where(backed, dropped, recovered)
        counter = window_misses(truth, alone, count, window, slide, aggregate, eps, exposure)
        counter = np.where(rebuilt, np.nan, counter)
    known = np.ones(count, bool) if measured is None else np.asarray(measured, bool)
    out = []
    for k in range(count):
        m = miss[k] if known[k] else np.full(n, np.nan)
        c = None if counter is None else (counter[k] if known[k] else np.full(n, np.nan))
        out.append(ShadowFeedback(int(ids[k]), m, rebuilt[k], c))
    return out


def _rebuilt_in_window(backed: np.ndarray, count: int, window: int, slide: int) -> np.ndarray:
    """(count, n) True where any of the sensor's readings in the window was not backed up."""
    starts = np.arange(count) * slide
    return count_unheld(backed, starts, starts + window) > 0


def drop_one_rebuild(
    model: GaussianModel, backup: Sequence[int]
) -> Callable[[np.ndarray], np.ndarray]:
    """A function of readings ``x`` (B, n): each backed-up sensor's readings rebuilt from
    the rest of ``backup``, (B, n) with NaN outside ``backup``.

    The conditional mean of sensor ``j`` given ``O - {j}`` is
    ``x_j - (P (x_O - mu_O))_j / P_jj`` with ``P = Sigma_OO^{-1}``: one inverse for the
    whole set, computed here once. A constant sensor is its mean.
    """
    backup = list(backup)
    informative = [j for j in backup if not model.constant_[j]]
    constant = [j for j in backup if model.constant_[j]]
    precision = np.linalg.inv(model.cov_[np.ix_(informative, informative)]) if informative else None
    mean = model.mean_

    def rebuild(x: np.ndarray) -> np.ndarray:
        out = np.full(x.shape, np.nan)
        if precision is not None:
            centred = x[:, informative] - mean[informative]
            out[:, informative] = x[:, informative] - (centred @ precision) / np.diag(precision)
        out[:, constant] = mean[constant]
        return out

    return rebuild


def rebuild_under_versions(
    x: np.ndarray,
    group: np.ndarray,
    versions: Sequence[tuple[LinearMap, Sequence[str]]],
    sensors: Sequence[str],
    drop: Callable[[list[int]], Callable[[np.ndarray], np.ndarray]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Readings ``x`` (B, n) as recovery rebuilds them, each row under its plan version.

    ``group[b]`` indexes ``versions``, one ``(map, backup sensors)`` per version (-1: a
    row of no version). Returns ``(recovered, backed, dropped)``: ``recovered`` is ``x``
    with the version's map targets rebuilt (a NaN reading rebuilds NaN); ``backed`` the
    version's backup set; ``dropped`` each backed-up sensor rebuilt from the rest of the
    set (``drop(indices)``, e.g. a ``DropOneRebuilds`` of the model; none without
    ``drop``), NaN elsewhere. A row of no version is left as read, backed nowhere, dropped
    NaN: the caller decides.
    """
    recovered, dropped = np.array(x, float), np.full(x.shape, np.nan)
    backed = np.zeros(x.shape, bool)
    for k in np.unique(group[group >= 0]):
        rows = group == k
        lm, backup = versions[int(k)]
        block = x[rows]
        cols = column_indices(sensors, lm.targets)
        recovered[np.ix_(rows, cols)] = lm.rebuild_columns(block, sensors)[:, cols]
        idx = column_indices(sensors, backup)
        backed[np.ix_(rows, idx)] = True
        if drop is not None:
            dropped[rows] = drop(idx)(block)
    return recovered, backed, dropped


def leave_out_under_versions(
    rebuilt: np.ndarray,
    group: np.ndarray,
    kept: Sequence[Sequence[str]],
    sensors: Sequence[str],
    aggregate: str,
) -> np.ndarray:
    """``rebuilt`` (B, n), in place and returned, with each row's version's kept-readings
    sensors left out (``engine.aggregates.leave_out``): ``group[b]`` indexes ``kept``, one
    list of sensors per version, as in ``rebuild_under_versions``."""
    for k, names in enumerate(kept):
        cols, rows = np.isin(np.asarray(sensors), list(names)), group == k
        if cols.any() and rows.any():
            rebuilt[rows] = leave_out(rebuilt[rows], cols, aggregate)
    return rebuilt


class DropOneRebuilds:
    """``drop_one_rebuild`` per (model, backup set), the ``keep`` most recent kept: one
    inverse of the backed-up block per set, not one per batch (the live control loop's and
    the production job's counterfactuals)."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._cache: dict[tuple[int, tuple[int, ...]], Callable[[np.ndarray], np.ndarray]] = {}

    def __call__(
        self, model: GaussianModel, backup: Sequence[int]
    ) -> Callable[[np.ndarray], np.ndarray]:
        key = (id(model), tuple(backup))
        if key not in self._cache:
            if len(self._cache) >= self.keep:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = drop_one_rebuild(model, backup)
        return self._cache[key]

    def clear(self) -> None:
        self._cache.clear()
