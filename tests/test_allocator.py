"""neurontrace._allocator: the heap is trimmed after a rank only when the rank left much behind, and its free top
is kept for the next blocks otherwise."""

from __future__ import annotations

import pytest

from neurontrace import _allocator


@pytest.mark.parametrize(("left_behind", "trimmed"), [(0, False), (_allocator.TRIM_ABOVE, False),
                                                      (_allocator.TRIM_ABOVE + 1, True)])
def test_trims_only_above_the_threshold(monkeypatch: pytest.MonkeyPatch, left_behind: int, trimmed: bool) -> None:
    rss = iter([1 << 30, (1 << 30) + left_behind])
    calls: list[int] = []
    monkeypatch.setattr(_allocator, "_rss", lambda: next(rss))
    monkeypatch.setattr(_allocator, "release_freed_memory", lambda: calls.append(1))
    with _allocator.handing_back():
        pass
    assert bool(calls) is trimmed


def test_rss_is_read_on_linux() -> None:
    import platform

    if platform.system() != "Linux":
        pytest.skip("resident size is read from /proc")
    held = bytearray(64 << 20)
    held[::4096] = b"x" * len(held[::4096])  # touch every page
    assert _allocator._rss() > 64 << 20
    _allocator.release_freed_memory()  # callable here (glibc), whatever it hands back


_HEAP_CHILD = """
import ctypes, sys
from neurontrace import _allocator
if sys.argv[1] == "cli":
    _allocator.use_system_allocator()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(1 << 20) for _ in range(96)]  # 96 MiB in blocks under the fixed mmap threshold
for b in blocks:
    ctypes.memset(b, 1, 1 << 20)
before = _allocator._rss()
for b in reversed(blocks):  # the heap's top freed last to first
    libc.free(b)
print(before - _allocator._rss())
"""


def test_the_cli_keeps_the_heaps_free_top_for_the_next_blocks() -> None:
    """Fixing the mmap threshold pins glibc's trim threshold at 128 KiB unless it is set too: 96 MiB freed at the
    heap's top went back to the OS at once, to fault in again for the next blocks."""
    import platform
    import subprocess
    import sys

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's heap")

    def handed_back(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _HEAP_CHILD, mode], capture_output=True, text=True, check=True)
        return int(out.stdout.strip())

    assert handed_back("cli") < 8 << 20  # kept: under TRIM_THRESHOLD
    assert handed_back("library") > 64 << 20  # the library's defaults (1 MiB blocks are mapped, unmapped on free)
