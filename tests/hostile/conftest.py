"""The hostile suite: every failure mode in docs/FAILURE_MODES.md, run as an operator would
meet it. In-process where the CLI's logic is tested (``run_cli``), a real subprocess
where the process boundary matters, Spark only where the item is about Spark (the one
session of ``tests/spark``, skipped without Java locally and failing in CI)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.cli import main
from tests.spark.conftest import spark  # noqa: F401  (the one shared SparkSession)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run_cli(*argv) -> (exit code, stdout, stderr)`` through ``engine.cli.main``."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def one_line_error(code: int, err: str) -> str:
    """The refusal's line: exit 2, one ``error:`` line on stderr, never a traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    assert lines and lines[-1].startswith("error: "), err
    assert sum(ln.startswith("error: ") for ln in lines) == 1, err
    return lines[-1]
