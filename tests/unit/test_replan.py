"""The live monitor re-plans on a regime change and leaves a stationary stream alone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engine.aggregates import window_errors
from engine.data import SensorHistory, load_history
from engine.planning import (
    BacktestSettings,
    BackupPlan,
    PlanParameters,
    ReplanningMonitor,
    make_plan,
)

DRIFT = Path(__file__).resolve().parents[2] / "sample_data" / "synthetic_drift.csv"
WINDOW, EPS = 10, 1.0  # the shipped drift sample changes regime at row 1200


@pytest.fixture(scope="module")
def drift() -> SensorHistory:
    return load_history(DRIFT)


@pytest.fixture(scope="module")
def plan(drift: SensorHistory) -> BackupPlan:
    params = PlanParameters(eps=EPS, delta=0.05, window=WINDOW, history=600)
    return make_plan(drift.rows(0, 1100), params, backtest=BacktestSettings(history=600))


def shadow_errors(plan: BackupPlan, segment: SensorHistory) -> np.ndarray:
    """What the pipeline's shadow check computes for the closed windows of a segment."""
    backup = segment.select(list(plan.backup_sensors)).values
    return window_errors(segment.values, plan.linear_map.apply(backup), WINDOW, WINDOW, "avg")


def stream(history: SensorHistory, start: int, stop: int, plan: BackupPlan):
    applied: list[tuple[BackupPlan, str]] = []
    position = {"row": start}
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: history.rows(max(0, position["row"] - 400), position["row"]),
        apply=lambda new, reason: applied.append((new, reason)),
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )
    first_alert = None
    for row in range(start, stop, 5 * WINDOW):  # five windows a micro-batch
        position["row"] = row + 5 * WINDOW
        segment = history.rows(row, row + 5 * WINDOW)
        alert = monitor.observe(
            shadow_errors(monitor.plan, segment), monitor.plan.linear_map.targets
        )
        if alert is not None and first_alert is None:
            first_alert = row
    return monitor, applied, first_alert


def test_no_alert_while_the_stream_is_stationary(drift: SensorHistory, plan: BackupPlan) -> None:
    monitor, applied, first = stream(drift, 600, 1200, plan)
    assert first is None and applied == [] and monitor.changes == []


def test_regime_change_raises_an_alert_and_widens_the_plan(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    monitor, applied, first = stream(drift, 1100, 2000, plan)
    assert first is not None and 1200 <= first < 1500
    new, reason = applied[0]
    assert set(plan.backup_sensors) <= set(new.backup_sensors)
    assert len(new.backup_sensors) > len(plan.backup_sensors)
    assert "live violation rate" in reason and "added" in reason
    assert not new.measured  # re-planned live: the monitor, not a backtest, measures it
    change = monitor.changes[0]
    assert change.added and change.to_dict()["at"] == "2026-01-01T00:00:00+00:00"


def test_a_failed_replan_is_logged_and_does_not_raise(
    drift: SensorHistory, plan: BackupPlan
) -> None:
    applied: list[object] = []
    monitor = ReplanningMonitor(
        plan,
        recent=lambda: drift.select(list(drift.sensors[:3])),  # not the plan's sensors
        apply=lambda new, reason: applied.append(new),
    )
    errors = np.full((20, len(plan.sensors)), 10.0)
    alert = monitor.observe(errors, plan.linear_map.targets)
    assert alert is not None and applied == []
    assert "re-plan failed" in monitor.changes[0].reason
    assert monitor.plan is plan
