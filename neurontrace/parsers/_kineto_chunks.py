"""A Kineto trace read a chunk at a time: the one reader of ``kineto.parse`` and of ``iter_chunks``.

The file's content (gunzipped in bounded pieces when it is gzip'd) is read into one reused
buffer; the compiled scanner converts the complete events of the buffer into columns and says
where the first event it could not finish begins; that tail is carried to the front of the buffer
and the next chunk is read after it. So a trace is never held whole: memory is the columns plus
about one chunk. The document around the event list (the keys before it, and those torch.profiler
writes after it) is kept as text and decoded once the list has closed.

Whatever the scanner declines (odd input, no compiled scanner, ``NEURONTRACE_KINETO_DECODER=python``)
is read by the reference decoder (``_kineto_json``) from the whole document, which names the
problem; so is, for ``kineto.parse``, a trace that ends early (it salvages what is complete).
``iter_chunks`` instead salvages the complete events of the last chunk itself, so a cut-off trace
larger than memory still streams.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from neurontrace._io import ContentReader, existing, read_content
from neurontrace.errors import TruncatedTraceError
from neurontrace.parsers._pool import POOL, pc
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ParseAccounting

from . import _kineto_json, _kineto_native

CHUNK_BYTES = 4 << 20  # content read per chunk by default
_HEAD_LIMIT = 256 << 20  # how far the start of the event list is looked for
_AT_BYTE = re.compile(r"\(event at byte (\d+)\)")


@dataclass
class EventChunk:
    """The events of one chunk of the traceEvents list, as the scanner converted them.

    ``parts`` hold them routed by kind (host, device, allocator, the rest; each part in file
    order); :attr:`events` is one table of them in file order. Columns: ``_kineto_json.COLUMNS``
    (``index`` is the event's position in the list, counted from 0 over the whole file)."""

    parts: list[pa.Table]
    first_index: int  # index of the chunk's first event
    rows: int
    content_bytes: int  # content (decompressed) bytes read so far
    kinds: list[int] | None = None  # each part's kind (0 host ... 3 the rest), when the scanner routed them

    @property
    def events(self) -> pa.Table:
        if len(self.parts) == 1:
            return self.parts[0]
        t = pa.concat_tables(self.parts, memory_pool=POOL)
        return pc.take(t, pc.sort_indices(t["index"]))


@dataclass
class TraceEnd:
    """What is known only once the whole file is read: the last item ``iter_chunks`` yields."""

    top: dict[str, Any]  # the document's other keys, decoded (deviceProperties, distributedInfo, ...)
    events: int  # rows yielded in all
    decoder: str  # "native", or "python (why not)"
    truncated_at: int | None = None  # content byte where the trace was cut off, when it was
    partial_events: int = 0  # an event cut in half by the truncation (0 or 1)
    notes: list[str] = field(default_factory=list)  # the reading layer's warnings (gzip damage, ...)
    damage: str | None = None  # why the content ends early, when the reading layer knows
    content_bytes: int = 0

    def accounting(self, source: str) -> ParseAccounting:
        """The decoding's share of the parse accounting: events read, cut in half, warnings."""
        acct = ParseAccounting(source=source, format="kineto", events_read=self.events + self.partial_events)
        acct.keep("events", self.events)
        acct.skip("cut in half by truncation", self.partial_events)
        acct.warnings += self.notes
        if self.truncated_at is not None:
            acct.warnings.append(f"{source}: the trace was cut off at byte {self.truncated_at}; kept the "
                                 f"{self.events} complete events before it" + (f". Why: {self.damage}" if self.damage
                                                                               else ""))
        return acct


class _DeclinedError(Exception):
    """The chunked scan cannot read this input; the reference decoder reads the whole document."""


def iter_chunks(path: str | Path, *, device_categories: list[str], chunk_bytes: int = CHUNK_BYTES,
                progress: Progress = no_progress) -> Iterator[EventChunk | TraceEnd]:
    """Chunks of a Kineto trace's events in file order, then one :class:`TraceEnd`.

    Each :class:`EventChunk` holds the events of about ``chunk_bytes`` of (decompressed) content,
    converted by the compiled scanner; memory is about three times ``chunk_bytes`` (the buffer and
    the chunk's columns), whatever the file's size. The last item is always a :class:`TraceEnd`:
    the top-level keys (complete only now: torch.profiler writes some after the event list) and
    the accounting. A file that changes while it is read raises ``InputChangedError`` (at the read
    that sees it, at the latest before the ``TraceEnd``): keep nothing of a stream that did not
    reach its ``TraceEnd``. A trace cut off (or a gzip damaged) inside its event list ends with the
    complete events before the cut and ``truncated_at`` set. Input the scanner declines is read
    whole by the reference decoder instead (not bounded then), continuing after the rows already
    yielded, so the stream is the same either way.
    """
    p = existing(path)
    cats = device_categories
    rows = 0
    try:
        for item in _native(p, chunk_bytes, progress, cats, salvage=True):
            if isinstance(item, EventChunk):
                rows += item.rows
            yield item
        return
    except _DeclinedError as exc:
        reason = str(exc)
    decoded = _reference(p, progress, cats, reason)
    events = pa.concat_tables(decoded.events or [], memory_pool=POOL)
    events = pc.filter(events, pc.greater_equal(events["index"], rows)) if rows else events
    step = max(1, chunk_bytes // 256)  # rows per chunk: about chunk_bytes of columns
    for lo in range(0, events.num_rows, step):
        piece = events.slice(lo, step)
        yield EventChunk([piece], rows + lo, piece.num_rows, 0)
    yield TraceEnd(decoded.top, rows + events.num_rows, decoded.decoder, decoded.truncated_at,
                   decoded.partial_events, decoded.notes, decoded.damage)


def decode_file(path: Path, *, progress: Progress = no_progress, device_categories: list[str],
                chunk_bytes: int | None = None) -> _kineto_json.Decoded:
    """The whole trace decoded (``kineto.parse``): the chunks' parts concatenated once, or the
    reference decoder's reading of the whole document where the scan declines or the trace ends early."""
    pieces: list[list[pa.Table]] = [[], [], [], []]
    try:
        for item in _native(path, chunk_bytes or CHUNK_BYTES, progress, device_categories, salvage=False):
            if isinstance(item, TraceEnd):
                parts = [pa.concat_tables(p, memory_pool=POOL) for p in pieces if p]
                return _kineto_json.Decoded(dict(item.top), parts, decoder=item.decoder,
                                            notes=item.notes)
            # Each kind's parts go together (a chunk without host events must not put its device part among
            # the host parts): a destination found in one part is kept whole, not sorted back (a copy of its args).
            for k, part in zip(item.kinds or range(len(item.parts)), item.parts, strict=True):
                if part.num_rows:
                    pieces[k].append(part)
    except _DeclinedError as exc:
        del pieces
        return _reference(path, progress, device_categories, str(exc))
    raise AssertionError("the chunk loop ends with a TraceEnd")  # pragma: no cover


def _reference(path: Path, progress: Progress, cats: list[str], reason: str) -> _kineto_json.Decoded:
    content = read_content(path, progress, snapshot=True)
    decoded = _kineto_json.decode(content.data, complete=content.complete, device_categories=cats,
                                  progress=progress, native=False)
    if content.complete:
        decoded.decoder = reason
    decoded.notes[:0] = content.notes
    decoded.damage = content.damage
    return decoded


def _native(path: Path, chunk_bytes: int, progress: Progress, cats: list[str], *,
            salvage: bool) -> Iterator[EventChunk | TraceEnd]:
    why = _kineto_native.available()
    if why is not None:
        raise _DeclinedError(f"python ({why})")
    enabled = gc.isenabled()
    gc.disable()
    reader = ContentReader(path, progress)
    try:
        yield from _scan(reader, max(1, chunk_bytes), progress, cats, salvage)
    finally:
        reader.close()
        if enabled:
            gc.enable()


def _scan(reader: ContentReader, chunk: int, progress: Progress, cats: list[str],
          salvage: bool) -> Iterator[EventChunk | TraceEnd]:
    buf = bytearray(chunk)
    filled = _fill(reader, buf, 0, chunk)
    first = _list_start(buf, filled)
    while first < 0 and not reader.eof and filled < _HEAD_LIMIT:
        buf.extend(bytes(max(chunk, filled)))
        filled = _fill(reader, buf, filled, len(buf) - filled)
        first = _list_start(buf, filled)
    if first < 0:
        raise _DeclinedError("python (native scanner found no traceEvents list)")
    bare = bytes(buf[first:first + 1]) == b"[" and not bytes(buf[:first]).strip()
    prefix = bytes(buf[:first])
    pos, rows, closed = first + 1, 0, False
    scanner = _kineto_native.scanner()
    encoded = tuple(c.encode() for c in cats)
    while True:
        pieces: list[list[pa.Table]] = [[], [], [], []]
        start_rows = rows
        while True:  # the buffer's complete events, a few MB per call
            try:
                stop, n, parts, closed = scanner.scan(buf, pos, filled, _kineto_native.CHUNK_BYTES, rows, encoded,
                                                      False)
                for k, (part_rows, cols) in enumerate(parts):
                    if part_rows:
                        pieces[k].append(_kineto_native.table(cols, part_rows, _kineto_json.COLUMNS))
            except (scanner.UnsupportedError, pa.ArrowInvalid) as exc:
                why = _in_content(str(exc), reader.delivered - filled)
                raise _DeclinedError(f"python (native scanner declined: {why})") from None
            rows += n
            progressed, pos = stop > pos, stop
            if closed or not progressed or pos >= filled:
                break
        if rows > start_rows:
            kinds = [k for k, p in enumerate(pieces) if p]
            yield EventChunk([pa.concat_tables(pieces[k], memory_pool=POOL) for k in kinds], start_rows,
                             rows - start_rows,
                             reader.delivered, kinds)
        del pieces
        if closed:
            break
        if reader.eof:  # the list never closed: cut off
            yield from _cut_off(reader, prefix, bare, memoryview(buf)[pos:filled], rows, salvage)
            return
        tail = filled - pos
        if pos:
            buf[:tail] = buf[pos:filled]
        want = max(chunk, tail // 2)  # an event longer than a chunk is read in growing steps
        if len(buf) < tail + want:
            buf.extend(bytes(tail + want - len(buf)))
        filled = _fill(reader, buf, tail, want)
        pos = 0
    rest = bytearray(buf[pos + 1:filled])
    del buf
    while not reader.eof:
        more = bytearray(chunk)
        got = _fill(reader, more, 0, chunk)
        rest += memoryview(more)[:got]
    reader.finish()
    top = _kineto_native.outer(prefix, bytes(rest), bare)
    if top is None:
        raise _DeclinedError("python (native scanner: the document around the list is not valid JSON)")
    if not rows:
        raise _DeclinedError("python (no events)")
    yield TraceEnd({k: _kineto_json.decode_any(v) for k, v in top.items()}, rows, "native",
                   notes=list(reader.notes), content_bytes=reader.delivered)


def _in_content(message: str, at: int) -> str:
    """The scanner's message with its byte offsets (in the buffer, whose first byte is content byte ``at``)
    made offsets in the content."""
    return _AT_BYTE.sub(lambda m: f"(event at byte {int(m.group(1)) + at})", message)


def _fill(reader: ContentReader, buf: bytearray, at: int, n: int) -> int:
    """Reads up to n bytes into buf at ``at``; returns where the content in buf now ends."""
    with memoryview(buf) as view:
        return at + reader.readinto(view[at:at + n])


def _list_start(buf: bytearray, filled: int) -> int:
    with memoryview(buf) as view:
        head = bytes(view[:min(filled, 4096)])
        stripped = head.lstrip()
        if stripped.startswith(b"["):
            return len(head) - len(stripped)
        return int(_kineto_native.scanner().find_events(view[:filled]))


def _cut_off(reader: ContentReader, prefix: bytes, bare: bool, tail: memoryview, rows: int,
             salvage: bool) -> list[EventChunk | TraceEnd]:
    """The end of a trace whose event list never closed: its last complete events and accounting,
    or (``salvage`` False, or damage the reference should name) the reference decoder's reading."""
    reader.finish()
    if not salvage:
        raise _DeclinedError("python (native scanner: the traceEvents list is not closed)")
    if reader.damage is None:  # a plain cut: the tail must be JSON cut off, not JSON broken in the middle
        try:
            msgspec.json.decode(b"[" + bytes(tail), type=msgspec.Raw)
        except msgspec.DecodeError as exc:
            if "truncated" not in str(exc):
                raise _DeclinedError("python (corrupt before the end)") from None
    tables, partial = _kineto_json.salvage_chunk(tail, first_index=rows)
    top = {} if bare else _kineto_json.salvage_top(prefix + b"[")
    salvaged = sum(t.num_rows for t in tables)
    end = TraceEnd(top, rows + salvaged, "native (cut off: the last chunk salvaged by the reference)",
                   reader.delivered, partial, list(reader.notes), reader.damage, reader.delivered)
    if rows + salvaged == 0:
        raise TruncatedTraceError(f"the trace was cut off at byte {reader.delivered} before its first complete "
                                  "event; nothing could be salvaged (was the profiler killed during export?)")
    if not salvaged:
        return [end]
    return [EventChunk([pa.concat_tables(tables, memory_pool=POOL)], rows, salvaged, reader.delivered), end]
