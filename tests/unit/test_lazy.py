"""Packages with lazy public names (``engine.lazy``): every name of ``__all__`` resolves,
and first uses from many threads at once all succeed."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAZY = ("engine.planning", "engine.job")


@pytest.mark.parametrize("package", LAZY)
def test_every_public_name_resolves_and_is_listed(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", LAZY)
def test_first_uses_from_many_threads_at_once_all_succeed(package: str) -> None:
    """In a fresh interpreter, ten threads each import a different public name at once."""
    probe = (
        "import importlib, threading\n"
        f"pkg = importlib.import_module({package!r})\n"
        "names = list(pkg.__all__)[:10]\n"
        "errors = []\n"
        "go = threading.Barrier(len(names))\n"
        "def use(name):\n"
        "    go.wait()\n"
        "    try:\n"
        "        getattr(pkg, name)\n"
        "    except Exception as err:\n"
        "        errors.append(f'{name}: {err!r}')\n"
        "threads = [threading.Thread(target=use, args=(n,)) for n in names]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print('ERRORS', errors)\n"
    )
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert "ERRORS []" in done.stdout, done.stdout + done.stderr
