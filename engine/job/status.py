"""What a production job has done, read from its backup location with DuckDB (no Spark).

The ``run`` job (``engine.job.run``) keeps beside its backup:

* ``_lacuna/plans/vNNNNNN.json``: the plan versions and why each was made;
* ``_lacuna/metrics/batch_id=N/part-00000.json``: one JSON line per micro-batch
  (readings, closed windows, rebuilt windows, misses, seconds);
* ``_lacuna/results/batch_id=N/part-00000.pq``: every closed window's true and
  rebuilt aggregate per sensor, its miss and its plan version (Parquet; named
  ``.parquet`` by jobs before, still read);
* ``_lacuna/events/NNNNNNNNNNNN-<event>.json``: alerts, re-plans, expiries;
* ``_lacuna/run.json``: the last start's contract, exposure and durability.

``read_job_status`` gathers them for the console and ``engine status``: a local
or mounted path, as ``recover --backup`` reads. Live rates count rebuilt
windows only (a backed-up sensor is recovered exactly), each sensor judged as
the job's monitor judges a range plan: above ``delta`` by its test valid however often
it is checked (``engine.planning.monitor.alerting``), over at least ``MIN_WINDOWS``. Those
rates are whole windows rebuilt (the range contract, what ``recover`` over a range
needs); a crash plan's monitor measures m-row losses instead, and the summary states
which contract the shadow check measured and, for a crash plan, its windows and
missed fractions under the version in force (``shadow_contract``, ``crash_*``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from engine.backup.dataset import RESULTS_SUFFIXES, batch_files, local_path
from engine.errors import ConfigError, DataError
from engine.export.plan_book import PLANS_DIR, JobPlan, is_plan_file
from engine.job.record import CHECKED, find_record_gaps, results_after
from engine.planning.monitor import (
    CONFIDENCE,
    MIN_WINDOWS,
    alerting,
    rate_lower_bounds,
    rate_upper_bound,
)
from engine.planning.verdict import disjoint_share
from engine.query import contract_of

BATCH_COLUMNS = (
    "batch_id", "plan_version", "readings", "windows", "rebuilt_pairs", "misses",
    "seconds", "last_window_end", "rows", "over_exposure",
    "contract", "crash_windows", "crash_misses", "control", "version_pairs", "version_misses",
)  # fmt: skip
RATE_COLUMNS = (
    "plan_version", "sensor", "windows", "misses", "rate", "lower95", "upper95", "above_delta"
)  # fmt: skip


@dataclass(frozen=True)
class JobStatus:
    """A production job's record: versions, per-batch metrics, live rates, events."""

    backup: str
    versions: tuple[JobPlan, ...]  # oldest first
    batches: pd.DataFrame  # BATCH_COLUMNS, one row per micro-batch, in order
    rates: pd.DataFrame  # RATE_COLUMNS, per version and sensor, rebuilt windows only
    events: tuple[dict, ...]  # newest first
    # the last start's contract, exposure and durability (``engine.job.exposure``);
    # empty for a job that did not record them
    run: dict = field(default_factory=dict)
    # one sentence per part of the record found missing (``find_record_gaps``)
    gaps: tuple[str, ...] = ()
    # when the newest metrics file was written (its modification time, seconds since
    # 1970; None: none): the wall clock of the job's last batch, where event times of the
    # windows say nothing of whether it still runs
    written_at: float | None = None

    @property
    def in_force(self) -> JobPlan:
        return self.versions[-1]

    @property
    def delta(self) -> float:
        return self.in_force.config.query.delta

    def version_rates(self, version: int | None = None) -> pd.DataFrame:
        """Rates under ``version`` (default: the version in force), worst first."""
        v = self.in_force.version if version is None else int(version)
        rows = self.rates[self.rates["plan_version"] == v]
        return rows.sort_values(["rate", "windows"], ascending=False).reset_index(drop=True)

    def summary(self) -> dict[str, object]:
        """The headline: how much ran, under which plan, and is it holding."""
        b, current = self.batches, self.version_rates()
        pairs, misses = int(current["windows"].sum()), int(current["misses"].sum())
        every_pair, every_miss = int(self.rates["windows"].sum()), int(self.rates["misses"].sum())
        validity = self.in_force.config.validity or {}
        exposure = self.in_force.config.query.exposure
        return {
            "batches": len(b),
            "readings": int(b["readings"].sum()) if len(b) else 0,
            "last_window_end": b["last_window_end"].dropna().iloc[-1]
            if b["last_window_end"].notna().any()
            else None,
            "plan_version": self.in_force.version,
            "plan_reason": self.in_force.reason,
            "versions": len(self.versions),
            "valid_until": validity.get("valid_until"),
            "backup_sensors": len(self.in_force.config.backup_sensors),
            "sensors": len(self.in_force.config.sensors),
            # the monitor's figures under the version in force: (window, rebuilt sensor)
            # pairs checked, those that missed; every version's beside them
            "rates_version": self.in_force.version,
            "rebuilt_pairs": pairs,
            "misses": misses,
            "miss_rate": misses / pairs if pairs else None,
            "all_versions": {
                "rebuilt_pairs": every_pair,
                "misses": every_miss,
                "miss_rate": every_miss / every_pair if every_pair else None,
            },
            "delta": self.delta,
            "sensors_above_delta": self._above_delta(current),
            # (version, sensor) pairs an alert named, each once: the job logs a sensor's
            # alert once per version, again after a restart
            "alerts": sum(len(named) for named in self._alerted().values()),
            # micro-batches over the plan's exposure: each backed up every sensor
            "batches_over_exposure": int(b["over_exposure"].eq(True).sum()),
            "contract": contract_of(exposure),
            "exposure_rows": exposure,
            **self._shadow_contract(),
            "rows_per_trigger": self.run.get("rows_per_trigger"),
            "durability": self.run.get("durability"),
            "online_control": self._online_control(),
            "record_gaps": list(self.gaps),
            "newest_batch_written_at": None
            if self.written_at is None
            else datetime.fromtimestamp(self.written_at, UTC).isoformat(timespec="seconds"),
        }

    def _online_control(self) -> dict | None:
        """The online controller's figures after the last batch that ran it
        (``engine.job.control``: windows applied, miss bound, delay, set changes); None
        when no batch did (``--no-control``, ``--no-replan``, or a job before it)."""
        found = [c for c in self.batches["control"] if isinstance(c, dict)]
        return found[-1] if found else None

    def _alerted(self) -> dict[int, set[str]]:
        """Plan version -> the sensors its alert events named."""
        out: dict[int, set[str]] = {}
        for e in self.events:
            if e.get("event") == "alert" and e.get("plan_version") is not None:
                named = out.setdefault(int(e["plan_version"]), set())
                named.update(str(s) for s in e.get("sensors", ()))
        return out

    def _above_delta(self, current: pd.DataFrame) -> int:
        """Sensors whose live misses were above delta by the monitor's test under the
        version in force, under the contract its plan promises. The monitor's test is
        valid however often it is checked because a sensor that crossed it once alerted:
        the sensors its alert events named (for a crash plan, over m-row losses,
        ``engine.job.crash_check``), and for a range plan also those the final totals put
        above it (the rates' ``above_delta``, for a job that logged no event)."""
        named = self._alerted().get(self.in_force.version, set())
        if self.in_force.config.query.exposure is None:
            now = current.loc[current["above_delta"].astype(bool), "sensor"].astype(str)
            named = named | set(now)
        return len(named)

    def _shadow_contract(self) -> dict[str, object]:
        """What the monitor measured under the version in force: whole windows rebuilt
        (``range``: ``live_rates`` are its figures) or m-row losses (``crash``: each
        window counts the fraction of its failure positions that missed)."""
        if self.in_force.config.query.exposure is None:
            return {"shadow_contract": "range"}
        b = self.batches[self.batches["plan_version"] == self.in_force.version]
        windows = int(b["crash_windows"].fillna(0).sum())
        missed = float(b["crash_misses"].fillna(0).sum())
        return {
            "shadow_contract": "crash",
            "crash_windows": windows,
            "crash_misses": round(missed, 6),
            "crash_miss_rate": missed / windows if windows else None,
            "live_rates_contract": "range (whole windows rebuilt)",
            # the whole-window figure beside it, which this plan does not promise
            "range_sensors_above_delta": int(self.version_rates()["above_delta"].sum()),
        }

    def to_dict(self, events: int = 20) -> dict[str, object]:
        """``engine status``'s answer: the headline, the versions, the version in force's
        sensors with their live rates (worst first) and the latest ``events``."""
        return {
            "backup": self.backup,
            "summary": self.summary(),
            "versions": [
                {
                    "plan_version": p.version,
                    "first_batch": p.first_batch,
                    "reason": p.reason,
                    "detail": p.detail,
                    "valid_until": (p.config.validity or {}).get("valid_until"),
                    "backup_sensors": list(p.config.backup_sensors),
                    "pinned": list(p.pinned),
                }
                for p in self.versions
            ],
            "live_rates": self.version_rates().to_dict(orient="records"),
            "events": list(self.events[:events]),
        }


