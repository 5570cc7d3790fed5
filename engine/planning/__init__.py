"""Planning: from an operator's tolerance to a measured backup plan, and keeping it honest.

``guarantee``: (eps, delta, window, aggregate) -> the seed's variance targets;
``calibration``: calibrated targets (``plan_on``);
``backtest``: the rolling-origin backtest (``run_backtest``); ``folds``: its folds;
``parameters``: ``PlanParameters``, the operator's request, and its default history and horizon;
``plan``: ``PlanParameters`` -> ``BackupPlan`` (model, selection, calibration, backtest);
``reselect``: a plan's backup set chosen again without refitting (``retarget``, ``pin_backups``);
``savings``: ``Savings``, the backup volume and cost a plan saves;
``monitor``: the live violation tally and its confidence bounds;
``replan``: re-planning when the live monitor alerts;
``control``: per-sensor online control of the backup set from every closed window;
``whatif``: the backup fraction at other eps or delta (model projections).

The names below load their modules on first use (``engine.lazy``).
"""

from typing import TYPE_CHECKING

from engine.lazy import exports

if TYPE_CHECKING:
    from engine.planning.backtest import run_backtest
    from engine.planning.backtest_result import BacktestResult
    from engine.planning.calibration import (
        CALIBRATIONS,
        CalibrationInfo,
        PlanningSpec,
        Progress,
        plan_on,
    )
    from engine.planning.control import (
        ControlConfig,
        ControlDecision,
        SensorController,
        ShadowFeedback,
    )
    from engine.planning.folds import BacktestSettings, fold_origins
    from engine.planning.guarantee import variance_target, window_violation_probability, z_value
    from engine.planning.monitor import (
        MonitorAlert,
        ViolationMonitor,
        rate_lower_bound,
        rate_upper_bound,
    )
    from engine.planning.parameters import PlanParameters, default_history
    from engine.planning.plan import BackupPlan, contract_assessment, make_plan
    from engine.planning.replan import PlanChange, ReplanningMonitor, widen_plan
    from engine.planning.reselect import pin_backups, retarget
    from engine.planning.savings import BYTES_PER_READING, Savings
    from engine.planning.whatif import DELTA_GRID, eps_grid, scaled_eps, whatif_delta, whatif_eps

__all__ = [
    "BYTES_PER_READING",
    "CALIBRATIONS",
    "DELTA_GRID",
    "BacktestResult",
    "BacktestSettings",
    "BackupPlan",
    "CalibrationInfo",
    "ControlConfig",
    "ControlDecision",
    "MonitorAlert",
    "PlanChange",
    "PlanParameters",
    "PlanningSpec",
    "Progress",
    "ReplanningMonitor",
    "Savings",
    "SensorController",
    "ShadowFeedback",
    "ViolationMonitor",
    "contract_assessment",
    "default_history",
    "eps_grid",
    "fold_origins",
    "make_plan",
    "pin_backups",
    "plan_on",
    "rate_lower_bound",
    "rate_upper_bound",
    "retarget",
    "run_backtest",
    "scaled_eps",
    "variance_target",
    "whatif_delta",
    "whatif_eps",
    "widen_plan",
    "window_violation_probability",
    "z_value",
]

if not TYPE_CHECKING:  # type checkers read the imports above
    __getattr__, __dir__ = exports(
        __name__,
        {
            "backtest": ("run_backtest",),
            "backtest_result": ("BacktestResult",),
            "calibration": (
                "CALIBRATIONS",
                "CalibrationInfo",
                "PlanningSpec",
                "Progress",
                "plan_on",
            ),
            "control": ("ControlConfig", "ControlDecision", "SensorController", "ShadowFeedback"),
            "folds": ("BacktestSettings", "fold_origins"),
            "guarantee": ("variance_target", "window_violation_probability", "z_value"),
            "monitor": ("MonitorAlert", "ViolationMonitor", "rate_lower_bound", "rate_upper_bound"),
            "parameters": ("PlanParameters", "default_history"),
            "plan": ("BackupPlan", "contract_assessment", "make_plan"),
            "replan": ("PlanChange", "ReplanningMonitor", "widen_plan"),
            "reselect": ("pin_backups", "retarget"),
            "savings": ("BYTES_PER_READING", "Savings"),
            "whatif": ("DELTA_GRID", "eps_grid", "scaled_eps", "whatif_delta", "whatif_eps"),
        },
    )
