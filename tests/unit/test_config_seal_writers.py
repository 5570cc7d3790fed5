"""Every writer of a schema-v3 config seals it (``engine.export.seal``): the CLI's
``plan --out``, the app's Export, the production job's re-plans and its online
controller's versions; and what each writes loads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import main
from engine.data import load_history
from engine.export import BackupConfig, load_config, plan_to_config
from engine.export.plan_book import JobPlan
from engine.export.seal import compute_seal
from engine.planning import PlanParameters, make_plan
from engine.query import WindowQuery

SMALL = Path(__file__).resolve().parents[2] / "sample_data" / "beijing_aq_small.csv"


@pytest.fixture(scope="module")
def history():
    h = load_history(SMALL)
    return h.select([s for s in h.sensors if s.endswith("_TEMP")]).rows(0, 400)


@pytest.fixture(scope="module")
def plan(history):
    return make_plan(history, PlanParameters(WindowQuery(1.0, 0.05, 24)), run_backtest_now=False)


def assert_sealed(data: dict) -> None:
    assert data["seal"] == compute_seal(data)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_the_cli_plan_writes_a_sealed_config(tmp_path, capsys, suffix: str) -> None:
    out = tmp_path / f"plan{suffix}"
    argv = ["plan", "--data", str(SMALL), "--sensors", "*_TEMP", "--eps", "1", "--delta", "0.05"]
    code = main([*argv, "--window", "24", "--no-backtest", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert_sealed(load_config(out).data)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_apps_export_writes_a_sealed_config(plan, tmp_path, fmt: str) -> None:
    from ui import exporting

    config, text = exporting.config_text(plan, fmt)
    path = tmp_path / exporting.config_name(fmt)
    path.write_text(text)
    loaded = load_config(path)
    assert_sealed(loaded.data)
    assert loaded == BackupConfig.from_dict(config)


def test_the_jobs_re_plan_and_controller_write_sealed_versions(plan, history) -> None:
    from engine.job.control import _config as controller_config
    from engine.job.plans import plan_again

    first = BackupConfig.from_dict(plan_to_config(plan))
    again = plan_again(first, history.to_frame())
    assert_sealed(again.data)
    version = JobPlan(2, 5, "scheduled", "test", again)
    assert JobPlan.from_bytes(version.to_bytes(), "v000002.json").config == again
    assert_sealed(controller_config(plan).data)
