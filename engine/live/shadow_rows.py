"""A closed block's rows as a recovery rebuilds them, each under its own plan version.

The live pipeline's shadow check scores what recovery from the backup would return.
A row is backed up under the version in force when its batch ran (``PlanVersion``:
rows ``first_seq ..``), so a window that straddles a plan change holds rows of two
versions: each row is rebuilt with its own version's map (its set as read, a crash
plan's kept sensors left out), never all with the newest. A window counts on the record
of the oldest version it holds (versions follow one another in row order), so a new
version is judged only by windows read under it alone. A reading its batch backed up
beyond the version's set (a batch over a crash plan's exposure, or after a recovery:
``engine.live.exposure``) is returned as read; a (window, sensor) pair every reading of
which recovery returns as read is exact (``ShadowRows.exact``), not measured. A row
before every version this process knows (a resumed run) takes the oldest one it knows,
as the online controller does (``engine.live.control_loop``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.live.batch import ClosedWindows
from engine.live.versions import PlanVersion, versions_of_rows
from engine.planning.feedback import leave_out_under_versions, rebuild_under_versions
from engine.windows import count_unheld

__all__ = ["ShadowRows", "rows_under_versions"]


@dataclass(frozen=True, eq=False)
class ShadowRows:
    """``rebuilt`` (B, n): the block as recovery rebuilds it; ``versions`` (W,): each
    window's oldest plan version id; ``exact`` (W, n) bool: the (window, sensor) pairs
    recovery returns as read, every reading in the window backed up (by its version's
    set, or by its batch beyond it); None: none."""

    rebuilt: np.ndarray
    versions: np.ndarray
    exact: np.ndarray | None = None

    def mask_exact(self, values: np.ndarray) -> np.ndarray:
        """``values`` (W, n), the windows' shadow errors or misses, NaN where ``exact``.

        Such a pair is not rebuilt, so it is not measured (as the recovery report leaves
        out its exact pairs and the online controller its backed-up ones): scored, its
        zero error would count in the denominator of every shadow rate and test."""
        if self.exact is None:
            return np.asarray(values, dtype=float)
        return np.where(self.exact, np.nan, np.asarray(values, dtype=float))


def rows_under_versions(
    closed: ClosedWindows, versions: Mapping[int, PlanVersion], crash: bool
) -> ShadowRows:
    """``closed``'s block rebuilt row by row under ``versions`` (id -> version, one at
    least); ``crash``: leave each version's kept sensors out of its rows."""
    params = max(versions.values(), key=lambda v: (v.first_seq, v.id)).spec.window_params
    block = np.asarray(closed.block, dtype=float)
    n = block.shape[1]
    if len(closed) == 0:
        return ShadowRows(block.copy(), np.zeros(0, dtype=np.int64), np.zeros((0, n), bool))
    first = int(closed.ids[0]) * params.slide
    ordered, which = versions_of_rows(versions.values(), first, len(block))
    group = np.maximum(which, 0)  # before every version known: the oldest one
    specs = [v.spec for v in ordered]
    maps = [(s.linear_map, s.backup_sensors) for s in specs]
    rebuilt, backed, _ = rebuild_under_versions(block, group, maps, params.sensors)
    if crash:
        kept = [s.kept_sensors for s in specs]
        leave_out_under_versions(rebuilt, group, kept, params.sensors, params.aggregate)
    stored = closed.stored_cells  # a batch backed them up beyond its set: returned as read
    rebuilt[stored] = block[stored]
    starts = (closed.ids - closed.ids[0]) * params.slide
    ids = np.array([v.id for v in ordered], dtype=np.int64)
    exact = count_unheld(backed | stored, starts, starts + params.window) == 0
    return ShadowRows(rebuilt, ids[group[starts]], exact)
