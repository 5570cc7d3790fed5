"""Live violation monitor: is the guarantee holding on the stream right now?

While the pipeline runs, every sensor still flows through it; only the backup is
partial. So for every closed window the pipeline can compute what recovery from
the backup *would* have produced and compare it with the real aggregate. This
module keeps the per-sensor tally and decides when the observed violation rate
is above ``delta`` with statistical confidence.

The test is checked after every batch, so it must stay valid however often it is
looked at: a sensor alerts when its mixture likelihood ratio against "rate <= delta"
(``log_evidence``: the likelihood of its misses under a rate drawn uniformly from
``(delta, 1]``, over their likelihood at ``delta``) reaches ``m / alpha``, ``alpha = 1 -
confidence`` and ``m`` the sensors the plan version rebuilds. Under "every window
misses with probability at most delta, whatever came before" that ratio is a
nonnegative supermartingale, so by Ville's inequality a sensor ever reaches ``m /
alpha`` with probability at most ``alpha / m``, and any sensor of the version at most
``alpha``: over the whole run, not per check. (A per-check test, a 95 % lower bound
above delta after every batch, alerted on every run of 20 sensors missing exactly
delta, mostly within 15 windows.) Sliding windows overlap: the test scales their misses
and windows by the disjoint share (``verdict.disjoint_share``), as the backtest verdict
does; that treats the windows of one overlapping run as copies of one trial, an
approximation the argument above does not cover (exact for tumbling windows). A sensor
also needs ``min_windows`` windows before it can alert.

Under the crash contract (a failure loses ``m`` consecutive rows) a window's miss is
not an indicator but the fraction of the ``w + m - 1`` failure positions touching it
that put its aggregate more than eps off (``engine.planning.feedback.window_misses``).
``observe_misses`` tallies those fractions, a window counting its fraction, and the
ratio is taken at the real-valued count. It stays a supermartingale: for a fraction
``x`` in [0, 1] the ratio's factor ``(p / delta)^x ((1 - p) / (1 - delta))^(1 - x)`` is
convex in ``x``, so its mean is at most the Bernoulli's of the same mean, which is at
most 1 when that mean is at most delta.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betaincc, betaincinv, betaln

from engine.errors import ParameterError
from engine.planning.verdict import disjoint_share, window_upper_bound
from engine.query import WindowQuery


@dataclass(frozen=True)
class MonitorAlert:
    """Sensors whose live violation rate exceeds ``delta`` with confidence."""

    sensors: tuple[str, ...]
    rates: dict[str, float]
    lower_bounds: dict[str, float]
    windows: int
    reason: str


def rate_lower_bound(violations: int, windows: int, confidence: float) -> float:
    """One-sided Clopper-Pearson lower bound of a binomial rate."""
    return float(rate_lower_bounds(np.array([violations]), np.array([windows]), confidence)[0])


def rate_lower_bounds(violations: np.ndarray, windows: np.ndarray, confidence: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bounds of binomial rates, pair by pair, in one
    inverse of the regularised incomplete beta (``scipy.stats.beta.ppf`` without loading
    ``scipy.stats``: the job's monitor bounds every sensor after every micro-batch);
    0 where there is no violation or no window. ``violations`` may be real (a crash
    contract's windows each count a fraction): the bound of the continued tail."""
    v, w = np.asarray(violations, dtype=float), np.asarray(windows, dtype=float)
    out = np.zeros(v.shape)
    some = (v > 0) & (w > 0)
    out[some] = betaincinv(v[some], w[some] - v[some] + 1, 1.0 - confidence)
    return out


