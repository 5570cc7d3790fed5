"""The Start button never deletes an earlier run: it asks, and deleting needs a confirmation."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.live.pipeline import RUN_FILE
from engine.live.status import PipelineStatus, StatusBoard
from engine.planning import ReplanningMonitor
from ui import live, resources

pytestmark = pytest.mark.app


class StartRecorder:
    """Stands in for ``PipelineManager``: idle, and records how ``start`` was called."""

    def __init__(self, status: PipelineStatus | None = None) -> None:
        self.starts: list[dict[str, Any]] = []
        self._status = status or PipelineStatus(state="idle")
        self.board = StatusBoard()  # the dashboard reads its (empty) metrics history

    def status(self) -> PipelineStatus:
        return self._status

    def start(self, *args: Any, **kwargs: Any) -> PipelineStatus:
        self.starts.append(kwargs)
        return self.status()

    def plan_log(self) -> None:
        return None

    def report(self) -> None:
        from engine.errors import PipelineError

        raise PipelineError("no recovery has run yet")


def _no_apply(*args: Any) -> None:
    raise AssertionError("the stand-in pipeline never re-plans")


@pytest.fixture
def crashed(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[StartRecorder, Path]]:
    """A crashed run's files in the app's pipeline directory, and a recording manager."""
    root = Path(os.environ["LACUNA_HOME"]) / "pipeline"
    (root / "checkpoint").mkdir(parents=True)
    (root / "checkpoint" / RUN_FILE).write_text('{"run": 0}')
    (root / "store.duckdb").write_bytes(b"backup rows")
    (root / "backup" / "run=0" / "batch_id=0").mkdir(parents=True)
    manager = StartRecorder()
    monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
    # start() sets the monitor's schedule switch and logs the monitor: a real one, never run,
    # in a log private to this test (the app's log is shared by every AppTest in the process)
    monkeypatch.setattr(
        live,
        "replanning_monitor",
        lambda manager, history, plan, **kw: ReplanningMonitor(plan, lambda: history, _no_apply),
    )
    log = resources.PipelineLog()
    monkeypatch.setattr(resources, "pipeline_log", lambda: log)
    yield manager, root
    shutil.rmtree(root)


def test_start_after_a_crash_asks_and_deletes_only_when_confirmed(app, crashed):  # type: ignore[no-untyped-def]
    manager, root = crashed
    app.switch_page("pages/live.py").run()
    assert any("earlier run's backup" in c.value for c in app.caption)
    app.button(key="start_pipeline").click().run()
    assert not app.exception and not app.error
    assert manager.starts == []  # nothing started, nothing touched yet
    assert (root / "store.duckdb").read_bytes() == b"backup rows"
    assert any("nothing is deleted unless you say so" in w.value for w in app.warning)
    assert any("Parquet backup: yes" in w.value for w in app.warning)
    radio = app.radio(key="w_leftovers")
    assert [o for o in radio.options if "Resume" in o]  # checkpoint and store: resumable
    delete = next(o for o in radio.options if o.startswith("Delete"))
    radio.set_value(delete).run()
    assert app.button(key="leftovers_go").disabled  # not before the confirmation
    app.checkbox(key="w_confirm_delete").check().run()
    app.button(key="leftovers_go").click().run()
    assert not app.exception
    assert [s["leftovers"] for s in manager.starts] == ["delete"]


def test_archive_is_offered_and_cancel_starts_nothing(app, crashed):  # type: ignore[no-untyped-def]
    manager, _ = crashed
    app.switch_page("pages/live.py").run()
    app.button(key="start_pipeline").click().run()
    app.button(key="leftovers_cancel").click().run()
    assert manager.starts == [] and not [r for r in app.get("radio") if r.key == "w_leftovers"]
    app.button(key="start_pipeline").click().run()
    radio = app.radio(key="w_leftovers")
    radio.set_value(next(o for o in radio.options if o.startswith("Archive"))).run()
    app.button(key="leftovers_go").click().run()
    assert [s["leftovers"] for s in manager.starts] == ["archive"]


def test_a_dead_pipeline_shows_its_error_and_can_be_stopped(app, monkeypatch):  # type: ignore[no-untyped-def]
    error = "the feeder failed: [Errno 2] No such file or directory: 'landing/.tmp'"
    manager = StartRecorder(PipelineStatus(state="error", run=0, last_error=error))
    monkeypatch.setattr(resources, "pipeline_manager", lambda: manager)
    app.switch_page("pages/live.py").run()
    assert not app.exception
    assert [e.value for e in app.error] == [error]
    assert app.button(key="start_pipeline").disabled
    assert not app.button(key="stop_pipeline").disabled
