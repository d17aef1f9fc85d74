"""Run by tests/test_output_swap.py in a subprocess: `convert --force` SIGKILLed before each of its file
system steps in turn, the output checked after every kill (it must be the whole old or the whole new).

argv: OLD_INPUT NEW_INPUT WORK AROUND [--no-exchange]. Prints one JSON line: {"steps": N, "kills": [...],
"states": {...}, "leftovers": [...], "final": bool}. The kills: the first steps, every step around the
swap (the exchange or the renames) and a spread of the rest.
Each kill is a real SIGKILL of a forked child running the real command; the parent reads files only
(bytes compared with the complete old and new outputs), never Arrow, so forking stays safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from neurontrace import _replace
from neurontrace.app.index_store import DIRECTORY as INDEX_DIR
from neurontrace.cli import main

STEPS = ("rename", "replace", "unlink", "rmdir", "mkdir")


def tree(p: Path) -> dict[str, str] | None:
    """Every file under ``p`` with its content's digest (None: no output there), but the viewer's index: a
    cache stored after the swap, which the viewer uses only when its key matches the tables and otherwise
    builds again (tests/test_app_index_store.py), so a kill while it is written loses nothing."""
    if not p.is_dir():
        return None
    return {str(f.relative_to(p)): hashlib.sha1(f.read_bytes()).hexdigest()
            for f in sorted(p.rglob("*")) if f.is_file() and f.relative_to(p).parts[0] != INDEX_DIR}


def convert(src: str, out: Path, kill_at: int) -> tuple[int, int]:
    """In a forked child: the real command, killed before its ``kill_at``-th step (0: never); (the number of
    steps, the step that swapped the output in), or (-1, -1) once killed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        count = [0, 0]
        target = str(out.resolve())

        def counted(name: str, fn: Any) -> Any:
            def step(*a: Any, **k: Any) -> Any:
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                if name in ("exchange", "rename", "replace") and len(a) > 1 and str(a[1]) == target:
                    count[1] = count[0]  # the step that puts the new output in place
                return fn(*a, **k)
            return step

        for name in STEPS:
            setattr(os, name, counted(name, getattr(os, name)))
        if _replace._EXCHANGE is not None:
            _replace._EXCHANGE = counted("exchange", _replace._EXCHANGE)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["convert", src, "-o", str(out), "--force"])
        os.write(w, json.dumps([code, *count]).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if kill_at:
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (kill_at, status, data)
        return -1, -1
    code, steps, swap = json.loads(data)
    assert code == 0, code
    return int(steps), int(swap)


def run(old_src: str, new_src: str, work: Path, kills_around: int) -> dict[str, Any]:
    """Kill `convert OLD -> NEW --force` at the first step, the last, and every step within ``kills_around``
    of the swap; after each kill the output must be the old or the new one, once the leftovers are dealt
    with as the next run deals with them first (``clean_leftovers``). The last kill's leftovers are left to
    a real next run, which must leave none."""
    out = work / "out"
    convert(old_src, out, 0)
    old = tree(out)
    pristine = work / "old-copy"
    shutil.copytree(out, pristine)
    steps, swap = convert(new_src, out, 0)
    new = tree(out)
    assert old and new and old != new and swap > 0
    kills = sorted({1, *range(max(1, swap - kills_around), min(steps, swap + kills_around) + 1), steps})
    states: dict[str, int] = {}
    for i, k in enumerate(kills):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(pristine, out)  # the old output in place
        convert(new_src, out, k)
        now = tree(out)
        state = "old" if now == old else "new" if now == new else "missing" if now is None else "mixed"
        if i < len(kills) - 1:
            _replace.clean_leftovers(out.resolve())  # what the next run does first
            later = tree(out)
            state += "/" + ("old" if later == old else "new" if later == new else "lost")
        states[state] = states.get(state, 0) + 1
    convert(new_src, out, 0)  # the next run: cleans every leftover of the last kill
    leftovers = sorted(p.name for p in work.iterdir() if p.name.startswith(".out."))
    return {"steps": steps, "swap": swap, "kills": kills, "states": states, "leftovers": leftovers,
            "final": tree(out) == new}


if __name__ == "__main__":
    old_input, new_input, work_dir, around = sys.argv[1:5]
    if "--no-exchange" in sys.argv:
        _replace._EXCHANGE = None  # the fallback: the old output renamed aside, the new one renamed in
    print(json.dumps(run(old_input, new_input, Path(work_dir), int(around))))
