"""Allocator settings for a process that loads one large trace after another (a Dask worker, the CLI).

Arrow's default pool (mimalloc) and glibc's malloc both keep freed memory for reuse, and glibc raises its
mmap threshold each time a large block is freed, so later large blocks come from the heap and stay there. A
process that parses a rank of hundreds of MB, analyses it, drops it and parses the next keeps the high water
of every step: with these defaults a worker grew by 190 MB on a 58 MB rank (``bench/scale.py``), 3.3x the
rank. With large blocks returned to the system when freed, it grows by what it holds at once.

- ``ARROW_DEFAULT_MEMORY_POOL=system``: Arrow allocates with malloc, so the setting below reaches its buffers.
- ``MALLOC_MMAP_THRESHOLD_=262144``: glibc serves blocks over 256 KiB from their own mappings and unmaps them
  on free; a fixed value also turns off the dynamic threshold (glibc's mallopt(3), ``M_MMAP_THRESHOLD``).

:data:`ENV` is for processes started for neurontrace (LocalCluster workers), where it applies from the first
allocation; :func:`return_freed_memory` applies both to the running process, from then on.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from contextlib import suppress

MMAP_THRESHOLD = 256 * 1024
ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
_M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>


@functools.cache
def return_freed_memory() -> None:
    """Apply :data:`ENV`'s two settings to this process (once; the malloc one on glibc only)."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        with suppress(OSError, AttributeError):  # a libc without mallopt: Arrow's setting still holds
            ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
