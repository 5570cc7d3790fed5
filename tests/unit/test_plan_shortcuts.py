"""Planning's shortcuts give the answers of the computations they skip."""

from __future__ import annotations

import numpy as np
import pytest

from engine.model import GaussianModel
from engine.planning.calibration import PlanningSpec, back_up_everything
from engine.selection import select_backups


@pytest.mark.parametrize("seed", range(4))
def test_backing_up_everything_is_the_selection_for_zero_targets(seed):
    """The unmeasured plan's set, written down directly, is what the selection finds for
    targets of 0 on the fitted model: every sensor but the constant ones, all within 0,
    also when duplicate sensors made the fit add a ridge."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(200, 3)) @ rng.normal(size=(3, 9)) + 0.2 * rng.normal(size=(200, 9))
    x[:, 2] = 5.0  # constant
    x[:, 7] = x[:, 1] if seed % 2 else x[:, 7]  # a duplicate: near-singular, repaired
    model = GaussianModel().fit(x)
    spec = PlanningSpec(eps=1.0, delta=0.05, window=4, slide=4, aggregate="avg")
    fold = back_up_everything(model, spec, "test")
    reference = select_backups(model.cov_, np.zeros(9))
    assert sorted(fold.selection.backup) == sorted(reference.backup)
    assert fold.selection.feasible and reference.feasible
    np.testing.assert_array_equal(fold.selection.conditional_variance,
                                  reference.conditional_variance)  # fmt: skip
    assert ("ridge" in model.repair_note_) == bool(seed % 2)
