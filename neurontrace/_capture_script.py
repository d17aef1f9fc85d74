"""Running a Python script in this process, the way ``python script.py`` / ``python -m mod`` would.

``neurontrace record`` runs the script in-process (so the capture sees it) with ``sys.argv`` and
``sys.path[0]`` set as the interpreter would set them, and turns its ending into an exit code:
normal end → 0, ``sys.exit(n)`` → n, an uncaught exception → its traceback (from the script's
own frames on) and 1, Ctrl-C → 130.
"""

from __future__ import annotations

import importlib.util
import re
import runpy
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from neurontrace.errors import InputNotFoundError, UsageError

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?(\.exe)?$")
EXIT_INTERRUPTED = 130

USAGE = "expected `-- python SCRIPT.py [ARGS...]`, `-- python -m MODULE [ARGS...]` or `-- SCRIPT.py [ARGS...]`"


@dataclass(frozen=True)
class Target:
    kind: str  # "path" or "module"
    name: str  # the script path or the module name
    args: tuple[str, ...]
    file: str | None  # the file whose frames start the user's traceback

    @property
    def argv(self) -> list[str]:
        # As the interpreter sets it: the script as given, or the module's file for -m.
        return [self.name if self.kind == "path" else self.file or self.name, *self.args]


def parse_command(command: Sequence[str]) -> Target:
    """The script or module to run from the words after ``--``; a usage error when it is not one."""
    words = list(command)
    if words[:1] == ["--"]:
        words = words[1:]
    if not words:
        raise UsageError(f"no script to run: {USAGE}")
    first = words[0]
    if _PYTHON.match(Path(first).name) or first == sys.executable:
        words = words[1:]
        if words[:1] == ["-m"]:
            if len(words) < 2:
                raise UsageError(f"`-m` needs a module name: {USAGE}")
            return _module(words[1], tuple(words[2:]))
        if words and words[0].startswith("-"):
            raise UsageError(
                f"interpreter option {words[0]!r} is not supported: the script runs inside neurontrace's own "
                "interpreter; give such options to it instead (python -X ... -m neurontrace record ...)"
            )
        if not words:
            raise UsageError(f"no script after {first!r}: {USAGE}")
    elif not first.endswith(".py"):
        raise UsageError(
            f"{first!r} is not a Python script: {USAGE}. Launchers run neurontrace instead, "
            "e.g. torchrun ... -m neurontrace record -- train.py"
        )
    script = Path(words[0])
    if not script.is_file():
        raise InputNotFoundError(f"{script}: no such script")
    return Target("path", str(script), tuple(words[1:]), str(script.resolve()))


def _module(name: str, args: tuple[str, ...]) -> Target:
    saved = sys.path[:]
    sys.path.insert(0, str(Path.cwd()))  # `python -m` looks in the current directory first
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path[:] = saved
    if spec is None:
        raise InputNotFoundError(f"no module named {name!r} to run")
    return Target("module", name, args, spec.origin)


@contextmanager
def script_environment(target: Target) -> Iterator[None]:
    """``sys.argv`` and ``sys.path[0]`` as the interpreter sets them for the script; restored after."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = target.argv
    first = str(Path(target.name).resolve().parent) if target.kind == "path" else str(Path.cwd())
    if sys.path:
        sys.path[0] = first
    else:
        sys.path.append(first)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def run(target: Target) -> None:
    """Run the script as ``__main__``; whatever it raises (``SystemExit`` included) propagates."""
    if target.kind == "module":
        runpy.run_module(target.name, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target.name, run_name="__main__")


def exit_code(exc: BaseException | None, target: Target) -> int:
    """The exit code ``python`` would give for how the script ended, printing what it would print."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        sys.stderr.write(f"{exc.code}\n")
        return 1
    if isinstance(exc, KeyboardInterrupt):
        sys.stderr.write("KeyboardInterrupt\n")
        return EXIT_INTERRUPTED
    tb = exc.__traceback__
    # Start the traceback at the script's own frames, as `python script.py` would show it.
    while tb is not None and not _is_target(tb.tb_frame.f_code.co_filename, target):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
    return 1


def _is_target(filename: str, target: Target) -> bool:
    return target.file is not None and (filename == target.file or Path(filename).resolve() == Path(target.file))
