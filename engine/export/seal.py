"""The seal of an exported config: a hash that shows an edit made after export.

Every writer of a schema-v3 config (the CLI's ``plan --out``, the app's Export, the
production job's plan versions and re-plans) goes through
``engine.export.config.plan_to_config``, which adds ``"seal": "sha256:<hex>"``: the
SHA-256 of the config's canonical JSON (keys sorted, no spaces, no NaN) without the
seal itself. The JSON and the YAML file of one config parse to the same values, so
they verify alike.

The loader checks every other rule first (a specific message names the key at fault)
and then refuses a seal that does not match: a config edited by hand can be internally
consistent and still wrong (a backup sensor removed from every section rebuilds the
others with coefficients fitted with it). Nothing in a config is meant to be edited:
docs/OPERATIONS.md and docs/INTERFACES.md tell an operator to re-plan, never to edit
a key, so the seal covers every key.

A v3 config without a seal (an older export, or one whose seal was deleted) is read
unchecked, as v1 and v2 are: the seal catches an edit made by mistake, not one made to
deceive.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from engine.errors import ConfigError

SEAL_KEY = "seal"
SEAL_PREFIX = "sha256:"


def compute_seal(config: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of ``config``'s canonical JSON, its own seal left out. A whole
    number is canonical as a float (``2`` and ``2.0`` are one value: a tool that rewrites
    one as the other, as jq does, has not edited the plan)."""
    try:
        body = _canonical({k: v for k, v in config.items() if k != SEAL_KEY})
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, OverflowError) as err:  # a NaN, a NumPy integer, 1e400
        raise ConfigError(f"config cannot be sealed: {err}") from None
    return SEAL_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` with every integer (not a bool) as a float, recursively."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def seal_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its seal (``compute_seal``) as its last key, in place; returned."""
    config.pop(SEAL_KEY, None)
    config[SEAL_KEY] = compute_seal(config)
    return config


def check_seal(config: Mapping[str, Any], source: str = "config") -> None:
    """``ConfigError`` naming ``source`` when ``config`` holds a seal that does not match
    its contents; nothing when it matches or there is none."""
    said = config.get(SEAL_KEY)
    if said is None:
        return
    if said != compute_seal(config):
        raise ConfigError(
            f"{source}: the plan was edited after it was exported (its seal does not "
            "match); re-plan, or use the exported file unchanged"
        )
