"""Per-sensor online control: which sensors are backed up, decided after every closed window.

Why: a plan's targets are calibrated on the past; the shadow check measures, for
every closed window, what recovery *would* have done. This controller steers
each sensor's variance target by those measurements (adaptive conformal
inference, Gibbs & Candes 2021; the "quantile tracking" part of conformal PID,
Angelopoulos et al. 2023) and patches the backup set to the new targets
(``engine.selection.incremental``), instead of alerting and re-planning.

**Input**, once per batch of closed windows (``ShadowFeedback``, one per window):
each sensor's miss in ``[0, 1]`` (range contract: the indicator
``|recovered - true| > eps``; crash contract: the fraction of failure positions
touching the window whose error exceeds eps; the controller does not care which),
which sensors were rebuilt in the window, and optionally the counterfactual miss
of the backed-up ones (had the sensor been dropped). NaN means "not measured".

**Rule.** Sensor ``i`` keeps a log-scale ``s_i`` of its base target ``t_i``. It
may be rebuilt only while ``var_{i|O} <= t_i exp(s_i)`` and ``s_i > s_min``; at or
below the floor it is forced into the backup. Each applied window moves
``s_i <- min(s_max, s_i + gamma (aim - u))`` with ``aim = delta * margin`` and

* ``u`` = the window's miss if ``i`` was rebuilt in it (unmeasured: 1, a miss);
* ``u`` = the counterfactual miss if ``i`` was backed up (unmeasured: ``aim``, no move),
  but never more than ``aim`` while ``s_i <= s_min`` (a forced sensor does not sink
  further: only measured hits lift it back).

**Guarantee** (exact, for any sequence of errors). Assume (A1) a sensor backed up
for a whole window has error 0 in it (its readings are in the backup);
(A2) ``s_min <= s_0 <= s_max``; (A3) the feedback of window ``t`` is applied before
the decision for window ``t + d + 1``, so at any moment at most ``d + 1`` windows
(rebuilt or not) have their feedback outstanding: ``d`` is the delay in windows,
batches and out-of-order arrival included. Then for every sensor, over the ``T``
windows whose feedback has been applied so far,

    sum_t e_t  <=  aim T + (s_0 - s_min + gamma (d + 1)) / gamma,

so its miss fraction over all windows (backed-up windows count as hits) is at most
``aim + (s_0 - s_min + gamma (d + 1)) / (gamma T)``; over the windows applied between
any two later moments, the same with ``s_max`` in place of ``s_0``.
Proof: clipping only lowers ``s``, so ``s_now <= s_0 + gamma sum (aim - u_t)``, and
``u_t >= e_t`` (equal when rebuilt, ``>= 0 = e_t`` when backed up); it remains to
bound ``s_now`` below. Let ``v`` be the last moment ``s > s_min``. After ``v`` every
decision forces the sensor, and a backed-up window applied while ``s <= s_min`` does
not move ``s`` down; so every window that moves ``s`` down after ``v`` was rebuilt
under a decision before ``v`` or is the one whose feedback crossed the floor: both
outstanding at ``v``, at most ``d + 1``, each lowering ``s`` by at most
``gamma (1 - aim)``. So ``s_now >= s_min - gamma (d + 1)``. The bound is on the miss
fraction over all windows, not conditional on being rebuilt, and it holds whatever
selection rule decides the rest: every other rule here (the evidence to release,
hysteresis, the incremental re-selection) only backs up more.

**In the live pipeline** (``engine.live.control_loop``) a window's feedback arrives
when it closes: after its last reading, and with the disorder stage after its
stragglers are released. A decision after the batch whose largest row is ``h`` governs
rows from ``h + 1``, so the windows holding rows up to ``h`` that are not applied yet are
outstanding: ``d`` is the largest such count at a decision (measured there; about
``window / slide`` without disorder, more with it). Windows the controller never gets
(the recovery job closed them, or a process before a restart) are skipped, not
applied: the bound covers the windows applied.

**Never trusted without a measurement.** A backed-up sensor is released only when
its last ``evidence_windows`` measured windows as a dropped sensor (actual misses
while rebuilt, counterfactual ones while backed up) hold at most ``aim`` misses per
window, it has been backed up for ``hold_windows`` windows, and its removal keeps
every sensor whose variance rises within ``release_margin`` of its target
(hysteresis: a release is not undone by the next small move); at most
``max_releases`` sensors are released per decision, so the set shrinks step by
step, each step measured, and a decision stays cheap. Adding is immediate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from engine.errors import ParameterError
from engine.planning.control_types import (
    ControlConfig,
    ControlDecision,
    ShadowFeedback,
    check_feedback,
)
from engine.selection.incremental import IncrementalSelection

SNAPSHOT_VERSION = 1
KEEP_WINDOWS = 4096  # window ids remembered above the watermark (duplicates are ignored)
COUNTERS = ("windows", "watermark", "newest", "max_lag", "changes", "added_total",
            "released_total")  # fmt: skip


class SensorController:
    """Online per-sensor control of the backup set.

    Parameters
    ----------
    config : the controller's constants.
    cov : (n, n) covariance of the model in force (the plan version's).
    targets : (n,) base variance targets of the plan (calibrated), >= 0.
    backup : the plan's backup set (indices), the controller's starting set.
    first_window : the id of the first window the controller will be told about (ids
        below it count as applied).
    """

    def __init__(
        self,
        config: ControlConfig,
        cov: np.ndarray,
        targets: np.ndarray,
        backup: Sequence[int],
        first_window: int = 0,
    ) -> None:
        self.config = config
        self.selection = IncrementalSelection(cov, backup, config.refresh_every)
        n = self.selection.n
        self.targets = _check_targets(targets, n)
        self.scale = np.full(n, config.s_start)  # s_i
        self.evidence = np.zeros((n, config.evidence_windows))  # ring of "miss if dropped"
        self.evidence_count = np.zeros(n, dtype=int)
        self.added_at = np.full(n, -config.hold_windows, dtype=int)
        self.misses = np.zeros(n)  # sum of e_t over applied windows (unmeasured: 1)
        self.windows = 0  # windows applied
        self.watermark = int(first_window)  # every window id below it counts as applied
        self.recent: set[int] = set()  # applied ids at or above the watermark
        self.newest = -1
        self.max_lag = 0
        self.changes = 0  # batches that changed the set
        self.added_total = 0
        self.released_total = 0

    # ---------------------------------------------------------------- the loop
    @property
    def backup(self) -> tuple[int, ...]:
        return self.selection.backup

    def effective_targets(self) -> np.ndarray:
        """(n,) ``t_i exp(s_i)``; 0 for sensors at the floor."""
        forced = self.scale <= self.config.s_min
        return np.where(forced, 0.0, self.targets * np.exp(self.scale))

    def observe(self, feedback: Sequence[ShadowFeedback]) -> ControlDecision:
        """Apply a batch of closed windows' feedback and decide the backup set.

        Called once per batch; the set returned governs the windows that open after it.
        Windows already applied (a replayed batch) are ignored.
        """
        applied = sum(self._apply(f) for f in feedback)
        targets = self.effective_targets()
        added = self.selection.repair(targets)
        self.added_at[added] = self.windows
        cfg = self.config
        released = self.selection.release(
            targets, self._releasable(), cfg.release_margin, cfg.max_releases
        )
        if added or released:
            self.changes += 1
            self.added_total += len(added)
            self.released_total += len(released)
        forced = np.flatnonzero(self.scale <= self.config.s_min)
        return ControlDecision(
            self.backup, tuple(added), tuple(released), tuple(int(i) for i in forced), applied
        )

    def rebase(self, cov: np.ndarray, targets: np.ndarray) -> ControlDecision:
        """A new model version (refit): same sensors, new covariance and base targets.

        The scales, evidence and tallies carry over (the guarantee does not depend on
        the model); the set is kept and repaired to the new targets.
        """
        self.selection = IncrementalSelection(cov, self.backup, self.config.refresh_every)
        if self.selection.n != self.targets.size:
            raise ParameterError(
                f"a rebase keeps the sensors: got {self.selection.n}, have {self.targets.size}"
            )
        self.targets = _check_targets(targets, self.targets.size)
        return self.observe(())

    def skip_to(self, window: int) -> int:
        """Windows below ``window`` not applied yet will never come (another process or a
        recovery closed them): stop waiting. They are not applied (``windows`` and the
        bound count only applied windows). Returns how many were skipped."""
        skipped = max(0, int(window) - self.watermark) - sum(1 for w in self.recent if w < window)
        if window > self.watermark:
            self.watermark = int(window)
            self.recent = {w for w in self.recent if w >= self.watermark}
            self._advance_watermark()
        return skipped

    def changes_per_day(self, window_seconds: float) -> float:
        """Decisions that changed the set, per day of applied windows of ``window_seconds``."""
        if not window_seconds > 0:
            raise ParameterError(f"window_seconds must be > 0, got {window_seconds!r}")
        days = self.windows * window_seconds / 86_400.0
        return self.changes / days if days > 0 else 0.0

    def miss_fraction(self) -> np.ndarray:
        """(n,) each sensor's miss fraction over the applied windows (0 before any)."""
        return self.misses / max(self.windows, 1)

    # ---------------------------------------------------------------- inside
    def _apply(self, f: ShadowFeedback) -> int:
        """Apply one window's feedback; 0 if it was applied before, else 1."""
        n = self.targets.size
        miss, rebuilt, counter = check_feedback(f, n)
        if f.window < self.watermark or f.window in self.recent:
            return 0
        self.recent.add(f.window)
        self.newest = max(self.newest, f.window)
        self.max_lag = max(self.max_lag, self.newest - f.window)
        self._advance_watermark()
        aim = self.config.aim
        measured_miss = np.where(np.isnan(miss), 1.0, miss)  # unmeasured: a miss
        forced = self.scale <= self.config.s_min
        backed = np.where(np.isnan(counter), aim, counter)
        backed = np.where(forced, np.minimum(backed, aim), backed)
        u = np.where(rebuilt, measured_miss, backed)
        self.scale = np.minimum(self.config.s_max, self.scale + self.config.gamma * (aim - u))
        self.misses += np.where(rebuilt, measured_miss, 0.0)
        self.windows += 1
        dropped = np.where(rebuilt, miss, counter)  # the sensor's miss as a dropped sensor
        self._record_evidence(dropped)
        return 1

    def _record_evidence(self, dropped: np.ndarray) -> None:
        """Push each measured value into its sensor's ring of the last L."""
        idx = np.flatnonzero(~np.isnan(dropped))
        slot = self.evidence_count[idx] % self.config.evidence_windows
        self.evidence[idx, slot] = dropped[idx]
        self.evidence_count[idx] += 1

    def _releasable(self) -> list[int]:
        """Backed-up sensors with the evidence, the hold and the scale to be released."""
        cfg = self.config
        full = self.evidence_count >= cfg.evidence_windows
        clean = self.evidence.sum(axis=1) <= cfg.aim * cfg.evidence_windows
        held = self.windows - self.added_at < cfg.hold_windows
        ok = full & clean & ~held & (self.scale > cfg.s_min)
        return [j for j in self.backup if ok[j]]

    def _advance_watermark(self) -> None:
        while self.watermark in self.recent:
            self.recent.discard(self.watermark)
            self.watermark += 1
        if len(self.recent) > KEEP_WINDOWS:  # a window that never came: stop waiting
            self.watermark = max(self.watermark, self.newest - KEEP_WINDOWS)
            self.recent = {w for w in self.recent if w >= self.watermark}

    # ---------------------------------------------------------------- state
    def snapshot(self) -> dict[str, Any]:
        """The controller's state as JSON-ready data (the model's covariance is not in
        it: ``restore`` takes it again and checks it is the same by its digest).

        The selection is recomputed from the covariance first, as ``restore`` computes
        it, so a restored controller goes on exactly as this one does.
        """
        self.selection.refresh()
        return {
            "version": SNAPSHOT_VERSION,
            "config": asdict(self.config),
            "cov_digest": _digest(self.selection.cov),
            "targets": self.targets.tolist(),
            "backup": [*self.selection.order, *sorted(self.selection.inert)],
            "scale": self.scale.tolist(),
            "evidence": self.evidence.tolist(),
            "evidence_count": self.evidence_count.tolist(),
            "added_at": self.added_at.tolist(),
            "misses": self.misses.tolist(),
            "counters": {name: int(getattr(self, name)) for name in COUNTERS},
            "recent": sorted(self.recent),
        }

    @classmethod
    def restore(cls, state: dict[str, Any], cov: np.ndarray) -> SensorController:
        """The controller ``snapshot`` described, on the same model covariance ``cov``."""
        return cls._from_state(state, cov, None)

    @classmethod
    def resume(
        cls, state: dict[str, Any], cov: np.ndarray, targets: np.ndarray
    ) -> SensorController:
        """The controller ``snapshot`` described, rebased on another model: ``restore``
        then ``rebase(cov, targets)`` (a process that resumes a run may hold another
        model than the one the snapshot was taken under; the guarantee does not depend
        on the model). The set is the snapshot's, repaired to the new targets by the
        next ``observe``."""
        return cls._from_state(state, cov, targets)

    @classmethod
    def _from_state(
        cls, state: dict[str, Any], cov: np.ndarray, targets: np.ndarray | None
    ) -> SensorController:
        try:
            if state["version"] != SNAPSHOT_VERSION:
                raise ParameterError(f"unknown controller snapshot version {state['version']!r}")
            config = ControlConfig(**state["config"])
            base = np.asarray(state["targets"] if targets is None else targets, float)
            out = cls(config, cov, base, state["backup"])
            if targets is None and _digest(out.selection.cov) != state["cov_digest"]:
                raise ParameterError("the snapshot was taken under another model covariance")
            n = out.targets.size
            out.scale = _array(state["scale"], (n,), float)
            out.evidence = _array(state["evidence"], (n, config.evidence_windows), float)
            out.evidence_count = _array(state["evidence_count"], (n,), int)
            out.added_at = _array(state["added_at"], (n,), int)
            out.misses = _array(state["misses"], (n,), float)
            if set(state["counters"]) != set(COUNTERS):
                raise ParameterError(f"snapshot counters must be {COUNTERS}")
            for name in COUNTERS:
                setattr(out, name, int(state["counters"][name]))
            out.recent = {int(w) for w in state["recent"]}
        except (KeyError, TypeError) as err:
            raise ParameterError(f"not a controller snapshot: {err!r}") from None
        return out


def _check_targets(targets: np.ndarray, n: int) -> np.ndarray:
    t = np.asarray(targets, dtype=float)
    if t.shape != (n,) or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ParameterError(f"targets must be ({n},) finite and >= 0, got shape {t.shape}")
    return t.copy()


def _array(values: Any, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    out: np.ndarray = np.asarray(values, dtype=dtype)
    if out.shape != shape:
        raise ParameterError(f"snapshot array has shape {out.shape}, expected {shape}")
    return out


def _digest(cov: np.ndarray) -> str:
    return "sha256:" + hashlib.sha256(np.ascontiguousarray(cov, "<f8").tobytes()).hexdigest()
