"""BacktestResult: what a backtest measured, and the verdict's test.

Headline rates are over (window, sensor) pairs **where the sensor was rebuilt**:
a backed-up sensor is recovered exactly, so counting its windows as hits would
dilute the rate the operator relies on. The all-windows rate of the worst
sensor stays as a secondary, labelled field.

The verdict's test (``VERDICT_TEST``) has three outcomes (``Verdict.state``):

* ``fails``: the pooled miss rate over rebuilt pairs is above ``delta``, or some
  sensor's rebuilt-window misses reject "rate <= delta" in a one-sided exact
  binomial test at level ``VERDICT_ALPHA / m`` (Bonferroni over the ``m`` sensors
  rebuilt at least once);
* ``holds``: neither, and the worst sensor's Clopper-Pearson upper bound at the
  same corrected level is itself at most ``delta``;
* ``unsettled`` (not enough evidence): neither, but that bound is above ``delta``.
  The verdict then says what would settle it: how many rebuilt windows of the
  worst sensor at its measured rate bring the bound under ``delta``, or, when
  that rate is not below ``delta``, that more windows would only confirm a miss.

A backtest without folds is ``not measured``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import betainc
from scipy.stats import beta

from engine.errors import ParameterError
from engine.planning.monitor import binomial_p_value, rate_upper_bound

VERDICT_ALPHA = 0.05
VERDICT_TEST = (
    "pooled miss rate over rebuilt windows <= delta, and every rebuilt sensor consistent "
    "with delta: one-sided exact binomial test at 5 % / (sensors rebuilt), Bonferroni; "
    "confirmed when the worst sensor's 95 % upper bound (same correction) <= delta"
)
VERDICT_STATES = ("holds", "unsettled", "fails", "not measured")
STATE_LABELS = {
    "holds": "holds",
    "unsettled": "not enough evidence",
    "fails": "DOES NOT HOLD",
    "not measured": "not measured",
}
FIX = "What would fix it: loosen eps, widen delta or back up more sensors"
MAX_SETTLE_WINDOWS = 10**7  # beyond this many windows "what would settle it" says "very many"


@dataclass(frozen=True)
class Verdict:
    """The backtest's verdict for one ``delta``: its state, one sentence, and (when the
    evidence is not enough) what would settle it.

    ``state`` is one of ``VERDICT_STATES``; ``text`` starts with the state's label
    (``STATE_LABELS``); ``settle`` says what would settle (unsettled) or fix (fails)
    it; ``windows_needed`` is the number of rebuilt windows of the
    worst sensor at its measured rate that would confirm the guarantee (0 when
    nothing more is needed or more windows cannot confirm it).
    """

    state: str
    text: str
    settle: str = ""
    windows_needed: int = 0

    def __post_init__(self) -> None:
        if self.state not in VERDICT_STATES:
            raise ParameterError(
                f"verdict state must be one of {VERDICT_STATES}, got {self.state!r}"
            )

    @property
    def label(self) -> str:
        return STATE_LABELS[self.state]

    def sentence(self) -> str:
        """The verdict and, if any, what would settle it."""
        return f"{self.text}. {self.settle}" if self.settle else self.text


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

    @property
    def worst_counts(self) -> tuple[int, int]:
        """The worst sensor's (misses, rebuilt windows); (0, 0) when nothing was rebuilt."""
        if self.worst_sensor is None:
            return 0, 0
        misses, rebuilt, _ = self.per_sensor.get(self.worst_sensor, (0, 0, 0))
        return misses, rebuilt

    def pooled_label(self) -> str:
        """``1.2 % of 416 rebuilt windows``: the pooled rate with what it counts."""
        return f"{_pct(self.violation_rate_mean)} of {self.windows:,} rebuilt windows"

    def worst_label(self) -> str:
        """``T5 missed 2 of 8 rebuilt windows (25.0 %)``: the worst sensor, counted."""
        if self.worst_sensor is None:
            return "no sensor was rebuilt"
        misses, rebuilt = self.worst_counts
        return (
            f"{self.worst_sensor} missed {misses:,} of {rebuilt:,} rebuilt windows "
            f"({_pct(self.violation_rate_worst_sensor)})"
        )

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
        pooled = f"pooled {self.pooled_label()} missed eps"
        if self.violation_rate_mean > delta:
            return Verdict(
                "fails", f"DOES NOT HOLD: {pooled}, above delta {_pct(delta)} ({where})", FIX
            )
        rejected = self.rejected_sensors(delta)
        if rejected:
            v, r, _ = self.per_sensor[rejected[0]]
            return Verdict(
                "fails",
                f"DOES NOT HOLD: {len(rejected)} sensor(s) miss eps more often than delta "
                f"{_pct(delta)} (binomial test, Bonferroni over {self.rebuilt_sensors}), e.g. "
                f"{rejected[0]} missed {v:,} of {r:,} rebuilt windows; {pooled} ({where})",
                FIX,
            )
        ucb = self.violation_rate_worst_sensor_ucb95
        worst = f"worst sensor {self.worst_label()}"
        if ucb <= delta:
            return Verdict(
                "holds",
                f"holds: {pooled}; {worst}, 95 % bound over all sensors {_pct(ucb)} <= delta "
                f"{_pct(delta)} ({where})",
            )
        needed = self.windows_to_settle(delta)
        text = (
            f"not enough evidence: {pooled} <= delta {_pct(delta)} and no sensor misses "
            f"significantly more often than delta, but the {worst}: its 95 % bound "
            f"{_pct(ucb)} is above delta ({where})"
        )
        return Verdict("unsettled", text, self._settle_text(needed), needed)

    def windows_to_settle(self, delta: float) -> int:
        """Rebuilt windows of the worst sensor that, at its measured miss rate, bring its
        95 % bound (Bonferroni, as the verdict) to ``delta`` or below; 0 when its rate is
        not below ``delta`` (more windows at that rate cannot confirm the guarantee)."""
        rate = self.violation_rate_worst_sensor
        if self.worst_sensor is None or not rate < delta:
            return 0
        level = 1.0 - VERDICT_ALPHA / max(self.rebuilt_sensors, 1)

        def settled(n: int) -> bool:
            return rate_upper_bound(round(rate * n), n, level) <= delta

        return _first_settled(settled, max(self.worst_counts[1], 1))

    def _settle_text(self, needed: int) -> str:
        rebuilt = self.worst_counts[1]
        if needed == 0:
            return (
                f"What would settle it: nothing more of the same. {self.worst_sensor}'s "
                f"measured rate is not below delta, so more windows would show a miss: "
                "loosen its eps or back it up"
            )
        per_fold = rebuilt / self.n_folds
        folds = math.ceil(needed / per_fold) if per_fold > 0 else 0
        many = "at least " if needed >= MAX_SETTLE_WINDOWS else ""
        return (
            f"What would settle it: {many}{needed:,} rebuilt windows of {self.worst_sensor} "
            f"at its measured rate (it has {rebuilt:,}; about {folds:,} folds of this "
            f"backtest instead of {self.n_folds}): backtest more folds over more history"
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

    @property
    def worst_counts(self) -> tuple[float, int]:
        """The worst sensor's (missed fraction summed over its windows, rebuilt windows)."""
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
        pooled = (
            f"pooled {_pct(self.violation_rate_mean)} of {self.scored:,} (failure, window) "
            f"pairs over {windows:,} rebuilt windows missed eps"
        )
        where = what
        if self.violation_rate_mean > delta:
            return Verdict(
                "fails", f"DOES NOT HOLD: {pooled}, above delta {_pct(delta)} ({where})", FIX
            )
        rejected = self.rejected_sensors(delta)
        if rejected:
            return Verdict(
                "fails",
                f"DOES NOT HOLD: {len(rejected)} sensor(s) miss eps more often than delta "
                f"{_pct(delta)} (binomial test over windows, Bonferroni over "
                f"{self.rebuilt_sensors}), e.g. {rejected[0]}; {pooled} ({where})",
                FIX,
            )
        ucb = self.violation_rate_worst_sensor_ucb95
        worst = (
            f"worst sensor {self.worst_sensor} {_pct(self.violation_rate_worst_sensor)} of its "
            f"(failure, window) pairs"
        )
        if ucb <= delta:
            return Verdict(
                "holds",
                f"holds: {pooled}; {worst}, 95 % bound over all sensors {_pct(ucb)} <= delta "
                f"{_pct(delta)} ({where})",
            )
        needed = self.windows_to_settle(delta)
        text = (
            f"not enough evidence: {pooled} <= delta {_pct(delta)} and no sensor misses "
            f"significantly more often than delta, but the {worst}: its 95 % bound "
            f"{_pct(ucb)} is above delta ({where})"
        )
        rebuilt = self.worst_counts[1]
        settle = (
            f"What would settle it: {needed:,} rebuilt windows of {self.worst_sensor} at its "
            f"measured rate (it has {rebuilt:,}): backtest more folds over more history"
            if needed
            else f"What would settle it: nothing more of the same. {self.worst_sensor}'s "
            "measured rate is not below delta: loosen its eps or back it up"
        )
        return Verdict("unsettled", text, settle, needed)

    def windows_to_settle(self, delta: float) -> int:
        """Rebuilt windows of the worst sensor that, at its measured rate, bring its 95 %
        bound (Bonferroni, as the verdict) to ``delta`` or below; 0 when its rate is not
        below ``delta``."""
        rate = self.violation_rate_worst_sensor
        if self.worst_sensor is None or not rate < delta:
            return 0
        level = 1.0 - VERDICT_ALPHA / max(self.rebuilt_sensors, 1)
        return _first_settled(
            lambda n: window_upper_bound(rate * n, n, level) <= delta,
            max(self.worst_counts[1], 1),
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


def _first_settled(settled: Callable[[int], bool], start: int) -> int:
    """The first window count ``n >= start`` with ``settled(n)`` (the bound falls with n at a
    fixed rate: double, then bisect); ``MAX_SETTLE_WINDOWS`` when none is below it."""
    lo = hi = start
    while not settled(hi):
        if hi >= MAX_SETTLE_WINDOWS:
            return MAX_SETTLE_WINDOWS
        lo, hi = hi, min(2 * hi, MAX_SETTLE_WINDOWS)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if not settled(mid) else (lo, mid)
    return hi


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


def _pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.1f} %"
