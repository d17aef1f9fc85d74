"""Reading source lines for the source panel, safely.

A trace names source files (Python frames, NKI kernels); the trace may come from anyone, so the
viewer treats those paths as untrusted. :class:`SourceReader` serves a file only when

- it is reached from a directory handle of one of the configured source roots (``--source-root``,
  default the current directory) one component at a time, each opened relative to the handle of the
  one before with ``O_NOFOLLOW`` (directories also with ``O_DIRECTORY``), so a symlink is never
  followed by the kernel: the reader reads the link itself and walks its target under the root the
  same way, and a ``..`` or a link target that would leave the root is refused. The path is opened
  once; what was opened is then checked (``fstat``), never a path checked and then opened again, so a
  directory swapped for a symlink to an outside one while the request runs cannot redirect the read;
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

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_BYTES = 4 * 1024 * 1024  # larger "source files" are not shown
MAX_PATH_CHARS = 4096
MAX_LINKS = 40  # symlinks followed in one lookup, as the kernel allows
CONTEXT = 5  # lines shown either side of the line

OK = "ok"
REFUSED = "refused"
NOT_FOUND = "not_found"
UNREADABLE = "unreadable"
NO_LOCATION = "no_location"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


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


class _OutsideError(Exception):
    """The lookup would leave the root (a ``..`` above it, a link pointing out of it, too many links)."""


class _NotRegularError(Exception):
    """The component reached is not a regular file (a directory, device, FIFO or socket)."""


class SourceReader:
    """Reads lines of files under ``roots`` only (see the module docstring for the rules)."""

    def __init__(self, roots: Sequence[str | Path]) -> None:
        resolved: list[Path] = []
        given: list[tuple[Path, Path]] = []  # (the root as written, absolute; its real path)
        for root in roots:
            real = Path(os.path.realpath(root))
            if real.is_dir() and real not in resolved:
                resolved.append(real)
                given.append((Path(os.path.normpath(Path(root).absolute())), real))
        self.roots: tuple[Path, ...] = tuple(resolved)
        self._spellings = given

    def inside(self, path: str | Path) -> Path | None:
        """The root that ``path`` (absolute, ``..`` resolved as written, symlinks not followed) lies in."""
        rel = self._relative(Path(path))
        return rel[0] if rel is not None else None

    def read(self, file: str | None, line: int | None, *, context: int = CONTEXT) -> Snippet:
        if not file:
            return Snippet(file, line, NO_LOCATION, "no source file recorded for this frame")
        if "\x00" in file or len(file) > MAX_PATH_CHARS:
            return Snippet(file, line, REFUSED, "refused: not a usable file path")
        if not self.roots:
            return Snippet(file, line, NOT_FOUND, "no source roots configured (--source-root DIR)")
        refused = False
        problem = ""
        for root, parts, by_suffix in self._candidates(file):
            try:
                fd = open_beneath(root, parts)
            except _OutsideError:
                refused = refused or not by_suffix
                continue
            except _NotRegularError:
                problem = f"{file}: not a regular file"
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    problem = f"{file}: cannot be opened ({exc.strerror})"
                continue
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())  # what was opened is what is checked, and what is read
                if not stat.S_ISREG(st.st_mode):
                    problem = f"{file}: not a regular file"
                    continue
                if st.st_size > MAX_BYTES:
                    problem = f"{file}: larger than {MAX_BYTES // (1024 * 1024)} MB, not shown"
                    continue
                if st.st_nlink > 1:
                    return Snippet(file, line, REFUSED, f"refused: {file} has {st.st_nlink} hard links, so it may "
                                   "be a file from outside the source roots; shown as text only")
                data = fh.read(MAX_BYTES + 1)
            return self._lines(file, line, root.joinpath(*_normal(parts)), data, context, by_suffix)
        if problem:
            return Snippet(file, line, UNREADABLE, problem)
        if refused:
            return Snippet(file, line, REFUSED,
                           "refused: the path resolves outside the source roots; shown as text only")
        roots = ", ".join(str(r) for r in self.roots)
        return Snippet(file, line, NOT_FOUND,
                       f"not found under the source roots ({roots}); add one with --source-root DIR")

    def _relative(self, path: Path) -> tuple[Path, list[str]] | None:
        """(root, components below it) of an absolute ``path`` written under a root (as given or real)."""
        norm = Path(os.path.normpath(path))
        for spelled, real in self._spellings:
            for base in (real, spelled):
                if norm == base or norm.is_relative_to(base):
                    return real, list(norm.relative_to(base).parts)
        return None

    def _candidates(self, file: str) -> Iterator[tuple[Path, list[str], bool]]:
        path = Path(file)
        if path.is_absolute():
            rel = self._relative(path)
            if rel is not None:
                yield rel[0], rel[1], False
            else:
                yield self.roots[0], [".."], False  # outside every root: refused as such
            parts = PurePosixPath(file.replace("\\", "/")).parts[1:]
            for k in range(len(parts) - 1, 0, -1):  # trailing components, longest first
                tail = parts[-k:]
                if ".." in tail:
                    continue
                for root in self.roots:
                    yield root, list(tail), True
        else:
            for root in self.roots:
                yield root, list(path.parts), False

    def _lines(self, file: str, line: int | None, real: Path, data: bytes, context: int,
               by_suffix: bool) -> Snippet:
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


def open_beneath(root: Path, parts: Sequence[str]) -> int:
    """A file descriptor of the regular file ``root/parts...``, opened once, never leaving ``root``.

    Each component is opened relative to the descriptor of the directory before it with ``O_NOFOLLOW``
    (the kernel follows no symlink); a symlink met on the way is read (``readlink`` relative to its
    directory) and its target walked the same way, from that directory, or from the root when absolute
    (then it must be written under the root). ``..`` goes back one directory of the walk, never above the
    root. Raises ``_OutsideError``, ``_NotRegularError`` (checked before opening, so a FIFO or device is never
    opened), or the ``OSError`` of a missing component. The caller checks the descriptor again (fstat).
    """
    pending = list(reversed(parts))
    stack = [os.open(root, _DIR_FLAGS)]
    links = 0
    try:
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) == 1:
                    raise _OutsideError(name)
                os.close(stack.pop())
                continue
            if "/" in name or "\x00" in name:
                raise _OutsideError(name)
            here = stack[-1]
            st = os.stat(name, dir_fd=here, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise _OutsideError(name)
                try:
                    target = os.readlink(name, dir_fd=here)
                except OSError as exc:  # EINVAL: no longer a link since the stat; look at it again
                    if exc.errno != errno.EINVAL:
                        raise
                    pending.append(name)
                    continue
                if target.startswith("/"):  # absolute: only as a path written under the root
                    norm = Path(os.path.normpath(target))
                    if not norm.is_relative_to(root):
                        raise _OutsideError(target)
                    while len(stack) > 1:
                        os.close(stack.pop())
                    target = str(norm.relative_to(root))
                pending.extend(reversed(PurePosixPath(target).parts))
                continue
            if not pending:  # the last component: a regular file, opened without following a link
                if not stat.S_ISREG(st.st_mode):
                    raise _NotRegularError(name)
                try:
                    return os.open(name, _FILE_FLAGS, dir_fd=here)
                except OSError as exc:
                    if exc.errno != errno.ELOOP:
                        raise
                    pending.append(name)  # swapped for a symlink since the stat: look at it again
                    links += 1
                    continue
            try:
                stack.append(os.open(name, _DIR_FLAGS, dir_fd=here))
            except OSError as exc:
                if exc.errno != errno.ELOOP or links >= MAX_LINKS:
                    raise
                pending.append(name)  # swapped for a symlink since the stat: read it as one
                links += 1
        raise _NotRegularError(str(root))  # the root itself
    finally:
        for fd in stack:
            os.close(fd)


def _normal(parts: Sequence[str]) -> list[str]:
    """``parts`` with ``.`` and ``..`` resolved as written (for the path the panel shows)."""
    out: list[str] = []
    for p in parts:
        if p == "..":
            if out:
                out.pop()
        elif p not in ("", "."):
            out.append(p)
    return out


def _shown(path: Path) -> str:
    """The path as the panel shows it: relative to the current directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
