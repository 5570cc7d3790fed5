"""Backup config export (schema v1, JSON or YAML), loader and production snippets.

The config must be enough on its own: with it and the backed-up sensors' data a
production job rebuilds every sensor (``python -m engine recover`` proves it).
Top-level keys are fixed because other tools read them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import yaml

from engine.errors import ConfigError
from engine.plan import BackupPlan
from engine.reconstruct import LinearMap
from engine.snippets import (
    ProductionPaths,
    checkpoint_minutes,
    flink_config,
    run_command,
    spark_script,
)

SCHEMA_PATH = Path(__file__).parent / "schema" / "backup_config.v1.json"
MODEL_NOTE = (
    "model-only probability under the seed's assumptions (errors independent over time, "
    "model never stale); the backtest is the measured figure"
)


@cache
def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def plan_to_config(
    plan: BackupPlan, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> dict[str, Any]:
    """The backup config (schema v1) of ``plan`` as plain JSON-ready data."""
    p, lm = plan.parameters, plan.linear_map
    reconstruction = {
        target: {
            "intercept": float(lm.intercept[i]),
            "coefficients": {b: float(c) for b, c in zip(lm.backup, lm.coef[i], strict=True)},
            "conditional_variance": max(0.0, float(lm.conditional_variance[i])),
        }
        for i, target in enumerate(lm.targets)
    }
    return {
        "schema_version": 1,
        "created_at": now().isoformat(timespec="seconds"),
        "data_fingerprint": plan.data_fingerprint,
        "parameters": {
            "eps": float(p.eps),
            "delta": float(p.delta),
            "window": int(p.window),
            "slide": int(p.effective_slide),
            "aggregate": p.aggregate,
            "sampling_interval_s": float(plan.sampling_interval_s),
        },
        "sensors": list(plan.sensors),
        "backup_sensors": list(plan.backup_sensors),
        "reconstruction": reconstruction,
        "guarantee": _guarantee(plan),
        "savings": plan.savings().to_dict(),
        "production": production_snippets(
            plan.backup_sensors,
            p.effective_slide * plan.sampling_interval_s,
            sampling_interval_s=plan.sampling_interval_s,
        ),
    }


def _guarantee(plan: BackupPlan) -> dict[str, Any]:
    return {
        "method": plan.parameters.method,
        "calibration": plan.calibration.to_dict(),
        "history_rows": plan.history_rows,
        "model": {
            "worst_violation_probability": plan.model_worst_probability,
            "note": MODEL_NOTE,
            "repair": plan.model_note,
        },
        "backtest": None if plan.backtest is None else plan.backtest.to_dict(),
        "verdict": (
            "not measured: no backtest was run for this plan"
            if plan.backtest is None
            else plan.backtest.verdict(plan.parameters.delta)
        ),
        "backtest_note": (
            "not run: this plan's guarantee is unmeasured"
            if plan.backtest is None
            else plan.backtest.note
        ),
    }


def production_snippets(
    backup_sensors: tuple[str, ...],
    checkpoint_interval_s: float,
    paths: ProductionPaths | None = None,
    sampling_interval_s: float = 3600.0,
    flink_minutes: int | None = None,
) -> dict[str, Any]:
    """The run command, a runnable PySpark backup script and Flink 2.x checkpoint keys.

    ``checkpoint_interval_s`` is the slide in seconds; the Flink interval is
    derived from it in minutes (``engine.snippets.checkpoint_minutes``) unless
    ``flink_minutes`` is given.
    """
    paths = paths or ProductionPaths()
    minutes = checkpoint_minutes(checkpoint_interval_s, flink_minutes)
    flink, flink_yaml = flink_config(tuple(backup_sensors), paths, minutes)
    return {
        "run_command": run_command(paths),
        "spark_filter": spark_script(tuple(backup_sensors), paths, sampling_interval_s),
        "flink_config": flink,
        "flink_config_yaml": flink_yaml,
    }


def json_safe(value: Any) -> Any:
    """NaN and infinity are not JSON (strict parsers reject them): write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def dump_config(config: dict[str, Any], fmt: str = "json") -> str:
    """Serialise a config as ``json`` or ``yaml`` text (non-finite numbers as null)."""
    if fmt == "json":
        return json.dumps(json_safe(config), indent=2, allow_nan=False) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(json_safe(config), sort_keys=False)
    raise ConfigError(f"config format must be json or yaml, got {fmt!r}")


