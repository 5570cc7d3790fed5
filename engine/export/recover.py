"""Offline recovery: a backup config plus the backed-up sensors' data gives every sensor.

This is the proof that an exported config is enough on its own. What it rebuilds is a
range of time steps, whole windows of them: the range contract covers it, whatever the
plan's own contract, and each result says so with the plan's measured figure for it
(``range_guarantee``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.atomic import write_atomically
from engine.data.files import shorten_path
from engine.data.history import LoadOptions, SensorHistory, load_sensors
from engine.data.names import spreadsheet_safe
from engine.errors import ConfigError, DataError, named
from engine.export.codec import iso_utc, parse_utc
from engine.export.loader import BackupConfig, load_config
from engine.export.plan_book import read_plan_book, same_plan
from engine.export.wide import (
    add_empty_steps,
    conflicting_readings,
    infinite_readings,
    overlay,
    rebuild,
    say_uncovered,
    widen,
)
from engine.model.linear import LinearMap


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
    contract: str = "range"  # whole windows rebuilt
    guarantee: str = ""  # the plan's measured range-contract verdict (``range_guarantee``)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def recover_file(
    config_path: str | Path, backup_path: str | Path, out_path: str | Path
) -> RecoverResult:
    """Rebuild all sensors from ``backup_path`` with the map in ``config_path``.

    The backup file holds a time column and (at least) every backup sensor's
    column, wide or long. Only the time and the backup sensors are read (the map
    rebuilds every other sensor from them alone): other columns (the failed sensors,
    a note) are neither parsed nor checked, and are reported in ``ignored_columns``.
    A CSV header quoted against spreadsheet formulas (``'=x``, as this project writes
    them) matches the config's ``=x``. The CSV written quotes such names the same way
    (``engine.data.names``); Parquet keeps them exact.

    A time step where a backup sensor has no reading is not rebuilt (dropped, counted
    and said): a filled-in reading would be written out as if it had been backed up, and
    a file is read in whole rows. (Recovery from the job's backup dataset keeps such a
    step's other readings: ``recover_dataset``.)
    """
    config = load_config(config_path)
    out = _check_out(out_path, backup_path)
    if not config.backup_sensors:  # the map would write its means at every time step
        from engine.planning.plan import NO_BACKUP  # the error path only: planning is heavy

        raise DataError(f"nothing to recover from {Path(backup_path).name}: {NO_BACKUP}")
    names = [n for s in config.backup_sensors for n in (s, spreadsheet_safe(s))]
    # the backup sensors only, their gaps dropped (a filled-in reading would be written
    # out as if it had been backed up)
    history, ignored = load_sensors(backup_path, names, LoadOptions(min_rows=2, missing="drop"))
    columns = {s: _column_of(s, history.sensors) for s in config.backup_sensors}
    missing = [s for s, column in columns.items() if column is None]
    if missing:
        raise ConfigError(
            f"{Path(backup_path).name} lacks backup sensor column(s) {', '.join(missing[:5])} "
            "named in the config"
        )
    ignored += tuple(s for s in history.sensors if s not in columns.values())
    lm = config.linear_map()
    backup = (
        history.select([str(columns[b]) for b in lm.backup]).values
        if lm.backup
        else np.zeros((len(history.times), 0))
    )
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        values = lm.apply(backup)
    _check_finite(values, lm.sensors)
    rows = _write(values, history.times, lm.sensors, out)
    return RecoverResult(
        rows=rows,
        sensors=len(lm.sensors),
        backup_sensors=len(lm.backup),
        rebuilt_sensors=len(lm.targets),
        ignored_columns=ignored,
        out=str(out),
        backup_values_filled=history.report.n_values_filled,
        backup_rows_dropped=history.report.n_rows_dropped,
        notes=history.report.notes,
        # the loader's notes an operator must not miss (readings that look like thousands
        # separators, an unsteady interval, early dates), as `plan` prints them
        warnings=tuple(history.report.warning_notes())
        + _warnings(config, history.times)
        + _gaps(history)
        + _rate(config, history),
        guarantee=range_guarantee(config),
    )


def _rate(config: BackupConfig, history: SensorHistory) -> tuple[str, ...]:
    """One sentence when the backup's readings come at another interval than the plan's:
    its windows count readings, so they would span another time, and the model was
    fitted at the plan's rate."""
    planned, found = config.sampling_interval_s, history.report.sampling_interval_s
    if not found or abs(found - planned) <= 0.01 * planned:
        return ()
    return (
        f"the backup's readings come every {found:g} s, the plan's every {planned:g} s: "
        f"its windows of {config.parameters['window']} readings span another time and its "
        "model was fitted at the plan's rate, so the plan's guarantee does not cover this "
        "backup; re-plan on data at this rate",
    )


def _gaps(history: SensorHistory) -> tuple[str, ...]:
    dropped = history.report.n_rows_dropped
    if not dropped:
        return ()
    return (
        f"{dropped} time step(s) where a backup sensor has no reading were not rebuilt "
        "(left out of the output: a backup file's rows are read whole)",
    )


def range_guarantee(config: BackupConfig) -> str:
    """One line: the range contract covers a rebuilt range, and what the plan measured for it.

    A crash-contract plan (schema v3, ``exposure`` m) states its range verdict beside its
    crash one (``guarantee.verdicts.range``): its crash figure covers a failure that
    loses at most m rows while the windows' state survives, never a range rebuilt here.
    A v1 or v2 config's ``verdict`` is the range contract's (the only one then).
    """
    guarantee = config.data.get("guarantee") or {}
    exposure = config.parameters.get("exposure")
    verdict = (guarantee.get("verdicts") or {}).get("range")
    if verdict is None and exposure is None:  # a range plan's only verdict is the range one
        verdict = guarantee.get("verdict")
    head = "range contract (whole windows rebuilt from the backup)"
    if exposure is not None:
        head += (
            f"; the plan's crash contract ({exposure} row{'' if exposure == 1 else 's'} lost, "
            "window state kept) does not cover a rebuilt range"
        )
    return f"{head}: {verdict or 'not measured: the config states no range verdict'}"


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
            "no validity period; re-export the plan (schema v2 or later) to check it"
        )
    end, until = parse_utc(v["fit_end"]), parse_utc(v["valid_until"])
    if end <= first and last <= until:
        return None
    return (
        f"the backup spans {span}, outside the plan's validity {v['fit_end']}..{v['valid_until']}; "
        "the plan is meant for that period only (its guarantee was backtested on the history "
        "before fit_end): before it, rows the plan was fitted on are rebuilt and look better "
        "than they will; after it, re-plan on recent data"
    )


