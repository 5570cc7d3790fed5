"""BacktestResult: what a backtest measured, and the verdict's test.

Headline rates are over (window, sensor) pairs **where the sensor was rebuilt**:
a backed-up sensor is recovered exactly, so counting its windows as hits would
dilute the rate the operator relies on. The all-windows rate of the worst
sensor stays as a secondary, labelled field.

The verdict's test (``VERDICT_TEST``): the guarantee holds when the pooled miss
rate over rebuilt pairs is at most ``delta`` and no sensor's rebuilt-window
misses reject "rate <= delta" in a one-sided exact binomial test at level
``VERDICT_ALPHA / m`` (Bonferroni over the ``m`` sensors rebuilt at least once).
It is *confirmed* when the worst sensor's Clopper-Pearson upper bound at the
same corrected level is itself at most ``delta``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betainc
from scipy.stats import beta

from engine.planning.monitor import binomial_p_value, rate_upper_bound

VERDICT_ALPHA = 0.05
VERDICT_TEST = (
    "pooled miss rate over rebuilt windows <= delta, and every rebuilt sensor consistent "
    "with delta: one-sided exact binomial test at 5 % / (sensors rebuilt), Bonferroni"
)


def sensor_test_level(rebuilt_sensors: int) -> float:
    """Each sensor's test level: ``VERDICT_ALPHA`` over the sensors rebuilt (Bonferroni)."""
    return VERDICT_ALPHA / max(rebuilt_sensors, 1)


