"""What an interrupted first batch leaves in a Spark checkpoint, and what is removed."""

from __future__ import annotations

from pathlib import Path

from engine.stream.checkpoint import clear_interrupted_first_batch


class LocalFiles:
    """``names`` and ``delete`` of ``engine.backup.durable.DurableFiles``, on local paths."""

    def names(self, uri: str) -> list[str]:
        path = Path(uri)
        return sorted(p.name for p in path.iterdir()) if path.is_dir() else []

    def delete(self, uri: str) -> None:
        Path(uri).unlink()


def checkpoint(tmp: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    return tmp


def left(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_the_temporary_files_of_an_unlogged_first_batch_are_removed(tmp_path: Path) -> None:
    root = checkpoint(
        tmp_path,
        {
            "metadata": "{}",
            "sources/0/0": "v1",
            "offsets/.0.ab12.tmp": "",
            "offsets/..0.ab12.tmp.crc": "",
            "commits/.0.cd34.tmp": "",
        },
    )
    removed = clear_interrupted_first_batch(LocalFiles(), str(root) + "/")
    assert sorted(removed) == [
        "commits/.0.cd34.tmp",
        "offsets/..0.ab12.tmp.crc",
        "offsets/.0.ab12.tmp",
    ]
    assert left(root) == {"metadata", "sources/0/0"}  # the source's log is kept


def test_a_checkpoint_with_a_logged_batch_is_left_alone(tmp_path: Path) -> None:
    files = {"offsets/0": "v1", "offsets/.1.ef56.tmp": "", "commits/.0.cd34.tmp": ""}
    root = checkpoint(tmp_path, files)
    assert clear_interrupted_first_batch(LocalFiles(), str(root)) == []
    assert left(root) == set(files)


def test_a_new_checkpoint_has_nothing_to_remove(tmp_path: Path) -> None:
    assert clear_interrupted_first_batch(LocalFiles(), str(tmp_path / "none")) == []
    root = checkpoint(tmp_path / "ck", {"metadata": "{}", "sources/0/.0.crc": ""})
    assert clear_interrupted_first_batch(LocalFiles(), str(root)) == []
    assert left(root) == {"metadata", "sources/0/.0.crc"}