@dataclass(frozen=True)
class RangeRecoverResult:
    """What ``recover_dataset`` did."""

    rows: int
    sensors: int
    backup_sensors: int
    rebuilt_sensors: int
    backup_readings: int
    # time steps lacking a reading of a backup sensor of their version: written with the
    # readings the backup holds there, the sensors the version rebuilds left empty
    incomplete_rows: int
    plan_versions: tuple[int, ...]
    start: str | None
    end: str | None
    out: str
    warnings: tuple[str, ...] = ()
    contract: str = "range"  # whole windows rebuilt
    guarantee: str = ""  # the plan's measured range-contract verdict (``range_guarantee``)
    # readings of rebuilt sensors the backup held (a batch over the plan's exposure backs
    # up every sensor): written as read, not rebuilt
    stored_readings: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def is_backup_dataset(backup: str | Path) -> bool:
    """A directory (or ``file:`` URI of one) is the production job's Parquet backup dataset."""
    from engine.backup.dataset import is_dataset

    return is_dataset(backup)


def recover_dataset(
    config_path: str | Path,
    backup: str | Path,
    out_path: str | Path,
    start: str | None = None,
    end: str | None = None,
    allow_incomplete: bool = False,
) -> RangeRecoverResult:
    """Rebuild every sensor over ``[start, end)`` from the job's backup dataset.

    Reads only the partitions of the range (DuckDB, no Spark). Output is wide:
    ``time`` and one column per sensor, one row per time step the backup holds a
    reading of. A step lacking a reading of a backup sensor of its plan version
    cannot be rebuilt by the map: its row holds the readings the backup has, the
    sensors the version rebuilds are left empty, and ``incomplete_rows`` counts it (a
    step where only sensors outside the plan were read is such a step too).

    When the job re-planned, the backup keeps its plan versions
    (``_lacuna/plans``); each time step is rebuilt with the version that wrote
    it (the newest one among its readings), and ``config_path`` must be one of
    them. Without a plan book every row is rebuilt with ``config_path``.

    A committed batch that is not whole (``engine.backup.integrity``) is refused by
    name; with ``allow_incomplete`` the rest is rebuilt and each gap is a warning.
    """
    from engine.backup import check_batches
    from engine.backup.dataset import TimeRange, local_path, nothing_in, read_backup_arrow

    config = load_config(config_path)
    out = _check_out(out_path, local_path(backup))
    span = TimeRange.parse(start, end)
    gaps = check_batches(local_path(backup), allow_incomplete) if allow_incomplete else ()
    long = read_backup_arrow(backup, span, allow_incomplete)
    if long is None or not long.num_rows:  # an empty answer would look like a recovery
        from engine.planning.plan import NO_BACKUP  # the error path only: planning is heavy

        why = "" if config.backup_sensors else f" ({NO_BACKUP})"
        raise DataError(nothing_in(backup, span) + why)
    readings = long.num_rows
    configs, unbooked = _version_configs(config, backup, _plan_versions(long))
    maps = {v: c.linear_map() for v, c in configs.items()}
    union = tuple(dict.fromkeys(b for m in maps.values() for b in m.backup))
    # sensors outside every plan version: the job backed them up in full, so they come
    # back as they were read, in columns after the plan's (nothing it kept is left out)
    planned = {s for m in maps.values() for s in m.sensors}
    names = set(long["sensor"].unique().to_pylist()) - {None}
    outside = tuple(sorted(names - planned))
    lm = maps[max(maps)]
    # sensors the plan rebuilds whose readings the backup holds anyway (a micro-batch
    # over the plan's exposure backs up every sensor): written as read where read
    stored = tuple(s for s in lm.sensors if s in names and s not in union)
    times, both = add_empty_steps(long, *widen(long, union + outside + stored))
    wide, raw = both[:, : len(union)], both[:, len(union) : len(union) + len(outside)]
    odd = infinite_readings(wide, times, union)  # missing: its step is not rebuilt
    as_read = both[:, len(union) :]  # outside and stored readings, written as read: never inf
    odd_read = infinite_readings(as_read, times, outside + stored, backup=False)
    versions = (
        _step_versions(long, times)
        if len(maps) > 1
        else np.full(len(times), min(maps), dtype=np.int64)  # one map: nothing to choose
    )
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        kept, values = _rebuild_by_version(maps, union, wide, versions)
    absent = _absent_backup_sensors(maps, union, wide, versions)
    if absent and not kept.any():  # nothing rebuilt: the backup is not this plan's
        raise ConfigError(f"the backup holds no readings of {absent}: nothing can be rebuilt")
    _check_finite(values[kept], lm.sensors)
    found = 0
    if stored:
        held = both[:, len(union) + len(outside) :]
        values, found = overlay(values, lm.sensors, held, stored)
    # a sensor another version backs up, read at a step whose version rebuilds it (a
    # micro-batch over the exposure stored it), and every reading of a step the map cannot
    # rebuild (a backup sensor's reading is missing): the reading, not the rebuild
    extra = _rebuilt_but_read(maps, union, wide, versions)
    held = extra | (~kept[:, None] & ~np.isnan(wide))
    if held.any():
        values, _ = overlay(values, lm.sensors, np.where(held, wide, np.nan), union)
        found += int(extra.sum())  # a backup sensor's own reading is no extra one
    if outside:
        values = np.hstack([values, raw])
    # every step the backup recorded is a row, one with nothing read too (counted below)
    rows = _write(values, times, lm.sensors + outside, out)
    stamps = np.asarray(times, dtype="datetime64[ns]")
    used = versions
    warnings = [gap.warning(span) for gap in gaps]
    warnings += [w for v in np.unique(used) for w in _warnings(configs[int(v)], stamps[used == v])]
    warnings += [w for w in (unbooked, odd, odd_read) if w]
    if absent:
        warnings.append(f"the range holds no readings of {absent}: none of its steps is rebuilt")
    torn = int((~kept).sum())
    if torn:
        warnings.append(
            f"{torn} time step(s) lack a reading of a backup sensor of their plan version: "
            "written with the readings the backup holds, the sensors the plan rebuilds left "
            "empty there"
        )
    warnings += [clash] if (clash := conflicting_readings(long)) else []
    warnings += say_uncovered(times, span.start, span.end, config.sampling_interval_s)
    if outside:
        warnings.append(
            f"{len(outside)} sensor(s) outside the plan ({', '.join(outside[:5])}) were "
            "backed up in full: their readings follow the plan's columns, as read"
        )
    return RangeRecoverResult(
        rows=rows,
        sensors=len(lm.sensors),
        backup_sensors=len(lm.backup),
        rebuilt_sensors=len(lm.targets),
        backup_readings=readings,
        incomplete_rows=torn,
        plan_versions=_plan_versions(long),
        start=None if span.start is None else span.start.isoformat(),
        end=None if span.end is None else span.end.isoformat(),
        out=str(out),
        warnings=tuple(warnings),
        guarantee=range_guarantee(config),
        stored_readings=found,
    )


