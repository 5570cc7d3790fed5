"""The Gaussian model of the sensors and the linear map that rebuilds the unobserved ones.

``gaussian``: mergeable moment statistics and ``GaussianModel`` (fit, conditionals).
``linear``: ``LinearMap`` (intercept + coefficients over the backup sensors) and
the window helpers recovery scoring uses.
"""

from engine.model.gaussian import GaussianModel, MomentStats
from engine.model.linear import LinearMap, column_indices

__all__ = ["GaussianModel", "LinearMap", "MomentStats", "column_indices"]
