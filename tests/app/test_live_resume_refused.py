"""A Resume whose query differs from the earlier run's is refused with one clear message.

The refusal is the manager's (``engine.live.ownership.check_same_run``); the page shows
its one error line, and the start box says the pipeline was not started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.live.ownership import RUN_SPEC, check_same_run, run_identity
from engine.live.spec import PipelinePaths
from tests.app.test_app_leftovers import crashed  # noqa: F401 (the fixture this test takes)

pytestmark = pytest.mark.app


def test_a_resume_with_another_eps_shows_one_error_naming_it(app, crashed):  # type: ignore[no-untyped-def]  # noqa: F811
    manager, _ = crashed
    started: list[Any] = []

    def start(history: Any, spec: Any, mode: str, paths: PipelinePaths, **kw: Any) -> Any:
        """The manager's own check, on the earlier run's recorded identity (eps 123)."""
        earlier = {**run_identity(spec, mode), "eps": 123.0}
        (Path(paths.root) / RUN_SPEC).write_text(json.dumps(earlier))
        check_same_run(paths, run_identity(spec, mode))
        started.append(kw)
        return manager.status()

    manager.start = start
    app.switch_page("pages/live.py").run()
    app.button(key="start_pipeline").click().run()
    radio = app.radio(key="w_leftovers")
    radio.set_value(next(o for o in radio.options if o.startswith("Resume"))).run()
    app.button(key="leftovers_go").click().run()
    assert not app.exception and not started
    errors = [e.value for e in app.error]
    assert len(errors) == 1 and "another eps (it had eps=123.0) than this start (eps=" in errors[0]
    assert "archive it and start afresh" in errors[0]
    # the start box says the pipeline did not start, not that Spark is still starting
    assert [(s.label, s.state) for s in app.status] == [("Not started", "error")]
    app.run()  # the question stays: Archive or Delete are still offered
    assert not app.error and app.radio(key="w_leftovers") is not None
