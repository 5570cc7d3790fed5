"""A closed block's rows as a recovery rebuilds them, each under its own plan version.

The live pipeline's shadow check scores what recovery from the backup would return.
A row is backed up under the version in force when its batch ran (``PlanVersion``:
rows ``first_seq ..``), so a window that straddles a plan change holds rows of two
versions: each row is rebuilt with its own version's map (its set as read, a crash
plan's kept sensors left out), never all with the newest. A window counts on the record
of the oldest version it holds (versions follow one another in row order), so a new
version is judged only by windows read under it alone. A row before every version this
process knows (a resumed run) takes the oldest one it knows, as the online controller
does (``engine.live.control_loop``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.aggregates import leave_out
from engine.live.batch import ClosedWindows
from engine.live.versions import PlanVersion

__all__ = ["ShadowRows", "rows_under_versions"]


@dataclass(frozen=True, eq=False)
class ShadowRows:
    """``rebuilt`` (B, n): the block as recovery rebuilds it; ``versions`` (W,): each
    window's oldest plan version id."""

    rebuilt: np.ndarray
    versions: np.ndarray


def rows_under_versions(
    closed: ClosedWindows, versions: Mapping[int, PlanVersion], crash: bool
) -> ShadowRows:
    """``closed``'s block rebuilt row by row under ``versions`` (id -> version, one at
    least); ``crash``: leave each version's kept sensors out of its rows."""
    ordered = sorted(versions.values(), key=lambda v: (v.first_seq, v.id))
    params = ordered[-1].spec.window_params
    slide, sensors = params.slide, params.sensors
    block = np.asarray(closed.block, dtype=float)
    if len(closed) == 0:
        return ShadowRows(block.copy(), np.zeros(0, dtype=np.int64))
    firsts = np.array([v.first_seq for v in ordered])
    first = int(closed.ids[0]) * slide
    which = np.maximum(np.searchsorted(firsts, first + np.arange(len(block)), side="right") - 1, 0)
    rebuilt = block.copy()
    for k in np.unique(which):
        rows, version = which == k, ordered[int(k)].spec
        part = version.linear_map.rebuild_columns(block[rows], sensors)
        kept = np.isin(np.asarray(sensors), np.asarray(version.kept_sensors, dtype=object))
        if crash and kept.any():
            part = leave_out(part, kept, params.aggregate)
        rebuilt[rows] = part
    starts = (closed.ids - closed.ids[0]) * slide
    ids = np.array([v.id for v in ordered], dtype=np.int64)
    return ShadowRows(rebuilt, ids[which[starts]])
