"""Open a history file into DuckDB: the table ``raw`` as read, checked before parsing.

``check_file`` refuses a missing, empty, unreadable or unsupported file by
name; ``read_csv`` reads the time candidates as text and everything else as
DOUBLE (falling back to text so the first bad value can be named), and
``read_parquet`` reads a Parquet file. ``engine.data.reader`` decodes ``raw``.
"""

from __future__ import annotations

import csv
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from engine.data.options import LoadOptions
from engine.data.reader import TIME_NAMES
from engine.errors import DataError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "NULL_STRINGS",
    "SUFFIXES",
    "check_file",
    "check_names",
    "connect",
    "exact_path",
    "read_csv",
    "read_parquet",
    "shorten_path",
]

NULL_STRINGS = ["", "NA", "N/A", "NaN", "nan", "NULL", "null", "None"]
SUFFIXES = {".csv": "csv", ".txt": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def connect() -> duckdb.DuckDBPyConnection:
    """In-memory DuckDB, UTC session (naive times are UTC), no progress bar on stdout."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false; SET TimeZone = 'UTC'")
    return con


def check_file(path: Path) -> str:
    """``csv`` or ``parquet`` by suffix; a missing, empty, unreadable or unsupported file raises."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as err:  # a name too long, a loop of links, a permission on the way
        raise DataError(f"{shorten_path(path)}: cannot open: {err.strerror or err}") from None
    if stat.S_ISDIR(info.st_mode):
        raise DataError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise DataError(f"{path}: not a regular file (a device, pipe or socket)")
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(
            f"{path.name}: unsupported file extension {path.suffix!r}; use {', '.join(SUFFIXES)}"
        )
    if info.st_size == 0:
        raise DataError(f"{path.name}: file is empty")
    return kind


def shorten_path(path: Path, limit: int = 80) -> str:
    """``path`` as text, cut in the middle beyond ``limit`` characters."""
    text = str(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def check_names(source: str, names: list[str], what: str = "column") -> None:
    """Reject no columns, a duplicate column name or a NUL in a name, naming it and its
    position. Names that differ only in case are duplicates: DuckDB, which reads the
    file, does not tell them apart (a Parquet file's ``X`` beside ``x`` became ``X_1``).
    ``what`` is ``"sensor"`` for a long file's sensor ids: each becomes a column of the
    backup and recovered files, which this reader reads back."""
    if not names:
        raise DataError(f"{source}: no columns")
    seen: dict[str, str] = {}
    for position, name in enumerate(names, start=1):
        if "\x00" in name:  # SQL text cannot hold it: DuckDB refuses the query itself
            raise DataError(
                f"{source}: {what} {position} ({name.replace(chr(0), '<NUL>')!r}) has a NUL "
                f"character in its name; rename the {what}"
            )
        first = seen.get(name.lower())
        if first == name:
            raise DataError(f"{source}: duplicate {what} name {name!r} ({what} {position})")
        if first is not None:
            raise DataError(
                f"{source}: {what} {position} ({name!r}) differs from {what} {first!r} only in "
                "case, which the reader does not tell apart: rename one"
            )
        seen[name.lower()] = name


def exact_path(path: Path) -> str:
    """``path`` for DuckDB's readers, which expand ``*``, ``?`` and ``[...]`` as globs.

    Each glob character is put in a one-character class (``[[]``, ``[*]``), so the
    pattern matches exactly the file named and nothing beside it.
    """
    return re.sub(r"([\[\]*?])", r"[\1]", str(path))


DELIMITERS = (",", "\t", ";", "|")
SNIFF_LINES = 5  # data lines after the header the delimiter must also split alike


def _read_header(path: Path) -> tuple[list[str], str]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            line = handle.readline()
            sample = [handle.readline() for _ in range(SNIFF_LINES)]
    except UnicodeDecodeError as err:
        raise DataError(f"{path.name}: not UTF-8 text ({err.reason})") from err
    except OSError as err:  # permissions, I/O errors: the file, not its content
        raise DataError(f"{path.name}: cannot read: {err.strerror or err}") from err
    if not line.strip():
        raise DataError(f"{path.name}: file is empty (no header line)")
    tsv = path.suffix.lower() == ".tsv"
    delim = "\t" if tsv else sniff_delimiter(line, [s for s in sample if s.strip()])
    return [n.strip() for n in _fields(line, delim)], delim


def sniff_delimiter(header: str, rows: list[str]) -> str:
    """The delimiter of a CSV whose first line is ``header`` and next lines ``rows``.

    Each candidate splits the lines as CSV does, so a delimiter inside a quoted name
    (``"plant|hall|t1"``) is no field boundary. The choice is the one that splits the
    header into more than one field and every row into as many, the most fields first
    (names holding ``;`` or ``|`` unquoted then lose to the commas that split the
    readings); failing that, the one splitting the header into the most fields (a file
    that is no table is refused later, by its ragged rows).
    """

    def rank(delim: str) -> tuple[bool, int]:
        width = len(_fields(header, delim))
        alike = width > 1 and all(len(_fields(row, delim)) == width for row in rows)
        return alike, width

    return max(DELIMITERS, key=rank)


def _fields(line: str, delim: str) -> list[str]:
    return next(csv.reader([line], delimiter=delim), [])


_DATA_LIKE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|\d{4}-\d{2}-\d{2}([ T].*)?")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}.*")


def check_header(source: str, names: list[str]) -> None:
    """Refuse a first line of readings where the header of column names belongs: every
    field a number or a date, or a field that is a date and time (a file saved without
    its header lost its first row, and its sensors were named by readings)."""
    fields = [n.strip() for n in names]
    if (len(fields) > 1 and all(_DATA_LIKE.fullmatch(n) for n in fields)) or any(
        _TIMESTAMP.fullmatch(n) for n in fields
    ):
        shown = ", ".join(repr(n) for n in names[:3])
        raise DataError(
            f"{source}: the first line ({shown}, ...) holds readings, not column names: add a "
            "header line (the time column's name, then one name per sensor)"
        )


_READ_CSV = "read_csv(?, header = true, auto_detect = false, delim = ?, columns = ?, nullstr = ?)"


def read_csv(con: duckdb.DuckDBPyConnection, path: Path, options: LoadOptions) -> list[str]:
    """Create the table ``raw`` from a CSV (sensors as DOUBLE, falling back to text);
    returns notes for the operator (a header cell without a name)."""
    cells, delim = _read_header(path)
    names = [n or f"column{i}" for i, n in enumerate(cells, start=1)]
    check_names(path.name, names)
    check_header(path.name, names)
    notes = [
        f"column {i} {NO_NAME}: read as {n!r} (a saved row index would be read as a "
        "sensor: drop it, or name the column)"
        for i, (cell, n) in enumerate(zip(cells, names, strict=True), start=1)
        if not cell
    ]
    query = f"CREATE TABLE raw AS SELECT * FROM {_READ_CSV}"
    if delim == ";":
        notes += _thousands_notes(con, path, names)
    # DuckDB's DOUBLE reads digit separators ('41_25' as 4125): a file holding '_' past
    # its header is read as text, where such a value is refused by name
    if len(names) != 3 and options.layout != "long" and not _has_underscore(path):
        text = {names[0], options.time_column} | {n for n in names if n.lower() in TIME_NAMES}
        types = {n: "VARCHAR" if n in text else "DOUBLE" for n in names}
        try:
            con.execute(query, [exact_path(path), delim, types, NULL_STRINGS])
            return drop_trailing_empty(con, cells, notes)
        except duckdb.Error:
            pass  # re-read as text below, which names the offending column and row
    try:
        con.execute(query, [exact_path(path), delim, dict.fromkeys(names, "VARCHAR"), NULL_STRINGS])
    except duckdb.Error as err:
        raise DataError(f"{path.name}: cannot read CSV: {_duckdb_message(err)}") from err
    return drop_trailing_empty(con, cells, notes)


def drop_trailing_empty(
    con: duckdb.DuckDBPyConnection, cells: list[str], notes: list[str]
) -> list[str]:
    """A last header cell without a name over a column without a value (a spreadsheet's
    export ends every line with the delimiter): that column is dropped, not read as a
    sensor with no values. Returns ``notes``, its own in place of the unnamed column's."""
    if len(cells) < 3 or cells[-1]:
        return notes
    name = f"column{len(cells)}"
    quoted = '"' + name.replace('"', '""') + '"'
    filled = con.execute(f"SELECT count({quoted}) FROM raw").fetchone()
    if filled is None or filled[0]:
        return notes
    con.execute(f"ALTER TABLE raw DROP COLUMN {quoted}")
    unnamed = f"column {len(cells)} {NO_NAME}"
    return [n for n in notes if not n.startswith(unnamed)] + [
        f"column {len(cells)} has no name and no value: every line ends with the "
        "delimiter (a spreadsheet export), so it was dropped"
    ]


def _has_underscore(path: Path, chunk: int = 1 << 20) -> bool:
    """Whether a ``_`` follows the header line (the header's names may hold one)."""
    with path.open("rb") as handle:
        handle.readline()
        while block := handle.read(chunk):
            if b"_" in block:
                return True
    return False


# every value holding a '.' has 1-3 digits before it and exactly 3 after: "1.401", as a
# locale writing '.' between thousands (and ';' between fields) writes 1401
_THOUSANDS = r"[-+]?[1-9]\d{0,2}\.\d{3}"  # a leading 0 is no thousands group (0.013)
NO_NAME = "has no name in the header line"  # the note's words (``warning_notes``)
THOUSANDS_LIKE = "as a thousands separator writes them"  # the note's words (``warning_notes``)
THOUSANDS_SAMPLE = 10_000  # rows looked at first; only the columns they suspect are read in full


def _thousands_notes(con: duckdb.DuckDBPyConnection, path: Path, names: list[str]) -> list[str]:
    """Notes naming the columns of a ';'-separated file whose decimals look like
    thousands separators (the file read again as text: its first rows, then the columns
    they suspect in full; errors are left to the read proper). A warning only: 1.401 bar
    is a reading too."""
    source = f"(SELECT * FROM {_READ_CSV} LIMIT {THOUSANDS_SAMPLE})"
    suspects = _thousands_like(con, path, names, names, source)
    if suspects:
        suspects = _thousands_like(con, path, names, list(suspects), _READ_CSV)
    return [
        f"column {name!r}: every value with a '.' has three digits after it (e.g. "
        f"{example!r}), {THOUSANDS_LIKE} in this ';'-separated file: "
        f"read as a decimal point ({example}, not {example.replace('.', '')}); if they are "
        "thousands, remove the separators"
        for name, example in suspects.items()
    ]


def _thousands_like(
    con: duckdb.DuckDBPyConnection, path: Path, names: list[str], columns: list[str], source: str
) -> dict[str, str]:
    """The ``columns`` of ``source`` holding a '.' only as in ``_THOUSANDS``, with an
    example each: one pass over the values as (column, value) pairs, whatever the width
    (an aggregate per column took minutes at 1,000 columns)."""
    picked = ", ".join(map(_quote, columns))
    query = (
        f"SELECT name, count(*) FILTER (WHERE NOT regexp_full_match(v, '{_THOUSANDS}')), "
        f"first(v) FROM (SELECT name, trim(value) AS v FROM (UNPIVOT (SELECT {picked} "
        f"FROM {source}) ON COLUMNS(*) INTO NAME name VALUE value) WHERE contains(value, '.')) "
        "GROUP BY name"
    )
    try:
        rows = con.execute(
            query, [exact_path(path), ";", dict.fromkeys(names, "VARCHAR"), NULL_STRINGS]
        ).fetchall()
    except duckdb.Error:
        return {}
    found = {str(name): str(example) for name, other, example in rows if not other}
    return {c: found[c] for c in columns if c in found}


def read_parquet(con: duckdb.DuckDBPyConnection, path: Path, options: LoadOptions) -> list[str]:
    """Create the table ``raw`` from a Parquet file, without the pandas index pandas
    stored as columns; returns notes for the operator (what became of that index)."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (OSError, ValueError) as err:
        raise DataError(f"{path.name}: not a readable Parquet file ({err})") from err
    check_names(path.name, schema.names)
    star, notes = _without_pandas_index(schema, options)
    try:
        con.execute(f"CREATE TABLE raw AS SELECT {star} FROM read_parquet(?)", [exact_path(path)])
    except duckdb.Error as err:
        raise DataError(f"{path.name}: cannot read Parquet: {_duckdb_message(err)}") from err
    return notes


def _without_pandas_index(schema: pa.Schema, options: LoadOptions) -> tuple[str, list[str]]:
    """The select list for a Parquet file pandas wrote with a non-default index, and notes.

    An unnamed index (``__index_level_0__``: a filtered frame's row numbers) is no sensor:
    left out, said. A named index is a column like any other (what ``reset_index`` gives:
    ``set_index(["time", "sensor"])`` is a long file). An index of datetimes is the time
    column when no other column is named as one: put first (pandas stores the index last),
    named ``time`` if unnamed."""
    import pyarrow as pa

    meta = schema.pandas_metadata or {}
    stored = [c for c in meta.get("index_columns", []) if isinstance(c, str) and c in schema.names]
    named_time = {options.time_column} | {n for n in schema.names if n.lower() in TIME_NAMES}
    timed = any(n in named_time for n in schema.names)
    first, drop, notes = "", [], []
    for name in stored:
        unnamed = name.startswith("__index_level_")
        kind = schema.field(name).type
        if (pa.types.is_timestamp(kind) or pa.types.is_date(kind)) and not (timed or first):
            new = "time" if unnamed and "time" not in schema.names else name
            first = f"{_quote(name)} AS {_quote(new)}, "
            notes.append(f"the pandas index (datetimes, column {name!r}) is the time column")
            drop.append(name)
        elif unnamed:
            notes.append(
                f"column {name!r} is the pandas index saved with the data (the file's pandas "
                "metadata says so), not a sensor: left out"
            )
            drop.append(name)
        else:
            notes.append(
                f"column {name!r} is the pandas index saved with the data: read as a column "
                "(in a wide file, a sensor; drop the index before saving if it is not one)"
            )
    exclude = f" EXCLUDE ({', '.join(map(_quote, drop))})" if drop else ""
    return f"{first}*{exclude}", notes


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_RAGGED = re.compile(
    r"Line: (?P<line>\d+).*?Expected Number of Columns: (?P<want>\d+) Found: (?P<got>\d+)",
    re.DOTALL,
)


def _duckdb_message(err: duckdb.Error) -> str:
    """DuckDB's reason in words an operator reads: a row with more or fewer fields than
    the header is said as such (prose or a note saved as .csv reads so), else its first
    line and the expectation it states."""
    ragged = _RAGGED.search(str(err))
    if ragged is not None:
        line, want, got = ragged["line"], int(ragged["want"]), int(ragged["got"])
        what = (
            "this does not look like a table of readings (a header line of column names, "
            "then one line per time with as many comma-separated fields)"
        )
        return f"line {line} has {got} field(s) where the header line has {want}: {what}"
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    head = lines[0].split("Error: ", 1)[-1] if lines else type(err).__name__
    if any("Invalid unicode" in ln for ln in lines):  # past the header's check of the start
        return f"{head}: the file is not UTF-8 text (save it as UTF-8)"
    # the reason is the line before DuckDB's suggestions ("Possible fixes", "Possible
    # Solution"), after the quoted line, which an open quote stretches over many lines
    fixes = next((i for i, ln in enumerate(lines) if ln.startswith("Possible")), None)
    reason = lines[fixes - 1] if fixes is not None and fixes > 1 else ""
    if reason.startswith("Original Line") or reason.startswith("Expected"):
        reason = ""
    expected = [ln for ln in lines[1:] if ln.startswith("Expected")]
    return "; ".join([head, *([reason.rstrip(".")] if reason else []), *expected])
