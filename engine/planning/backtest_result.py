"""BacktestResult: what a backtest measured under the range contract (whole windows
rebuilt), and its verdict (``engine.planning.verdict``: the three states and the test).

Headline rates are over (window, sensor) pairs **where the sensor was rebuilt**:
a backed-up sensor is recovered exactly, so counting its windows as hits would
dilute the rate the operator relies on. The all-windows rate of the worst
sensor stays as a secondary, labelled field. ``crash`` holds the crash contract's
figures when the plan has an exposure (``engine.planning.crash_result``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.planning.crash_result import CrashResult
from engine.planning.verdict import (
    FIX,
    MAX_SETTLE_WINDOWS,
    VERDICT_ALPHA,
    VERDICT_TEST,
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

__all__ = ["BacktestResult", "summarise_backtest"]


@dataclass(frozen=True)
class BacktestResult:
    """Measured, not modelled: how often recovered window aggregates missed eps.

    ``per_sensor`` maps sensor -> (misses over rebuilt windows, rebuilt windows,
    all windows). ``violation_rate_worst_sensor`` is the largest per-sensor rate
    over rebuilt windows. ``violation_rate_worst_sensor_ucb95`` is the largest of every
    rebuilt sensor's Clopper-Pearson bounds, which hold for all of them at once (95 %,
    Bonferroni), on disjoint windows (``share`` of the scored ones:
    ``verdict.disjoint_share``); ``bound_sensor`` is the sensor it is of (few windows
    can give a sensor with a lower rate the larger bound).
    """

    n_folds: int
    history: int
    step: int
    windows: int  # (window, rebuilt sensor) pairs scored
    backup_fraction_mean: float
    violation_rate_mean: float  # pooled over rebuilt pairs
    violation_rate_worst_sensor: float  # over the worst sensor's rebuilt windows
    violation_rate_worst_sensor_ucb95: float
    worst_sensor: str | None
    violation_rate_worst_sensor_when_rebuilt: float  # same as the headline (kept for readers)
    per_sensor: dict[str, tuple[int, int, int]]
    note: str = ""
    violation_rate_worst_sensor_all_windows: float = float("nan")  # secondary, labelled
    delta: float = float("nan")  # the delta the verdict in ``to_dict`` is for
    # The crash contract's figures at the plan's exposure; None for a range-contract plan.
    crash: CrashResult | None = None
    bound_sensor: str | None = None  # whose bound ``violation_rate_worst_sensor_ucb95`` is
    share: float = 1.0  # of the scored windows the tests count (disjoint ones)

    @property
    def rebuilt_sensors(self) -> int:
        return sum(1 for _, r, _ in self.per_sensor.values() if r > 0)

    def rejected_sensors(self, delta: float) -> list[str]:
        """Sensors whose rebuilt-window misses reject ``rate <= delta`` after Bonferroni."""
        return rejected({s: (v, r) for s, (v, r, _) in self.per_sensor.items()}, delta, self.share)

    @property
    def worst_counts(self) -> tuple[int, int]:
        """The worst sensor's (misses, rebuilt windows); (0, 0) when nothing was rebuilt."""
        if self.worst_sensor is None:
            return 0, 0
        misses, rebuilt, _ = self.per_sensor.get(self.worst_sensor, (0, 0, 0))
        return misses, rebuilt

    def pooled_label(self, digits: int = 1) -> str:
        """``1.2 % of 416 (window, rebuilt sensor) pairs``: the pooled rate with what it
        counts (a window where three sensors were rebuilt counts three times)."""
        rate = pct(self.violation_rate_mean, digits)
        return f"{rate} of {self.windows:,} (window, rebuilt sensor) pairs"

    def worst_label(self) -> str:
        """``T5 missed 2 of 8 rebuilt windows (25.0 %)``: the worst sensor, counted."""
        if self.worst_sensor is None:
            return "no sensor was rebuilt"
        misses, rebuilt = self.worst_counts
        return (
            f"{self.worst_sensor} missed {misses:,} of {rebuilt:,} rebuilt windows "
            f"({pct(self.violation_rate_worst_sensor)})"
        )

    def bound_label(self) -> str:
        """``T5, which missed 2 of 8 rebuilt windows (25.0 %)``: the sensor whose bound is
        the largest, counted."""
        v, r, _ = self.per_sensor.get(self.bound_sensor or "", (0, 0, 0))
        rate = pct(v / r) if r else "n/a"
        return f"{self.bound_sensor}, which missed {v:,} of {r:,} rebuilt windows ({rate})"

    def verdict(self, delta: float) -> str:
        """One honest sentence, stating its test (``VERDICT_TEST``); ``assess`` is typed."""
        return self.assess(delta).sentence()

    def assess(self, delta: float) -> Verdict:
        """The three-state verdict (``Verdict``) at ``delta``."""
        if self.n_folds == 0:
            return Verdict("not measured", f"not measured: {self.note}")
        where = f"{self.n_folds} folds"
        if self.windows == 0:
            return Verdict(
                "holds",
                f"holds trivially over {where}: every sensor was backed up, nothing was rebuilt",
            )
        d = delta_digits(delta)  # the pooled rate beside delta, both shown exactly enough
        pooled = f"pooled {self.pooled_label(d)} missed eps"
        if self.violation_rate_mean > delta:
            return Verdict(
                "fails", f"DOES NOT HOLD: {pooled}, above delta {pct(delta, d)} ({where})", FIX
            )
        rejected = self.rejected_sensors(delta)
        if rejected:
            v, r, _ = self.per_sensor[rejected[0]]
            return Verdict(
                "fails",
                f"DOES NOT HOLD: {len(rejected)} sensor(s) miss eps more often than delta "
                f"{pct(delta, d)} (binomial test, Bonferroni over {self.rebuilt_sensors}), e.g. "
                f"{rejected[0]} missed {v:,} of {r:,} rebuilt windows; {pooled} ({where})",
                FIX,
            )
        ucb = self.violation_rate_worst_sensor_ucb95
        return unrejected(
            pooled, self.bound_label(), ucb, delta, where, lambda: self._settle(delta)
        )

    def _settle(self, delta: float) -> tuple[str, int]:
        needed = self.windows_to_settle(delta)
        return self._settle_text(needed), needed

    def windows_to_settle(self, delta: float) -> int:
        """Rebuilt windows of the sensor with the largest bound (``bound_sensor``) that, at
        its measured miss rate, bring its 95 % bound (Bonferroni and disjoint windows, as
        the verdict) to ``delta`` or below; 0 when its rate is not below ``delta`` (more
        windows at that rate cannot confirm the guarantee)."""
        v, r, _ = self.per_sensor.get(self.bound_sensor or "", (0, 0, 0))
        if self.bound_sensor is None or r == 0 or not v / r < delta:
            return 0
        rate, level = v / r, 1.0 - VERDICT_ALPHA / max(self.rebuilt_sensors, 1)

        def settled(n: int) -> bool:  # the misses at the measured rate, a real count
            return window_upper_bound(*disjoint(rate * n, n, self.share), level) <= delta

        return first_settled(settled, max(r, 1), disjoint_stride(self.share))

    def _settle_text(self, needed: int) -> str:
        rebuilt = self.per_sensor.get(self.bound_sensor or "", (0, 0, 0))[1]
        if needed == 0:
            return (
                f"What would settle it: nothing more of the same. {self.bound_sensor}'s "
                f"measured rate is not below delta, so more windows would show a miss: "
                "loosen its eps or back it up"
            )
        per_fold = rebuilt / self.n_folds
        folds = math.ceil(needed / per_fold) if per_fold > 0 else 0
        many = "at least " if needed >= MAX_SETTLE_WINDOWS else ""
        return (
            f"What would settle it: {many}{needed:,} rebuilt windows of {self.bound_sensor} "
            f"at its measured rate (it has {rebuilt:,}; about {folds:,} folds of this "
            f"backtest instead of {self.n_folds}): backtest more folds over more history"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "n_folds": self.n_folds,
            "history": self.history,
            "step": self.step,
            "rebuilt_pairs_scored": self.windows,  # (window, rebuilt sensor) pairs
            "backup_fraction_mean": self.backup_fraction_mean,
            "violation_rate_mean": self.violation_rate_mean,
            "violation_rate_worst_sensor": self.violation_rate_worst_sensor,
            "violation_rate_worst_sensor_ucb95": self.violation_rate_worst_sensor_ucb95,
            "worst_sensor": self.worst_sensor,
            "bound_sensor": self.bound_sensor,
            "windows_counted_share": self.share,
            "violation_rate_worst_sensor_when_rebuilt": (
                self.violation_rate_worst_sensor_when_rebuilt
            ),
            "violation_rate_worst_sensor_all_windows": self.violation_rate_worst_sensor_all_windows,
            "rates_over": "rebuilt (window, sensor) pairs",
            "verdict_test": VERDICT_TEST,
            "per_sensor": {
                s: {"violations": v, "windows_rebuilt": r, "windows": w}
                for s, (v, r, w) in self.per_sensor.items()
            },
            "note": self.note,
            "crash": None if self.crash is None else self.crash.to_dict(),
        }


