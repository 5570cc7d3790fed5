"""The plan book of a production job's backup: which plan wrote which rows.

``<backup>/_lacuna/plans/v000001.json``, one file per plan version, written by
the job (``engine.job.plans``) and read here without Spark by
``recover --backup``. Each holds the exported config (schema v3) of the
version, the first micro-batch written under it and why it was made.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import ConfigError
from engine.export.codec import parse_utc
from engine.export.loader import BackupConfig

PLANS_DIR = ("_lacuna", "plans")
REASONS = ("initial", "scheduled", "alert", "control")


def plan_file(version: int) -> str:
    return f"v{version:06d}.json"


def is_plan_file(name: str) -> bool:
    """A version's file ``vNNNNNN.json`` (not a writer's hidden ``.vNNNNNN.json.tmp``, nor
    another JSON file an operator left beside them)."""
    return re.fullmatch(r"v\d+\.json", name) is not None


@dataclass(frozen=True)
class JobPlan:
    """One plan version of the job and the micro-batches from ``first_batch`` on."""

    version: int
    first_batch: int
    reason: str
    detail: str
    config: BackupConfig
    alerted: tuple[str, ...] = ()  # the sensors whose alert made this version
    pinned: tuple[str, ...] = ()  # backed up whatever a re-plan says (alerted twice in a row)

    def __post_init__(self) -> None:
        if self.version < 1 or self.first_batch < 0 or self.reason not in REASONS:
            raise ConfigError(
                f"plan version {self.version!r} (first batch {self.first_batch!r}, "
                f"reason {self.reason!r}) is not a valid plan version"
            )

    @property
    def valid_until_us(self) -> int | None:
        """``valid_until`` as epoch microseconds (None: a v1 config states none)."""
        v = self.config.validity
        if v is None:
            return None
        return int(parse_utc(v["valid_until"]).astype("datetime64[us]").astype(np.int64))

    def to_bytes(self) -> bytes:
        record = {
            "plan_version": self.version,
            "first_batch": self.first_batch,
            "reason": self.reason,
            "detail": self.detail,
            "alerted": list(self.alerted),
            "pinned": list(self.pinned),
            "config": self.config.to_dict(),
        }
        return json.dumps(record, indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> JobPlan:
        try:
            record = json.loads(data)
            return cls(
                version=int(record["plan_version"]),
                first_batch=int(record["first_batch"]),
                reason=str(record["reason"]),
                detail=str(record.get("detail", "")),
                config=BackupConfig.from_dict(record["config"], where),
                alerted=tuple(map(str, record.get("alerted", []))),
                pinned=tuple(map(str, record.get("pinned", []))),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"plan version file {where} is unreadable: {err}") from None


def same_plan(a: BackupConfig, b: BackupConfig) -> bool:
    """The same exported plan (its sensors, backup set and map), whenever it was exported."""
    keys = ("sensors", "backup_sensors", "reconstruction", "parameters")
    return all(a.data.get(k) == b.data.get(k) for k in keys)


def read_plan_book(backup: str | Path) -> dict[int, BackupConfig]:
    """Each version's config from a local (or mounted) backup; empty without a plan book."""
    from engine.backup.dataset import local_path

    root = local_path(backup).joinpath(*PLANS_DIR)
    if not root.is_dir():
        return {}
    found = {}
    for f in sorted(f for f in root.iterdir() if is_plan_file(f.name)):
        plan = JobPlan.from_bytes(f.read_bytes(), str(f))
        found[plan.version] = plan.config
    return found
