"""A backtest's verdict: its three states and the tests behind them, shared by the
range contract's result (``engine.planning.backtest_result.BacktestResult``) and the
crash contract's (``engine.planning.crash_result.CrashResult``).

The verdict's test (``VERDICT_TEST``) has three outcomes (``Verdict.state``):

* ``fails``: the pooled miss rate over rebuilt pairs is above ``delta``, or some
  sensor's rebuilt-window misses reject "rate <= delta" in a one-sided exact
  binomial test at level ``VERDICT_ALPHA / m`` (Bonferroni over the ``m`` sensors
  rebuilt at least once);
* ``holds``: neither, and every rebuilt sensor's Clopper-Pearson upper bound at the
  same corrected level is itself at most ``delta`` (the largest of them: the sensor
  with the fewest windows can have it, not the one with the highest rate);
* ``unsettled`` (not enough evidence): neither, but that bound is above ``delta``.
  The verdict then says what would settle it: how many rebuilt windows of that
  sensor at its measured rate bring the bound under ``delta``, or, when that rate
  is not below ``delta``, that more windows would only confirm a miss.

The tests treat windows as independent trials. Sliding windows overlap, and
overlapping windows share readings, so the tests count the disjoint ones only: a
share ``1 / ceil(window / slide)`` of the scored windows, the misses scaled alike
(``disjoint_share``); the rates shown count every window. Reading errors that are
correlated across disjoint windows are not corrected for (an assumption the
verdict's test states).

A backtest without folds is ``not measured``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scipy.special import betainc, betaincinv

from engine.errors import ParameterError

VERDICT_ALPHA = 0.05
VERDICT_TEST = (
    "pooled miss rate over rebuilt windows <= delta, and every rebuilt sensor consistent "
    "with delta: one-sided exact binomial test at 5 % / (sensors rebuilt), Bonferroni; "
    "confirmed when every rebuilt sensor's 95 % upper bound (same correction) <= delta; "
    "the tests count disjoint windows as independent trials (1 / ceil(window / slide) of "
    "sliding windows)"
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


def unrejected(
    pooled: str,
    loosest: str,
    ucb: float,
    delta: float,
    where: str,
    settle: Callable[[], tuple[str, int]],
) -> Verdict:
    """The verdict once no test rejects ``delta``: *holds* when every rebuilt sensor's
    95 % bound is within it (``ucb``, the largest, is ``loosest``'s: a sensor and its
    counts), else *not enough evidence*, with ``settle()``'s (what would settle it, the
    windows it needs). Both contracts' results read their figures into these sentences."""
    d = delta_digits(delta)  # rates beside delta to the digits that show it exactly
    if ucb <= delta:
        return Verdict(
            "holds",
            f"holds: {pooled}; every rebuilt sensor's 95 % bound (Bonferroni) is at most "
            f"{pct(ucb, d)} <= delta {pct(delta, d)}, the largest that of {loosest} ({where})",
        )
    text = (
        f"not enough evidence: {pooled} <= delta {pct(delta, d)} and no sensor misses "
        f"significantly more often than delta, but the 95 % bound of {loosest}, is "
        f"{pct(ucb, d)}, above delta ({where})"
    )
    advice, needed = settle()
    return Verdict("unsettled", text, advice, needed)


def disjoint_share(window: int, slide: int) -> float:
    """The share of windows scored every ``slide`` rows that are disjoint: every
    ``ceil(window / slide)``-th; 1 for tumbling (or gapped) windows."""
    return 1.0 / max(1, math.ceil(window / max(slide, 1)))


def disjoint_stride(share: float) -> int:
    """g, the tests' stride: every g-th scored window is tested (``share`` = 1 / g, as
    ``disjoint_share`` gives it); a share that is not 1 / g is refused."""
    g = round(1.0 / share) if share > 0.0 else 0
    if g < 1 or abs(g * share - 1.0) > 1e-9:
        raise ParameterError(f"share must be 1 / a whole number of windows, got {share!r}")
    return g


