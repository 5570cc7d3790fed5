"""Sensor names: choosing them by name or glob, and writing them safely as CSV headers.

Spreadsheets run a cell that starts with ``=``, ``+``, ``-`` or ``@`` (and some
also a tab or carriage return) as a formula, so a sensor named
``=cmd|' /C calc'!A0`` written verbatim as a CSV header is a command waiting for
a double click (CSV injection). Every CSV this project writes passes its headers
through ``spreadsheet_safe``, which puts a single quote in front of such a name:
spreadsheets show the quote-prefixed text as plain text. ``recover`` undoes the
quote when it matches a backup file's columns to the config's sensor names, so
the app's CSV download still round-trips.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from engine.errors import ParameterError

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def resolve_sensors(available: Sequence[str], items: Sequence[str], minimum: int = 1) -> list[str]:
    """Expand names and globs (``*_TEMP``) against ``available``, in the given order.

    A sensor's exact name wins over reading it as a glob: ``site[1]`` chooses the
    sensor so named where there is one (as a glob it would choose ``site1``). An item
    that matches nothing, or fewer than ``minimum`` sensors in all, is a
    ``ParameterError``; a sensor matched twice is kept once.
    """
    chosen: list[str] = []
    for item in (s.strip() for s in items):
        if not item:
            continue
        hits = (
            [item]
            if item in available
            else [s for s in available if fnmatch.fnmatchcase(s, item)]
            if any(c in item for c in "*?[")
            else []
        )
        if not hits:
            raise ParameterError(f"unknown sensor {item!r} (the data has {len(available)} sensors)")
        chosen += [h for h in hits if h not in chosen]
    if len(chosen) < minimum:
        raise ParameterError(f"--sensors must select at least {minimum} sensors, got {len(chosen)}")
    return chosen


def spreadsheet_safe(name: str) -> str:
    """``name`` with a leading ``'`` when a spreadsheet would read it as a formula."""
    return "'" + name if name.startswith(FORMULA_STARTS) else name


def spreadsheet_unsafe(name: str) -> str:
    """Undo ``spreadsheet_safe``: ``'=x`` is ``=x`` again; other names are unchanged."""
    return name[1:] if name.startswith("'") and name[1:].startswith(FORMULA_STARTS) else name
