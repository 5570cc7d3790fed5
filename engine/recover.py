"""Offline recovery: a backup config plus the backed-up sensors' data gives every sensor.

This is the proof that an exported config is enough on its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engine.data import LoadOptions, load_history
from engine.errors import ConfigError, DataError
from engine.export import load_config


@dataclass(frozen=True)
class RecoverResult:
    """What ``recover_file`` did."""

    rows: int
    sensors: int
    backup_sensors: int
    rebuilt_sensors: int
    ignored_columns: tuple[str, ...]
    out: str
    backup_values_filled: int  # missing backup readings the loader interpolated
    backup_rows_dropped: int  # rows the loader could not fill (not written)
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def recover_file(
    config_path: str | Path, backup_path: str | Path, out_path: str | Path
) -> RecoverResult:
    """Rebuild all sensors from ``backup_path`` with the map in ``config_path``.

    The backup file holds a time column and (at least) every backup sensor's
    column, wide or long. Extra columns are ignored and reported.
    """
    config = load_config(config_path)
    out = Path(out_path)
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise DataError(f"{out.name}: output must end in .csv or .parquet")
    history = load_history(backup_path, LoadOptions(min_rows=2))
    missing = [s for s in config.backup_sensors if s not in history.sensors]
    if missing:
        raise ConfigError(
            f"{Path(backup_path).name} lacks backup sensor column(s) {', '.join(missing[:5])} "
            "named in the config"
        )
    ignored = tuple(s for s in history.sensors if s not in config.backup_sensors)
    lm = config.linear_map()
    values = lm.apply(
        history.select(list(lm.backup)).values if lm.backup else np.zeros((len(history.times), 0))
    )
    frame = pd.DataFrame(values, columns=list(lm.sensors))
    frame.insert(0, "time", history.times)
    try:
        if out.suffix.lower() == ".csv":
            frame.to_csv(out, index=False)
        else:
            frame.to_parquet(out, index=False)
    except OSError as err:
        raise DataError(f"cannot write {out}: {err.strerror or err}") from err
    return RecoverResult(
        rows=len(frame),
        sensors=len(lm.sensors),
        backup_sensors=len(lm.backup),
        rebuilt_sensors=len(lm.targets),
        ignored_columns=ignored,
        out=str(out),
        backup_values_filled=history.report.n_values_filled,
        backup_rows_dropped=history.report.n_rows_dropped,
        notes=history.report.notes,
    )


@dataclass(frozen=True)
class RangeRecoverResult:
    """What ``recover_dataset`` did."""

    rows: int
    sensors: int
    backup_sensors: int
    rebuilt_sensors: int
    backup_readings: int
    incomplete_rows_dropped: int  # time steps lacking a backup sensor's reading
    plan_versions: tuple[int, ...]
    start: str | None
    end: str | None
    out: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def is_backup_dataset(backup: str | Path) -> bool:
    """A directory (or ``file:`` URI of one) is the job's Parquet backup dataset."""
    from engine.backup_dataset import is_dataset

    return is_dataset(backup)


def recover_dataset(
    config_path: str | Path,
    backup: str | Path,
    out_path: str | Path,
    start: str | None = None,
    end: str | None = None,
) -> RangeRecoverResult:
    """Rebuild every sensor over ``[start, end)`` from the job's backup dataset.

    Reads only the partitions of the range (DuckDB, no Spark). Output is wide:
    ``time`` and one column per sensor, one row per time step holding every
    backup sensor.
    """
    from engine.backup_dataset import TimeRange, read_backup

    config = load_config(config_path)
    out = _check_out(out_path)
    span = TimeRange.parse(start, end)
    long = read_backup(backup, span)
    lm = config.linear_map()
    wide = long.pivot_table(index="event_time", columns="sensor", values="value", aggfunc="last")
    missing = [s for s in lm.backup if s not in wide.columns]
    if missing and len(long):
        raise ConfigError(
            f"the backup holds no readings of backup sensor(s) {', '.join(missing[:5])} "
            "named in the config"
        )
    wide = wide.reindex(columns=list(lm.backup))
    complete = wide.dropna()
    values = lm.apply(complete.to_numpy(dtype=float).reshape(len(complete), len(lm.backup)))
    frame = pd.DataFrame(values, columns=list(lm.sensors))
    frame.insert(0, "time", complete.index.to_numpy())
    _write(frame, out)
    return RangeRecoverResult(
        rows=len(frame),
        sensors=len(lm.sensors),
        backup_sensors=len(lm.backup),
        rebuilt_sensors=len(lm.targets),
        backup_readings=len(long),
        incomplete_rows_dropped=len(wide) - len(complete),
        plan_versions=tuple(sorted(int(v) for v in long["plan_version"].unique())),
        start=None if span.start is None else span.start.isoformat(),
        end=None if span.end is None else span.end.isoformat(),
        out=str(out),
    )


def _check_out(out_path: str | Path) -> Path:
    out = Path(out_path)
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise DataError(f"{out.name}: output must end in .csv or .parquet")
    return out


def _write(frame: pd.DataFrame, out: Path) -> None:
    try:
        if out.suffix.lower() == ".csv":
            frame.to_csv(out, index=False)
        else:
            frame.to_parquet(out, index=False)
    except OSError as err:
        raise DataError(f"cannot write {out}: {err.strerror or err}") from err
