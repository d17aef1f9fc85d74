"""One buffer of a Kineto event list scanned on several threads (the compiled scanner runs without the GIL).

The buffer is cut at guessed event boundaries (``},`` then ``{`` after white space) into :data:`WAYS`
pieces, scanned at once. A piece counts only where the piece before it, scanned from a boundary already
known, stopped exactly at its cut: a guess inside a string (or inside an event's args) is found out there,
and the rest of the buffer is scanned again in order from the last boundary known. So the rows, their order
and any error are those of one scan in order; only the work is shared.
"""

from __future__ import annotations

import functools
import itertools
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

WAYS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
MIN_PIECE = 1 << 20  # bytes: below this a thread costs more than it saves
_WS = b" \t\r\n"

Call = tuple[int, list[Any]]  # one scan call's rows and its parts, as the scanner returns them


def scan_buffer(scanner: Any, buf: bytearray, pos: int, filled: int, rows: int, cats: tuple[bytes, ...],
                max_bytes: int) -> tuple[list[Call], int, int, bool]:
    """The complete events of ``buf[pos:filled]``: (the scan calls' results in order, where the scan stopped,
    the rows after it, whether the list closed), as repeated ``scanner.scan`` calls from ``pos`` give them."""
    cuts = _cuts(buf, pos, filled) if WAYS > 1 else []
    if not cuts:
        return _piece(scanner, buf, pos, filled, rows, cats, max_bytes)
    bounds = [pos, *cuts, filled]
    futures: list[Future[Any]] = [_threads(WAYS - 1, os.getpid()).submit(_piece, scanner, buf, a, b, 0, cats, max_bytes)
                                  for a, b in itertools.pairwise(bounds[1:])]
    try:
        first: Any = _piece(scanner, buf, pos, cuts[0], rows, cats, max_bytes)
    except Exception as exc:  # decided below, in order, like any piece's error
        first = exc
    results = [first, *(_outcome(f) for f in futures)]  # every thread is done with buf before it is touched again
    calls: list[Call] = []
    at = pos
    for i, got in enumerate(results):
        if isinstance(got, BaseException):  # the scan in order from this piece's start (known) says what it is
            break
        piece, stop, after, closed = got
        if i:  # numbered from 0 on its thread: renumbered from where the pieces before it end
            _renumber(piece, rows)
            after += rows
        calls += piece
        at, rows = stop, after
        if closed or i == len(results) - 1:
            return calls, at, rows, closed
        if stop != bounds[i + 1]:  # the cut was no boundary: the rest is scanned in order from here
            break
    more, stop, rows, closed = _piece(scanner, buf, at, filled, rows, cats, max_bytes)
    return calls + more, stop, rows, closed


def _renumber(piece: list[Call], first: int) -> None:
    for _, parts in piece:
        for part_rows, cols in parts:
            if part_rows and first:
                np.frombuffer(cols["index"][2], np.int64)[:] += first  # the scanner's own buffer, in place


def _outcome(f: Future[Any]) -> Any:
    try:
        return f.result()
    except Exception as exc:  # the piece's error, decided in order by scan_buffer
        return exc


@functools.cache
def _threads(n: int, pid: int) -> ThreadPoolExecutor:  # pid: a forked child starts its own threads
    return ThreadPoolExecutor(n, thread_name_prefix="neurontrace-scan")


def _piece(scanner: Any, buf: bytearray, a: int, b: int, rows: int, cats: tuple[bytes, ...],
           max_bytes: int) -> tuple[list[Call], int, int, bool]:
    """``buf[a:b]`` scanned in order, call after call, until it closes the list or stops short."""
    calls: list[Call] = []
    while True:
        stop, n, parts, closed = scanner.scan(buf, a, b, max_bytes, rows, cats, False)
        calls.append((n, parts))
        rows += n
        if closed or stop <= a or stop >= b:
            return calls, stop, rows, closed
        a = stop


def _cuts(buf: bytearray, pos: int, filled: int) -> list[int]:
    """Up to WAYS - 1 guessed boundaries in ``buf[pos:filled]``: each just after the comma of a ``},`` that
    white space and a ``{`` follow, near an equal share of the bytes."""
    ways = min(WAYS, (filled - pos) // MIN_PIECE)
    cuts: list[int] = []
    for k in range(1, ways):
        j = buf.find(b"},", max(pos + (filled - pos) * k // ways, cuts[-1] if cuts else pos), filled)
        while j >= 0:
            q = j + 2
            while q < filled and buf[q] in _WS:
                q += 1
            if q < filled and buf[q] == 0x7B:  # '{'
                break
            j = buf.find(b"},", j + 2, filled)
        if j < 0:
            break
        cuts.append(j + 2)
    return cuts
