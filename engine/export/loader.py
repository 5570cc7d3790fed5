"""The backup config read back: schema check (v1, v2, v3), the validated ``BackupConfig``
and ``load_config``.

The schema files are ``schema/backup_config.v<N>.json``; the aggregate's enum is
filled in from the registry (``engine.aggregates.AGGREGATES``) when a schema is
loaded, so a new aggregate is accepted without editing them. The loader rejects
unknown keys, non-finite numbers and oversized documents (``engine.export.guard``),
the cross-field mistakes a schema cannot state and, last, a v3 config whose seal does
not match its contents (``engine.export.seal``: edited after it was exported).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from engine.aggregates import aggregate_names
from engine.errors import ConfigError
from engine.export.codec import from_config, parse_utc, plan_parameters
from engine.export.guard import check_plain_values, parse_config_text, read_config_text
from engine.export.reconstruction import coefficient_matrix, schema_problem
from engine.export.seal import check_seal
from engine.model.linear import LinearMap
from engine.planning.calibration import CALIBRATIONS
from engine.planning.parameters import PlanParameters
from engine.query import WindowQuery, contract_of

SCHEMA_VERSION = 3
SCHEMA_PATHS = {v: Path(__file__).parent / "schema" / f"backup_config.v{v}.json" for v in (1, 2, 3)}
SCHEMA_PATH = SCHEMA_PATHS[SCHEMA_VERSION]


def load_schema(version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The JSON schema of config ``version``, its aggregate enum the registry's names."""
    return _schema(version, aggregate_names())


@cache
def _schema(version: int, aggregates: tuple[str, ...]) -> dict[str, Any]:
    schema = json.loads(SCHEMA_PATHS[version].read_text())
    aggregate = schema["properties"]["parameters"]["properties"]["aggregate"]
    aggregate["enum"] = list(aggregates)
    return schema


def _top_validator(version: int) -> Any:
    return _validator(version, aggregate_names())


@cache
def _validator(version: int, aggregates: tuple[str, ...]) -> Any:
    """The schema with ``reconstruction`` only required to be an object.

    ``engine.export.reconstruction.schema_problem`` checks that section's
    contents (the bulk of a large config) much faster than ``jsonschema``.
    """
    schema = copy.deepcopy(_schema(version, aggregates))
    schema["properties"]["reconstruction"] = {"type": "object"}
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@dataclass(frozen=True)
class BackupConfig:
    """A validated config, as plain values (round-trips: ``from_dict(to_dict(c)) == c``)."""

    data: dict[str, Any]

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> BackupConfig:
        """Validated (``validate_config``; ``source`` names the data in its errors), copied."""
        validate_config(data, source)
        return cls(json.loads(json.dumps(data)))

    @classmethod
    def _from_parsed(cls, data: Any, source: str = "config") -> BackupConfig:
        """``from_dict`` without its defensive copy, for data just parsed that nobody else holds."""
        validate_config(data, source)
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
    def kept_readings(self) -> tuple[str, ...]:
        """Sensors a crash leaves out of their max/min windows (v3; none when absent)."""
        return tuple(self.data.get("kept_readings", ()))

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self.data["parameters"])

    @property
    def schema_version(self) -> int:
        return int(self.data["schema_version"])

    @property
    def query(self) -> WindowQuery:
        """The window query the config states (``engine.export.codec.from_config``)."""
        return from_config(self.data)

    @property
    def sampling_interval_s(self) -> float:
        """Seconds between two readings of a sensor (the window's readings in time)."""
        return float(self.data["parameters"]["sampling_interval_s"])

    def plan_parameters(self) -> PlanParameters:
        """The planning request behind the config, to plan again the same way."""
        return plan_parameters(self.data)

    @property
    def validity(self) -> dict[str, Any] | None:
        """Fit period and ``valid_until`` (v2); None for a v1 config, which states none."""
        found = self.data.get("validity")
        return None if found is None else dict(found)

    def eps_vector(self) -> np.ndarray:
        """Each sensor's eps, (n,) in ``sensors`` order (v1: the single eps for all)."""
        return self.query.eps_vector(self.sensors)

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


