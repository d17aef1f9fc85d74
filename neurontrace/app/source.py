"""Reading source lines for the source panel, safely.

A trace names source files (Python frames, NKI kernels); the trace may come from anyone, so the
viewer treats those paths as untrusted. :class:`SourceReader` opens a file only when

- the path, with every symlink and ``..`` resolved, lies inside one of the configured source roots
  (``--source-root``, default the current directory);
- it is a regular file (not a directory, device, FIFO or socket) of at most ``MAX_BYTES``;
- it has one link only: a hard link has no "real path" to check, and a second name for a file
  outside the roots (``ln /etc/shadow ROOT/x.py``) would otherwise be served;
- its content is text (no NUL bytes in what is read).

Anything else is *refused* or *not found* and the panel shows the path as text only. A relative
path is tried under each root in turn. An absolute path is opened only if it lies inside a root;
otherwise (a trace recorded on another machine) its trailing components are looked up under the
roots instead, longest first (``/home/u/proj/model.py`` → ``<root>/proj/model.py``,
``<root>/model.py``), with the same checks; the panel says when a file was matched that way.

Pure standard library; no Dash.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_BYTES = 4 * 1024 * 1024  # larger "source files" are not shown
MAX_PATH_CHARS = 4096
CONTEXT = 5  # lines shown either side of the line

OK = "ok"
REFUSED = "refused"
NOT_FOUND = "not_found"
UNREADABLE = "unreadable"
NO_LOCATION = "no_location"


@dataclass(frozen=True)
class Snippet:
    """The outcome of one lookup: the lines to show, or why there are none."""

    requested: str | None  # the path as the trace recorded it
    line: int | None
    status: str  # OK, REFUSED, NOT_FOUND, UNREADABLE, NO_LOCATION
    message: str
    path: Path | None = None  # the file read (status OK)
    first_line: int = 1  # line number of lines[0]
    lines: list[str] = field(default_factory=list)
    matched_by_suffix: bool = False


class SourceReader:
    """Reads lines of files under ``roots`` only (see the module docstring for the rules)."""

    def __init__(self, roots: Sequence[str | Path]) -> None:
        resolved = []
        for root in roots:
            real = Path(os.path.realpath(root))
            if real.is_dir() and real not in resolved:
                resolved.append(real)
        self.roots: tuple[Path, ...] = tuple(resolved)

    def inside(self, path: str | Path) -> Path | None:
        """The root that the fully resolved ``path`` lies in, or None."""
        real = Path(os.path.realpath(path))
        return next((r for r in self.roots if real == r or real.is_relative_to(r)), None)

    def read(self, file: str | None, line: int | None, *, context: int = CONTEXT) -> Snippet:
        if not file:
            return Snippet(file, line, NO_LOCATION, "no source file recorded for this frame")
        if "\x00" in file or len(file) > MAX_PATH_CHARS:
            return Snippet(file, line, REFUSED, "refused: not a usable file path")
        if not self.roots:
            return Snippet(file, line, NOT_FOUND, "no source roots configured (--source-root DIR)")
        refused = False
        problem = ""
        for candidate, by_suffix in self._candidates(file):
            if self.inside(candidate) is None:
                refused = refused or not by_suffix
                continue
            real = Path(os.path.realpath(candidate))
            try:
                st = real.stat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                problem = f"{file}: not a regular file"
                continue
            if st.st_size > MAX_BYTES:
                problem = f"{file}: larger than {MAX_BYTES // (1024 * 1024)} MB, not shown"
                continue
            if st.st_nlink > 1:
                return Snippet(file, line, REFUSED, f"refused: {file} has {st.st_nlink} hard links, so it may be "
                               "a file from outside the source roots; shown as text only")
            return self._lines(file, line, real, st, context, by_suffix)
        if problem:
            return Snippet(file, line, UNREADABLE, problem)
        if refused:
            return Snippet(file, line, REFUSED,
                           "refused: the path resolves outside the source roots; shown as text only")
        roots = ", ".join(str(r) for r in self.roots)
        return Snippet(file, line, NOT_FOUND,
                       f"not found under the source roots ({roots}); add one with --source-root DIR")

    def _candidates(self, file: str) -> Iterator[tuple[Path, bool]]:
        path = Path(file)
        if path.is_absolute():
            yield path, False
            parts = PurePosixPath(file.replace("\\", "/")).parts[1:]
            for k in range(len(parts) - 1, 0, -1):  # trailing components, longest first
                tail = parts[-k:]
                if ".." in tail:
                    continue
                for root in self.roots:
                    yield root.joinpath(*tail), True
        else:
            for root in self.roots:
                yield root / path, False

    def _lines(self, file: str, line: int | None, real: Path, st: os.stat_result, context: int,
               by_suffix: bool) -> Snippet:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(real, flags)
        except OSError as exc:
            return Snippet(file, line, UNREADABLE, f"{file}: cannot be opened ({exc.strerror})")
        with os.fdopen(fd, "rb") as fh:
            now = os.fstat(fh.fileno())
            # The file checked is the file read (no swap between the check and the open).
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode) \
                    or now.st_nlink > 1:
                return Snippet(file, line, REFUSED, "refused: the file changed while it was being opened")
            data = fh.read(MAX_BYTES + 1)
        if b"\x00" in data:
            return Snippet(file, line, UNREADABLE, f"{file}: not a text file")
        text = data.decode("utf-8", errors="replace").splitlines()
        note = " (matched by its trailing path components)" if by_suffix else ""
        if line is None or line < 1:
            first, last = 1, min(len(text), 2 * context + 1)
        else:
            if line > len(text):
                return Snippet(file, line, NOT_FOUND, f"{_shown(real)} has {len(text)} lines, not line {line}{note}",
                               path=real, matched_by_suffix=by_suffix)
            first, last = max(1, line - context), min(len(text), line + context)
        return Snippet(file, line, OK, f"{_shown(real)}{note}", path=real, first_line=first,
                       lines=text[first - 1:last], matched_by_suffix=by_suffix)


def _shown(path: Path) -> str:
    """The path as the panel shows it: relative to the current directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
