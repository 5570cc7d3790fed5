"""Small helpers shared by the benchmarks: timing, JSON output, random covariances."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
STRUCTURES: tuple[str, ...] = ("factor", "cluster", "toeplitz", "near_singular")
ROOT = Path(__file__).resolve().parents[1]


def datasets_dir() -> Path:
    """The reference data sets the benchmarks read: ``$LACUNA_DATASETS`` when set, else
    ``../shared/datasets`` beside the repository root."""
    given = os.environ.get("LACUNA_DATASETS")
    return Path(given) if given else ROOT.parent / "shared" / "datasets"


def beijing_wide() -> Path:
    """The 132 Beijing channels (35,064 hourly rows), wide: the throughput benchmarks' data."""
    return datasets_dir() / "beijing_multisite_aq" / "wide.csv"


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """A temporary git worktree of this repository at ``ref`` (removed afterwards): the
    checkout a ``--before REF`` measurement runs in."""
    with tempfile.TemporaryDirectory(prefix="lacuna-before-") as tmp:
        where = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref],
                       check=True, capture_output=True)  # fmt: skip
        try:
            yield where
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
                           check=False, capture_output=True)  # fmt: skip


def time_call(fn: Callable[[], T], repeat: int = 1) -> tuple[T, float]:
    """Run ``fn`` ``repeat`` times; return its last result and the best time in seconds."""
    best = float("inf")
    result: Any = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def print_json(obj: dict[str, Any]) -> None:
    """Print one JSON object on stdout (numpy scalars converted)."""

    def convert(x: Any) -> Any:
        if isinstance(x, np.integer):
            return int(x)
        if isinstance(x, np.floating):
            return float(x)
        if isinstance(x, np.ndarray):
            return x.tolist()
        raise TypeError(f"cannot serialise {type(x).__name__}")

    json.dump(obj, sys.stdout, indent=2, default=convert)
    sys.stdout.write("\n")


def random_covariance(
    n: int, rng: np.random.Generator, structure: str = "factor", scaled: bool = True
) -> np.ndarray:
    """A seeded random (n, n) covariance with the named correlation structure.

    ``factor``: a few latent factors plus sensor noise; ``cluster``: groups of
    sensors correlated inside their group; ``toeplitz``: AR(1)-like correlation
    decaying with distance along a randomly ordered line; ``near_singular``:
    factors with tiny noise and some duplicated sensors (smallest eigenvalue ~0).
    With ``scaled`` each sensor gets a random scale (variances differ by up to
    ~50x); otherwise the result is a correlation-like matrix (unit-ish variances).
    """
    if structure == "factor":
        k = int(rng.integers(2, max(3, n // 4) + 1))
        load = rng.normal(size=(n, k)) * rng.uniform(0.3, 1.0, size=k)
        corr = load @ load.T + np.diag(rng.uniform(0.05, 0.6, size=n))
    elif structure == "cluster":
        labels = rng.integers(0, max(2, n // 6), size=n)
        rho = rng.uniform(0.7, 0.99, size=labels.max() + 1)
        same = labels[:, None] == labels[None, :]
        corr = np.where(same, np.sqrt(np.outer(rho[labels], rho[labels])), 0.0)
        common = 0.1 * _low_rank(n, 2, rng)  # weak correlation across groups
        corr += common
        np.fill_diagonal(corr, 1.0 + np.diag(common))  # unit noise share: PSD by construction
    elif structure == "toeplitz":
        rho = rng.uniform(0.85, 0.99)
        pos = rng.permutation(n)
        corr = rho ** np.abs(pos[:, None] - pos[None, :]).astype(float)
    elif structure == "near_singular":
        k = int(rng.integers(2, max(3, n // 3) + 1))
        load = rng.normal(size=(n, k))
        dup = rng.choice(n, size=max(1, n // 8), replace=False)
        load[dup] = load[rng.integers(0, n, size=dup.size)]
        corr = load @ load.T + 1e-9 * np.eye(n)
    else:
        raise ValueError(f"unknown structure {structure!r}; expected one of {STRUCTURES}")
    scale = np.exp(rng.uniform(-1.0, 1.0, size=n)) if scaled else np.ones(n)
    cov = corr * np.outer(scale, scale)
    return (cov + cov.T) / 2.0


def _low_rank(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    load = rng.normal(size=(n, k)) / np.sqrt(k)
    return load @ load.T
