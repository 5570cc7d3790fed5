"""Lacuna engine: approximate fault tolerance for sensor streams.

Pure Python. Importing this package never imports Streamlit and never starts a
JVM; PySpark is imported lazily inside ``engine.stream`` functions.
"""

import os

# The engine's linear algebra is many small solves (n x n with n in the tens to
# hundreds). Multi-threaded BLAS makes those ~10x slower on a 2-core machine
# (threads spin and contend), so default to one thread unless told otherwise.
# This only takes effect if numpy has not been imported yet. The Gram product of
# thousands of sensors takes every core for its duration (``engine.model.blas``),
# unless the operator chose a thread count; factorisations stay on one thread.
_BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
BLAS_THREADS_CHOSEN = any(_var in os.environ for _var in _BLAS_VARS)
for _var in _BLAS_VARS:
    os.environ.setdefault(_var, "1")

from engine.errors import (  # noqa: E402
    ConfigError,
    DataError,
    EngineError,
    NotFittedError,
    ParameterError,
    PipelineError,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DataError",
    "EngineError",
    "NotFittedError",
    "ParameterError",
    "PipelineError",
    "StoreError",
    "__version__",
]