def _version_configs(
    config: BackupConfig, backup: str | Path, present: tuple[int, ...]
) -> tuple[dict[int, BackupConfig], str]:
    """The config of each plan version with rows in the range, and a warning ("" if none):
    without a plan book every row is rebuilt with ``config``, which the warning says when
    the range holds rows of several versions (a backup written by the exported snippet,
    whose plan version is raised with each new plan)."""
    book = read_plan_book(backup)
    if not book:
        several = (
            f"the range holds rows of plan versions {', '.join(map(str, present))} and the "
            "backup keeps no plan book: every row was rebuilt with --config; rebuild each "
            "version's rows with its own config (--from/--to)"
            if len(present) > 1
            else ""
        )
        return ({v: config for v in present} or {1: config}), several
    if not any(same_plan(c, config) for c in book.values()):
        raise ConfigError(
            f"--config is none of the backup's {len(book)} plan version(s): pass the "
            "config the job was started with (or any version it wrote)"
        )
    lost = [v for v in present if v not in book]
    if lost:
        raise ConfigError(f"the backup's plan book lacks version(s) {lost} that wrote its rows")
    return ({v: book[v] for v in present} or {max(book): book[max(book)]}), ""


def _step_versions(long: pa.Table, times: np.ndarray) -> np.ndarray:
    """Each time step's plan version: the newest among its readings (as ``widen`` keys them)."""
    newest = long.group_by("event_time").aggregate([("plan_version", "max")])
    at = newest["event_time"].to_numpy()
    version = newest["plan_version_max"].to_numpy()
    order = np.argsort(at)
    where = np.searchsorted(at[order], times)
    return version[order][np.clip(where, 0, len(at) - 1)].astype(np.int64)


