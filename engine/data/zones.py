"""Zone abbreviations DuckDB reads as another country's zone, and the offsets it applied.

DuckDB parses a zone abbreviation after a clock time through ICU, whose three-letter
ids are Java's legacy ones. Most name one zone (``EST`` -05:00, ``MST`` -07:00, ``HST``
-10:00, ``JST`` +09:00, ``EAT`` +03:00) or are tz database zones (``CET``, ``EET``,
``WET``, ``MET``, ``PST8PDT``), and are read as meant. The ones below are read as a zone
other than the one a logger usually means, so the times move by hours with no word (a UK
logger's ``BST`` read as Bangladesh, +06:00, then its change from ``GMT`` to ``BST``
became a false duplicate timestamp). Each was checked against DuckDB 1.5: what it reads,
then what the abbreviation also names. Abbreviations DuckDB does not parse at all
(``CDT``, ``EDT``, ``ADT``, ``CEST``, ``AEST``) are refused as unparsable times already.
"""

from __future__ import annotations

import duckdb
import numpy as np

from engine.errors import DataError

AMBIGUOUS_ZONES = {
    "BST": "Bangladesh, +06:00 (not British Summer Time, +01:00)",
    "IST": "India, +05:30 (not Irish Standard Time, +01:00, or Israel, +02:00)",
    "CST": "US Central, -06:00/-05:00 (not China Standard Time, +08:00, or Cuba)",
    "AST": "Alaska, -09:00/-08:00 (not Atlantic, -04:00, or Arabia Standard Time, +03:00)",
    "NST": "New Zealand, +12:00/+13:00 (not Newfoundland, -03:30)",
    "SST": "Solomon Islands, +11:00 (not Samoa, -11:00, or Singapore, +08:00)",
    "ART": "Egypt, +02:00/+03:00 (not Argentina, -03:00)",
    "ECT": "Central Europe, +01:00/+02:00 (not Ecuador, -05:00)",
}
_AMBIGUOUS = (
    r"\d:\d{2}(:\d{2}(\.\d+)?)?\s*(" + "|".join(AMBIGUOUS_ZONES) + r")\s*$"
)  # fmt: skip
_CLOCK = r"^\s*\d{4}-\d{2}-\d{2}[ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?"  # the local date and time


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def refuse_ambiguous_zones(con: duckdb.DuckDBPyConnection, source: str, name: str) -> None:
    """``DataError`` at the first time in column ``name`` of the table ``raw`` (text)
    that ends in one of ``AMBIGUOUS_ZONES``, saying what DuckDB would read it as."""
    col = _q(name)
    hit = f"coalesce(regexp_matches({col}, '{_AMBIGUOUS}', 'i'), false)"
    count = con.execute(f"SELECT count(*) FROM raw WHERE {hit}").fetchone()
    if not count or not count[0]:
        return
    got = con.execute(f"SELECT {hit} AS bad, {col} AS v FROM raw").fetchnumpy()
    index = int(np.argmax(np.asarray(got["bad"], dtype=bool)))
    value = str(got["v"][index])
    abbreviation = value.strip()[-3:].upper()
    raise DataError(
        f"{source}: column {name!r} row {index + 1}: time {value!r} ends in the zone "
        f"abbreviation {abbreviation}, which names more than one zone: it would be read as "
        f"{AMBIGUOUS_ZONES[abbreviation]}; write a numeric offset (+01:00) or an IANA zone "
        "name (Europe/London) instead"
    )


def offsets_read(con: duckdb.DuckDBPyConnection, name: str, parsed: str, limit: int = 3) -> str:
    """The UTC offsets the zoned times of column ``name`` were read with (``parsed``: the
    SQL reading it as TIMESTAMPTZ), as ``"+05:30"`` or ``"-05:00, -04:00"``; "" when
    the local time cannot be told from the text (another date format)."""
    local = f"TRY_CAST(regexp_extract({_q(name)}, '{_CLOCK}') AS TIMESTAMP)"
    rows = con.execute(
        f"SELECT DISTINCT epoch({local} - CAST({parsed} AS TIMESTAMP)) AS s FROM raw "
        f"WHERE {local} IS NOT NULL ORDER BY s LIMIT {limit + 1}"
    ).fetchall()
    offsets = [_format_offset(float(r[0])) for r in rows if r[0] is not None]
    return ", ".join(offsets[:limit]) + (", ..." if len(offsets) > limit else "")


def _format_offset(seconds: float) -> str:
    minutes = round(abs(seconds) / 60)
    return f"{'-' if seconds < 0 else '+'}{minutes // 60:02d}:{minutes % 60:02d}"
