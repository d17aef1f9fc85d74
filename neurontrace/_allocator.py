"""Allocator settings for a process that loads one large trace after another (a Dask worker, the CLI).

Arrow's default pool (mimalloc) keeps freed memory for reuse, and so does glibc's heap, whose threshold for
serving a block from its own mapping rises as large blocks are freed: a process that parses a rank of
hundreds of MB, analyses it, drops it and parses the next keeps the high water of every step. Measured on
a 291 MB rank, three in a row in one process (growth of the peak RSS):

- defaults: 594, 808, 808 MiB;
- Arrow on malloc, the heap trimmed after each rank: 472, 486, 488 MiB, the same CPU time;
- with glibc's mmap threshold fixed at 16 MiB as well: 480, 484, 484 MiB, the same time (:data:`ENV`);
- Dask's worker default ``MALLOC_TRIM_THRESHOLD_=65536`` fixes the mmap threshold at 128 KiB: 366-395 MiB,
  but every large block is then a fresh mapping whose pages fault in, and a rank takes 31% longer. Our
  workers leave it unset (:data:`UNSET_ENV`).
- Fixing the mmap threshold also fixes the trim threshold, at 128 KiB: the heap's free top goes back to the OS
  at almost every free, and the next blocks fault the same pages in again. ``diagnose --json`` of the 1,206 MB
  tiled ResNet-50 trace, in turn: 577-646 K page faults and 3.1-3.6 s of system time at 128 KiB, 427-429 K and
  2.5 s with the heap's top kept up to :data:`TRIM_THRESHOLD`, for 1.6-2.5% more peak RSS; the wall time moved
  within the machine's noise (``bench/diagnose_sections.py --versus``).

:data:`ENV` is for processes started for neurontrace (LocalCluster workers), where it holds from the first
allocation; :func:`use_system_allocator` applies it to a running process (the CLI, a worker of a cluster
started elsewhere), from then on; :func:`handing_back` trims the heap after a rank that left much behind;
:func:`use_arrow_pool` gives Arrow its mimalloc pool back for ``diagnose DATASET`` (slice after slice, it does better).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

MMAP_THRESHOLD = 16 << 20
TRIM_THRESHOLD = 256 << 20  # free heap top kept for the next blocks (a rank's large leftovers: handing_back)
ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
# Left unset in worker processes: Dask's 64 KiB trim threshold (a 291 MB rank: 4.7 s without it, 6.2 s with).
UNSET_ENV = ("MALLOC_TRIM_THRESHOLD_",)
TRIM_ABOVE = 64 << 20  # bytes a rank may leave behind before the heap is trimmed


@functools.cache
def use_system_allocator() -> None:
    """:data:`ENV` for this running process, from now on (once): Arrow's default pool becomes the system
    allocator, and glibc's mmap and trim thresholds are fixed (mallopt)."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    libc = _libc()
    if libc is not None:
        with suppress(AttributeError):  # a libc without mallopt
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def use_arrow_pool() -> None:
    """Arrow's mimalloc pool for this process from now on (where the build has it): for ``diagnose DATASET``,
    which reads one slice after another and drops it. On malloc each slice's columns fault in fresh pages and the
    heap's high water grows with the slices read; measured on the 2.1 / 8.5 GB tiled ResNet-50 datasets
    (docs/scale.md): peak 1,137 / 1,290 MB on malloc, 1,006 / 1,068 MB on mimalloc, in 0.66-0.79x the wall time
    (system time 14 s against 40 s at 2.1 GB)."""
    import pyarrow as pa

    with suppress(NotImplementedError):  # a pyarrow built without mimalloc keeps its pool
        pa.set_memory_pool(pa.mimalloc_memory_pool())


def release_pool() -> None:
    """Hand the free memory Arrow's pool holds back to the OS: before each slice ``diagnose DATASET`` reads (the
    previous one dropped). What mimalloc kept of one slice fitted the next one's columns badly and the peak rose
    with the slices read: at 8.5 GB of the tiled ResNet-50 trace 1,080 MiB kept, 991 MiB handed back (docs/scale.md),
    in about the same wall time (the pages fault in again: system time +15-25%)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


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
