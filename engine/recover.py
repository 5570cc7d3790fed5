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
from engine.sensor_names import spreadsheet_safe


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
    (``engine.sensor_names``); Parquet keeps them exact.
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
    )
