"""Backup config export (schema v3, JSON or YAML), loader and production snippets.

The config must be enough on its own: with it and the backed-up sensors' data a
production job rebuilds every sensor (``python -m engine recover`` proves it).
Top-level keys are fixed because other tools read them; v2 adds one, ``validity``
(the fit period and how long the plan may be used), and per-sensor ``eps`` and
``units`` under ``parameters``; v3 adds ``parameters.exposure`` (the rows one
failure can lose, the crash contract; null for whole windows, the range contract).
The loader reads v1, v2 and v3.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pandas as pd
import yaml

from engine.data.units import sensor_units
from engine.errors import ConfigError, ParameterError
from engine.export.guard import check_plain_values, parse_config_text, read_config_text
from engine.export.reconstruction import coefficient_matrix, schema_problem
from engine.export.snippets import (
    ProductionPaths,
    checkpoint_minutes,
    flink_config,
    run_command,
    spark_script,
)
from engine.model.linear import LinearMap
from engine.planning.plan import BackupPlan, contract_verdict, contract_verdicts

SCHEMA_VERSION = 3
SCHEMA_PATHS = {v: Path(__file__).parent / "schema" / f"backup_config.v{v}.json" for v in (1, 2, 3)}
SCHEMA_PATH = SCHEMA_PATHS[SCHEMA_VERSION]
MODEL_NOTE = (
    "model-only probability under the seed's assumptions (errors independent over time, "
    "model never stale); the backtest is the measured figure"
)


@cache
def load_schema(version: int = SCHEMA_VERSION) -> dict[str, Any]:
    return json.loads(SCHEMA_PATHS[version].read_text())


@cache
def _top_validator(version: int) -> Any:
    """The schema with ``reconstruction`` only required to be an object.

    ``engine.export.reconstruction.schema_problem`` checks that section's
    contents (the bulk of a large config) much faster than ``jsonschema``.
    """
    schema = copy.deepcopy(load_schema(version))
    schema["properties"]["reconstruction"] = {"type": "object"}
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def iso_utc(t: np.datetime64) -> str:
    """``2016-09-01T00:00:00Z``: a naive-UTC time as ISO 8601 with its zone."""
    return pd.Timestamp(t).isoformat() + "Z"


def parse_utc(text: str) -> np.datetime64:
    """The inverse of ``iso_utc``: a naive-UTC ``datetime64[ns]``."""
    try:
        stamp = pd.Timestamp(text)
    except ValueError as err:
        raise ConfigError(f"not an ISO 8601 time: got {text!r} ({err})") from None
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert(None)
    return np.datetime64(stamp.to_datetime64(), "ns")


def horizon_rows(plan: BackupPlan) -> int:
    """Rows the plan is meant to be used for before re-planning.

    The plan's own horizon when planning states one; otherwise the rows the
    backtest kept each fold's plan for (its step), or one window when unmeasured:
    the longest stretch anything measured the plan over.
    """
    rows = getattr(plan, "horizon_rows", None) or getattr(plan.parameters, "horizon", None)
    if rows is None:
        rows = plan.backtest.step if plan.backtest is not None else plan.parameters.window
    return int(rows)


LAST_TIME = pd.Timestamp.max.floor("s").to_datetime64()  # 2262-04-11T23:47:16: ns timestamps


def valid_until(fit_end: np.datetime64, rows: int, sampling_interval_s: float) -> np.datetime64:
    """``fit_end + rows x sampling interval``; a ``ParameterError`` when that passes the
    last time a timestamp holds (it would wrap around to a date centuries back)."""
    seconds = rows * sampling_interval_s
    end: np.datetime64 = pd.Timestamp(fit_end).to_datetime64()
    # in whole seconds as Python ints: ns arithmetic near 2262 or before 1970 overflows int64
    room = int(LAST_TIME.astype("datetime64[s]").astype(np.int64)) - int(
        end.astype("datetime64[s]").astype(np.int64)
    )
    if not seconds <= room:
        raise ParameterError(
            f"a horizon of {rows:,} rows of {sampling_interval_s:g} s from the fit's end "
            f"{iso_utc(end)} runs past {iso_utc(LAST_TIME)}, the last time a timestamp "
            f"holds; use a horizon of at most {int(room // sampling_interval_s):,} rows"
        )
    return end + np.timedelta64(round(seconds * 1e9), "ns")


def validity(plan: BackupPlan) -> dict[str, Any]:
    """Fit period, horizon and ``valid_until = fit_end + horizon x sampling interval``."""
    if plan.fit_start is None or plan.fit_end is None:
        raise ConfigError("the plan does not know the times it was fitted on")
    rows = horizon_rows(plan)
    seconds = rows * float(plan.sampling_interval_s)
    until = valid_until(plan.fit_end, rows, float(plan.sampling_interval_s))
    return {
        "fit_start": iso_utc(plan.fit_start),
        "fit_end": iso_utc(plan.fit_end),
        "horizon_rows": rows,
        "horizon_seconds": seconds,
        "valid_until": iso_utc(until),
    }


def plan_to_config(
    plan: BackupPlan, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> dict[str, Any]:
    """The backup config (schema v3) of ``plan`` as plain JSON-ready data: what a plan
    could not measure (no backtest fold) is null, as written, so the config validates
    before it is written (the app's Export refused such a plan over a NaN)."""
    p, lm = plan.parameters, plan.linear_map
    reconstruction = {
        target: {
            "intercept": float(lm.intercept[i]),
            "coefficients": {b: float(c) for b, c in zip(lm.backup, lm.coef[i], strict=True)},
            "conditional_variance": max(0.0, float(lm.conditional_variance[i])),
        }
        for i, target in enumerate(lm.targets)
    }
    eps = plan.eps_per_sensor
    config = {
        "schema_version": SCHEMA_VERSION,
        "created_at": now().isoformat(timespec="seconds"),
        "data_fingerprint": plan.data_fingerprint,
        "parameters": {
            "eps": float(p.eps),
            "delta": float(p.delta),
            "window": int(p.window),
            "slide": int(p.effective_slide),
            "aggregate": p.aggregate,
            "sampling_interval_s": float(plan.sampling_interval_s),
            "eps_by_sensor": {s: float(e) for s, e in zip(plan.sensors, eps, strict=True)},
            "units": sensor_units(plan.sensors, p.units),
            "exposure": p.exposure,
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
        "validity": validity(plan),
    }
    return json_safe(config)


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
        "contract": "range" if plan.parameters.exposure is None else "crash",
        "exposure_rows": plan.parameters.exposure,
        "verdict": (
            "not measured: no backtest was run for this plan"
            if plan.backtest is None
            else contract_verdict(plan.backtest, plan.parameters.delta)
        ),
        "verdicts": contract_verdicts(plan.backtest, plan.parameters.delta),
        "warnings": list(plan.warnings),
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
    derived from it in minutes (``engine.export.snippets.checkpoint_minutes``) unless
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


def config_format(path: str | Path) -> str:
    """ "json" or "yaml" from the extension; ``ConfigError`` otherwise."""
    out = Path(path)
    fmt = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(out.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{out.name}: config file must end in .json, .yaml or .yml")
    return fmt


def check_config_out(path: str | Path) -> None:
    """``ConfigError`` now for a config path that cannot be written, before a plan that
    may take a minute: a wrong extension, a directory, a missing or read-only folder."""
    out = Path(path)
    config_format(out)
    folder = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise ConfigError(f"cannot write config to {out}: it is a directory")
    if not folder.is_dir():
        raise ConfigError(f"cannot write config to {out}: no directory {str(folder)!r}")
    if not os.access(out if out.exists() else folder, os.W_OK):
        raise ConfigError(f"cannot write config to {out}: permission denied")


def write_config(config: dict[str, Any], path: str | Path) -> Path:
    """Write ``config`` to ``path``; the format follows the extension (.json, .yaml, .yml)."""
    out = Path(path)
    fmt = config_format(out)
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

    @classmethod
    def _from_parsed(cls, data: Any) -> BackupConfig:
        """``from_dict`` without its defensive copy, for data just parsed that nobody else holds."""
        validate_config(data)
        return cls(data)

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

    @property
    def schema_version(self) -> int:
        return int(self.data["schema_version"])

    @property
    def validity(self) -> dict[str, Any] | None:
        """Fit period and ``valid_until`` (v2); None for a v1 config, which states none."""
        found = self.data.get("validity")
        return None if found is None else dict(found)

    def eps_vector(self) -> np.ndarray:
        """Each sensor's eps, (n,) in ``sensors`` order (v1: the single eps for all)."""
        given = self.data["parameters"].get("eps_by_sensor", {})
        eps = float(self.data["parameters"]["eps"])
        return np.array([float(given.get(s, eps)) for s in self.sensors])

    def linear_map(self) -> LinearMap:
        """Rebuild the reconstruction map from the config alone."""
        backup = self.backup_sensors
        kept = set(backup)
        targets = tuple(s for s in self.sensors if s not in kept)
        intercept, coef, variance = coefficient_matrix(self.data["reconstruction"], targets, backup)
        return LinearMap(
            sensors=self.sensors,
            backup=backup,
            targets=targets,
            intercept=intercept,
            coef=coef,
            conditional_variance=variance,
        )


def validate_config(data: Any) -> None:
    """Schema check plus the cross-field rules a schema cannot say; ``ConfigError``."""
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a JSON/YAML object, got {type(data).__name__}")
    check_plain_values(data)  # before the schema: depth, JSON types, finite numbers by path
    version = data.get("schema_version")
    if isinstance(version, bool) or version not in SCHEMA_PATHS:
        raise ConfigError(
            f"schema_version must be one of {', '.join(map(str, SCHEMA_PATHS))}, got {version!r}"
        )
    _check_schema(data, int(version))
    sensors, backup = data["sensors"], data["backup_sensors"]
    known, kept = set(sensors), set(backup)  # sets: a 1,000-sensor plan has 150,000 coefficients
    unknown = [s for s in backup if s not in known]
    if unknown:
        raise ConfigError(f"backup_sensors not in sensors: {', '.join(unknown[:5])}")
    expected = {s for s in sensors if s not in kept}
    got = set(data["reconstruction"])
    if got != expected:
        missing, extra = sorted(expected - got), sorted(got - expected)
        raise ConfigError(
            f"reconstruction must cover exactly the non-backup sensors: "
            f"missing {missing[:5]}, unexpected {extra[:5]}"
        )
    for target, entry in data["reconstruction"].items():
        if len(entry["coefficients"]) == len(kept) and entry["coefficients"].keys() <= kept:
            continue
        bad = [b for b in entry["coefficients"] if b not in kept]
        if bad:
            raise ConfigError(f"reconstruction of {target} uses non-backup sensor(s) {bad[:5]}")
        # a coefficient deleted by hand would rebuild as 0 x that sensor, silently
        lacking = [b for b in backup if b not in entry["coefficients"]]
        raise ConfigError(
            f"reconstruction of {target} lacks coefficient(s) of backup sensor(s) "
            f"{lacking[:5]} (an exported plan writes every one, 0 included)"
        )
    if version >= 2:
        _validate_v2(data)


def _check_schema(data: dict[str, Any], version: int) -> None:
    """``jsonschema.validate(data, load_schema(version))``, the same verdict and error, fast.

    The fixed top of the document goes through ``jsonschema``; the
    ``reconstruction`` section through ``schema_problem``. When either finds a
    problem, the full ``jsonschema`` validation runs to word the error as it
    always has (it picks the most relevant of several); should it pass where
    the fast check did not, the fast check's finding is the error, so a
    disagreement can only ever refuse.
    """
    top_ok = _top_validator(version).is_valid(data)
    found = schema_problem(data["reconstruction"]) if top_ok else None
    if top_ok and found is None:
        return
    try:
        jsonschema.validate(data, load_schema(version))
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "top level"
        raise ConfigError(f"config invalid at {where}: {err.message}") from None
    path, reason = found or ((), "the schema refuses it")
    raise ConfigError(f"config invalid at {'/'.join(('reconstruction', *path))}: {reason}")


def _validate_v2(data: dict[str, Any]) -> None:
    """Per-sensor maps cover exactly the sensors; the validity period is in order."""
    sensors = set(data["sensors"])
    for key in ("eps_by_sensor", "units"):
        got = set(data["parameters"][key])
        if got != sensors:
            raise ConfigError(
                f"parameters/{key} must name every sensor once: missing "
                f"{sorted(sensors - got)[:5]}, unexpected {sorted(got - sensors)[:5]}"
            )
    v = data["validity"]
    start, end, until = (parse_utc(v[k]) for k in ("fit_start", "fit_end", "valid_until"))
    if not start <= end <= until:
        raise ConfigError(
            f"validity must have fit_start <= fit_end <= valid_until, got "
            f"{v['fit_start']}, {v['fit_end']}, {v['valid_until']}"
        )


def load_config(path: str | Path) -> BackupConfig:
    """Read and validate a config file (.json, .yaml or .yml), within ``config_guard``'s limits."""
    src = Path(path)
    text = read_config_text(src)
    fmt = "yaml" if src.suffix.lower() in (".yaml", ".yml") else "json"
    parsed = parse_config_text(text, src.name, fmt)
    if isinstance(parsed, dict) and "schema_version" not in parsed and "plan_version" in parsed:
        parsed = parsed.get("config")  # a job's plan book file (_lacuna/plans/vNNNNNN.json)
    return BackupConfig._from_parsed(parsed)