def read_job_status(backup: str | Path) -> JobStatus:
    """The job's record at ``backup`` (``DataError`` when there is none to read, or the
    file system refuses the path: a name too long, no permission)."""
    root = local_path(backup)
    try:
        return _read_job_status(root, backup)
    except OSError as err:
        raise DataError(
            f"cannot read the backup at {str(backup)!r}: {err.strerror or err}"
        ) from None


def _read_job_status(root: Path, backup: str | Path) -> JobStatus:
    from engine.backup import check_batches

    if not root.is_dir():
        raise DataError(f"no backup directory at {str(backup)!r}")
    plans = root.joinpath(*PLANS_DIR)
    names = (
        sorted(f.name for f in plans.iterdir() if is_plan_file(f.name)) if plans.is_dir() else []
    )
    if not names:
        raise DataError(
            f"{str(backup)!r} holds no production job's plan book (_lacuna/plans): "
            "point at the --backup of `python -m engine run`"
        )
    try:
        versions = tuple(
            sorted(
                (JobPlan.from_bytes((plans / n).read_bytes(), str(plans / n)) for n in names),
                key=lambda p: p.version,
            )
        )
    except ConfigError as err:
        raise DataError(str(err)) from None
    check_batches(root)  # a committed batch not whole: its batches would be counted anyway
    lacuna = root / "_lacuna"
    metrics = _files(lacuna / "metrics", ".json")
    batches, rates = _batches(metrics), _rates(lacuna / "results", versions)
    newest = int(batches["batch_id"].max()) if batches["batch_id"].notna().any() else -1
    in_flight = results_after(lacuna / "results", newest)
    return JobStatus(
        backup=str(backup),
        versions=versions,
        batches=batches,
        rates=rates,
        events=_events(lacuna / "events"),
        run=_run(lacuna / "run.json"),
        gaps=find_record_gaps(batches, rates, in_flight),
        # the newest batch's file (a compaction rewrites older ones, later): when it ran
        written_at=metrics[-1].stat().st_mtime if metrics else None,
    )