def log_evidence(misses: np.ndarray, windows: np.ndarray, delta: float) -> np.ndarray:
    """Log of each sensor's mixture likelihood ratio against "rate <= delta", pair by pair:

    ``log int_delta^1 (p / delta)^k ((1 - p) / (1 - delta))^(W - k) dp / (1 - delta)``,
    the rate drawn uniformly from ``(delta, 1]``; in closed form ``B(k + 1, W - k + 1)
    (1 - I_delta(k + 1, W - k + 1)) / (delta^k (1 - delta)^(W - k) (1 - delta))``. 0 with
    no window; real ``k`` (a crash contract's fractions) taken as they are, at most ``W``.
    """
    w = np.asarray(windows, dtype=float)
    k = np.minimum(np.asarray(misses, dtype=float), w)
    a, b = k + 1.0, w - k + 1.0
    with np.errstate(divide="ignore"):  # a tail that underflows: no evidence at all
        tail = np.log(betaincc(a, b, delta))
    return betaln(a, b) + tail - k * np.log(delta) - (w - k + 1.0) * np.log1p(-delta)


def alerting(
    misses: np.ndarray,
    windows: np.ndarray,
    delta: float,
    watched: int | np.ndarray,
    confidence: float = 0.95,
    share: float = 1.0,
    min_windows: int = 1,
) -> np.ndarray:
    """(n,) True where a sensor's misses of its ``windows`` (each counted whole, or sliding
    with disjoint ``share``) are evidence enough that its rate is above ``delta``: the
    always-valid test of ``ViolationMonitor`` (module docstring), ``watched`` the sensors
    the version rebuilds (Bonferroni; one number, or one per sensor), at most a ``1 -
    confidence`` chance of any alert while every rate is at most delta, however often it
    is checked."""
    w = np.asarray(windows, dtype=float)
    scale = min(float(share), 1.0)  # both counts scaled alike: a floor would add evidence
    k, n = np.asarray(misses, dtype=float) * scale, w * scale
    level = np.log(np.maximum(np.asarray(watched, dtype=float), 1.0) / (1.0 - confidence))
    return (w >= min_windows) & (log_evidence(k, n, delta) >= level)


