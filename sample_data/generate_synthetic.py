"""Synthetic correlated sensors with an optional regime change (drift).

Each sensor belongs to one of ``n_clusters`` clusters. A cluster shares a latent
AR(1) factor; a sensor reads ``offset + scale * (loading * factor + noise)``
where its own noise is AR(1) too, so errors are autocorrelated in time like real
sensor data. Factors and noise have unit stationary variance before scaling.

With ``drift_at`` (a fraction of the rows), the correlation structure changes
from that row on: the second half of cluster 0 flips the sign of its loading
(those sensors become anti-correlated with the rest of the cluster) and the
noise of the last cluster grows three-fold. A model learned before the change is
stale after it, which is what the drift checks must catch.

Usage::

    python sample_data/generate_synthetic.py --sensors 16 --rows 2000 --clusters 4 \
        --ar 0.95 --drift-at 0.6 --seed 7 --out sample_data/synthetic_drift.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

START = pd.Timestamp("2024-01-01 00:00:00")
INTERVAL = pd.Timedelta(minutes=1)
NOISE_SD = (0.15, 0.35)  # per-sensor noise level relative to its loading
DRIFT_NOISE_FACTOR = 3.0


def simulate_ar1(n_rows: int, n_series: int, coef: float, rng: np.random.Generator) -> np.ndarray:
    """(n_rows, n_series) AR(1) series with unit stationary variance, started stationary."""
    innovation_sd = np.sqrt(1.0 - coef**2)
    out = np.empty((n_rows, n_series))
    out[0] = rng.standard_normal(n_series)
    shocks = rng.standard_normal((n_rows, n_series)) * innovation_sd
    for t in range(1, n_rows):
        out[t] = coef * out[t - 1] + shocks[t]
    return out


def check_arguments(
    n_sensors: int, n_rows: int, n_clusters: int, ar_coef: float, drift_at: float | None
) -> None:
    """Raise ``ValueError`` naming the first bad argument."""
    if n_sensors < 2:
        raise ValueError(f"n_sensors must be >= 2, got {n_sensors!r}")
    if n_rows < n_sensors + 2:
        raise ValueError(f"n_rows must be >= n_sensors + 2 = {n_sensors + 2}, got {n_rows!r}")
    if not 1 <= n_clusters <= n_sensors:
        raise ValueError(f"n_clusters must be in [1, n_sensors={n_sensors}], got {n_clusters!r}")
    if not 0.0 <= ar_coef < 1.0:
        raise ValueError(f"ar_coef must be in [0, 1), got {ar_coef!r}")
    if drift_at is not None and not 0.0 < drift_at < 1.0:
        raise ValueError(f"drift_at must be a fraction in (0, 1) or None, got {drift_at!r}")


def generate(
    n_sensors: int = 16,
    n_rows: int = 2000,
    n_clusters: int = 4,
    ar_coef: float = 0.95,
    drift_at: float | None = 0.6,
    seed: int = 7,
) -> pd.DataFrame:
    """Wide frame: column ``time`` (1-minute steps from 2024-01-01) and ``s00``.. sensors.

    Cluster of sensor ``i`` is ``i % n_clusters``. The same ``seed`` gives the same frame.
    """
    check_arguments(n_sensors, n_rows, n_clusters, ar_coef, drift_at)
    rng = np.random.default_rng(seed)
    cluster = np.arange(n_sensors) % n_clusters
    loading = rng.uniform(0.7, 1.3, n_sensors)
    noise_sd = rng.uniform(*NOISE_SD, n_sensors)
    offset = rng.uniform(10.0, 30.0, n_sensors)
    scale = rng.uniform(0.5, 3.0, n_sensors)
    factors = simulate_ar1(n_rows, n_clusters, ar_coef, rng)
    noise = simulate_ar1(n_rows, n_sensors, ar_coef, rng)
    load_t = np.tile(loading, (n_rows, 1))
    noise_t = np.tile(noise_sd, (n_rows, 1))
    if drift_at is not None:
        start = int(drift_at * n_rows)
        members = np.flatnonzero(cluster == 0)
        load_t[start:, members[len(members) // 2 :]] *= -1.0
        noise_t[start:, cluster == n_clusters - 1] *= DRIFT_NOISE_FACTOR
    signal = load_t * factors[:, cluster] + noise_t * noise
    values = offset + scale * signal
    frame = pd.DataFrame(values, columns=[f"s{i:02d}" for i in range(n_sensors)])
    frame.insert(0, "time", START + INTERVAL * np.arange(n_rows))
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description="Write synthetic correlated sensors as CSV.")
    parser.add_argument("--sensors", type=int, default=16)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--ar", type=float, default=0.95)
    parser.add_argument("--drift-at", type=float, default=0.6, help="fraction; negative = none")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("synthetic_drift.csv"))
    args = parser.parse_args()
    drift = args.drift_at if args.drift_at >= 0 else None
    frame = generate(args.sensors, args.rows, args.clusters, args.ar, drift, args.seed)
    frame.to_csv(args.out, index=False, float_format="%.4f", date_format="%Y-%m-%d %H:%M:%S")
    print(f"{args.out}: {len(frame)} rows x {args.sensors} sensors, drift at {drift}")


if __name__ == "__main__":
    main()
