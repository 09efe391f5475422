"""Files in folders an agent may write to (oar/core/safe_files.py): walked and opened without
following a link, on the real file system; a planted link, FIFO or hard link is refused and
nothing is read or written through it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from oar.core import safe_files
from oar.core.safe_files import TooLarge, UnsafeFile


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the folder an agent writes in: what a planted link points at."""
    target = tmp_path / "outside" / "owner.txt"
    target.parent.mkdir()
    target.write_text("the owner's file\n", encoding="utf-8")
    return target


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def test_it_makes_the_folders_writes_by_a_rename_and_reads_back(work: Path) -> None:
    with safe_files.opened_dir(work / ".relay" / "memory", create=True) as folder:
        safe_files.write_file_atomic(folder, "fe.md", b"## a\n")
        safe_files.write_file_atomic(folder, "fe.md", b"## b\n")  # replaced whole
        assert safe_files.read_regular_file(folder, "fe.md", 100) == b"## b\n"
        assert safe_files.names_in(folder) == ["fe.md"]  # no .partial left
        with pytest.raises(TooLarge):
            safe_files.read_regular_file(folder, "fe.md", 3)
        with pytest.raises(FileNotFoundError):
            safe_files.read_regular_file(folder, "be.md", 100)
    with pytest.raises(FileNotFoundError):
        safe_files.open_dir_nofollow(work / "missing")


def test_a_leftover_regular_partial_is_replaced(work: Path) -> None:
    (work / ".fe.md.partial").write_text("half", encoding="utf-8")
    with safe_files.opened_dir(work) as folder:
        safe_files.write_file_atomic(folder, "fe.md", b"whole")
    assert (work / "fe.md").read_text(encoding="utf-8") == "whole" and not (work / ".fe.md.partial").exists()


def test_a_symlinked_partial_is_refused_and_its_target_untouched(work: Path, outside: Path) -> None:
    (work / ".fe.md.partial").symlink_to(outside)
    with safe_files.opened_dir(work) as folder, pytest.raises(UnsafeFile) as refused:
        safe_files.write_file_atomic(folder, "fe.md", b"# agent text\n")
    assert ".fe.md.partial is a symbolic link" in refused.value.strerror
    assert outside.read_text(encoding="utf-8") == "the owner's file\n"
    assert not (work / "fe.md").exists()


def test_a_symlinked_target_is_refused(work: Path, outside: Path) -> None:
    (work / "fe.md").symlink_to(outside)
    with safe_files.opened_dir(work) as folder, pytest.raises(UnsafeFile, match="fe.md is a symbolic link"):
        safe_files.write_file_atomic(folder, "fe.md", b"x")
    assert outside.read_text(encoding="utf-8") == "the owner's file\n" and (work / "fe.md").is_symlink()


@pytest.mark.parametrize("linked", ["a", "a/b", "a/b/c"])
def test_a_symlinked_folder_anywhere_on_the_way_is_refused(work: Path, outside: Path, linked: str) -> None:
    (work / "a" / "b" / "c").mkdir(parents=True)
    path = work / linked
    shutil.rmtree(path)
    path.symlink_to(outside.parent)
    for create in (False, True):
        with pytest.raises(UnsafeFile) as refused:
            safe_files.open_dir_nofollow(work / "a" / "b" / "c", create=create)
        assert refused.value.strerror.startswith(f"{path} is a symbolic link")
    assert sorted(item.name for item in outside.parent.iterdir()) == ["owner.txt"]


def test_a_file_where_a_folder_should_be_is_refused(work: Path) -> None:
    (work / ".relay").write_text("x", encoding="utf-8")
    with safe_files.opened_dir(work) as folder, pytest.raises(UnsafeFile, match=r"\.relay is not a folder"):
        safe_files.open_dir_nofollow(".relay/memory", under=folder, create=True)


def test_a_symlink_a_fifo_and_a_hard_link_are_not_read(work: Path, outside: Path) -> None:
    (work / "stolen.md").symlink_to(outside)
    os.mkfifo(work / "pipe.md")  # opened for reading, it would wait for a writer
    os.link(outside, work / "linked.md")
    (work / "folder.md").mkdir()
    with safe_files.opened_dir(work) as folder:
        for name, why in (("stolen.md", "is a symbolic link"), ("pipe.md", "is not a regular file"),
                          ("linked.md", "has other names"), ("folder.md", "is not a regular file")):
            with pytest.raises(UnsafeFile) as refused:
                safe_files.read_regular_file(folder, name, 1000)
            assert refused.value.strerror.startswith(f"{name} {why}")