def validate_config(data: Any, source: str = "config") -> None:
    """Schema check plus the cross-field rules a schema cannot say, then the seal (a
    refusal names ``source``, e.g. the file); ``ConfigError``."""
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
    if "time" in sensors:  # recovered files' time column: the loader refuses it as a sensor
        raise ConfigError("sensors must not include 'time', the name of the time column")
    _check_guarantee(data["guarantee"])
    _check_time_scale(data["parameters"])
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
    left = data.get("kept_readings", [])
    wrong = [s for s in left if s not in known or s in kept]
    if wrong:
        raise ConfigError(
            f"kept_readings must be sensors that are not backed up, got {', '.join(wrong[:5])}"
        )
    if left and data["parameters"].get("aggregate") not in ("max", "min"):
        raise ConfigError(
            "kept_readings is for max and min plans only (avg and sum need every reading)"
        )
    if version >= 2:
        _validate_v2(data)
    if version >= 3:
        _check_contract(data)
    from_config(data)  # the query's own rules (a slide longer than the window, ...)
    # last, so that a specific rule's message names the key at fault first
    check_seal(data, source)


MAX_ROWS = 2**31  # the most readings a window, slide, exposure or horizon may span


def _check_contract(data: dict[str, Any]) -> None:
    """``guarantee.contract`` (when stated) is the one ``parameters.exposure`` makes:
    "crash" with an exposure, "range" without; recover and the job read the exposure."""
    exposure = data["parameters"].get("exposure")
    said = data["guarantee"].get("contract")
    expected = contract_of(exposure)
    if said is not None and said != expected:
        raise ConfigError(
            f"guarantee/contract must be {expected!r} for parameters/exposure {exposure!r} "
            f"(crash with an exposure, range without), got {said!r}"
        )


def _check_time_scale(parameters: dict[str, Any]) -> None:
    """Rows and the sampling interval a streaming job can hold: each count at most
    ``MAX_ROWS``, a slide of at least a microsecond (the job counts time in them)."""
    for key in ("window", "slide", "exposure", "horizon"):
        value = parameters.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > MAX_ROWS:
            raise ConfigError(f"parameters/{key} must be at most {MAX_ROWS:,} rows, got {value!r}")
    interval = float(parameters["sampling_interval_s"])
    slide = parameters.get("slide") or parameters["window"]
    if interval * float(slide) < 1e-6:
        raise ConfigError(
            f"parameters/sampling_interval_s x slide must be at least a microsecond, got "
            f"{interval:g} s x {slide}"
        )


def _check_guarantee(guarantee: Any) -> None:
    """What the readers of ``guarantee`` rely on: ``history_rows`` (the rows a re-plan
    learns from) a whole number >= 1, ``verdicts`` an object of sentences (or null)."""
    if not isinstance(guarantee, dict):
        raise ConfigError(f"guarantee must be an object, got {type(guarantee).__name__}")
    rows = guarantee.get("history_rows")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ConfigError(
            f"guarantee/history_rows must be a whole number of rows >= 1 (a re-plan learns "
            f"from as many), got {rows!r}"
        )
    calibration = guarantee.get("calibration")
    method = calibration.get("method") if isinstance(calibration, dict) else None
    if method not in (*CALIBRATIONS, "unmeasured"):
        raise ConfigError(
            f"guarantee/calibration/method must be one of {', '.join(CALIBRATIONS)} or "
            f"unmeasured, got {method!r}"
        )
    verdicts = guarantee.get("verdicts")
    if verdicts is not None and not (
        isinstance(verdicts, dict) and all(isinstance(v, str | None) for v in verdicts.values())
    ):
        raise ConfigError(
            f"guarantee/verdicts must be an object of sentences, got {type(verdicts).__name__}"
        )


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
    # valid_until = fit_end + horizon_rows x sampling interval, as exported: an edited one
    # would stretch the plan's validity (and the job re-plans when it passes)
    seconds = float(v["horizon_rows"]) * float(data["parameters"]["sampling_interval_s"])
    said = float(v["horizon_seconds"])
    gap_us = abs(float((until - end) / np.timedelta64(1, "us")) - seconds * 1e6)
    if abs(said - seconds) > 1e-9 * max(seconds, 1.0) or gap_us > 1.0:
        raise ConfigError(
            f"validity must have valid_until = fit_end + horizon_rows x sampling_interval_s "
            f"({v['horizon_rows']} rows, {seconds:g} s) and horizon_seconds the same, got "
            f"valid_until {v['valid_until']} and horizon_seconds {said:g}"
        )


def load_config(path: str | Path) -> BackupConfig:
    """Read and validate a config file (.json, .yaml or .yml), within ``config_guard``'s limits."""
    src = Path(path)
    text = read_config_text(src)
    fmt = "yaml" if src.suffix.lower() in (".yaml", ".yml") else "json"
    parsed = parse_config_text(text, src.name, fmt)
    if isinstance(parsed, dict) and "schema_version" not in parsed and "plan_version" in parsed:
        parsed = parsed.get("config")  # a job's plan book file (_lacuna/plans/vNNNNNN.json)
    return BackupConfig._from_parsed(parsed, src.name)