@dataclass(frozen=True)
class BacktestResult:
    """Measured, not modelled: how often recovered window aggregates missed eps.

    ``per_sensor`` maps sensor -> (misses over rebuilt windows, rebuilt windows,
    all windows). ``violation_rate_worst_sensor`` is the largest per-sensor rate
    over rebuilt windows, its ``_ucb95`` a Clopper-Pearson bound holding for all
    rebuilt sensors at once (95 %, Bonferroni).
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

    @property
    def rebuilt_sensors(self) -> int:
        return sum(1 for _, r, _ in self.per_sensor.values() if r > 0)

    def rejected_sensors(self, delta: float) -> list[str]:
        """Sensors whose rebuilt-window misses reject ``rate <= delta`` after Bonferroni."""
        level = sensor_test_level(self.rebuilt_sensors)
        return [
            s
            for s, (v, r, _) in self.per_sensor.items()
            if r > 0 and binomial_p_value(v, r, delta) < level
        ]

    def verdict(self, delta: float) -> str:
        """One honest sentence, stating its test (``VERDICT_TEST``)."""
        if self.n_folds == 0:
            return f"not measured: {self.note}"
        if self.windows == 0:
            return (
                f"holds trivially over {self.n_folds} folds: every sensor was backed up, "
                "nothing was rebuilt"
            )
        pooled, worst = self.violation_rate_mean, self.violation_rate_worst_sensor
        where = f"{self.n_folds} folds, {self.windows} rebuilt windows"
        if pooled > delta:
            return (
                f"DOES NOT HOLD: rebuilt windows missed eps in {pooled:.1%} > delta {delta:.1%} "
                f"({where})"
            )
        rejected = self.rejected_sensors(delta)
        if rejected:
            return (
                f"DOES NOT HOLD: {len(rejected)} sensor(s) miss eps more often than delta "
                f"{delta:.1%} (binomial test, Bonferroni over {self.rebuilt_sensors}), e.g. "
                f"{rejected[0]}; pooled {pooled:.1%} ({where})"
            )
        ucb = self.violation_rate_worst_sensor_ucb95
        if ucb <= delta:
            return (
                f"holds: pooled {pooled:.1%}, worst sensor {self.worst_sensor} {worst:.1%} "
                f"(95% bound over all sensors {ucb:.1%}) <= delta {delta:.1%} ({where})"
            )
        return (
            f"holds: pooled {pooled:.1%} <= delta {delta:.1%} and every sensor is consistent "
            f"with delta (worst {self.worst_sensor} {worst:.1%}), but its 95% bound {ucb:.1%} "
            f"exceeds delta: more folds would confirm it ({where})"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "n_folds": self.n_folds,
            "history": self.history,
            "step": self.step,
            "windows_scored": self.windows,
            "backup_fraction_mean": self.backup_fraction_mean,
            "violation_rate_mean": self.violation_rate_mean,
            "violation_rate_worst_sensor": self.violation_rate_worst_sensor,
            "violation_rate_worst_sensor_ucb95": self.violation_rate_worst_sensor_ucb95,
            "worst_sensor": self.worst_sensor,
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


CRASH_TEST = (
    "pooled miss rate over (failure position, window touched, rebuilt sensor) triples <= delta, "
    "and every rebuilt sensor consistent with delta: one-sided binomial test over its rebuilt "
    "windows, each counting the fraction of its failure positions that missed, at "
    "5 % / (sensors rebuilt), Bonferroni"
)


@dataclass(frozen=True)
class CrashResult:
    """The crash contract measured: a failure loses ``exposure`` consecutive rows.

    Every window touched by a failure is exact except the lost rows of the rebuilt
    sensors. The rate counts (failure position, window touched, rebuilt sensor)
    triples: of the window results a failure leaves approximate, the fraction off by
    more than eps, a failure equally likely at every row. Each window is touched by
    ``positions = w + m - 1`` failure positions, so ``per_sensor`` maps sensor ->
    (missed triples, triples), triples = ``positions`` x rebuilt windows.

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

    @property
    def rebuilt_sensors(self) -> int:
        return sum(1 for _, r in self.per_sensor.values() if r > 0)

    def rejected_sensors(self, delta: float) -> list[str]:
        """Sensors whose window miss fractions reject ``rate <= delta`` after Bonferroni
        (the same level as the range contract's test, ``BacktestResult.rejected_sensors``)."""
        level = sensor_test_level(self.rebuilt_sensors)
        return [
            s
            for s, (v, r) in self.per_sensor.items()
            if r > 0 and window_p_value(v / self.positions, r // self.positions, delta) < level
        ]

    def verdict(self, delta: float) -> str:
        """One honest sentence, stating its test (``CRASH_TEST``)."""
        what = f"crash contract, {self.exposure} row(s) lost"
        if self.scored == 0:
            return f"holds trivially ({what}): every sensor was backed up, nothing was rebuilt"
        pooled = self.violation_rate_mean
        where = f"{what}, {self.scored} rebuilt (failure, window) pairs"
        if pooled > delta:
            return (
                f"DOES NOT HOLD: rebuilt windows missed eps in {pooled:.1%} > delta {delta:.1%} "
                f"({where})"
            )
        rejected = self.rejected_sensors(delta)
        if rejected:
            return (
                f"DOES NOT HOLD: {len(rejected)} sensor(s) miss eps more often than delta "
                f"{delta:.1%} (binomial test over windows, Bonferroni over "
                f"{self.rebuilt_sensors}), e.g. {rejected[0]}; pooled {pooled:.1%} ({where})"
            )
        worst, ucb = self.violation_rate_worst_sensor, self.violation_rate_worst_sensor_ucb95
        return (
            f"holds: pooled {pooled:.1%}, worst sensor {self.worst_sensor} {worst:.1%} "
            f"(95% bound over all sensors {ucb:.1%}) <= delta {delta:.1%} ({where})"
            if ucb <= delta
            else f"holds: pooled {pooled:.1%} <= delta {delta:.1%} and every sensor is "
            f"consistent with delta (worst {self.worst_sensor} {worst:.1%}), but its 95% bound "
            f"{ucb:.1%} exceeds delta: more folds would confirm it ({where})"
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
            "rates_over": "(failure position, window touched, rebuilt sensor) triples",
            "verdict_test": CRASH_TEST,
            "per_sensor": {
                s: {"violations": v, "triples_rebuilt": r} for s, (v, r) in self.per_sensor.items()
            },
        }


def window_p_value(misses: float, windows: int, delta: float) -> float:
    """One-sided binomial p-value of ``misses`` (a real count) in ``windows`` at rate ``delta``.

    ``P(Binomial(windows, delta) >= misses)`` continued to real counts by the
    regularised incomplete beta ``I_delta(k, n - k + 1)``; 1.0 with no miss or window.
    """
    if windows <= 0 or misses <= 0:
        return 1.0
    k = min(float(misses), float(windows))
    return float(betainc(k, windows - k + 1.0, delta))


def window_upper_bound(misses: float, windows: int, confidence: float) -> float:
    """One-sided Clopper-Pearson upper bound of a rate from a real miss count."""
    if windows <= 0 or misses >= windows:
        return 1.0
    return float(beta.ppf(confidence, misses + 1.0, windows - misses))


def summarise_crash(
    exposure: int, window: int, misses: np.ndarray, triples: np.ndarray, sensors: tuple[str, ...]
) -> CrashResult:
    """Build the crash figures from per-sensor missed triples (n,) and triples (n,)."""
    positions = window + exposure - 1
    per = {s: (int(v), int(r)) for s, v, r in zip(sensors, misses, triples, strict=True)}
    scored = int(triples.sum())
    if scored == 0:
        return CrashResult(exposure, positions, 0, 0.0, 0.0, 0.0, None, per)
    rate = np.where(triples > 0, misses / np.maximum(triples, 1), -1.0)
    worst = int(np.argmax(rate))
    m = int(np.count_nonzero(triples))
    return CrashResult(
        exposure=exposure,
        positions=positions,
        scored=scored,
        violation_rate_mean=float(misses.sum() / scored),
        violation_rate_worst_sensor=float(rate[worst]),
        # over the worst sensor's windows, each counting its fraction of missed positions
        violation_rate_worst_sensor_ucb95=window_upper_bound(
            misses[worst] / positions, int(triples[worst]) // positions, 1.0 - VERDICT_ALPHA / m
        ),
        worst_sensor=sensors[worst],
        per_sensor=per,
    )


def summarise_backtest(
    n_folds: int,
    history: int,
    step: int,
    counts: tuple[np.ndarray, np.ndarray, int],
    fractions: list[float],
    sensors: tuple[str, ...],
    delta: float,
) -> BacktestResult:
    """Build the result from per-sensor misses (n,), rebuilt windows (n,), all windows."""
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
            0.0 if total else nan, per, note, 0.0 if total else nan, delta,
        )  # fmt: skip
    cond = np.where(rebuilt > 0, viol / np.maximum(rebuilt, 1), -1.0)
    worst = int(np.argmax(cond))
    m = int(np.count_nonzero(rebuilt))
    return BacktestResult(
        n_folds=n_folds,
        history=history,
        step=step,
        windows=scored,
        backup_fraction_mean=float(np.mean(fractions)),
        violation_rate_mean=float(viol.sum() / scored),
        violation_rate_worst_sensor=float(cond[worst]),
        # The worst sensor is picked after looking: the bound holds for all m at once.
        violation_rate_worst_sensor_ucb95=rate_upper_bound(
            int(viol[worst]), int(rebuilt[worst]), 1.0 - VERDICT_ALPHA / m
        ),
        worst_sensor=sensors[worst],
        violation_rate_worst_sensor_when_rebuilt=float(cond[worst]),
        per_sensor=per,
        note=note,
        violation_rate_worst_sensor_all_windows=float(viol.max() / total),
        delta=delta,
    )
