"""Backup-set selection: the smallest ``O`` with ``var_{i|O} <= target_i`` for every sensor.

``greedy``: the dispatcher ``select_backups``, the seed's greedy (``paper``) and ours;
``incremental``: ``IncrementalSelection``, a set patched one sensor at a time as targets move;
``exact``: branch and bound for small n; ``exchange``: prune and 2-for-1 exchange
after the greedy; ``core``: tolerances and the solves they share.
"""

from engine.selection.greedy import (
    BRUTE_FORCE_MAX_N,
    METHODS,
    Method,
    Selection,
    brute_force_min_backup,
    select_backups,
)
from engine.selection.incremental import IncrementalSelection

__all__ = [
    "BRUTE_FORCE_MAX_N", "METHODS", "IncrementalSelection", "Method", "Selection",
    "brute_force_min_backup", "select_backups",
]  # fmt: skip
