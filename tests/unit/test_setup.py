"""Setup beyond this machine: Python 3.11-3.13, Java 17+, Chromium anywhere, every
transitive dependency pinned; CI runs README's test command, which checks before it tests."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from engine.stream.session import java_major, java_problem
from tests.e2e.harness import find_chromium

ROOT = Path(__file__).resolve().parents[2]


def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.9" 2023-10-17', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.21" 2023-10-17', 11),
        ('java version "1.8.0_392"', 8),
        ("not java at all", None),
    ],
)
def test_java_major_reads_every_version_style(output: str, major: int | None) -> None:
    assert java_major(output) == major


@pytest.mark.parametrize(("version", "ok"), [("11.0.21", False), ("17.0.9", True)])
def test_an_old_java_is_refused_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, ok: bool
) -> None:
    (tmp_path / "bin").mkdir()
    script(tmp_path / "bin", "java", f"echo 'openjdk version \"{version}\" 2023-10-17' >&2")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    problem = java_problem()
    if ok:
        assert problem is None
    else:
        assert problem is not None and "needs Java 17 or newer" in problem and "Java 11" in problem


def test_setup_sh_reads_the_java_major_version(tmp_path: Path) -> None:
    text = (ROOT / "scripts" / "setup.sh").read_text()
    function = re.search(r"^java_major\(\) \{.*?^\}", text, re.S | re.M)
    assert function is not None
    script(tmp_path, "java", "echo 'openjdk version \"11.0.21\" 2023-10-17' >&2")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", f"{function.group(0)}\njava_major"], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "11"
    assert "-lt 17" in text and "Spark 4 needs Java 17 or newer" in text


def test_chromium_is_found_by_variable_or_on_path(tmp_path: Path) -> None:
    browser = script(tmp_path, "chromium-browser", "exit 0")
    assert find_chromium({"PATH": str(tmp_path)}) == str(browser)
    assert find_chromium({"PATH": str(tmp_path), "LACUNA_CHROMIUM": "/opt/c/chrome"}) == (
        "/opt/c/chrome"
    )
    own = script(tmp_path, "my-chrome", "exit 0")
    assert find_chromium({"PATH": str(tmp_path), "LACUNA_CHROMIUM": "my-chrome"}) == str(own)
    assert find_chromium({"PATH": str(tmp_path / "nothing")}) == "/usr/bin/chromium"


def test_python_3_11_to_3_13_are_accepted() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = SpecifierSet(project["requires-python"])
    assert all(v in allowed for v in ("3.11.7", "3.12.1", "3.13.0"))
    assert "3.10.12" not in allowed and "3.14.0" not in allowed
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "(3, 11) <= sys.version_info[:2] <= (3, 13)" in setup
    assert "-c constraints.txt" in setup


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            out[canonicalize_name(req.name)] = str(req.specifier).removeprefix("==")
    return out


def test_constraints_pin_every_transitive_dependency_at_the_requirements_versions() -> None:
    constraints = pins(ROOT / "constraints.txt")
    direct = pins(ROOT / "requirements.txt") | pins(ROOT / "requirements-dev.txt")
    assert {n: constraints.get(n) for n in direct} == direct
    seen, todo = set(), list(direct)
    while todo:  # the installed closure of the requirements, by their metadata
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    assert sorted(seen - constraints.keys()) == []
    installed = {canonicalize_name(n): metadata.version(n) for n in seen}
    assert {n: constraints[n] for n in seen} == installed


def test_the_image_is_pinned_and_its_user_cannot_rewrite_the_app() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    base = next(line for line in lines if line.startswith("FROM "))
    assert re.fullmatch(r"FROM python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", base)
    copies = [line for line in lines if line.startswith("COPY ")]
    assert copies and not [c for c in copies if "--chown" in c]
    assert lines.index("USER lacuna") > max(lines.index(c) for c in copies)
    assert "RUN pip install -r requirements.txt -c constraints.txt" in lines
    assert any("-p 127.0.0.1:8501:8501" in line for line in lines)
    # the example run starts (the image refuses to start without credentials)
    assert any("-e LACUNA_TOKEN" in line for line in lines)
    # a developer's [auth] secrets never go into the image
    assert not [c for c in copies if c.split()[1] in (".", ".streamlit", ".streamlit/")]
    assert ".streamlit/secrets.toml" in (ROOT / ".dockerignore").read_text().splitlines()


def test_the_app_listens_on_loopback_by_default() -> None:
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None
    return [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_ci_runs_readmes_test_command_verbatim() -> None:
    setup, tests = readme_commands()
    assert setup.startswith("bash scripts/setup.sh &&")
    assert tests == "bash scripts/setup.sh --dev && bash scripts/test.sh"
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    wiring = ("#", "set ", "cd ", "export ")
    commands = [ln for ln in run if ln.strip() and not ln.startswith(wiring)]
    assert commands == [tests]
    assert "set -euo pipefail" in run


def fake_venv(tmp_path: Path) -> Path:
    """A copy of scripts/test.sh beside a ``.venv/bin/python`` that logs its arguments and
    fails (exit 3) when they contain ``$FAIL_AT``."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    body = 'echo "$*" >> "$LOG"\ncase "$*" in *"${FAIL_AT:-never}"*) exit 3;; esac'
    script(tmp_path / ".venv" / "bin", "python", body)
    return tmp_path / "scripts" / "test.sh"


def run_test_sh(tmp_path: Path, *args: str, fail_at: str = "never") -> tuple[int, list[str]]:
    log = tmp_path / "calls.log"
    env = {"PATH": "/usr/bin:/bin", "LOG": str(log), "FAIL_AT": fail_at}
    done = subprocess.run(["bash", str(fake_venv(tmp_path)), *args], env=env,
                          capture_output=True, text=True)  # fmt: skip
    return done.returncode, log.read_text().splitlines()


def test_the_test_script_lints_formats_and_types_before_the_tests(tmp_path: Path) -> None:
    code, calls = run_test_sh(tmp_path, "tests/unit", "-x")
    assert code == 0
    assert calls == [
        "-m ruff check .",
        "-m ruff format --check .",
        "-m mypy engine",
        "-m pytest -n 2 --dist loadgroup --durations=15 --no-loadscope-reorder tests/unit -x",
    ]


@pytest.mark.parametrize(("fail_at", "ran"), [("ruff check", 1), ("format", 2), ("mypy", 3)])
def test_the_test_script_stops_at_the_first_check_that_fails(
    tmp_path: Path, fail_at: str, ran: int
) -> None:
    code, calls = run_test_sh(tmp_path, fail_at=fail_at)
    assert code == 3 and len(calls) == ran and fail_at in calls[-1]


def test_spark_submits_master_stands_unless_one_is_given() -> None:
    """PySpark's builder overrides spark-submit's --master: `spark-submit --master yarn
    engine/job/run.py ...` ran on local[*] unsaid. Under spark-submit (its gateway port in
    the environment) no master is set unless --master or LACUNA_SPARK_MASTER gives one."""
    from engine.stream.session import MASTER_ENV, SUBMITTED_ENV, SparkSettings

    submitted = {SUBMITTED_ENV: "40123"}
    assert SparkSettings().resolved_master({}) == "local[*]"
    assert SparkSettings().resolved_master(submitted) is None
    assert SparkSettings("spark://h:7077").resolved_master(submitted) == "spark://h:7077"
    assert SparkSettings().resolved_master({**submitted, MASTER_ENV: "local[2]"}) == "local[2]"
