"""What the K-slack buffer holds and hands out: tuples, late tuples, closed windows.

``Item`` is a buffered or released tuple and ``LateItem`` one that arrived after
a window containing it closed; both round-trip through JSON lists
(``parse_item``, ``parse_late_item``) in stage snapshots. ``ClosedWindow`` is a
window whose provisional result is due; ``BufferOutput`` what one ``drain``
returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["BufferOutput", "ClosedWindow", "Item", "LateItem", "parse_item", "parse_late_item"]


@dataclass(frozen=True)
class ClosedWindow:
    """A window whose provisional result is due.

    Attributes
    ----------
    index : window number ``j``; start_s, end_s : its event-time span (s).
    values : sensor -> in-time values (in release order).
    closed_at : stream time (arrival clock, s) of the close.
    k_at_close : buffer size ``K`` (s) when it closed.
    """

    index: int
    start_s: float
    end_s: float
    values: dict[str, list[float]]
    closed_at: float
    k_at_close: float


class Item(NamedTuple):
    """A buffered or released tuple; ordered (as a tuple) by event time, then arrival.

    ``seq`` numbers tuples in arrival order (ties in event time leave in arrival
    order); ``tag`` is an opaque integer carried through (the feeder's reading number).
    """

    ts: float
    seq: int
    first_window: int
    sensor: str
    value: float
    arrival: float
    tag: int


class LateItem(NamedTuple):
    """A late tuple: late for windows ``first_window..last_closed`` (closed when it arrived)."""

    ts: float
    seq: int
    first_window: int
    last_closed: int
    sensor: str
    value: float
    arrival: float
    tag: int


def parse_item(x: Sequence[Any]) -> Item:
    """An ``Item`` back from its JSON list form."""
    return Item(float(x[0]), int(x[1]), int(x[2]), str(x[3]), float(x[4]), float(x[5]), int(x[6]))


def parse_late_item(x: Sequence[Any]) -> LateItem:
    """A ``LateItem`` back from its JSON list form."""
    return LateItem(
        float(x[0]),
        int(x[1]),
        int(x[2]),
        int(x[3]),
        str(x[4]),
        float(x[5]),
        float(x[6]),
        int(x[7]),
    )


@dataclass
class BufferOutput:
    """What the buffer produced since the last ``drain``."""

    released: list[Item] = field(default_factory=list)
    late: list[LateItem] = field(default_factory=list)
    closed: list[ClosedWindow] = field(default_factory=list)
