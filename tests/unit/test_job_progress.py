"""The job's progress line: one per micro-batch that ran, with the readings it carried.

Spark reports a trigger that found nothing new too, under the id of the batch that has
not run yet and without an ``addBatch`` phase; taken as that batch's line, it hid the
batch's own (readings null, over_exposure false) after every idle gap.
"""

from __future__ import annotations

from typing import Any

from engine.job.watch import _log_progress


class Query:
    name = "lacuna"

    def __init__(self, progress: list[dict[str, Any]]) -> None:
        self.recentProgress = progress


IDLE = {"batchId": 5, "durationMs": {"latestOffset": 2, "triggerExecution": 3}}
RAN = {"batchId": 5, "durationMs": {"addBatch": 1800, "triggerExecution": 2000}}


def test_an_idle_triggers_report_is_not_the_next_batchs_line() -> None:
    logged: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    _log_progress(Query([IDLE]), seen, logged.append, {}, ())
    assert logged == []  # nothing ran
    _log_progress(Query([IDLE, RAN]), seen, logged.append, {5: 5000}, {5})
    assert len(logged) == 1
    line = logged[0]
    assert (line["batchId"], line["readings"], line["over_exposure"]) == (5, 5000, True)
    assert line["readings_per_second"] == 2500.0  # 5,000 readings in 2 s
    _log_progress(Query([IDLE, RAN]), seen, logged.append, {5: 5000}, {5})
    assert len(logged) == 1  # said once
