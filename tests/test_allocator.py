"""neurontrace._allocator: the heap is trimmed after a rank only when the rank left much behind."""

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
