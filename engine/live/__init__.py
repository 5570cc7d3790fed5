"""The app's live pipeline: the feeder, the Spark query, the DuckDB store, failure and
recovery, and the manager that the UI and ``simulate`` drive. PySpark is imported inside
functions only.

``manager``: the one owner of a run (``views``: what it tells); ``pipeline``: the live query
(``switching``, ``reporting``, ``listener``); ``batch``: pure per-batch functions;
``feeder``: a history replayed as landing files; ``store``: the DuckDB store (``records``:
what it writes); ``versions``: plan versions; ``failure``: what a crash destroys;
``recovery``, ``rebuild``, ``recovery_report``: the recovery job and its report;
``replanning``: the live monitor and re-plans wired in; ``launch``: ``start_live``, the one
way a run starts (the app's and ``simulate``'s), the disorder stage included; ``simulate``,
``simulation``, ``split``: ``python -m engine simulate``; ``ownership``: who owns a directory;
``status``, ``metrics``: the status board; ``spec``, ``run_config``: what a run runs with;
``audit``: who stopped, archived or deleted a run, and when.
"""

from engine.live.audit import AuditLog
from engine.live.exposure import default_exposure, feed_within_exposure
from engine.live.failure import FAILURE_KINDS
from engine.live.feeder import Feeder, FeedOptions
from engine.live.launch import Disorder, start_live
from engine.live.manager import PipelineManager, get_manager
from engine.live.metrics import BatchPoint, PipelineEvent, summarise
from engine.live.ownership import find_leftovers
from engine.live.pipeline import LivePipeline
from engine.live.records import INDEXED_KINDS
from engine.live.recovery import LostRange, recover_lost_range
from engine.live.recovery_report import RecoveryReport, promise_note, score_recovery
from engine.live.replanning import replanning_monitor
from engine.live.simulate import simulate_from_cli
from engine.live.spec import PipelineOptions, PipelinePaths, StreamSpec
from engine.live.split import ReplaySplit, split_for_replay
from engine.live.status import PipelineStatus, Restore
from engine.live.store import BackupStore
from engine.live.versions import changes

__all__ = [
    "FAILURE_KINDS",
    "INDEXED_KINDS",
    "AuditLog",
    "BackupStore",
    "BatchPoint",
    "Disorder",
    "FeedOptions",
    "Feeder",
    "LivePipeline",
    "LostRange",
    "PipelineEvent",
    "PipelineManager",
    "PipelineOptions",
    "PipelinePaths",
    "PipelineStatus",
    "RecoveryReport",
    "ReplaySplit",
    "Restore",
    "StreamSpec",
    "changes",
    "default_exposure",
    "feed_within_exposure",
    "find_leftovers",
    "get_manager",
    "promise_note",
    "recover_lost_range",
    "replanning_monitor",
    "score_recovery",
    "simulate_from_cli",
    "split_for_replay",
    "start_live",
    "summarise",
]
