"""Backup config export (schema v3, JSON or YAML): a plan as the config, and writing it.

The config must be enough on its own: with it and the backed-up sensors' data a
production job rebuilds every sensor (``python -m engine recover`` proves it).
Top-level keys are fixed because other tools read them; v2 adds one, ``validity``
(the fit period and how long the plan may be used), and per-sensor ``eps`` and
``units`` under ``parameters``; v3 adds ``parameters.exposure`` (the rows one
failure can lose, the crash contract; null for whole windows, the range contract)
and ``seal`` (``engine.export.seal``: the hash that shows an edit after export).
The window query's keys are ``engine.export.codec``'s; reading a config back is
``engine.export.loader``'s (v1, v2 and v3).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from engine.atomic import write_atomically
from engine.data.files import shorten_path
from engine.data.units import sensor_units
from engine.errors import ConfigError, ParameterError
from engine.export.codec import iso_utc, to_config
from engine.export.loader import SCHEMA_VERSION
from engine.export.seal import seal_config
from engine.export.snippets import (
    ProductionPaths,
    contract_text,
    flink_config,
    flink_interval,
    run_command,
    spark_script,
)
from engine.planning.plan import BackupPlan, contract_verdict, contract_verdicts

MODEL_NOTE = (
    "model-only probability that a window rebuilt whole misses eps (the range contract's "
    "case, whatever the plan's contract), under the seed's assumptions (errors independent "
    "over time, model never stale); the backtest is the measured figure"
)


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
    rows = plan.horizon_rows
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
    plan: BackupPlan,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    paths: ProductionPaths | None = None,
) -> dict[str, Any]:
    """The backup config (schema v3) of ``plan`` as plain JSON-ready data: what a plan
    could not measure (no backtest fold) is null, as written, so the config validates
    before it is written (the app's Export refused such a plan over a NaN). ``paths``:
    where the production snippets say the job reads and writes (the config's own file
    name among them; default ``ProductionPaths()``). Sealed (``engine.export.seal``): a
    caller that changes a key must seal it again or the loader refuses it."""
    p, lm = plan.parameters, plan.linear_map
    query = to_config(plan.query, plan.sensors)["parameters"]
    reconstruction = {
        target: {
            "intercept": float(lm.intercept[i]),
            "coefficients": {b: float(c) for b, c in zip(lm.backup, lm.coef[i], strict=True)},
            "conditional_variance": max(0.0, float(lm.conditional_variance[i])),
        }
        for i, target in enumerate(lm.targets)
    }
    by_sensor, exposure = query.pop("eps_by_sensor"), query.pop("exposure")
    shared = set(by_sensor.values())
    if len(shared) == 1:
        # every sensor planned at one eps (an --eps-by-unit covering them all): that is the
        # plan's eps, not the query's default, which no sensor uses; the loader reads the
        # uniform map back as that one eps
        query["eps"] = shared.pop()
    config = {
        "schema_version": SCHEMA_VERSION,
        "created_at": now().isoformat(timespec="seconds"),
        "data_fingerprint": plan.data_fingerprint,
        "parameters": {
            **query,
            "sampling_interval_s": float(plan.sampling_interval_s),
            "eps_by_sensor": by_sensor,
            "units": sensor_units(plan.sensors, p.units),
            "exposure": exposure,
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
            exposure_rows=p.exposure,
            paths=paths,
        ),
        "validity": validity(plan),
    }
    if plan.kept_sensors:  # absent means none, so configs without the rule read as before
        config["kept_readings"] = list(plan.kept_sensors)
    return seal_config(json_safe(config))


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
        "contract": plan.query.contract,
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
    exposure_rows: int | None = None,
) -> dict[str, Any]:
    """The run command, a runnable PySpark backup script and Flink 2.x checkpoint keys.

    ``checkpoint_interval_s`` is the slide in seconds; the Flink interval is
    derived from it in minutes (``engine.export.snippets.checkpoint_minutes``), at most
    the ``exposure_rows`` of a crash-contract plan (``flink_interval``), unless
    ``flink_minutes`` is given. The script and the keys state what the plan's contract
    asks of the job that computes the windows (``contract_text``).
    """
    paths = paths or ProductionPaths()
    exposure_s = None if exposure_rows is None else exposure_rows * sampling_interval_s
    interval = flink_interval(checkpoint_interval_s, flink_minutes, exposure_s)
    contract = contract_text(exposure_rows, sampling_interval_s)
    flink, flink_yaml = flink_config(tuple(backup_sensors), paths, interval, contract)
    return {
        "run_command": run_command(paths),
        "spark_filter": spark_script(tuple(backup_sensors), paths, sampling_interval_s, contract),
        "flink_config": flink,
        "flink_config_yaml": flink_yaml,
    }


def json_safe(value: Any) -> Any:
    """NaN and infinity are not JSON (strict parsers reject them): write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    # A plan's coefficients hold most of a config's values (400,000 at 10,000 sensors):
    # a finite float or a string is kept without a call.
    if isinstance(value, dict):
        return {k: v if _plain(v) else json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [v if _plain(v) else json_safe(v) for v in value]
    return value


def _plain(value: Any) -> bool:
    """A value ``json_safe`` returns as it is, told at a glance."""
    kind = type(value)
    return kind is str or kind is int or (kind is float and math.isfinite(value))


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
    may take a minute: a wrong extension, a directory, a missing or read-only folder, a
    name the system refuses (too long, a folder on the way not searchable). The folder
    must be writable even when the file is: the config is written beside it and renamed
    over it (``write_config``)."""
    out = Path(path)
    config_format(out)
    folder = out.parent if str(out.parent) else Path(".")
    cannot = f"cannot write config to {shorten_path(out, 160)}"
    try:
        if out.is_dir():
            raise ConfigError(f"{cannot}: it is a directory")
        if not folder.is_dir():
            raise ConfigError(f"{cannot}: no directory {str(folder)!r}")
        writable = os.access(folder, os.W_OK) and (not out.exists() or os.access(out, os.W_OK))
    except OSError as err:
        raise ConfigError(f"{cannot}: {err.strerror or err}") from None
    if not writable:
        raise ConfigError(f"{cannot}: permission denied")


def write_config(config: dict[str, Any], path: str | Path) -> Path:
    """Write ``config`` to ``path``; the format follows the extension (.json, .yaml, .yml).

    Replaced whole or not at all (``engine.atomic``): a write that fails (a full
    disk, Ctrl-C) leaves the config that was there.
    """
    out = Path(path)
    text = dump_config(config, config_format(out))
    try:
        write_atomically(out, lambda tmp: tmp.write_text(text))
    except OSError as err:
        raise ConfigError(
            f"cannot write config to {shorten_path(out, 160)}: {err.strerror or err}"
        ) from err
    return out