def summarise_backtest(
    n_folds: int,
    history: int,
    step: int,
    counts: tuple[np.ndarray, np.ndarray, int],
    fractions: list[float],
    sensors: tuple[str, ...],
    delta: float,
    share: float = 1.0,
) -> BacktestResult:
    """Build the result from per-sensor misses (n,), rebuilt windows (n,), all windows;
    ``share``: of the scored windows, the disjoint ones the tests count
    (``verdict.disjoint_share``)."""
    viol, rebuilt, total = counts
    per = {s: (int(v), int(r), total) for s, v, r in zip(sensors, viol, rebuilt, strict=True)}
    scored = int(rebuilt.sum())
    note = ""
    if n_folds == 0:
        note = "no fold fits: the history is shorter than calibration needs plus one horizon"
    elif scored == 0:
        note = "every sensor was backed up in every fold: nothing was reconstructed"
    nan = float("nan")
    if total == 0 or scored == 0:
        return BacktestResult(
            n_folds, history, step, scored, float(np.mean(fractions)) if fractions else nan,
            0.0 if total else nan, 0.0 if total else nan, 0.0 if total else nan, None,
            0.0 if total else nan, per, note, 0.0 if total else nan, delta, share=share,
        )  # fmt: skip
    cond = np.where(rebuilt > 0, viol / np.maximum(rebuilt, 1), -1.0)
    worst = int(np.argmax(cond))
    bounds = sensor_bounds(viol.tolist(), rebuilt.tolist(), share)
    loosest = int(np.nanargmax(bounds))
    return BacktestResult(
        n_folds=n_folds,
        history=history,
        step=step,
        windows=scored,
        backup_fraction_mean=float(np.mean(fractions)),
        violation_rate_mean=float(viol.sum() / scored),
        violation_rate_worst_sensor=float(cond[worst]),
        # every rebuilt sensor's bound holds at once (Bonferroni): the largest of them
        violation_rate_worst_sensor_ucb95=float(bounds[loosest]),
        worst_sensor=sensors[worst],
        violation_rate_worst_sensor_when_rebuilt=float(cond[worst]),
        per_sensor=per,
        note=note,
        violation_rate_worst_sensor_all_windows=float(viol[worst] / total),  # its own misses
        delta=delta,
        bound_sensor=sensors[loosest],
        share=share,
    )
