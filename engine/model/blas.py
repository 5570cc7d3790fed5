"""BLAS threads for the few large products: the Gram product of thousands of sensors.

The engine runs BLAS on one thread (``engine/__init__``): its linear algebra is mostly
many small solves, which contend and slow down on more threads. A product of more than
``LARGE_FLOPS`` floating-point operations (the Gram product of 10,000 sensors over
11,442 rows is 1.1e12) does the opposite: its threads compute independent blocks of
the result, so on a two-core machine it ran 2.0x faster when the other core was idle
(12 s against 23 s) and no slower when another process held it (25 s against 25 s).
Factorisations stay on one thread: a 10,000-sensor Cholesky on two threads was 1.5x
faster on an idle machine but 2.4x slower when another process held a core (its
threads wait for each other at every step). Such products take every core the process
may use, for their duration only. An operator who set ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` keeps that setting for every call.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

from threadpoolctl import threadpool_limits

import engine

# About half a second of one core. Smaller products gain little time on two threads
# (a 1,000-sensor one: 30 ms) and a 200-sensor one is slower, while every threaded
# call competes with other processes for the cores.
LARGE_FLOPS = 2e10


def blas_threads(flops: float) -> AbstractContextManager[object]:
    """Context for one matrix product of about ``flops`` operations: every usable core
    when the product is large and the operator chose no thread count, else no change."""
    if flops < LARGE_FLOPS or engine.BLAS_THREADS_CHOSEN:
        return nullcontext()
    return threadpool_limits(limits=_usable_cores(), user_api="blas")


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
