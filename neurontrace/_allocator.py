"""Allocator settings for a process that loads one large trace after another (a Dask worker, the CLI).

Arrow's default pool (mimalloc) keeps freed memory for reuse, and so does glibc's heap: a process that
parses a rank of hundreds of MB, analyses it, drops it and parses the next keeps the high water of every
step. On a 291 MB rank, three ranks one after another grew a process by 594, 808 and 808 MiB with the
defaults; with Arrow on malloc and the heap trimmed after each rank, by 472, 486 and 488 MiB, for the same
CPU time (glibc's ``M_MMAP_THRESHOLD`` at 256 KiB gave 405-431 MiB at a third more CPU: not taken).

- ``ARROW_DEFAULT_MEMORY_POOL=system`` (:data:`ENV`, for processes started for neurontrace, where it holds
  from the first allocation; :func:`use_system_allocator` for a running one): Arrow allocates with malloc,
  so its freed buffers are in the heap that :func:`release_freed_memory` trims.
- :func:`handing_back` around each rank: glibc's ``malloc_trim(0)`` hands the heap's free pages back when
  the rank left more than :data:`TRIM_ABOVE` behind.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
TRIM_ABOVE = 64 << 20  # bytes a rank may leave behind before the heap is trimmed


@functools.cache
def use_system_allocator() -> None:
    """Arrow's default pool becomes the system allocator, from now on (once per process)."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def release_freed_memory() -> None:
    """Hand the free pages of the heap back to the OS (glibc; elsewhere nothing to do)."""
    libc = _libc()
    if libc is not None:
        with suppress(AttributeError):  # a libc without malloc_trim
            libc.malloc_trim(0)


@contextmanager
def handing_back(above: int = TRIM_ABOVE) -> Iterator[None]:
    """Around one rank's work: afterwards, if the process holds over ``above`` bytes more than before, trim
    the heap. Small ranks leave little behind, and trimming after each costs more than it gives: the next
    rank faults the pages in again (8 MB ranks ran up to a third slower trimmed every time)."""
    before = _rss()
    try:
        yield
    finally:
        if _rss() - before > above:
            release_freed_memory()


def _rss() -> int:
    """This process's resident bytes (Linux; 0 elsewhere, where nothing is trimmed)."""
    try:
        return int(Path("/proc/self/statm").read_bytes().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
