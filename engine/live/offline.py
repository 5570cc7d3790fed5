"""An offline replay recorded in the live pipeline's store, beside the runs.

The disorder experiment (``engine.disorder.experiment``) replays a history out
of order without Spark; an operator who wants its late tuples and versioned
results next to a live run's passes ``record=`` a function from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from engine.disorder.items import LateItem
from engine.disorder.ledger import ResultRow
from engine.disorder.stage import late_frame, results_frame
from engine.live.records import BatchWrite
from engine.live.store import BackupStore


def record_replay(
    store_path: str | Path, late: Sequence[LateItem], rows: Sequence[ResultRow]
) -> int:
    """Write late tuples and result rows to the DuckDB store as one new run's batch 0.

    Returns the run number. (The live pipeline writes the stage's frames with
    its own batches; this is for offline replays such as the experiment.)
    """
    with BackupStore(store_path) as store:
        run = store.next_run()
        seqs = [x[7] for x in late]
        write = BatchWrite(
            run,
            0,
            results=results_frame(rows),
            late=late_frame(late),
            max_seq=max(seqs, default=-1),
        )
        store.commit_batch(write)
    return run
