"""Offline recovery: a backup config plus the backed-up sensors' data gives every sensor.

This is the proof that an exported config is enough on its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engine.data.history import LoadOptions, load_history
from engine.data.names import spreadsheet_safe
from engine.errors import ConfigError, DataError
from engine.export.config import BackupConfig, iso_utc, load_config, parse_utc


def _column_of(sensor: str, columns: tuple[str, ...]) -> str | None:
    """The backup file's column for ``sensor``: exact, else its spreadsheet-quoted form."""
    if sensor in columns:
        return sensor
    quoted = spreadsheet_safe(sensor)
    return quoted if quoted in columns else None


def _check_finite(values: np.ndarray, sensors: tuple[str, ...]) -> None:
    """Finite coefficients can still overflow on large readings: never write inf or NaN."""
    bad = np.flatnonzero(~np.isfinite(values).all(axis=0))
    if bad.size:
        raise DataError(
            f"rebuilding {sensors[bad[0]]!r} overflows (non-finite values); the config's "
            "coefficients do not fit this data's scale"
        )


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
    warnings: tuple[str, ...] = ()  # printed on stderr by the CLI (exit code stays 0)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def recover_file(
    config_path: str | Path, backup_path: str | Path, out_path: str | Path
) -> RecoverResult:
    """Rebuild all sensors from ``backup_path`` with the map in ``config_path``.

    The backup file holds a time column and (at least) every backup sensor's
    column, wide or long. Extra columns are ignored and reported. A CSV header
    quoted against spreadsheet formulas (``'=x``, as this project writes them)
    matches the config's ``=x``. The CSV written quotes such names the same way
    (``engine.data.names``); Parquet keeps them exact.
    """
    config = load_config(config_path)
    out = Path(out_path)
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise DataError(f"{out.name}: output must end in .csv or .parquet")
    history = load_history(backup_path, LoadOptions(min_rows=2))
    columns = {s: _column_of(s, history.sensors) for s in config.backup_sensors}
    missing = [s for s, column in columns.items() if column is None]
    if missing:
        raise ConfigError(
            f"{Path(backup_path).name} lacks backup sensor column(s) {', '.join(missing[:5])} "
            "named in the config"
        )
    ignored = tuple(s for s in history.sensors if s not in columns.values())
    lm = config.linear_map()
    backup = (
        history.select([str(columns[b]) for b in lm.backup]).values
        if lm.backup
        else np.zeros((len(history.times), 0))
    )
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        values = lm.apply(backup)
    _check_finite(values, lm.sensors)
    csv = out.suffix.lower() == ".csv"
    frame = pd.DataFrame(values, columns=[spreadsheet_safe(s) if csv else s for s in lm.sensors])
    frame.insert(0, "time", history.times)
    try:
        if csv:
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
        warnings=_warnings(config, history.times),
    )


def _warnings(config: BackupConfig, times: np.ndarray) -> tuple[str, ...]:
    found = validity_warning(config, times[0], times[-1]) if len(times) else None
    return () if found is None else (found,)


def validity_warning(config: BackupConfig, first: np.datetime64, last: np.datetime64) -> str | None:
    """One sentence when the backup's times ``first..last`` leave ``fit_end..valid_until``.

    Before ``fit_end`` the plan rebuilds rows it was fitted on (optimistic); after
    ``valid_until`` it is older than its horizon. A v1 config states no validity,
    which is said instead.
    """
    span = f"{iso_utc(first)}..{iso_utc(last)}"
    v = config.validity
    if v is None:
        return (
            f"the backup spans {span}, but this schema v{config.schema_version} config states "
            "no validity period; re-export the plan (schema v2) to check it"
        )
    end, until = parse_utc(v["fit_end"]), parse_utc(v["valid_until"])
    if end <= first and last <= until:
        return None
    return (
        f"the backup spans {span}, outside the plan's validity {v['fit_end']}..{v['valid_until']}; "
        "the plan's guarantee was measured only for that period, so re-plan on recent data"
    )