def _files(folder: Path, suffix: str | tuple[str, ...]) -> list[Path]:
    """``batch_id=N/*<suffix>`` under ``folder``, in batch order (hidden names skipped;
    batches a compaction holds read from it, once)."""
    return [f for _, f in batch_files(folder, suffix, marked=False)]


def _batches(files: list[Path]) -> pd.DataFrame:
    """One row per micro-batch from its metrics ``files`` (``_files``, in batch order)."""
    rows = []
    for f in files:
        try:
            lines = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as err:
            raise DataError(f"job metrics file {f} is unreadable: {err}") from None
        if not all(isinstance(line, dict) for line in lines):
            raise DataError(f"job metrics file {f} is unreadable: a line is not a JSON object")
        rows += lines
    frame = pd.DataFrame(rows)
    for c in BATCH_COLUMNS:
        if c not in frame:
            frame[c] = pd.Series(dtype=float)
    out = frame[list(BATCH_COLUMNS)].drop_duplicates("batch_id", keep="last")
    return out.sort_values("batch_id").reset_index(drop=True)


def _rates(folder: Path, versions: tuple[JobPlan, ...]) -> pd.DataFrame:
    """Per version and rebuilt sensor: its checked windows, misses, rate, bounds and the
    monitor's verdict (``above_delta``)."""
    current = versions[-1]
    files = _files(folder, RESULTS_SUFFIXES)
    if not files:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in RATE_COLUMNS})
    con = duckdb.connect()
    try:
        frame = con.execute(
            "SELECT plan_version, sensor, count(*) AS windows, "
            "count(*) FILTER (WHERE miss) AS misses "
            f"FROM read_parquet(?) WHERE {CHECKED} GROUP BY plan_version, sensor",
            [[str(f) for f in files]],
        ).df()
    except duckdb.Error as err:
        raise DataError(f"the job's results under {folder} are unreadable: {err}") from None
    finally:
        con.close()
    query = current.config.query
    w, m = frame["windows"].astype(int), frame["misses"].astype(int)
    frame["rate"] = m / w
    frame["lower95"] = rate_lower_bounds(m.to_numpy(), w.to_numpy(), CONFIDENCE)
    frame["upper95"] = [rate_upper_bound(a, b, CONFIDENCE) for a, b in zip(m, w, strict=True)]
    # the job's monitor's test: each version's rebuilt sensors, its windows' disjoint share
    share = disjoint_share(query.window, query.effective_slide)
    # the monitor's divisor: the sensors each version rebuilds (a rebuilt sensor with no
    # checked window yet counts), or more if the results name more
    rebuilds = {v.version: len(v.config.sensors) - len(v.config.backup_sensors) for v in versions}
    seen = frame.groupby("plan_version")["sensor"].transform("size").to_numpy()
    named = frame["plan_version"].map(rebuilds).fillna(0).to_numpy()
    watched = np.maximum(seen, named)
    frame["above_delta"] = alerting(
        m.to_numpy(), w.to_numpy(), query.delta, watched, CONFIDENCE, share, MIN_WINDOWS
    )
    return frame[list(RATE_COLUMNS)]


def _run(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"job start record {path} is unreadable: {err}") from None
    if not isinstance(record, dict):
        raise DataError(f"job start record {path} is unreadable: not a JSON object")
    return record


def _events(folder: Path) -> tuple[dict, ...]:
    if not folder.is_dir():
        return ()
    out = []
    for name in sorted(os.listdir(folder)):
        if name.startswith((".", "_")) or not name.endswith(".json"):
            continue
        try:
            event = json.loads((folder / name).read_text())
        except (OSError, ValueError) as err:
            raise DataError(f"job event file {folder / name} is unreadable: {err}") from None
        if not isinstance(event, dict):
            raise DataError(f"job event file {folder / name} is unreadable: not a JSON object")
        out.append((name.split("-", 1)[0], str(event.get("logged_at", "")), name, event))
    # newest first: by batch, then by when each was kept (events before logged_at: by name)
    return tuple(e for *_, e in sorted(out, key=lambda t: t[:3], reverse=True))