def _rebuild_by_version(
    maps: dict[int, LinearMap], union: tuple[str, ...], wide: np.ndarray, versions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows kept (every backup sensor of their version read) and all sensors rebuilt there
    (T, n): NaN at the other rows, which the map cannot rebuild."""
    column = {s: j for j, s in enumerate(union)}
    keep = np.zeros(len(wide), dtype=bool)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for v, lm in maps.items():
        cols = [column[b] for b in lm.backup]
        rows = (versions == v) & ~np.isnan(wide[:, cols]).any(axis=1)
        keep |= rows
        parts.append((rows, rebuild(lm, wide[np.ix_(rows, cols)])))
    if len(parts) == 1 and keep.all():
        return keep, parts[0][1]
    out = np.full((len(wide), len(next(iter(maps.values())).sensors)), np.nan)
    for rows, values in parts:
        out[rows] = values
    return keep, out


def _absent_backup_sensors(
    maps: dict[int, LinearMap], union: tuple[str, ...], wide: np.ndarray, versions: np.ndarray
) -> str:
    """The backup sensors of a plan version with no reading at any of its steps, each
    with its version ("backup sensor(s) a, b of plan version 2; ..."), or ""."""
    column = {s: j for j, s in enumerate(union)}
    said = []
    for v, lm in sorted(maps.items()):
        steps = versions == v
        if not steps.any():
            continue
        block = wide if steps.all() else wide[steps]  # one version: no copy
        read = ~np.isnan(block).all(axis=0)  # every column at once (a loop was 11x slower)
        none = [b for b in lm.backup if not read[column[b]]]
        if none:
            said.append(
                f"backup sensor(s) {named(none)} of plan version {v} ({int(steps.sum())} step(s))"
            )
    return "; ".join(said)


def _rebuilt_but_read(
    maps: dict[int, LinearMap], union: tuple[str, ...], wide: np.ndarray, versions: np.ndarray
) -> np.ndarray:
    """(T, len(union)): a reading of a union sensor at a step whose version rebuilds it."""
    held = ~np.isnan(wide)
    for v, lm in maps.items():
        backed = np.isin(np.asarray(union), lm.backup)
        held[np.ix_(versions == v, backed)] = False
    return held


def _plan_versions(long: pa.Table | None) -> tuple[int, ...]:
    if long is None:
        return ()
    return tuple(sorted(int(v) for v in long["plan_version"].unique().to_pylist()))


def _check_out(out_path: str | Path, backup: str | Path) -> Path:
    """The output path: .csv or .parquet, and never the backup itself or inside it (the
    rebuilt readings would overwrite or join what they were rebuilt from)."""
    out = Path(out_path)
    if out.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise DataError(f"{out.name}: output must end in .csv or .parquet")
    try:
        source = Path(backup).resolve()
        # a second name of the backup file (a hard link) resolves elsewhere: same file
        same = out.exists() and source.exists() and os.path.samefile(out, source)
        if same or out.resolve() == source or source in out.resolve().parents:
            raise DataError(f"--out {str(out)!r} would overwrite the backup it rebuilds from")
    except OSError as err:  # a name too long, a folder on the way not searchable
        raise DataError(f"cannot write {shorten_path(out)}: {err.strerror or err}") from None
    return out


def _write(values: np.ndarray, times: np.ndarray, sensors: tuple[str, ...], out: Path) -> int:
    """Write ``time`` + one column per sensor (``values`` (T, n)); the rows written.

    The file is replaced whole or not at all (``engine.atomic``): a write that
    fails (a full disk, Ctrl-C) leaves the file that was there.

    CSV names are quoted against formulas. Parquet goes straight through
    pyarrow: pandas' ``to_parquet`` spent 0.15 s on 1,056 columns converting
    them one by one.
    """
    try:
        if out.suffix.lower() == ".csv":
            frame = pd.DataFrame(values, columns=[spreadsheet_safe(s) for s in sensors])
            frame.insert(0, "time", times)
            write_atomically(out, lambda tmp: frame.to_csv(tmp, index=False))
        else:
            table = _table(values, times, sensors)
            write_atomically(out, lambda tmp: _write_parquet(table, tmp))
    except OSError as err:
        raise DataError(f"cannot write {out}: {err.strerror or err}") from err
    return len(times)


def _table(values: np.ndarray, times: np.ndarray, sensors: tuple[str, ...]) -> pa.Table:
    """``time`` + one float64 column per sensor, as ``DataFrame.to_parquet`` would lay them out."""
    columns = np.asfortranarray(values, dtype=float)  # each column contiguous: no copy per column
    # NaN (a sensor left empty) as null, as pandas writes it and as the CSV's empty cell
    arrays = [pa.array(times)]
    arrays += [pa.array(columns[:, j], from_pandas=True) for j in range(len(sensors))]
    return pa.Table.from_arrays(arrays, names=["time", *sensors])


def _write_parquet(table: pa.Table, out: Path) -> None:
    # Dictionary encoding only for ``time``: rebuilt readings are (almost) all
    # distinct, so pyarrow's default tries a dictionary per column and gives up.
    # Microseconds, as Spark stores timestamps (it refuses Parquet's nanoseconds).
    pq.write_table(
        table,
        out,
        use_dictionary=["time"],
        coerce_timestamps="us",
        allow_truncated_timestamps=True,
    )
