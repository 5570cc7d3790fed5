"""The job's monitor: what it counts of a batch (``observe_closed``) and its tally, kept
with the window state after every micro-batch.

``WindowState.extra[MONITOR_KEY]`` is ``[plan version, {sensor: [misses, windows]},
contract]``: the version in force's tally and the contract it counted (a crash plan's
misses are a real sum of fractions). A tally kept without its contract counted whole
windows, the range contract. A restarted job resumes it (``saved_tally``) only under
the same version and contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from engine.planning.monitor import MonitorAlert, ViolationMonitor

MONITOR_KEY = "monitor"


def kept_tally(monitor: ViolationMonitor, version: int) -> list[Any]:
    """``monitor``'s tally under plan ``version``, JSON-able, as the state keeps it."""
    tally = {s: list(vw) for s, vw in monitor.rates(version).items()}
    return [int(version), tally, monitor.contract]


def saved_tally(saved: Any, version: int, contract: str) -> dict[str, tuple[float, int]] | None:
    """The kept tally as sensor -> (misses, windows), if it was counted under plan
    ``version`` and ``contract``; None when nothing was seen yet, a new version starts,
    or it counted the other contract (which says nothing of this one)."""
    if not saved or int(saved[0]) != int(version):
        return None
    if (saved[2] if len(saved) > 2 else "range") != contract:
        return None
    return {s: (float(v), int(w)) for s, (v, w) in saved[1].items()}


def observe_closed(
    monitor: ViolationMonitor,
    results: pd.DataFrame,
    misses: np.ndarray | None,
    sensors: Sequence[str],
    targets: Sequence[str],
    version: int,
) -> MonitorAlert | None:
    """Count a batch's closed windows in ``monitor`` and return its alert: a crash plan's
    ``misses`` ((W, n) crash-contract fractions in ``sensors`` order, ``check_closed``), a
    range plan's whole windows' errors from the shadow ``results``."""
    if misses is not None:
        order = [list(sensors).index(s) for s in monitor.sensors]
        return monitor.observe_misses(misses[:, order], targets, version)
    # the version's own windows: one with readings of an older version's batches is
    # that version's record (``shadow_results``' ``plan_version``), not this one's
    own = results["plan_version"] == version
    rebuilt = results[~results["backed_up"].astype(bool) & own]
    errors = (
        rebuilt.pivot_table(index="window_start", columns="sensor", values="error")
        .abs()
        .reindex(columns=list(monitor.sensors))
    )
    return monitor.observe(errors.to_numpy(dtype=float), targets, version)


def checked_pairs(results: pd.DataFrame) -> pd.DataFrame:
    """The (window, sensor) pairs of shadow ``results`` the check scored: rebuilt, with
    the rebuilt and the true aggregate both numbers (``engine.job.record.CHECKED``)."""
    return results[~results["backed_up"].astype(bool) & results["error"].notna()]


def count_own_pairs(results: pd.DataFrame, version: int) -> tuple[int, int]:
    """(checked pairs, misses) of a batch's closed windows that are plan ``version``'s
    record: checked (``checked_pairs``) and not an older version's window (as
    ``observe_closed`` counts a range plan's). The batch's ``rebuilt_pairs`` count every
    window it closed, whichever version's."""
    checked = checked_pairs(results)
    own = checked[checked["plan_version"] == version]
    return len(own), int(own["miss"].sum())
