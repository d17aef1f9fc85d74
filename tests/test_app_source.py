"""The source panel reads only regular text files under the source roots; everything else is refused."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from neurontrace.app.source import MAX_BYTES, NO_LOCATION, NOT_FOUND, OK, REFUSED, UNREADABLE, SourceReader


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """(root, outside): a source root with pkg/model.py, and a secret file beside the root."""
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "model.py").write_text("".join(f"line {i}\n" for i in range(1, 41)))
    outside = tmp_path / "secret.txt"
    outside.write_text("TOP SECRET\n")
    return root, outside


def test_relative_path_under_the_root_shows_ten_lines_around_the_line(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    s = SourceReader([root]).read("pkg/model.py", 20)
    assert s.status == OK
    assert s.first_line == 15 and s.lines[0] == "line 15" and s.lines[-1] == "line 25"
    assert s.lines[20 - s.first_line] == "line 20"
    assert s.path == (root / "pkg" / "model.py").resolve()


def test_dotdot_out_of_the_root_is_refused(tree: tuple[Path, Path]) -> None:
    root, _outside = tree
    reader = SourceReader([root])
    for path in ("../secret.txt", "pkg/../../secret.txt", "../../../../../../etc/passwd"):
        s = reader.read(path, 1)
        assert s.status == REFUSED, path
        assert s.lines == [] and "outside the source roots" in s.message
    assert reader.read("pkg/../pkg/model.py", 2).status == OK  # `..` that stays inside is fine


def test_absolute_paths_outside_the_roots_are_refused(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    reader = SourceReader([root])
    for path in (str(outside), "/etc/passwd", "/etc/shadow"):
        s = reader.read(path, 1)
        assert s.status == REFUSED, path
        assert "TOP SECRET" not in " ".join(s.lines) and not s.lines
    inside = reader.read(str(root / "pkg" / "model.py"), 3)
    assert inside.status == OK and not inside.matched_by_suffix


def test_absolute_path_from_another_machine_matches_by_trailing_components(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    s = SourceReader([root]).read("/home/someone/project/pkg/model.py", 5)
    assert s.status == OK and s.matched_by_suffix and s.lines[5 - s.first_line] == "line 5"
    assert "trailing path components" in s.message


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_symlinks_out_of_the_root_are_refused_and_inside_are_followed(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "leak.py").symlink_to(outside)
    (root / "leakdir").symlink_to(outside.parent)
    (root / "alias.py").symlink_to(root / "pkg" / "model.py")
    reader = SourceReader([root])
    assert reader.read("leak.py", 1).status == REFUSED
    assert reader.read("leakdir/secret.txt", 1).status == REFUSED
    assert reader.read(str(root / "leak.py"), 1).status == REFUSED
    assert reader.read("alias.py", 2).status == OK


def test_hard_links_are_refused(tree: tuple[Path, Path]) -> None:
    # A hard link has no real path to check: a second name inside the root for a file outside it.
    root, outside = tree
    os.link(outside, root / "pkg" / "innocent.py")
    s = SourceReader([root]).read("pkg/innocent.py", 1)
    assert s.status == REFUSED and "hard links" in s.message and s.lines == []
    assert SourceReader([root]).read("pkg/model.py", 1).status == OK  # one link: read as before


def test_a_symlinked_root_is_resolved_once(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    link = tmp_path / "rootlink"
    link.symlink_to(root)
    assert SourceReader([link]).read("pkg/model.py", 1).status == OK


def test_only_regular_text_files_of_bounded_size_are_read(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    reader = SourceReader([root])
    assert reader.read("pkg", 1).status == UNREADABLE  # a directory
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x00binary")
    assert reader.read("blob.bin", 1).status == UNREADABLE
    with (root / "huge.py").open("wb") as fh:
        fh.truncate(MAX_BYTES + 1)
    assert reader.read("huge.py", 1).status == UNREADABLE
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe.py")
        assert reader.read("pipe.py", 1).status == UNREADABLE  # never opened, so never blocks


def test_missing_files_lines_and_locations(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    reader = SourceReader([root])
    assert reader.read("pkg/nothere.py", 1).status == NOT_FOUND
    assert "--source-root" in reader.read("pkg/nothere.py", 1).message
    assert reader.read("pkg/model.py", 500).status == NOT_FOUND
    assert reader.read(None, None).status == NO_LOCATION
    assert reader.read("", 3).status == NO_LOCATION
    assert reader.read("pkg/model.py\x00.txt", 1).status == REFUSED
    no_line = reader.read("pkg/model.py", None)
    assert no_line.status == OK and no_line.first_line == 1


def test_each_root_is_tried_in_turn(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.py").write_text("a\nb\n")
    reader = SourceReader([other, root, tmp_path / "does-not-exist"])
    assert reader.roots == (other.resolve(), root.resolve())
    assert reader.read("pkg/model.py", 1).status == OK
    assert reader.read("train.py", 2).lines[-1] == "b"
    assert SourceReader([]).read("train.py", 1).status == NOT_FOUND


def _exchange() -> Callable[[Path, Path], None] | None:
    """Linux's renameat2(RENAME_EXCHANGE): swap two names in one step (None where libc lacks it)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return None
    at_fdcwd, rename_exchange = -100, 2

    def swap(a: Path, b: Path) -> None:
        if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")

    return swap


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_a_directory_swapped_for_a_symlink_while_reads_run_never_serves_an_outside_byte(tmp_path: Path) -> None:
    # The campaign's race: a directory inside the root and a symlink to an outside directory trade places
    # (an atomic exchange, or two renames where there is none) in a loop while the panel reads. Checking a
    # path and opening it again lost this race 28,733 times in 100,000; opening once beneath the root never.
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "pkg").mkdir(parents=True)
    (outside / "pkg").mkdir(parents=True)
    (root / "pkg" / "model.py").write_text("inside\n" * 20)
    (outside / "pkg" / "model.py").write_text("TOP SECRET\n" * 20)
    link = root / "swap"
    link.symlink_to(outside / "pkg")
    swap = _exchange()
    stop = threading.Event()
    swaps = [0]

    def racer() -> None:
        aside = root / "pkg.aside"
        while not stop.is_set():
            if swap is not None:
                swap(root / "pkg", link)
            else:
                (root / "pkg").rename(aside)
                link.rename(root / "pkg")
                (root / "pkg").rename(link)
                aside.rename(root / "pkg")
            swaps[0] += 1

    reader = SourceReader([root])
    statuses: dict[str, int] = {}
    t = threading.Thread(target=racer, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for path in ("pkg/model.py", str(root / "pkg" / "model.py")):
                s = reader.read(path, 3)
                assert not any("SECRET" in x for x in s.lines), (s.status, s.message)
                assert "SECRET" not in s.message
                statuses[s.status] = statuses.get(s.status, 0) + 1
                assert s.status in (OK, REFUSED, NOT_FOUND), s.message
    finally:
        stop.set()
        t.join()
    assert swaps[0] > 100, swaps  # the race really ran
    assert statuses.get(OK, 0) > 0 and statuses.get(REFUSED, 0) > 0, statuses  # both states were seen
