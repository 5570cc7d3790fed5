"""A corpus of hostile and awkward history files, written small into a directory.

Each case is a file name, its bytes and what the loader must do with it: either
raise ``DataError`` whose message holds ``error`` (one line, no traceback), or
load it with exactly the sensors and row count given. The unit tests run every
case through the loader and the CLI, the app tests through the upload widget.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


@dataclass(frozen=True)
class Case:
    name: str  # file name (may hold glob characters)
    data: bytes
    error: str | None = None  # a substring of the DataError message; None: loads
    sensors: tuple[str, ...] = ()  # when it loads: the sensors, in order
    rows: int = 0  # when it loads: the row count
    decoy: tuple[str, bytes] | None = None  # a sibling a glob reading of ``name`` would also hit


def _csv(header: str, rows: list[str]) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


def _wide(n_rows: int = 12, sensors: tuple[str, ...] = ("a", "b", "c"), seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(np.round(rng.normal(20, 5, (n_rows, len(sensors))), 3), columns=sensors)
    frame.insert(0, "time", pd.date_range("2024-03-01", periods=n_rows, freq="h"))
    return frame.to_csv(index=False).encode()


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _times(n: int) -> list[str]:
    return [str(t) for t in pd.date_range("2024-03-01", periods=n, freq="h")]


def _column_of(value: float, n: int = 12) -> bytes:
    """A wide CSV whose sensor ``b`` holds ``value`` times 1, 2, ..., n."""
    rows = [f"{t},{i % 5}.5,{(i + 1) * value!r},{(i * 7) % 11}" for i, t in enumerate(_times(n))]
    return _csv("time,a,b,c", rows)


def _reading(value: str, n: int = 12) -> bytes:
    """A wide CSV of ordinary readings with a single ``value`` in sensor ``b``, row 5."""
    rows = [f"{t},{i % 5}.5,{(i * 3) % 7}.25,{(i * 7) % 11}" for i, t in enumerate(_times(n))]
    parts = rows[4].split(",")
    rows[4] = ",".join([parts[0], parts[1], value, parts[3]])
    return _csv("time,a,b,c", rows)


def _year(year: str) -> bytes:
    rows = [f"{t},{i}.5,{i * 2}.0" for i, t in enumerate(_times(6))]
    rows[2] = f"{year}-01-01 00:00:00,3.5,1.0"
    return _csv("time,a,b", rows)


def _parquet_cases() -> list[Case]:
    t = pa.array(
        pd.date_range("2024-03-01", periods=6, freq="h").to_pydatetime(), pa.timestamp("us")
    )
    x = pa.array([1.0, 2.5, 3.0, 4.5, 5.0, 6.5])
    y = pa.array([2.0, 1.0, 4.0, 3.5, 5.5, 4.0])
    listed = pa.array([[v] for v in x.to_pylist()], pa.list_(pa.float64()))
    import datetime as dt

    old = pa.array([dt.datetime(1, 1, 1), *t.to_pylist()[1:]], pa.timestamp("us"))
    return [
        Case("list.parquet", _parquet(pa.table({"time": t, "a": listed, "b": y})), "list column"),
        Case("year1.parquet", _parquet(pa.table({"time": old, "a": x, "b": y})), "outside"),
        Case("garbage.parquet", b"PAR1" + bytes(range(256)) * 4, "not a readable Parquet"),
        Case("ok.parquet", _parquet(pa.table({"time": t, "a": x, "b": y})), None, ("a", "b"), 6),
    ]


def cases() -> list[Case]:
    """Every case; the names are unique."""
    ok12 = _wide(12)
    many = tuple(f"s{i}" for i in range(400))
    formula = "=cmd|' /C calc'!A0"
    return [
        Case("empty.csv", b"", "file is empty"),
        Case("blank_lines.csv", b"\n\n\n", "no header line"),
        Case("header_only.csv", b"time,a,b\n", "no data rows"),
        Case("binary.csv", bytes(range(256)) * 8, "not UTF-8"),
        Case("nul_in_text.csv", _reading("1\x00"), "cannot parse '1\\x00' as a number"),
        Case("duplicate_columns.csv", _csv("time,a,a", ["2024-03-01,1,2"]), "duplicate column"),
        Case("non_numeric.csv", _reading("oops"), "cannot parse 'oops' as a number"),
        Case(
            "all_nan.csv",
            _csv("time,a,b", [f"{t},{i},NA" for i, t in enumerate(_times(6))]),
            "has no values",
        ),
        Case("single_row.csv", _csv("time,a,b", ["2024-03-01,1,2"]), "need at least 4 rows"),
        Case("wide_few_rows.csv", _wide(5, many), "need at least 402 rows"),
        Case("no_time.csv", _csv("x,a,b", ["1.5,2,3", "abc,2,3"]), "no time column"),
        Case(
            "bad_time.csv",
            _csv("time,a,b", ["2024-03-01,1,2", "notatime,1,2"]),
            "cannot parse 'notatime' as a time",
        ),
        Case("duplicate_time.csv", _csv("time,a,b", ["2024-03-01,1,2"] * 2), "duplicate timestamp"),
        Case("ragged.csv", _csv("time,a,b", ["2024-03-01,1,2,3,4"]), "cannot read CSV"),
        Case("open_quote.csv", _csv("time,a,b", ['2024-03-01,"1,2']), "cannot read CSV"),
        Case("reading_1e308.csv", _reading("1e308"), "outside"),
        Case("column_1e308.csv", _column_of(1e307), "outside"),
        Case("column_1e154.csv", _column_of(1e154), "outside"),
        Case("reading_1e50.csv", _reading("1e50"), "times the column's typical deviation"),
        Case("year_0001.csv", _year("0001"), "outside"),
        Case("year_9999.csv", _year("9999"), "outside"),
        Case("newline_in_header.csv", b'time,"a\nb",c\n2024-03-01,1,2\n', "cannot read CSV"),
        Case("only_time.csv", _csv("time", _times(4)), "no numeric sensor columns"),
        Case(
            "huge_numeric_time.csv",
            _csv("time,a,b", ["1e30,1,2", "2,1,3"]),
            "time 1e+30 is out of range",
        ),
        Case(
            "long_duplicate.csv",
            _csv("time,sensor,value", ["2024-03-01,a,1", "2024-03-01,a,2"]),
            "has two readings",
        ),
        Case("hex.csv", _reading("0x10"), "cannot parse '0x10' as a number"),
        Case("underscore.csv", _reading("41_25"), "cannot parse '41_25' as a number"),
        Case(
            "negative_time.csv",
            _csv("time,a,b", [f"{-9 + i},{i % 3},{i * i % 5}" for i in range(8)]),
            None,
            ("a", "b"),
            8,
        ),
        Case("overflow_literal.csv", _reading("1e400"), None, ("a", "b", "c"), 12),
        Case("tabs.tsv", ok12.replace(b",", b"\t"), None, ("a", "b", "c"), 12),
        Case("sheet.xlsx", b"PK\x03\x04", "unsupported file extension"),
        Case(
            "unicode.csv",
            _wide(8, ("température", "湿度", "😀")),
            None,
            ("température", "湿度", "😀"),
            8,
        ),
        Case(  # a status beside one reading per time: not sensor ids of a long file
            "status_column.csv",
            _csv(
                "time,status,temp",
                [f"{t},{'OK' if i % 3 else 'FAULT'},{20 + i}" for i, t in enumerate(_times(12))],
            ),
            "column 'status' holds text, not numbers, and every time appears once",
        ),
        Case(  # naive times would be taken as UTC, hours from the offset ones
            "mixed_offsets.csv",
            _csv(
                "time,a,b",
                [
                    f"{t}{'+02:00' if i == 5 else ''},{i},{i * i % 7}"
                    for i, t in enumerate(_times(12))
                ],
            ),
            "mixes times with a UTC offset (row 6",
        ),
        Case(  # epoch milliseconds read as seconds: say which unit was assumed
            "epoch_ms.csv",
            _csv("time,a,b", [f"{1709251200000 + i * 3600000},{i},{i * i % 7}" for i in range(12)]),
            "is out of range as seconds since 1970-01-01 (another unit?",
        ),
        Case("bom.csv", b"\xef\xbb\xbf" + ok12, None, ("a", "b", "c"), 12),
        Case("semicolon.csv", ok12.replace(b",", b";"), None, ("a", "b", "c"), 12),
        Case("infinite.csv", _reading("inf"), None, ("a", "b", "c"), 12),
        Case("formula.csv", _wide(8, (formula, "+x", "b")), None, (formula, "+x", "b"), 8),
        Case(
            "site[1].csv",
            _wide(8, ("real", "data")),
            None,
            ("real", "data"),
            8,
            decoy=("site1.csv", _wide(8, ("decoy", "data"), seed=1)),
        ),
        Case(
            "a*b.csv",
            _wide(8, ("star", "data")),
            None,
            ("star", "data"),
            8,
            decoy=("aXb.csv", _wide(8, ("decoy", "data"), seed=1)),
        ),
        Case(
            "q?.csv",
            _wide(8, ("question", "data")),
            None,
            ("question", "data"),
            8,
            decoy=("qX.csv", _wide(8, ("decoy", "data"), seed=1)),
        ),
        *_parquet_cases(),
    ]


def write_corpus(directory: Path) -> list[tuple[Case, Path]]:
    """Write every case (and its decoy) into ``directory``; returns (case, path) pairs."""
    out = []
    for case in cases():
        if case.decoy is not None:
            (directory / case.decoy[0]).write_bytes(case.decoy[1])
        path = directory / case.name
        path.write_bytes(case.data)
        out.append((case, path))
    return out