def write_config(config: dict[str, Any], path: str | Path) -> Path:
    """Write ``config`` to ``path``; the format follows the extension (.json, .yaml, .yml)."""
    out = Path(path)
    fmt = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(out.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{out.name}: config file must end in .json, .yaml or .yml")
    try:
        out.write_text(dump_config(config, fmt))
    except OSError as err:
        raise ConfigError(f"cannot write config to {out}: {err.strerror}") from err
    return out


@dataclass(frozen=True)
class BackupConfig:
    """A validated config, as plain values (round-trips: ``from_dict(to_dict(c)) == c``)."""

    data: dict[str, Any]

    @classmethod
    def from_dict(cls, data: Any) -> BackupConfig:
        validate_config(data)
        return cls(json.loads(json.dumps(data)))

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.data))

    @property
    def sensors(self) -> tuple[str, ...]:
        return tuple(self.data["sensors"])

    @property
    def backup_sensors(self) -> tuple[str, ...]:
        return tuple(self.data["backup_sensors"])

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self.data["parameters"])

    def linear_map(self) -> LinearMap:
        """Rebuild the reconstruction map from the config alone."""
        backup = self.backup_sensors
        rec = self.data["reconstruction"]
        targets = tuple(s for s in self.sensors if s not in backup)
        coef = np.array([[rec[t]["coefficients"].get(b, 0.0) for b in backup] for t in targets])
        return LinearMap(
            sensors=self.sensors,
            backup=backup,
            targets=targets,
            intercept=np.array([rec[t]["intercept"] for t in targets], dtype=float),
            coef=coef.reshape(len(targets), len(backup)),
            conditional_variance=np.array([rec[t]["conditional_variance"] for t in targets]),
        )


def validate_config(data: Any) -> None:
    """Schema check plus the cross-field rules a schema cannot say; ``ConfigError``."""
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a JSON/YAML object, got {type(data).__name__}")
    try:
        jsonschema.validate(data, load_schema())
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "top level"
        raise ConfigError(f"config invalid at {where}: {err.message}") from None
    sensors, backup = data["sensors"], data["backup_sensors"]
    unknown = [s for s in backup if s not in sensors]
    if unknown:
        raise ConfigError(f"backup_sensors not in sensors: {', '.join(unknown[:5])}")
    expected = {s for s in sensors if s not in backup}
    got = set(data["reconstruction"])
    if got != expected:
        missing, extra = sorted(expected - got), sorted(got - expected)
        raise ConfigError(
            f"reconstruction must cover exactly the non-backup sensors: "
            f"missing {missing[:5]}, unexpected {extra[:5]}"
        )
    for target, entry in data["reconstruction"].items():
        bad = [b for b in entry["coefficients"] if b not in backup]
        if bad:
            raise ConfigError(f"reconstruction of {target} uses non-backup sensor(s) {bad[:5]}")


def load_config(path: str | Path) -> BackupConfig:
    """Read and validate a config file (.json, .yaml or .yml)."""
    src = Path(path)
    try:
        text = src.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read config {src}: {err.strerror}") from err
    try:
        data = yaml.safe_load(text) if src.suffix.lower() in (".yaml", ".yml") else json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0]
        raise ConfigError(
            f"{src.name}: not valid {src.suffix.lstrip('.') or 'json'}: {first}"
        ) from None
    return BackupConfig.from_dict(data)
