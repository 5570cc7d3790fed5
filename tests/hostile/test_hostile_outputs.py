"""What ``plan --out`` and ``recover --out`` write over: a write that fails (a full disk, a
file-size limit, Ctrl-C) leaves the file that was there whole, and an output path the
system cannot even check is one line. Real subprocesses where the process's limits matter."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.conftest import one_line_error

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "beijing_aq_small.csv"
PLAN = ("plan", "--data", SMALL, "--sensors", "*_TEMP", "--eps", "1", "--delta", "0.05",
        "--window", "24", "--no-backtest")  # fmt: skip
LIMIT = 4096  # bytes a process may write to one file (``ulimit -f 4``)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working backup config of the small sample's temperatures (about 8 KB)."""
    from engine.cli import main

    path = tmp_path_factory.mktemp("outputs") / "plan.json"
    assert main([str(a) for a in (*PLAN, "--out", path)]) == 0
    assert path.stat().st_size > LIMIT
    return path


def _limited(*argv: object) -> subprocess.CompletedProcess[str]:
    """``python -m engine *argv`` allowed ``LIMIT`` bytes per file, as a full disk would."""

    def limit() -> None:  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    return subprocess.run(
        [sys.executable, "-m", "engine", *map(str, argv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=300,
        check=False,
    )


def _leftovers(folder: Path, *keep: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p not in keep)


def test_a_plan_out_that_cannot_be_written_whole_leaves_the_old_config(
    config: Path, tmp_path: Path
) -> None:
    """Was: the config written in place and cut at 4,096 bytes, the working one lost."""
    out = tmp_path / "plan.json"
    out.write_bytes(config.read_bytes())
    done = _limited(*PLAN, "--out", out)
    line = one_line_error(done.returncode, done.stderr)
    assert "cannot write config" in line
    assert out.read_bytes() == config.read_bytes()
    assert _leftovers(tmp_path, out) == []  # no temporary file left beside it


def test_a_recover_out_that_cannot_be_written_whole_leaves_the_old_file(
    config: Path, tmp_path: Path
) -> None:
    from engine.cli import main

    out = tmp_path / "all.csv"
    recover = ("recover", "--config", config, "--backup", SMALL, "--out", out)
    assert main([str(a) for a in recover]) == 0
    before = out.read_bytes()
    assert len(before) > LIMIT
    done = _limited(*recover)
    assert "cannot write" in one_line_error(done.returncode, done.stderr)
    assert out.read_bytes() == before
    assert _leftovers(tmp_path, out) == []


def test_recover_refuses_an_out_hard_linked_to_its_backup(run_cli, config, tmp_path) -> None:
    """Was: ``_check_out`` compared resolved paths, and a second name of the backup file
    (a hard link) was written over with the rebuilt readings."""
    backup = tmp_path / "backup.csv"
    backup.write_bytes(SMALL.read_bytes())
    os.link(backup, tmp_path / "linked.csv")
    code, _, err = run_cli(
        "recover", "--config", config, "--backup", backup, "--out", tmp_path / "linked.csv"
    )
    assert "would overwrite the backup it rebuilds from" in one_line_error(code, err)
    assert backup.read_bytes() == SMALL.read_bytes()
    (tmp_path / "link.csv").symlink_to(backup)  # the symlink refusal stays
    code, _, err = run_cli(
        "recover", "--config", config, "--backup", backup, "--out", tmp_path / "link.csv"
    )
    assert "would overwrite the backup" in one_line_error(code, err)


def test_an_out_path_the_system_cannot_check_is_one_line(run_cli, tmp_path, monkeypatch) -> None:
    """Was: ``OSError: File name too long`` from ``check_config_out`` (``out.is_dir()``),
    a traceback, before any planning."""
    long = tmp_path / ("x" * 300 + ".json")
    code, _, err = run_cli(*PLAN, "--out", long)
    assert "cannot write config" in one_line_error(code, err)
    assert "name too long" in err.lower()

    def refused(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_dir", refused)  # a folder on the way not searchable
    code, _, err = run_cli(*PLAN, "--out", tmp_path / "sub" / "plan.json")
    assert "permission denied" in one_line_error(code, err).lower()
