"""Leave-one-out rebuilds and the scores calibration and the backtest read off them.

A sensor outside the backup set ``O`` is rebuilt from ``O``; a sensor in ``O`` as if
it were dropped (from ``O`` without it), so calibration can tell whether relaxing may
remove it. ``calibration_scores`` scores a stretch of history under the plan's contract
(``engine.planning.calibration`` explains both); ``window_residuals`` are the signed
whole-window errors the backtest measures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg

from engine.aggregates import get_aggregate
from engine.errors import ParameterError
from engine.model import GaussianModel
from engine.windows import window_aggregates, window_starts

if TYPE_CHECKING:
    from engine.planning.calibration import PlanningSpec


def dropped_variance(model: GaussianModel, backup: tuple[int, ...]) -> np.ndarray:
    """var_{i|O} for i outside O, and var_{i|O minus i} for i in O: (n,).

    For i in O the leave-one-out variance is ``1 / P_ii`` with ``P`` the inverse
    of ``Sigma_OO`` (informative sensors only): one inversion for all of O.
    """
    var = model.conditional_variance(list(backup)).copy()
    inf, precision = backup_precision(model, backup)
    if inf:
        var[inf] = 1.0 / np.diag(precision)
    return var


def backup_precision(model: GaussianModel, backup: tuple[int, ...]) -> tuple[list[int], np.ndarray]:
    """Informative backed-up sensors and the inverse of their covariance block.

    Constant sensors (zero variance) are left out: they are rebuilt by their mean
    and their leave-one-out variance is 0, as ``conditional_variance`` says.
    """
    inf = [j for j in backup if not model.constant_[j]]
    if not inf:
        return inf, np.zeros((0, 0))
    block = model.cov_[np.ix_(inf, inf)]
    return inf, scipy.linalg.cho_solve(scipy.linalg.cho_factor(block), np.eye(len(inf)))


def calibration_scores(
    x: np.ndarray, model: GaussianModel, backup: tuple[int, ...], spec: PlanningSpec
) -> np.ndarray:
    """(N, n) non-negative scores on ``x``, each against ``spec.eps``, linear in the
    scale of the rebuild's residual.

    Range contract: every window (sliding by one reading) rebuilt whole, its
    ``|error|``. Crash contract: every window and every failure position touching it
    (``w + m - 1`` a window), the lost rows rebuilt (``Aggregate.exposure_scores``),
    for max and min with the residual's sign and with its opposite.
    """
    if spec.exposure is None:
        return np.abs(window_residuals(x, model, backup, spec))
    starts = window_starts(x.shape[0], spec.window, 1)
    recovered = rebuilt(x, model, backup)
    agg = get_aggregate(spec.aggregate)
    rebuilds = [recovered]
    if not agg.sign_blind:
        # The model's error is symmetric; a sign the scored horizons happened to show (a
        # rebuild running low all along never overshoots a max) is not a property of the
        # next one. So max and min also score the mirrored residual: the rebuild
        # ``2 x - recovered``. Benchmark, choose half: a room's light sensor rebuilt low
        # through calibration overshot in 43 % of a week's failures once it ran high.
        rebuilds.append(2.0 * x - recovered)
    scores = agg.exposure_scores_of(x, rebuilds, starts, spec.window, spec.exposure, spec.eps)
    return np.vstack([s.reshape(-1, x.shape[1]) for s in scores])


def kept_scores(x: np.ndarray, spec: PlanningSpec) -> np.ndarray:
    """(N, n) errors on ``x`` of the kept-readings rule (crash contract, max or min): every
    window (sliding by one reading) and failure position touching it, the lost rows left
    out and the window's extreme taken over its kept readings. No model is involved."""
    agg = get_aggregate(spec.aggregate)
    if spec.exposure is None or agg.kept_fill is None:
        raise ParameterError(
            f"only a crash plan for max or min can keep readings, not {spec.aggregate!r} "
            f"with exposure {spec.exposure!r}"
        )
    starts = window_starts(x.shape[0], spec.window, 1)
    left_out = np.full_like(x, agg.kept_fill, dtype=float)
    errors = agg.exposure_errors(x, left_out, starts, spec.window, spec.exposure)
    return np.abs(errors).reshape(-1, x.shape[1])


def window_residuals(
    x: np.ndarray, model: GaussianModel, backup: tuple[int, ...], spec: PlanningSpec, slide: int = 1
) -> np.ndarray:
    """(W, n) signed window residuals (truth - recovered) on ``x``.

    Calibration slides by one reading: more (overlapping) samples.
    """
    truth = window_aggregates(x, spec.window, slide, spec.aggregate)
    recovered = rebuilt(x, model, backup)
    return truth - window_aggregates(recovered, spec.window, slide, spec.aggregate)


def rebuilt(x: np.ndarray, model: GaussianModel, backup: tuple[int, ...]) -> np.ndarray:
    """(T, n) readings of ``x`` as rebuilt from the backup set ``O``.

    Every sensor is rebuilt as in ``dropped_variance``: sensors outside ``O`` from
    ``O``, a sensor in ``O`` from ``O`` without it (what would happen if it were
    dropped).
    """
    recovered = model.linear_map(list(backup)).apply(x[:, list(backup)])
    # A sensor j in O rebuilt from O without j: x_j - (P (x_O - mu_O))_j / P_jj,
    # the leave-one-out regression read off the precision P of Sigma_OO.
    inf, precision = backup_precision(model, backup)
    if inf:
        centred = x[:, inf] - model.mean_[inf]
        recovered[:, inf] = x[:, inf] - (centred @ precision) / np.diag(precision)
    constant = [j for j in backup if model.constant_[j]]
    recovered[:, constant] = model.mean_[constant]
    return recovered