def rate_upper_bound(violations: int, windows: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a binomial rate (1.0 with no data)."""
    return window_upper_bound(violations, windows, confidence)


def check_eps(eps: float | np.ndarray, n: int) -> float | np.ndarray:
    """A scalar eps as a float, a per-sensor one as an (n,) array; finite and > 0."""
    e = np.asarray(eps, dtype=float)
    if e.shape not in ((), (n,)) or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ParameterError(f"eps must be finite and > 0, one number or ({n},), got {eps!r}")
    return float(e) if e.ndim == 0 else e


CONTRACTS = ("range", "crash")
MIN_WINDOWS = 10  # windows a sensor needs before it can alert (the default)
CONFIDENCE = 0.95  # of the one-sided test that a sensor's rate exceeds delta (the default)


class ViolationMonitor:
    """Per-sensor tally of shadow-recovery misses.

    Parameters
    ----------
    sensors : all sensor names, in the column order of the errors passed in.
    eps, delta : the operator's tolerance; ``eps`` a number or one per sensor (n,).
    confidence : ``1 - confidence`` bounds the chance of any alert under a plan version
        whose every sensor misses at most ``delta`` (module docstring).
    min_windows : windows a sensor needs before it can alert.
    contract : ``"range"`` (``observe``: a window misses or not) or ``"crash"``
        (``observe_misses``: a window counts the fraction of its failure positions that
        missed); tallies of a crash monitor are real numbers.
    share : the disjoint share of the windows (``verdict.disjoint_share(window, slide)``;
        1 for tumbling ones), which the test counts as independent trials.
    """

    def __init__(
        self,
        sensors: Sequence[str],
        eps: float | np.ndarray,
        delta: float,
        confidence: float = CONFIDENCE,
        min_windows: int = MIN_WINDOWS,
        contract: str = "range",
        share: float = 1.0,
    ) -> None:
        if contract not in CONTRACTS:
            raise ParameterError(f"contract must be one of {CONTRACTS}, got {contract!r}")
        if not 0.0 < delta < 1.0:
            raise ParameterError(f"delta must be in (0, 1), got {delta!r}")
        if not 0.5 <= confidence < 1.0:
            raise ParameterError(f"confidence must be in [0.5, 1), got {confidence!r}")
        self.sensors = tuple(sensors)
        self.eps, self.delta = check_eps(eps, len(self.sensors)), float(delta)
        self.confidence, self.min_windows = confidence, int(min_windows)
        self.contract = contract
        if not 0.0 < share <= 1.0:
            raise ParameterError(f"share must be in (0, 1], got {share!r}")
        self.share = float(share)
        self._watched: dict[int, int] = {}  # version -> sensors it rebuilds (Bonferroni)
        n = len(self.sensors)
        self._violations: np.ndarray = np.zeros(n, dtype=self._kind)  # overall, never reset
        self._windows = np.zeros(n, dtype=int)
        self._by_version: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.version = 0  # the plan version of the last batch observed

    @classmethod
    def for_query(
        cls,
        sensors: Sequence[str],
        eps: float | np.ndarray,
        query: WindowQuery,
        confidence: float = CONFIDENCE,
        min_windows: int = MIN_WINDOWS,
    ) -> ViolationMonitor:
        """The monitor of a plan made for ``query``: watched under the contract the plan
        promises (a crash plan, one with an exposure, under the crash contract; else whole
        windows), its windows' disjoint share counted as trials (sliding windows overlap).
        The job's monitor and the re-planning one are both built here."""
        contract = query.contract
        share = disjoint_share(query.window, query.effective_slide)
        return cls(sensors, eps, query.delta, confidence, min_windows, contract, share)

    def observe(
        self, errors: np.ndarray, reconstructed: Sequence[str], version: int = 0
    ) -> MonitorAlert | None:
        """Count a batch of closed windows; return an alert if one is due.

        Parameters
        ----------
        errors : (W, n) absolute window errors of shadow recovery, ``sensors`` order.
        reconstructed : sensors that recovery would rebuild (only these count).
        version : the plan version the windows were checked under. Tallies are kept
            per version and overall; only the version's own tally can alert (the
            windows of an earlier plan say nothing about the new one).
        """
        e = self._windows_of(errors, "errors", "range")
        mask = self._mask(reconstructed, version)
        finite = np.isfinite(e)
        windows = (finite & mask).sum(axis=0)
        violations = ((e > self.eps) & finite & mask).sum(axis=0)
        self._add(version, violations, windows)
        self.version = int(version)
        return self._alert()

    def observe_misses(
        self, misses: np.ndarray, reconstructed: Sequence[str], version: int = 0
    ) -> MonitorAlert | None:
        """Count a batch of closed windows' crash-contract misses; return an alert if due.

        Parameters
        ----------
        misses : (W, n) each window's miss in [0, 1], ``sensors`` order: the fraction of
            its failure positions that put it more than eps off; NaN where the window
            was not measured (it does not count).
        reconstructed, version : as ``observe``.
        """
        f = self._windows_of(misses, "misses", "crash")
        finite = np.isfinite(f)
        if np.any((f[finite] < 0) | (f[finite] > 1)):
            raise ParameterError("a window's miss fraction must be in [0, 1]")
        counted = finite & self._mask(reconstructed, version)
        self._add(version, np.where(counted, f, 0.0).sum(axis=0), counted.sum(axis=0))
        self.version = int(version)
        return self._alert()

    def _windows_of(self, values: np.ndarray, name: str, contract: str) -> np.ndarray:
        """``values`` as a (W, n) float array, refused unless this monitor counts
        ``contract`` (whole windows' errors, ``observe``; crash misses, ``observe_misses``)."""
        a = np.asarray(values, dtype=float)
        if a.ndim != 2 or a.shape[1] != len(self.sensors):
            raise ParameterError(f"{name} must have shape (W, {len(self.sensors)}), got {a.shape}")
        if self.contract != contract:
            counts = {"range": "window errors: observe", "crash": "miss fractions: observe_misses"}
            own = counts[self.contract]
            raise ParameterError(f"a {self.contract}-contract monitor counts {own}")
        return a

    @property
    def _kind(self) -> type:
        return float if self.contract == "crash" else int

    def _mask(self, reconstructed: Sequence[str], version: int) -> np.ndarray:
        """The sensors ``reconstructed`` of this monitor's; their count is the version's
        Bonferroni divisor (the largest seen, should a caller pass fewer)."""
        mask = np.isin(np.asarray(self.sensors), np.asarray(list(reconstructed), dtype=object))
        v = int(version)
        self._watched[v] = max(self._watched.get(v, 0), int(mask.sum()))
        return mask

    def resume(self, version: int, counts: Mapping[str, tuple[float, int]]) -> None:
        """Start plan ``version``'s tally from ``counts`` (sensor -> (violations, windows)),
        what an earlier run of the same job observed under it, before any new window
        (violations real for a crash monitor).

        Without it, a job restarted more often than it takes to gather
        ``min_windows`` per sensor would never alert.
        """
        unknown = sorted(set(counts) - set(self.sensors))
        if unknown:
            raise ParameterError(f"the tally names sensor(s) the monitor lacks: {unknown[:5]}")
        v = np.array([self._kind(counts.get(s, (0, 0))[0]) for s in self.sensors])
        w = np.array([int(counts.get(s, (0, 0))[1]) for s in self.sensors])
        if np.any(v < 0) or np.any(w < v):
            raise ParameterError("a tally needs 0 <= violations <= windows for every sensor")
        self._add(version, v, w)

    def _add(self, version: int, violations: np.ndarray, windows: np.ndarray) -> None:
        """Add (n,) counts to plan ``version``'s tally and to the overall one."""
        zero = np.zeros(len(self.sensors), dtype=int)
        v_old, w_old = self._by_version.get(int(version), (zero.astype(self._kind), zero))
        self._by_version[int(version)] = (v_old + violations, w_old + windows)
        self._violations += violations
        self._windows += windows

    def rates(self, version: int | None = None) -> dict[str, tuple[float, int]]:
        """sensor -> (violations, windows): overall, or under plan ``version``
        (violations an int for a range monitor, a real sum of fractions for a crash one)."""
        zero = np.zeros(len(self.sensors), dtype=int)
        v, w = (
            (self._violations, self._windows)
            if version is None
            else self._by_version.get(int(version), (zero, zero))
        )
        kind = self._kind
        return {s: (kind(a), int(b)) for s, a, b in zip(self.sensors, v, w, strict=True)}

    def versions(self) -> list[int]:
        """Plan versions seen so far, in order."""
        return sorted(self._by_version)

    def _alert(self) -> MonitorAlert | None:
        violations, windows_seen = self._by_version[self.version]
        watched = max(self._watched.get(self.version, 0), int(np.count_nonzero(windows_seen)))
        lower = rate_lower_bounds(violations, windows_seen, self.confidence)
        due = alerting(violations, windows_seen, self.delta, watched, self.confidence,
                       self.share, self.min_windows)  # fmt: skip
        hits = {s: float(b) for s, b, d in zip(self.sensors, lower, due, strict=True) if d}
        rates = {
            s: float(v / w)
            for s, v, w, d in zip(self.sensors, violations, windows_seen, due, strict=True)
            if d
        }
        if not hits:
            return None
        worst = max(rates, key=lambda s: rates[s])
        windows = int(windows_seen[self.sensors.index(worst)])
        what = "live violation rate" if self.contract == "range" else "live crash miss rate"
        reason = (
            f"{what} of {worst} is {rates[worst]:.1%} over {windows} windows, above delta "
            f"{self.delta:.1%} by a test valid however often it is checked (at most a "
            f"{1 - self.confidence:.0%} chance of any false alert under this version, over "
            f"{watched} rebuilt sensors); {len(hits)} sensor(s) alerting under plan version "
            f"{self.version}"
        )
        return MonitorAlert(tuple(hits), rates, hits, windows, reason)


def newly_alerting(said: dict[int, set[str]], version: int, sensors: Iterable[str]) -> list[str]:
    """The sensors of an alert under plan ``version`` that ``said`` (version -> sensors
    named so far) lacks, now recorded there. The monitor alerts in every batch while a
    rate stays above delta; an alert is said once per sensor and version."""
    named = said.setdefault(int(version), set())
    new = sorted(set(sensors) - named)
    named.update(new)
    return new
