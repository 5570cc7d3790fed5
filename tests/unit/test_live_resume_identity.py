"""A resume continues the earlier run under its stored backup set and map, so it must
also share the query that plan was made for: eps (per sensor too), delta, horizon and
exposure. Before, only sensors, windows and mode were checked, and a resume after a
change on Tune ran the old backup set under the new query (the plan of record and the
contract note described a plan that was not running).

No JVM: the refusal happens while the directory is claimed, before Spark starts.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.errors import PipelineError
from engine.live.manager import PipelineManager
from engine.live.ownership import DirectoryLock, check_same_run, record_run, run_identity
from engine.live.pipeline import RUN_FILE
from engine.live.spec import PipelinePaths, StreamSpec
from engine.live.store import BackupStore
from engine.live.versions import PlanVersion
from engine.query import WindowQuery
from tests.helpers import fit_map
from tests.unit.test_stream_batch import SENSORS, make_history


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume that passes the check would start Spark: here it stops the test instead."""

    def refuse(*args: object) -> None:
        raise AssertionError("the resume was not refused: Spark was about to start")

    monkeypatch.setattr("engine.live.manager.get_spark", refuse)


def now() -> datetime:
    return datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC)


def make_spec(query: WindowQuery, kept: tuple[str, ...] = ()) -> StreamSpec:
    values = make_history(40).values
    return StreamSpec(SENSORS, ("a",), fit_map(values, SENSORS, ("a",)), query, kept)


OLD = WindowQuery(5.0, 0.05, 8, aggregate="max", exposure=2, eps_by_sensor=(("b", 2.0),))


def stopped_run(paths: PipelinePaths, spec: StreamSpec) -> None:
    """What Stop leaves: a store holding the run's first plan version, a checkpoint
    naming the run, and the run's identity."""
    paths.ensure()
    with BackupStore(paths.store_file, now, paths.backup_uri) as store:
        store.write_version(PlanVersion.initial(spec, now()).record())
    paths.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    (paths.checkpoint_dir / RUN_FILE).write_text(json.dumps({"run": 0}))
    record_run(paths, run_identity(spec, "approx"))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            {"eps": 0.5},
            r"another eps \(it had eps=\{'a': 5\.0, 'b': 2\.0, 'c': 5\.0, 'd': 5\.0\}\) "
            r"than this start \(eps=\{'a': 0\.5, 'b': 2\.0, 'c': 0\.5, 'd': 0\.5\}\)",
        ),
        ({"delta": 0.01}, r"another delta \(it had delta=0\.05\) than this start \(delta=0\.01\)"),
        ({"exposure": 3}, r"another exposure \(it had exposure=2\) than this start \(exposure=3\)"),
        (
            {"horizon": 40},
            r"another horizon \(it had horizon=None\) than this start \(horizon=40\)",
        ),
        (
            {"eps_by_sensor": ()},
            r"another eps \(it had eps=\{'a': 5\.0, 'b': 2\.0, .*\(eps=\{'a': 5\.0, 'b': 5\.0",
        ),
    ],
)
def test_a_resume_with_another_query_is_refused_naming_what_differs(
    tmp_path: Path, change: dict[str, object], named: str
) -> None:
    """Without the query in the run's identity, the resume check passed and the run went on
    with the stored backup set under the new query."""
    paths = PipelinePaths(tmp_path)
    stopped_run(paths, make_spec(OLD, kept=("c",)))
    asked = make_spec(replace(OLD, **change))
    manager = PipelineManager(now=now)
    with pytest.raises(PipelineError, match=named) as err:
        manager.start(make_history(40), asked, "approx", paths, leftovers="resume")
    assert "archive it and start afresh" in str(err.value)
    DirectoryLock(tmp_path, now).acquire()  # the refused resume released the directory


def test_a_resume_of_a_kept_readings_plan_without_its_exposure_says_so(tmp_path: Path) -> None:
    """A max/min plan with kept sensors, resumed with no exposure, failed reading its
    stored version with an unrelated ParameterError about kept sensors."""
    paths = PipelinePaths(tmp_path)
    stopped_run(paths, make_spec(OLD, kept=("c",)))
    asked = make_spec(replace(OLD, exposure=None))
    with pytest.raises(
        PipelineError,
        match=r"another exposure \(it had exposure=2\) than this start \(exposure=None\)",
    ):
        PipelineManager(now=now).start(make_history(40), asked, "approx", paths, leftovers="resume")


def test_the_same_query_passes_the_check_through_its_json_record(tmp_path: Path) -> None:
    """Per-sensor eps and floats come back from the run spec equal: the same query resumes."""
    paths = PipelinePaths(tmp_path)
    spec = make_spec(replace(OLD, eps=0.1 + 0.2, delta=1 / 3, horizon=40))
    paths.ensure()
    record_run(paths, run_identity(spec, "approx"))
    check_same_run(paths, run_identity(make_spec(spec.query), "approx"))
    with pytest.raises(PipelineError, match="another eps, mode"):
        check_same_run(paths, run_identity(make_spec(replace(spec.query, eps=0.3)), "full"))


def test_a_run_spec_written_before_the_query_was_recorded_is_not_resumed(tmp_path: Path) -> None:
    """A run spec of an earlier version of Lacuna names no query: its plan's query is not
    known, so the resume is refused (archive it), saying the values were not recorded."""
    paths = PipelinePaths(tmp_path)
    paths.ensure()
    spec = make_spec(OLD)
    legacy = {k: v for k, v in run_identity(spec, "approx").items() if k in
              ("sensors", "window", "slide", "aggregate", "mode")}  # fmt: skip
    (paths.root / "lacuna_run_spec.json").write_text(json.dumps(legacy))
    with pytest.raises(
        PipelineError, match=r"did not record its delta, eps, exposure, horizon: .* archive it"
    ):
        check_same_run(paths, run_identity(spec, "approx"))


def test_the_same_eps_written_another_way_resumes(tmp_path: Path) -> None:
    """One eps per unit group that gives every sensor the single eps is the same query: the
    stored plan was made for the same tolerances, so the run resumes."""
    paths = PipelinePaths(tmp_path)
    paths.ensure()
    plain = WindowQuery(2.0, 0.05, 8, aggregate="max", exposure=2)
    record_run(paths, run_identity(make_spec(plain), "approx"))
    per_unit = replace(plain, eps=7.0, eps_by_sensor=tuple((s, 2.0) for s in SENSORS))
    check_same_run(paths, run_identity(make_spec(per_unit), "approx"))
