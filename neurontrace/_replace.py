"""Replacing an output directory so that no kill, at any moment, loses the old one.

A writer (``Trace.to_parquet``, ``convert`` of a job into a dataset) fills a directory of its own beside
the output, ``.<name>.partial-<host>-<pid>-<random>``, and :func:`swap` puts it in place:

- no output yet: one ``rename`` (atomic);
- an output exists (``--force``): on Linux one ``renameat2(RENAME_EXCHANGE)``, which trades the two names
  in one step, so the output is at every moment either the whole old one or the whole new one; the old
  one, now under the partial name, is deleted after. Where the exchange is missing (another OS, a file
  system without it) the old output is first renamed to ``.<name>.old-<host>-<pid>-<random>`` and the new
  one renamed in; a kill between the two leaves the old one under that name, and the next writer puts it
  back (:func:`clean_leftovers`) before anything else.

A writer killed at any point leaves at most its partial directory (with its pid in the name). The next
writer of the same output removes the leftovers of writers on this machine whose process is gone, and
names the others (another machine's, or a writer still running) in the error it raises, if any, so they
can be removed by hand.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

PARTIAL = "partial"
OLD = "old"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _host() -> str:
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:6]


def sibling(out: Path, kind: str) -> Path:
    """A new name beside ``out`` for a writer's own directory (``kind``: PARTIAL or OLD)."""
    return out.parent / f".{out.name}.{kind}-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def make_partial(out: Path) -> Path:
    """The writer's own new directory beside ``out`` (made by mkdir, so with the usual permissions)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = sibling(out, PARTIAL)
    tmp.mkdir()
    return tmp


def _leftovers(out: Path, kind: str) -> list[tuple[Path, bool]]:
    """(path, its writer is gone) for every ``kind`` directory beside ``out``."""
    prefix = f".{out.name}.{kind}-"
    found = []
    try:
        children = list(out.parent.iterdir())
    except OSError:
        return []
    for p in children:
        if not p.name.startswith(prefix):
            continue
        host, _, rest = p.name[len(prefix):].partition("-")
        pid_text = rest.partition("-")[0]
        gone = host == _host() and pid_text.isdigit() and not _alive(int(pid_text))
        found.append((p, gone))
    return found


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_leftovers(out: Path) -> list[Path]:
    """Put back an old output a killed writer had moved aside, remove dead writers' partial directories;
    returns the leftovers that were kept (another machine's, or of a writer still running)."""
    kept = []
    for old, gone in sorted(_leftovers(out, OLD), key=lambda x: x[0].stat().st_mtime if x[0].exists() else 0):
        if gone and not out.exists() and not out.is_symlink():
            try:
                old.rename(out)  # the old output, back where it was
                continue
            except OSError:
                pass
        if gone:
            _remove(old)
        else:
            kept.append(old)
    for tmp, gone in _leftovers(out, PARTIAL):
        if gone:
            _remove(tmp)
        else:
            kept.append(tmp)
    return kept


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            p.unlink()


def _exchanger() -> Callable[[Path, Path], bool] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None

    def exchange(a: Path, b: Path) -> bool:
        """True once ``a`` and ``b`` traded places; False where the system cannot exchange."""
        if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return True
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise OSError(code, os.strerror(code), str(b))

    return exchange


_EXCHANGE = _exchanger()


def swap(tmp: Path, out: Path, *, force: bool) -> None:
    """Put the finished directory ``tmp`` in place of ``out`` (see the module docstring). A missing ``out``
    or an empty directory is taken by one ``rename`` (which fails if someone fills it first); anything else
    is replaced only when ``force``, else ``FileExistsError``."""
    for _ in range(8):  # another writer may land between our attempts
        try:
            tmp.rename(out)  # atomic; succeeds over a missing name or an empty directory only
            return
        except OSError:
            if not out.exists() and not out.is_symlink():
                if not tmp.exists():
                    raise
                continue  # it went away meanwhile: try again
        if not force:
            raise FileExistsError(str(out))
        if _EXCHANGE is not None and _EXCHANGE(tmp, out):
            _remove(tmp)  # the old output, under the partial name now
            return
        old = sibling(out, OLD)
        try:
            out.rename(old)
        except FileNotFoundError:
            continue  # another writer moved it first
        tmp.rename(out)
        _remove(old)
        return
    raise FileExistsError(f"{out}: other writers kept replacing it")
