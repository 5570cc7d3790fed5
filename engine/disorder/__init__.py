"""Out-of-order sensor streams (DESIGN.md section 6; seed: Yang, Xu, Lv, Li).

``config``: ``DisorderConfig``; ``buffer``: the adaptive K-slack buffer and its PD
controller (stream module); ``items``: the tuples and closed windows it hands out;
``target``: the coverage target ``lambda_thr``;
``ledger``: late-tuple corrections (batch module); ``delays``: arrival-delay
models; ``stage``: the pure pandas stage the live pipeline runs; ``experiment``:
ours against the baselines on the same delays.
"""

from engine.disorder.buffer import KSlackBuffer, PDController, Zone, settled_values
from engine.disorder.config import POLICIES, DisorderConfig
from engine.disorder.delays import DELAY_KINDS, DelayModel, parse_delays, read_delay_file
from engine.disorder.experiment import (
    METHODS,
    DisorderReport,
    MethodReport,
    run_disorder_experiment,
)
from engine.disorder.items import (
    BufferOutput,
    ClosedWindow,
    Item,
    LateItem,
    parse_item,
    parse_late_item,
)
from engine.disorder.ledger import DisorderProcessor, ResultLedger, ResultRow
from engine.disorder.stage import DisorderStage
from engine.disorder.target import (
    CoverageTarget,
    prefix_miss_length,
    required_coverage,
    required_coverage_tail,
)

__all__ = [
    "DELAY_KINDS", "METHODS", "POLICIES", "BufferOutput", "ClosedWindow", "CoverageTarget",
    "DelayModel", "DisorderConfig", "DisorderProcessor", "DisorderReport", "DisorderStage", "Item",
    "KSlackBuffer", "LateItem", "MethodReport", "PDController", "ResultLedger", "ResultRow", "Zone",
    "parse_delays", "parse_item", "parse_late_item", "prefix_miss_length", "read_delay_file",
    "required_coverage", "required_coverage_tail", "run_disorder_experiment", "settled_values",
]  # fmt: skip
