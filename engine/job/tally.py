"""The job's monitor tally, kept with the window state after every micro-batch.

``WindowState.extra[MONITOR_KEY]`` is ``[plan version, {sensor: [misses, windows]},
contract]``: the version in force's tally and the contract it counted (a crash plan's
misses are a real sum of fractions). A tally kept without its contract counted whole
windows, the range contract. A restarted job resumes it (``saved_tally``) only under
the same version and contract.
"""

from __future__ import annotations

from typing import Any

from engine.planning.monitor import ViolationMonitor

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
