"""A Kineto trace's events in bounded chunks, for ``convert --dataset`` (a trace larger than memory).

The compiled scanner (``_kineto_scan``) is resumable: given a buffer and where to start, it converts the
complete events up to a limit and says where it stopped. This reads the file (plain or gz) a block at a
time into a buffer, scans the events the buffer holds completely, and carries the incomplete last one
into the next block, so memory is one block plus one chunk of columns whatever the file's size. The
members of the top-level object around ``traceEvents`` (``deviceProperties`` before it,
``baseTimeNanoseconds`` and others torch.profiler writes after it) are kept as bytes and decoded at the
end, as the whole-file reader decodes them (``_kineto_native._outer``).

Only what the scanner reads is read here: a document it declines (odd types, a cut-off file) is a named
error that says to convert without ``--dataset`` (the whole-file reader salvages or names the problem).
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from neurontrace._io import GZIP_MAGIC, UTF8_BOM, identity, unchanged
from neurontrace.errors import MalformedTraceError
from neurontrace.progress import Progress, no_progress

from . import _kineto_json, _kineto_native

DEFAULT_CHUNK_BYTES = 64 << 20
_AT = re.compile(r"event at byte (\d+)")
_WHOLE = "convert it without --dataset (the whole-file reader names or salvages what is wrong)"


@dataclass
class Final:
    """What is known only once the list is read: the other top-level keys (decoded) and the counts."""

    top: dict[str, Any]
    events: int = 0
    decoder: str = "native"
    notes: list[str] = field(default_factory=list)


def iter_raw(path: Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
             progress: Progress = no_progress) -> Iterator[pa.Table | Final]:
    """The raw scanned event columns (``_kineto_json.COLUMNS``) of successive chunks, each a Table in
    file order with the global ``index``; then one :class:`Final`."""
    why = _kineto_native.available()
    scanner = _kineto_native._kineto_scan
    if why is not None or scanner is None:
        raise MalformedTraceError(f"{path}: streaming needs the compiled scanner ({why}); {_WHOLE}")
    cats = tuple(c.encode() for c in _device_categories())
    with path.open("rb") as raw:
        before = identity(os.fstat(raw.fileno()))
        gz = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        f: IO[bytes] = gzip.GzipFile(fileobj=raw) if gz else raw  # type: ignore[assignment]
        try:
            yield from _scan_file(f, raw, path, before[2], chunk_bytes, cats, progress, scanner)
        except (OSError, EOFError) as exc:
            raise MalformedTraceError(f"{path}: unreadable ({exc}); {_WHOLE}") from exc
        unchanged(path, before, os.fstat(raw.fileno()))


def _device_categories() -> list[str]:
    from .kineto import DEVICE_CATEGORIES

    return list(DEVICE_CATEGORIES)


def _scan_file(f: IO[bytes], raw: IO[bytes], path: Path, size: int, chunk_bytes: int, cats: tuple[bytes, ...],
               progress: Progress, scanner: Any) -> Iterator[pa.Table | Final]:
    buf = bytearray(f.read(chunk_bytes))
    if buf.startswith(UTF8_BOM):
        del buf[:len(UTF8_BOM)]
    if buf.lstrip().startswith(b"["):
        raise MalformedTraceError(f"{path}: a bare list of events; {_WHOLE}")
    first = scanner.find_events(memoryview(buf))
    if first < 0:
        raise MalformedTraceError(f"{path}: no traceEvents list in its first {len(buf)} bytes; {_WHOLE}")
    head = bytes(buf[:first])
    pos, rows_done, eof = first + 1, 0, False
    while True:
        pos = _after_separator(buf, pos)
        view = memoryview(buf)
        try:
            stop, rows, parts, closed = scanner.scan(view, pos, len(view), len(view), rows_done, cats)
        except scanner.UnsupportedError as exc:
            m = _AT.search(str(exc))
            at = int(m.group(1)) if m else -1
            if eof or at <= pos:  # declined within the file, or one event longer than the buffer
                if not eof and at == pos and len(buf) - pos <= 8 * chunk_bytes:
                    more = f.read(max(chunk_bytes, len(buf)))
                    eof = not more
                    view.release()
                    buf += more
                    continue
                raise MalformedTraceError(f"{path}: the scanner declined an event ({exc}); {_WHOLE}") from exc
            stop, rows, parts, closed = scanner.scan(view, pos, at, len(view), rows_done, cats)
        else:
            if not closed and not eof and stop >= len(view):
                # The block ended where the scanner cannot say whether an event is complete (right at the
                # start of one): its rows are dropped and the block is scanned again with more bytes.
                view.release()
                more = f.read(chunk_bytes)
                eof = not more
                buf += more
                continue
        if rows:
            yield _file_order([_kineto_native._table(cols, n, _kineto_json.COLUMNS) for n, cols in parts if n])
        rows_done += rows
        progress("read events", raw.tell(), size)
        if closed:
            tail = bytes(view[stop + 1:]) + f.read()
            view.release()
            break
        view.release()
        del buf[:stop - 1]  # the scanner resumes after the byte before where it stopped: keep that byte
        pos = 1
        more = f.read(chunk_bytes)
        if not more:
            if eof:
                raise MalformedTraceError(f"{path}: the trace ends inside its event list (cut off?); {_WHOLE}")
            eof = True
        buf += more
    top = _kineto_native._outer(memoryview(head + b"[]" + tail), len(head), len(head) + 2, False)
    if top is None:
        raise MalformedTraceError(f"{path}: the document around the event list is not valid JSON; {_WHOLE}")
    return_top = {k: _kineto_json._decode_any(v) for k, v in top.items()}
    yield Final(return_top, rows_done)


def _after_separator(buf: bytearray, pos: int) -> int:
    """Past the comma between two events when a block ended just before it (the scanner stops there)."""
    i = pos
    while i < len(buf) and buf[i] in b" \t\r\n":
        i += 1
    return i + 1 if buf[i:i + 1] == b"," else pos


def _file_order(parts: list[pa.Table]) -> pa.Table:
    """The scanner routes a chunk's events to parts by kind; one table of them back in file order."""
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="permissive").sort_by("index")
