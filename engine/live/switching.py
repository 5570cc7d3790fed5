"""Plan switching for the live pipeline: a queued plan becomes a plan version.

``set_spec``/``queue`` park a new plan; the next micro-batch runs under it as
a new ``PlanVersion`` (starting at the store's next sequence number), and
once that batch commits the version is the plan in force. A replayed batch
that had already committed the version installs the stored one.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime
from typing import Any

import pandas as pd

from engine.live.spec import StreamSpec
from engine.live.status import StatusBoard
from engine.live.store import BackupStore
from engine.live.versions import PendingPlan, PlanVersion


class PlanSwitching:
    """Mixin of ``LivePipeline``: the plan in force and the one queued behind it."""

    store: BackupStore
    board: StatusBoard
    _spec_lock: threading.Lock
    _version: PlanVersion
    _pending: PendingPlan | None
    _history: dict[int, PlanVersion]  # every version this process has run, by id

    def set_spec(
        self,
        spec: StreamSpec,
        reason: str,
        *,
        kind: str = "manual",
        calibration: dict[str, Any] | None = None,
    ) -> None:
        """Queue a new plan; it becomes a plan version at the next micro-batch.

        ``kind`` is the version's reason (initial, scheduled, alert, manual),
        ``reason`` the sentence logged with it. A newer queued plan replaces an
        older one that has not taken effect yet.
        """
        self.queue(PendingPlan(spec, kind, reason, self.store.now(), calibration or {}))

    def queue(self, pending: PendingPlan) -> None:
        """Queue ``pending`` (e.g. one a failed run had not installed yet)."""
        with self._spec_lock:
            self._version.spec.check_compatible(pending.spec)
            self._pending = pending
        self.store.log_plan(pending.detail, pending.spec.backup_sensors)
        self.board.mark("replan", pending.detail)

    @property
    def pending(self) -> PendingPlan | None:
        """A queued plan that has not taken effect yet."""
        with self._spec_lock:
            return self._pending

    @property
    def spec(self) -> StreamSpec:
        with self._spec_lock:
            return self._version.spec

    @property
    def version(self) -> PlanVersion:
        """The plan version in force (the last batch's)."""
        with self._spec_lock:
            return self._version

    def _batch_version(self, pdf: pd.DataFrame) -> PlanVersion:
        """The version this batch runs under: a queued plan takes effect here."""
        with self._spec_lock:
            pending, current = self._pending, self._version
        if pending is None:
            return current
        new = current.following(pending, self.store.horizon() + 1)
        first_time = _first_time(pdf)
        return replace(new, first_time=first_time) if first_time is not None else new

    def _install(self, version: PlanVersion) -> None:
        """After the batch that started ``version`` committed: it is the plan in force."""
        with self._spec_lock:
            if version.id <= self._version.id:
                return
            if self._pending is not None and self._pending.spec is version.spec:
                self._pending = None
            self._version = version
            self._history[version.id] = version
        self.board.add(plan_changes=1)
        self.board.update(plan_version=version.id)

    def _install_stored_version(self) -> None:
        """A replayed batch already committed a queued plan's version: take it as in force."""
        with self._spec_lock:
            pending, current = self._pending, self._version
        if pending is None:
            return
        stored = [r for r in self.store.read_versions() if r.id == current.id + 1]
        if stored:
            self._install(current.following(pending, stored[0].first_seq))


def _first_time(pdf: pd.DataFrame) -> datetime | None:
    return _edge_time(pdf, "min")


def _last_time(pdf: pd.DataFrame) -> datetime | None:
    return _edge_time(pdf, "max")


def _edge_time(pdf: pd.DataFrame, how: str) -> datetime | None:
    if not len(pdf):
        return None
    t = pd.to_datetime(pdf["event_time"], utc=True).agg(how)
    return None if pd.isna(t) else t.to_pydatetime()
