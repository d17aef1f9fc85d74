"""`convert --force` (and Trace.to_parquet) killed at any step never loses the old output, and the
next run cleans up what a killed one left beside it (neurontrace/_replace.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neurontrace import _replace
from tests.conftest import ROOT, SAMPLES

RANKS = SAMPLES / "gloo_8rank"


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def _named(out: Path, kind: str, pid: int) -> Path:
    return out.parent / sibling_name(out, kind, pid)


def sibling_name(out: Path, kind: str, pid: int) -> str:
    return _replace.sibling(out, kind).name.replace(f"-{os.getpid()}-", f"-{pid}-")


@pytest.mark.parametrize("exchange", [True, False])
def test_swap_replaces_a_whole_directory_by_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  exchange: bool) -> None:
    if not exchange:
        monkeypatch.setattr(_replace, "_EXCHANGE", None)
    elif _replace._EXCHANGE is None:
        pytest.skip("no renameat2(RENAME_EXCHANGE) here")
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "old.txt").write_text("old")
    tmp = _replace.make_partial(out)
    (tmp / "new.txt").write_text("new")
    with pytest.raises(FileExistsError):
        _replace.swap(tmp, out, force=False)
    assert (out / "sub" / "old.txt").read_text() == "old" and (tmp / "new.txt").exists()
    _replace.swap(tmp, out, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old one deleted after, no leftover
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    (tmp_path / "file").write_text("a file where the directory goes")
    tmp = _replace.make_partial(tmp_path / "file")
    _replace.swap(tmp, tmp_path / "file", force=True)
    assert (tmp_path / "file").is_dir()


def test_the_next_writer_puts_back_a_moved_old_output_and_removes_dead_writers_partials(tmp_path: Path) -> None:
    out = tmp_path / "out"
    dead = _dead_pid()
    old = _named(out, _replace.OLD, dead)  # killed between "old aside" and "new in": the output is missing
    old.mkdir()
    (old / "marker").write_text("the old output")
    partial = _named(out, _replace.PARTIAL, dead)
    partial.mkdir()
    (partial / "half.parquet").write_bytes(b"PAR1")
    running = _replace.make_partial(out)  # a writer still running (this process): kept, and named
    assert _replace.clean_leftovers(out) == [running]
    assert (out / "marker").read_text() == "the old output"
    assert not old.exists() and not partial.exists() and running.exists()
    other_host = out.parent / f".out.{_replace.PARTIAL}-zzzzzz-{dead}-0123abcd"  # another machine's: kept
    other_host.mkdir()
    assert set(_replace.clean_leftovers(out)) == {running, other_host}


def _kill_run(tmp_path: Path, old: Path, new: Path, around: int, *extra: str) -> dict[str, Any]:
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "_kill_convert.py"), str(old), str(new), str(work),
                           str(around), *extra], check=False, capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def _rank_dirs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(RANKS / "rank-0.pt.trace.json.gz", a)
    shutil.copy(RANKS / "rank-1.pt.trace.json.gz", b)
    return a, b


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the kills fork a child per run")
def test_convert_of_a_dataset_killed_at_every_step_around_the_swap_keeps_the_old_or_the_new(tmp_path: Path) -> None:
    # Before: the old dataset was deleted, then the new one renamed in; 11 of 12 aimed kills lost it.
    a, b = _rank_dirs(tmp_path)
    r = _kill_run(tmp_path, a, b, 2)
    assert len(r["kills"]) >= 5 and r["swap"] in r["kills"]
    assert set(r["states"]) <= {"old/old", "new/new", "old", "new"}, r  # never missing, never mixed
    assert any(s.startswith("old") for s in r["states"]) and any(s.startswith("new") for s in r["states"]), r
    assert r["leftovers"] == [] and r["final"], r


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the kills fork a child per run")
def test_one_trace_without_an_exchange_a_kill_between_the_renames_is_undone_by_the_next_run(tmp_path: Path) -> None:
    # Trace.to_parquet (`convert FILE -o DIR`) swaps the same way; here through the fallback for systems
    # without renameat2: a kill between "old aside" and "new in" leaves no output, and the next run puts
    # the old one back before anything else.
    r = _kill_run(tmp_path, SAMPLES / "compare/baseline.pt.trace.json.gz", SAMPLES / "compare/slowed.pt.trace.json.gz",
                  1, "--no-exchange")
    assert r["states"].get("missing/old", 0) >= 1, r
    assert set(r["states"]) <= {"old/old", "new/new", "missing/old", "old", "new"}, r
    assert r["leftovers"] == [] and r["final"], r
