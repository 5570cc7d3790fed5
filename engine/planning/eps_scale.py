"""Planning in eps units: per-sensor tolerances as a per-sensor change of units.

With one eps per sensor, dividing sensor ``i``'s readings by ``eps_i`` turns
every tolerance into 1. Window avg/sum/max/min commute with a positive
per-sensor scaling, the Gaussian conditional mean is equivariant under it and
the conditional variance scales by ``eps_i^2``, so a plan made in eps units and
converted back is a plan for the per-sensor tolerances. Selection is *not*
invariant to units (greedy adds up excess variances, the paper's method takes
their maximum), so it runs in eps units: each sensor weighed by its tolerance.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from engine.model import GaussianModel
from engine.planning.calibration import FoldPlan
from engine.selection import Method, Selection, select_backups


def fold_in_units(fold: FoldPlan, factors: np.ndarray) -> FoldPlan:
    """A fold planned in eps units, back in the sensors' units (``factors`` = eps, (n,))."""
    sel = fold.selection
    return replace(
        fold,
        model=fold.model.rescaled(factors),
        selection=replace(
            sel,
            conditional_variance=sel.conditional_variance * factors**2,
            targets=np.asarray(sel.targets) * factors**2,
        ),
        targets=fold.targets * factors**2,
    )


def select_in_eps_units(
    model: GaussianModel, targets: np.ndarray, method: Method, eps: np.ndarray | None
) -> Selection:
    """``select_backups`` with each sensor's variance measured in units of its ``eps`` (n,).

    ``eps=None`` (one eps for all): ``select_backups`` on the model as it is.
    """
    if eps is None:
        return select_backups(model.cov_, targets, method)
    e = np.asarray(eps, dtype=float)
    sel = select_backups(model.cov_ / np.outer(e, e), targets / e**2, method)
    return replace(
        sel,
        conditional_variance=sel.conditional_variance * e**2,
        targets=np.asarray(sel.targets) * e**2,
    )