def disjoint(misses: float, windows: int, share: float) -> tuple[float, int]:
    """(misses, windows) as the tests count them: ``share`` of the windows (whole), the
    misses scaled alike (a real count; ``window_p_value`` and ``window_upper_bound``
    take one)."""
    if share >= 1.0:
        return float(misses), int(windows)
    # every g-th window: ``int(windows * share)`` floored 49 * (1 / 49) to 0
    return float(misses) * share, int(windows) // disjoint_stride(share)


def sensor_bounds(misses: Sequence[float], windows: Sequence[int], share: float) -> list[float]:
    """Each sensor's one-sided 95 % Clopper-Pearson upper bound, Bonferroni over the
    sensors with a window, on disjoint windows (``disjoint``); NaN for a sensor with none."""
    level = 1.0 - sensor_test_level(sum(1 for n in windows if n > 0))
    return [
        window_upper_bound(*disjoint(k, n, share), level) if n > 0 else float("nan")
        for k, n in zip(misses, windows, strict=True)
    ]


def rejected(per: Mapping[str, tuple[float, int]], delta: float, share: float) -> list[str]:
    """The sensors whose misses reject "rate <= delta", most significant first: the one
    test of the backtest verdicts and the live status line. ``per``: each sensor's (misses,
    windows), every scored window counted (misses real for the crash contract); each
    sensor is tested on its disjoint windows (``disjoint``, ``share``) in a one-sided
    binomial test at ``sensor_test_level`` of the sensors with a window (Bonferroni)."""
    tested = {
        s: window_p_value(*disjoint(k, n, share), delta) for s, (k, n) in per.items() if n > 0
    }
    level = sensor_test_level(len(tested))
    return sorted((s for s, p in tested.items() if p < level), key=lambda s: (tested[s], s))


def sensor_test_level(rebuilt_sensors: int) -> float:
    """Each sensor's test level: ``VERDICT_ALPHA`` over the sensors rebuilt (Bonferroni)."""
    return VERDICT_ALPHA / max(rebuilt_sensors, 1)


def first_settled(settled: Callable[[int], bool], start: int, step: int = 1) -> int:
    """The first multiple ``n`` of ``step`` at or above ``start`` with ``settled(n)``
    (``MAX_SETTLE_WINDOWS`` when none is at or below it): double, then bisect.

    The verdicts test every ``step``-th window (``disjoint``): between two multiples the
    tested count stays while the misses at a fixed rate grow, so ``settled`` is monotone
    on the multiples only, and the first settled count is always one of them.
    """
    step = max(1, step)

    def at(d: int) -> bool:
        return settled(d * step)

    top = MAX_SETTLE_WINDOWS // step  # the last multiple at or below the cap
    lo = hi = max(1, -(-start // step))
    if hi > top:
        return MAX_SETTLE_WINDOWS
    while not at(hi):
        if hi >= top:
            return MAX_SETTLE_WINDOWS
        lo, hi = hi, min(2 * hi, top)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if not at(mid) else (lo, mid)
    return hi * step


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
    return float(betaincinv(misses + 1.0, windows - misses, confidence))


def delta_digits(delta: float) -> int:
    """Decimals of a percentage that show ``delta`` exactly enough to compare a rate with:
    one, or as many as its percentage needs (0.05 % -> 2, 0.24 % -> 2), at most four."""
    for digits in range(1, 4):
        if abs(round(100 * delta, digits) - 100 * delta) < 1e-9:
            return digits
    return 4


def pct(x: float | None, digits: int = 1) -> str:
    """A rate as a percentage to ``digits`` decimals, never rounded onto 0 % or 100 % when
    it is neither: 0.0425 -> "4.3 %", 0.0003 -> "< 0.1 %", 0.99996 -> "> 99.9 %"; "n/a"
    for None or NaN. Every rate an operator reads (verdicts, the console) is said so."""
    if x is None or math.isnan(x):
        return "n/a"
    value = 100.0 * float(x)
    text = f"{value:.{digits}f}"
    if value > 0.0 and float(text) == 0.0:
        return f"< {10.0**-digits:.{digits}f} %"
    if value < 100.0 and float(text) >= 100.0:
        return f"> {100.0 - 10.0**-digits:.{digits}f} %"
    return f"{text} %"
