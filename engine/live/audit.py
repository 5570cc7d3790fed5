"""Who did what to the pipeline's runs, and when: an append-only log of destructive actions.

Stop, Archive and Delete (and a compaction of a job's backup) change or destroy what an
operator may need later; each is recorded before it is carried out as one JSON line in
``<LACUNA_HOME>/audit.jsonl``: ``at`` (UTC, ISO 8601), ``who`` (the signed-in identity the
app gives), ``action`` and ``detail``. The file lives outside the pipeline directory, so
it outlives the runs it speaks of (an Archive moves them, a Delete removes them). Time is
passed in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from engine.errors import StoreError

AUDIT_FILE = "audit.jsonl"
ACTIONS = ("stop", "archive", "delete", "compact")


@dataclass(frozen=True)
class AuditEntry:
    at: str
    who: str
    action: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class AuditLog:
    """Append and read the audit lines under ``root`` (the app's ``LACUNA_HOME``)."""

    def __init__(self, root: Path, now: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.path = Path(root) / AUDIT_FILE
        self._now = now

    def record(self, action: str, who: str, detail: str = "") -> AuditEntry:
        """Append one entry, flushed to disk before the action is carried out."""
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
        if not who.strip():
            raise ValueError("an audited action needs who did it")
        entry = AuditEntry(self._now().astimezone(UTC).isoformat(), who, action, detail)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(entry.to_dict()) + "\n")
                out.flush()
                os.fsync(out.fileno())
        except OSError as err:
            raise StoreError(
                f"cannot record {action} in {self.path}: {err.strerror or err}; not done"
            ) from None
        return entry

    def entries(self, limit: int = 200) -> list[AuditEntry]:
        """The latest ``limit`` entries, newest first (a torn last line is skipped)."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        except OSError as err:
            raise StoreError(f"cannot read {self.path}: {err.strerror or err}") from None
        out = []
        for line in reversed(lines):
            try:
                item = json.loads(line)
                out.append(AuditEntry(*(str(item[k]) for k in ("at", "who", "action", "detail"))))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash mid-write
            if len(out) >= limit:
                break
        return out
