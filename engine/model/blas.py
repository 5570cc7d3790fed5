"""BLAS threads for the few large calls: Gram products and factorisations of thousands of
sensors.

The engine runs BLAS on one thread (``engine/__init__``): its linear algebra is mostly
many small solves, which contend and slow down on more threads. A call of more than
``LARGE_FLOPS`` floating-point operations (a 10,000-sensor Gram product is 1.1e12, its
Cholesky factorisation 3.3e11) does the opposite: on this project's two-core machines
it runs about twice as fast on both cores. Such calls take every core the process may
use, for their duration only. An operator who set ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` keeps that setting for every call.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

from threadpoolctl import threadpool_limits

import engine

# About half a second of one core: below it the threads' start-up and contention eat
# the gain (measured: a 2,000-sensor Cholesky is no faster on two cores, a 4,000-sensor
# one 1.6x faster).
LARGE_FLOPS = 2e10


def blas_threads(flops: float) -> AbstractContextManager[object]:
    """Context for one BLAS or LAPACK call of about ``flops`` operations: every usable
    core when the call is large and the operator chose no thread count, else no change."""
    if flops < LARGE_FLOPS or engine.BLAS_THREADS_CHOSEN:
        return nullcontext()
    return threadpool_limits(limits=_usable_cores(), user_api="blas")


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
