"""engine.atomic: an output replaced whole or not at all (``plan --out``,
``recover --out``, the app's config download written to disk)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine.atomic import write_atomically


def _half_then(error: BaseException):
    def write(tmp: Path) -> None:
        tmp.write_text("half of the new ")
        raise error

    return write


@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(27, "File too large")])
def test_a_write_that_stops_leaves_the_old_file_and_no_temporary_one(
    tmp_path: Path, error: BaseException
) -> None:
    target = tmp_path / "plan.json"
    target.write_text("the old config\n")
    with pytest.raises(type(error)):
        write_atomically(target, _half_then(error))
    assert target.read_text() == "the old config\n"
    assert os.listdir(tmp_path) == ["plan.json"]


def test_the_new_file_replaces_the_old_with_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old")
    target.chmod(0o640)
    assert write_atomically(target, lambda tmp: tmp.write_text("new")) == target
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["plan.json"]


def test_a_symlinked_target_is_written_through_to_its_file(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    (tmp_path / "link.json").symlink_to(real)
    write_atomically(tmp_path / "link.json", lambda tmp: tmp.write_text("new"))
    assert (tmp_path / "link.json").is_symlink() and real.read_text() == "new"


def test_a_long_name_still_gets_a_temporary_file_beside_it(tmp_path: Path) -> None:
    """The temporary name is cut so it fits wherever the target's name fits (255 bytes)."""
    target = tmp_path / ("x" * 250 + ".csv")
    write_atomically(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "new"
