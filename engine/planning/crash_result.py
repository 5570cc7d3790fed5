"""CrashResult: what a backtest measured under the crash contract (a failure loses
``exposure`` consecutive rows), and its verdict (``CRASH_TEST``; the states and the
shared tests are ``engine.planning.verdict``'s).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.planning.verdict import (
    FIX,
    VERDICT_ALPHA,
    Verdict,
    delta_digits,
    disjoint,
    disjoint_stride,
    first_settled,
    pct,
    rejected,
    sensor_bounds,
    unrejected,
    window_upper_bound,
)

__all__ = ["CRASH_TEST", "CrashResult", "summarise_crash"]


CRASH_TEST = (
    "pooled miss rate over (failure position, window touched, sensor not backed up) triples "
    "<= delta, and every sensor not backed up (rebuilt, or for max and min keeping its "
    "readings) consistent with delta: one-sided binomial test over its windows, each "
    "counting the fraction of its failure positions that missed, at 5 % / (sensors not "
    "backed up), Bonferroni"
)


@dataclass(frozen=True)
class CrashResult:
    """The crash contract measured: a failure loses ``exposure`` consecutive rows.

    Every window touched by a failure is exact except the lost rows of the sensors not
    backed up (rebuilt, or for max and min left out where a sensor keeps its readings).
    The rate counts (failure position, window touched, sensor not backed up) triples:
    of the window results a failure leaves approximate, the fraction off by more than
    eps, a failure equally likely at every row. Each window is touched by
    ``positions = w + m - 1`` failure positions, so ``per_sensor`` maps sensor ->
    (missed triples, triples), triples = ``positions`` x windows not backed up.

    The triples of one window share its readings, so the verdict's tests count
    windows, not triples (``CRASH_TEST``): a window counts the fraction of its
    failure positions that missed, a number in [0, 1] whose variance is at most a
    Bernoulli's of the same mean, so the binomial test stays conservative.
    """

    exposure: int
    positions: int  # failure positions touching one window, w + m - 1
    scored: int  # triples scored
    violation_rate_mean: float
    violation_rate_worst_sensor: float
    violation_rate_worst_sensor_ucb95: float
    worst_sensor: str | None
    per_sensor: dict[str, tuple[int, int]]
    # whose bound ``violation_rate_worst_sensor_ucb95`` is: the largest of every rebuilt
    # sensor's (few windows can give a sensor with a lower rate the larger bound)
    bound_sensor: str | None = None
    share: float = 1.0  # of the scored windows the tests count (disjoint ones)

    @property
    def rebuilt_sensors(self) -> int:
        return sum(1 for _, r in self.per_sensor.values() if r > 0)

    def rejected_sensors(self, delta: float) -> list[str]:
        """Sensors whose window miss fractions reject ``rate <= delta`` after Bonferroni
        (the same level as the range contract's test, ``BacktestResult.rejected_sensors``)."""
        per = {s: self._windows(v, r) for s, (v, r) in self.per_sensor.items()}
        return rejected(per, delta, self.share)

    def _windows(self, missed: float, triples: int) -> tuple[float, int]:
        """(missed fraction summed over windows, windows): each window counts its fraction
        of missed failure positions; ``rejected`` then takes the disjoint ones."""
        return missed / self.positions, triples // self.positions

    @property
    def worst_counts(self) -> tuple[float, int]:
        """The worst sensor's (missed fraction summed over its windows, its windows not
        backed up)."""
        if self.worst_sensor is None:
            return 0.0, 0
        v, r = self.per_sensor.get(self.worst_sensor, (0, 0))
        return v / self.positions, r // self.positions

    def verdict(self, delta: float) -> str:
        """One honest sentence, stating its test (``CRASH_TEST``); ``assess`` is typed."""
        return self.assess(delta).sentence()

    def assess(self, delta: float) -> Verdict:
        """The three-state verdict (``Verdict``) at ``delta``, as ``BacktestResult.assess``
        states the range contract's, its figures counting failures and windows."""
        what = f"crash contract, {self.exposure} row(s) lost"
        if self.scored == 0:
            return Verdict(
                "holds", f"holds trivially ({what}): every sensor was backed up, nothing rebuilt"
            )
        windows = self.scored // self.positions
        d = delta_digits(delta)  # the pooled rate beside delta, both shown exactly enough
        pooled = (
            f"pooled {pct(self.violation_rate_mean, d)} of {self.scored:,} (failure, window, "
            f"sensor) triples over {windows:,} (window, sensor not backed up) pairs missed eps"
        )
        where = what
        if self.violation_rate_mean > delta:
            return Verdict(
                "fails", f"DOES NOT HOLD: {pooled}, above delta {pct(delta, d)} ({where})", FIX
            )
        rejected = self.rejected_sensors(delta)
        if rejected:
            return Verdict(
                "fails",
                f"DOES NOT HOLD: {len(rejected)} sensor(s) miss eps more often than delta "
                f"{pct(delta, d)} (binomial test over windows, Bonferroni over "
                f"{self.rebuilt_sensors}), e.g. {rejected[0]}; {pooled} ({where})",
                FIX,
            )
        v, r = self.per_sensor.get(self.bound_sensor or "", (0, 0))
        missed, rebuilt = v / self.positions, r // self.positions
        loosest = (  # a window counts its missed positions' fraction
            f"{self.bound_sensor}, which missed {missed:.3g} of its {rebuilt:,} windows not "
            "backed up "
            f"({pct(v / r if r else 0.0)} of its (failure, window) pairs)"
        )
        ucb = self.violation_rate_worst_sensor_ucb95

        def settle() -> tuple[str, int]:
            needed = self.windows_to_settle(delta)
            advice = (
                f"What would settle it: {needed:,} windows of {self.bound_sensor} not backed up "
                f"at its measured rate (it has {rebuilt:,}): backtest more folds over more "
                "history"
                if needed
                else f"What would settle it: nothing more of the same. {self.bound_sensor}'s "
                "measured rate is not below delta: loosen its eps or back it up"
            )
            return advice, needed

        return unrejected(pooled, loosest, ucb, delta, where, settle)

    def windows_to_settle(self, delta: float) -> int:
        """Windows not backed up of the sensor with the largest bound (``bound_sensor``) that, at
        its measured rate, bring its 95 % bound (Bonferroni and disjoint windows, as the
        verdict) to ``delta`` or below; 0 when its rate is not below ``delta``."""
        v, r = self.per_sensor.get(self.bound_sensor or "", (0, 0))
        if self.bound_sensor is None or r == 0 or not v / r < delta:
            return 0
        rate, level = v / r, 1.0 - VERDICT_ALPHA / max(self.rebuilt_sensors, 1)
        return first_settled(
            lambda n: window_upper_bound(*disjoint(rate * n, n, self.share), level) <= delta,
            max(r // self.positions, 1),
            disjoint_stride(self.share),
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "exposure_rows": self.exposure,
            "failure_positions_per_window": self.positions,
            "triples_scored": self.scored,
            "violation_rate_mean": self.violation_rate_mean,
            "violation_rate_worst_sensor": self.violation_rate_worst_sensor,
            "violation_rate_worst_sensor_ucb95": self.violation_rate_worst_sensor_ucb95,
            "worst_sensor": self.worst_sensor,
            "bound_sensor": self.bound_sensor,
            "windows_counted_share": self.share,
            "rates_over": "(failure position, window touched, sensor not backed up) triples",
            "verdict_test": CRASH_TEST,
            "per_sensor": {
                s: {"violations": v, "triples_scored": r} for s, (v, r) in self.per_sensor.items()
            },
        }


def summarise_crash(
    exposure: int,
    window: int,
    misses: np.ndarray,
    triples: np.ndarray,
    sensors: tuple[str, ...],
    share: float = 1.0,
) -> CrashResult:
    """Build the crash figures from per-sensor missed triples (n,) and triples (n,);
    ``share``: of the scored windows, the disjoint ones the tests count."""
    positions = window + exposure - 1
    per = {s: (int(v), int(r)) for s, v, r in zip(sensors, misses, triples, strict=True)}
    scored = int(triples.sum())
    if scored == 0:
        return CrashResult(exposure, positions, 0, 0.0, 0.0, 0.0, None, per, share=share)
    rate = np.where(triples > 0, misses / np.maximum(triples, 1), -1.0)
    worst = int(np.argmax(rate))
    # each window counts its fraction of missed positions (``CrashResult._windows``)
    bounds = sensor_bounds((misses / positions).tolist(), (triples // positions).tolist(), share)
    loosest = int(np.nanargmax(bounds))
    return CrashResult(
        exposure=exposure,
        positions=positions,
        scored=scored,
        violation_rate_mean=float(misses.sum() / scored),
        violation_rate_worst_sensor=float(rate[worst]),
        violation_rate_worst_sensor_ucb95=float(bounds[loosest]),
        worst_sensor=sensors[worst],
        per_sensor=per,
        bound_sensor=sensors[loosest],
        share=share,
    )
