"""Decoding Kineto Chrome-trace JSON into flat Arrow columns, fast and exactly.

Two decoders give the same rows. A complete document goes first to the compiled scanner
(``_kineto_native``, ``_kineto_scan.c``): it validates and converts in one pass and hands back
anything it is not sure of. Everything else (cut-off files, odd inputs, installs without a C
compiler, ``NEURONTRACE_KINETO_DECODER=python``) is read by the reference decoder of this module,
which also names what is wrong with a bad file. The tests compare the two on every real trace.

How the reference stays fast (no Python bytecode per event on this path):
- msgspec decodes events into typed structs, skipping every field we do not ask for;
- ``args`` is captured as raw JSON text (kept losslessly) and decoded a second time, all at once,
  into a typed struct holding only the keys the normalizer needs;
- columns are pulled out with ``map(attrgetter)`` and converted to Arrow in bulk.

How it stays exact: ``ts``/``dur`` are float microseconds with a 3-digit nanosecond fraction.
Below 2**43 µs (about 101 days) a double's spacing is under 1 ns, so the nearest-integer split in
:func:`us_to_ns` recovers the printed nanoseconds exactly. Above that (absolute-epoch floats) the
chunk is decoded again with ``Decimal`` timestamps. (The scanner converts the printed digits to
integer nanoseconds directly, rounding half to even like ``Decimal``.)

How it stays lean: the ``traceEvents`` array is decoded in chunks cut at event boundaries (about
``CHUNK_BYTES`` each, however the file is laid out), and each chunk in batches of at most
``BATCH_EVENTS`` events or ``BATCH_BYTES`` of text, so the Python objects of one batch (and a small
handle per event of one chunk) are alive at a time; all-null columns share one zero-filled buffer.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from neurontrace._io import UTF8_BOM, Data, Snapshot
from neurontrace._numbers import checked_float
from neurontrace.errors import MalformedTraceError, TruncatedTraceError
from neurontrace.parsers._pool import POOL, pc
from neurontrace.progress import Progress, no_progress

from . import _kineto_native, _kineto_repair

CHUNK_BYTES = 2 << 20  # text decoded per chunk by the reference (see "How it stays lean")
BATCH_EVENTS = 1 << 15  # events decoded into Python objects at a time (see _decode_chunk) ...
BATCH_BYTES = 4 << 20  # ... or this much of their text
Document = Data  # the whole content: bytes, a bytearray or a file snapshot
EXACT_FLOAT_US = 2.0**43  # below this, float µs with 3 decimals round-trip to exact ns
_NULL = msgspec.Raw(b"null")
_NO_ARGS = msgspec.Raw(b"{}")
_INT64_MAX = 2**63 - 1
# Deeper JSON fails with a named error: msgspec's (and the scanner's) recursion is bounded by the
# interpreter's limit (sys.getrecursionlimit(), 1000 by default), so the limit is that, less headroom.
MAX_NESTING = 990


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    id: int | str | None = None
    args: msgspec.Raw = _NO_ARGS


class _Times(msgspec.Struct, gc=False):
    ts: Decimal | None = None
    dur: Decimal | None = None


class _OpArgs(msgspec.Struct, gc=False):
    """The args keys the normalizer reads from ops, runtime calls and device events; everything
    else stays in the raw ``args`` text."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    external_id_legacy: int | None = msgspec.field(default=None, name="external id")
    correlation: int | None = None
    device: int | str | None = None
    stream: int | str | None = None
    nbytes: int | float | None = msgspec.field(default=None, name="bytes")
    kind: str | None = None
    call_stack: str | None = msgspec.field(default=None, name="Call stack")


class _PythonArgs(msgspec.Struct, gc=False):
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")


class _MemoryArgs(msgspec.Struct, gc=False):
    mem_device_type: int | None = msgspec.field(default=None, name="Device Type")
    mem_device_id: int | None = msgspec.field(default=None, name="Device Id")
    mem_bytes: int | float | None = msgspec.field(default=None, name="Bytes")
    mem_total_allocated: int | float | None = msgspec.field(default=None, name="Total Allocated")
    mem_total_reserved: int | float | None = msgspec.field(default=None, name="Total Reserved")


class _MetaArgs(msgspec.Struct, gc=False):
    label: str | None = msgspec.field(default=None, name="name")
    labels: str | None = None


# Each kind of event has its own few args keys: decoding a kind's args with its own small struct
# reads only those fields (python frames are most events and need two).
_ARG_STRUCTS: tuple[type[msgspec.Struct], ...] = (_OpArgs, _PythonArgs, _MemoryArgs, _MetaArgs)
_OP, _PYTHON, _MEMORY, _META = range(4)


_ARG_COLUMNS = {
    "external_id": pa.int64(), "external_id_legacy": pa.int64(), "correlation": pa.int64(),
    "device": pa.string(), "stream": pa.string(), "nbytes": pa.int64(), "kind": pa.string(),
    "python_id": pa.int64(), "python_parent_id": pa.int64(), "call_stack": _kineto_native.STACKS,
    "mem_device_type": pa.int64(), "mem_device_id": pa.int64(), "mem_bytes": pa.float64(),
    "mem_total_allocated": pa.float64(), "mem_total_reserved": pa.float64(),
    "label": pa.string(), "labels": pa.string(),
}


COLUMNS = ["index", "ph", "cat", "name", "pid", "tid", "flow_id", "args", "ts_ns", "dur_ns", *_ARG_COLUMNS]

# The JSON key of each typed args field, to test cheaply whether a chunk mentions it at all.
_ARG_KEYS = {f.name: f'"{f.encode_name}"'.encode() for st in _ARG_STRUCTS for f in msgspec.structs.fields(st)}


@dataclass
class Decoded:
    """The top-level object's other keys, and every event as one row of flat columns."""

    top: dict[str, Any]
    # Every event as rows of the same columns, in one or more parts (each in file order), handed
    # over to (and released by) the normalizer.
    events: list[pa.Table] | None
    truncated_at: int | None = None  # byte offset of the cut, when the input was truncated
    partial_events: int = 0  # events cut in half at the truncation point (0 or 1)
    decoder: str = "python"  # "native" (the compiled scanner) or "python (why not native)"
    notes: list[str] = field(default_factory=list)  # warnings for the accounting (the reading layer's)
    damage: str | None = None  # why the input ends early, when the reading layer knows


def decode(data: Document, *, complete: bool, device_categories: list[str] | None = None,
           progress: Progress = no_progress, native: bool = True) -> Decoded:
    """Decode a whole Chrome-trace document (object or bare array form); ``native`` False: the
    reference decoder only (the chunked scan already declined it)."""
    # Millions of short-lived objects and no reference cycles: the cyclic collector would only
    # rescan them again and again, so it is paused for the decode (a common parser technique).
    enabled = gc.isenabled()
    gc.disable()
    try:
        if bytes(data[:len(UTF8_BOM)]) == UTF8_BOM:  # a byte-order mark (read_content drops it already)
            data = memoryview(data)[len(UTF8_BOM):]  # type: ignore[assignment]
        try:
            return _decode(data, complete=complete, device_categories=device_categories or [], progress=progress,
                           native=native)
        except MalformedTraceError:
            repaired, rewritten = _kineto_repair.unescaped_names(data) if complete else (b"", 0)
            if not rewritten:
                raise
            try:
                decoded = _decode(repaired, complete=True, device_categories=device_categories or [],
                                  progress=progress, native=True)
            except MalformedTraceError:
                raise MalformedTraceError(
                    "not valid JSON, even with the unescaped quotes torch.profiler writes in event names escaped "
                    f"({rewritten} names): the file is corrupt") from None
            decoded.notes.append(_kineto_repair.warning(rewritten))
            return decoded
    except RecursionError:
        raise MalformedTraceError(
            f"the JSON nests deeper than {MAX_NESTING} levels; no trace nests that deep: the file is damaged "
            "or was not written by a profiler") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:  # only input makes msgspec fail
        raise MalformedTraceError(f"not a valid Chrome trace: {exc}") from exc
    finally:
        if enabled:
            gc.enable()


def _decode(data: Document, *, complete: bool, device_categories: list[str], progress: Progress,
            native: bool = True) -> Decoded:
    if complete and not native:
        decoder = "python"
    elif complete:  # the compiled scanner reads complete documents; salvaging a cut one is Python's
        scanned = _kineto_native.scan(data, COLUMNS, device_categories, progress, _page_releaser(data))
        if scanned.parts is not None:
            return Decoded({k: decode_any(v) for k, v in scanned.top.items()}, scanned.parts,
                           decoder=scanned.reason)
        decoder = scanned.reason
        if isinstance(data, Snapshot):
            data.restore()  # the scanner may have released pages the reference reads again
    else:
        decoder = "python (truncated input)"
        # Content known to end early may also be damaged before its end (a corrupt gzip inflates to
        # garbage before its checksum fails): what is salvaged ends where the JSON breaks.
        data = memoryview(data)[:_json_break(data)]  # type: ignore[assignment]
    start = _first_non_space(data)
    if start < 0:
        raise TruncatedTraceError("the file holds only whitespace; expected a JSON trace object")
    if data[start:start + 1] == b"[":
        top: dict[str, Any] = {}
        array, array_end = _array_extent(data, start)
    elif data[start:start + 1] == b"{":
        top, array, array_end = _split_top(data)
    else:
        raise MalformedTraceError(f"expected a JSON object or array, found {data[start:start + 20]!r}")
    truncated_at = None if array_end is not None and complete else len(data)
    tables = []
    done_events = done_bytes = partial = 0
    for chunk, last in _chunks(array):
        batches, partial = _decode_chunk(chunk, first_index=done_events, final=last and truncated_at is not None)
        tables += batches
        done_events += sum(t.num_rows for t in batches)
        done_bytes += len(chunk)
        progress("decode events", done_bytes, len(array))
    events = pa.concat_tables(tables, memory_pool=POOL) if tables else _empty_events()
    del tables
    if truncated_at is not None and events.num_rows == 0:
        raise TruncatedTraceError(
            f"the trace was cut off at byte {truncated_at} before its first complete event; "
            "nothing could be salvaged (was the profiler killed during export?)"
        )
    return Decoded(top, [events], truncated_at, partial, decoder)


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def _json_break(data: Document) -> int:
    """Where the JSON stops being valid (the length when it is valid or merely cut off)."""
    try:
        msgspec.json.decode(data, type=msgspec.Raw)
    except msgspec.DecodeError as exc:
        m = _AT_BYTE.search(str(exc))
        if m:
            return int(m.group(1))
    except RecursionError:
        pass
    return len(data)


def _page_releaser(data: Document) -> Callable[[int, int], None] | None:
    """For a file snapshot: a function that hands the pages of a byte range back to the OS.

    Scanned input is not read again (unless the scanner declines, and then the snapshot is
    restored), so peak memory holds about one copy of the trace, not two, while the columns grow.
    """
    return data.release if isinstance(data, Snapshot) else None


def _first_non_space(data: Document) -> int:
    m = re.compile(rb"\S").search(data)
    return m.start() if m else -1


class _TopRaw(msgspec.Struct):
    traceEvents: msgspec.Raw = _NULL  # noqa: N815 - the format's own key


def _split_top(data: Document) -> tuple[dict[str, Any], memoryview, int | None]:
    """Top-level keys (decoded) and the raw traceEvents array; array end is None when cut off."""
    try:
        whole = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        if "truncated" not in str(exc):  # broken in the middle: salvaging would hide the damage
            raise MalformedTraceError(f"not valid JSON: {exc}; the file is corrupt, not just cut off") from exc
        _refuse_lone_surrogate_at_end(data)
        return _salvage_top(data)
    raw = whole.pop("traceEvents", None)
    top = {k: decode_any(v) for k, v in whole.items()}
    if raw is None:
        raise MalformedTraceError("a JSON object without a 'traceEvents' list; not a Chrome/Kineto trace")
    view = memoryview(raw)
    if not bytes(view[:1]) == b"[":
        raise MalformedTraceError("'traceEvents' is not a list")
    return top, view[1:len(view) - 1], len(view)


def decode_any(raw: msgspec.Raw) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return bytes(raw).decode("utf-8", "replace")


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def _salvage_top(data: Document) -> tuple[dict[str, Any], memoryview, int | None]:
    """A document that does not decode whole: keep the keys before traceEvents and its events."""
    m = _EVENTS_KEY.search(data)
    if m is None:
        raise MalformedTraceError(
            "not valid JSON and no 'traceEvents' list found; expected a torch.profiler Chrome trace"
        )
    head = bytes(data[: m.start()]).rstrip().rstrip(b",") + b"}"
    try:
        top = msgspec.json.decode(head)
    except msgspec.DecodeError:
        top = {}
    return top, memoryview(data)[m.end():], None


def salvage_top(head: bytes) -> dict[str, Any]:
    """The keys before the event list of a document cut off inside it (``head`` ends with its '[')."""
    return _salvage_top(head)[0]


def salvage_chunk(chunk: memoryview, *, first_index: int) -> tuple[list[pa.Table], int]:
    """The complete events of the last chunk of a cut-off list, and how many were cut in half."""
    return _decode_chunk(chunk, first_index=first_index, final=True)


def _array_extent(data: Document, start: int) -> tuple[memoryview, int | None]:
    try:
        msgspec.json.decode(data, type=msgspec.Raw)  # validates without building objects
    except msgspec.DecodeError:
        _refuse_lone_surrogate_at_end(data)
        return memoryview(data)[start + 1:], None
    end = len(data)
    while end > start and data[end - 1:end] in (b" ", b"\t", b"\r", b"\n"):
        end -= 1
    return memoryview(data)[start + 1:end - 1], end


# A high-surrogate escape: JSON needs a low-surrogate escape right after it. The decoder, reading those six
# bytes past the end of a file that ends soon after a lone one ("\\ud800"}]}), calls the input truncated.
_HIGH_SURROGATE = re.compile(rb"\\+u[dD][89abAB][0-9a-fA-F]{2}")
_SURROGATE_TAIL = 64  # bytes at the end of the document looked at


def _refuse_lone_surrogate_at_end(data: Document) -> None:
    """A complete document whose last string holds a lone surrogate escape is corrupt, not cut off: the
    decoder calls it truncated (it looks for the low half past the end), and salvaging would drop the
    last event as if cut in half. A document that ends inside the escape pair itself is a real cut."""
    tail = bytes(memoryview(data)[max(0, len(data) - _SURROGATE_TAIL):])
    for m in _HIGH_SURROGATE.finditer(tail):
        if (m.end() - m.start() - 5) % 2 == 0:
            continue  # an even run of backslashes: a literal backslash, then text
        after = tail[m.end():]
        if after and not b"\\u".startswith(after[:2]):  # something follows, and it is no second escape
            at = len(data) - len(tail) + m.start() + (m.end() - m.start() - 6)
            raise MalformedTraceError(
                f"not valid JSON: a lone surrogate escape ({m.group()[-6:].decode()}) at byte {at}, near the end "
                "of a complete file; the file is corrupt, not cut off")


_BOUNDARY_CACHE: dict[bytes, re.Pattern[bytes]] = {}


def _chunks(buf: memoryview) -> Iterator[tuple[memoryview, bool]]:
    """Slices of the array's content, each a run of whole events, cut where a new event starts.

    A pretty-printed trace opens every event on its own line at one indentation; nested objects
    never start a line at that indentation, so a cut just before "\\n<indent>{" is safe. A
    minified trace (no such lines) is cut by _minified_chunks.
    """
    n = len(buf)
    m = re.compile(rb"\{").search(buf)
    if m is None:
        yield buf, True
        return
    line_start = bytes(buf[: m.start()]).rfind(b"\n") + 1
    indent = bytes(buf[line_start:m.start()])
    if line_start == 0 or indent.strip():
        yield from _minified_chunks(buf)
        return
    pat = _BOUNDARY_CACHE.setdefault(indent, re.compile(b"\n" + re.escape(indent) + rb"\{"))
    pos = 0
    while pos < n:
        target = pos + CHUNK_BYTES
        if target >= n:
            yield buf[pos:], True
            return
        cut = pat.search(buf, target)
        if cut is None:
            yield buf[pos:], True
            return
        yield buf[pos:cut.start()], False
        pos = cut.start()


_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
_CUT_TRIES = 16


def _minified_chunks(buf: memoryview) -> Iterator[tuple[memoryview, bool]]:
    """Chunks of a list without line structure, cut at a "}, {" between two events.

    Such a gap may also sit inside a string; the text from an event's start to a gap between events
    is valid JSON (a list of whole events), while one that ends inside a string is not, so each
    candidate is checked (msgspec validates without building objects) and the next one tried if
    need be. Without a good cut after a few tries (damaged input), the rest is one chunk.
    """
    n, pos = len(buf), 0
    while pos < n:
        target = pos + CHUNK_BYTES
        cut = None
        for _ in range(_CUT_TRIES if target < n else 0):
            gap = _EVENT_GAP.search(buf, target)
            if gap is None:
                break
            try:
                msgspec.json.decode(_bracketed(buf[pos:gap.start() + 1]), type=msgspec.Raw)
            except msgspec.DecodeError:
                target = gap.end()
                continue
            cut = gap.end() - 1  # at the next event's "{": this chunk keeps the comma, which is trimmed
            break
        if cut is None:
            yield buf[pos:], True
            return
        yield buf[pos:cut], False
        pos = cut


def _decode_chunk(chunk: memoryview, *, first_index: int, final: bool) -> tuple[list[pa.Table], int]:
    """One chunk's events as columns, and how many events were cut in half (truncation only).

    The chunk is split into its events' raw texts first (a small object per event, pointing into
    the chunk) and decoded BATCH_EVENTS at a time, so the Python objects alive at once are bounded
    however the chunk is laid out (a minified trace is one chunk of any size).
    """
    doc = _bracketed(chunk)
    partial = 0
    # A chunk that cannot hold more events than a batch (fewer "{" than BATCH_EVENTS, the usual case: chunks
    # are CHUNK_BYTES) is one batch: decoded once, typed, instead of split into raw texts and joined again.
    if not final and len(doc) <= BATCH_BYTES and _braces(doc) <= BATCH_EVENTS:
        try:
            events = msgspec.json.decode(doc, type=list[_Event])
        except (msgspec.ValidationError, msgspec.DecodeError):  # the path below names the problem
            pass
        else:
            return [_columns(events, first_index, doc)], 0
    try:
        raws = msgspec.json.decode(doc, type=list[msgspec.Raw])
    except msgspec.DecodeError as exc:
        if not final:
            raise MalformedTraceError(f"the traceEvents list is not valid JSON: {exc}") from exc
        raws, partial = _salvage_events(bytes(doc))
    # Batches end after BATCH_EVENTS events or BATCH_BYTES of text, whichever comes first.
    ends = np.cumsum(np.fromiter(map(len, raws), dtype=np.int64, count=len(raws)))
    tables, i = [], 0
    while i < len(raws):
        j = min(i + BATCH_EVENTS, max(int(np.searchsorted(ends, ends[i] + BATCH_BYTES)), i + 1), len(raws))
        tables.append(_batch(raws[i:j], first_index + i))
        i = j
    return tables or [_empty_events()], partial


def _braces(doc: bytearray) -> int:
    """How many "{" the text holds (at least one per event): numpy counts them 5x faster than bytearray.count."""
    return int(np.count_nonzero(np.frombuffer(doc, dtype=np.uint8) == ord("{")))


def _batch(raws: list[msgspec.Raw], first_index: int) -> pa.Table:
    doc = b"[" + b",".join(raws) + b"]"
    try:
        events = msgspec.json.decode(doc, type=list[_Event])
    except msgspec.ValidationError:
        # A key given twice with a bad first value ("cat": 2, "cat": "cpu_op"): the last value
        # counts, as JSON.parse (and the compiled scanner) take it; then the same typed decode.
        doc = b"[" + b",".join(map(_last_values, raws)) + b"]"
        try:
            events = msgspec.json.decode(doc, type=list[_Event])
        except msgspec.ValidationError as exc:
            raise MalformedTraceError(f"an event has an unexpected field type: {exc}") from exc
    return _columns(events, first_index, doc)


def _last_values(raw: msgspec.Raw) -> bytes:
    """An event object with each duplicate key kept once, holding its last value (others as they are)."""
    text = bytes(raw)
    if text[:1] != b"{":
        return text
    fields = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
    return b"{" + b",".join(msgspec.json.encode(k) + b":" + bytes(v) for k, v in fields.items()) + b"}"


def _bracketed(chunk: memoryview) -> bytearray:
    """``[`` + the chunk without surrounding whitespace and trailing comma + ``]``, copied once."""
    lo, hi = 0, len(chunk)
    while lo < hi and chunk[lo] in b" \t\r\n":
        lo += 1
    while hi > lo and chunk[hi - 1] in b" \t\r\n,":
        hi -= 1
    doc = bytearray(hi - lo + 2)
    doc[0], doc[-1] = ord("["), ord("]")
    doc[1:-1] = chunk[lo:hi]
    return doc


def _salvage_events(doc: bytes) -> tuple[list[msgspec.Raw], int]:
    """The raw texts of the longest prefix of complete events of a cut-off event list."""
    end = len(doc)
    while (end := doc.rfind(b"}", 0, end)) > 0:
        prefix = doc[: end + 1] + b"]"
        try:
            raws = msgspec.json.decode(prefix, type=list[msgspec.Raw])
        except msgspec.DecodeError:
            continue
        return raws, int(b"{" in doc[end + 1:])
    return [], int(b"{" in doc)


def _columns(events: list[_Event], first_index: int, doc: bytes | bytearray) -> pa.Table:
    n = len(events)
    args_raw = list(map(attrgetter("args"), events))
    cols: dict[str, pa.Array] = {
        "index": pa.array(np.arange(first_index, first_index + n, dtype=np.int64), memory_pool=POOL),
        "ph": pa.array(list(map(attrgetter("ph"), events)), pa.string(), memory_pool=POOL),
        "cat": pa.array(list(map(attrgetter("cat"), events)), pa.string(), memory_pool=POOL),
        "name": pa.array(list(map(attrgetter("name"), events)), pa.string(), memory_pool=POOL),
        "pid": _id_strings(list(map(attrgetter("pid"), events))),
        "tid": _id_strings(list(map(attrgetter("tid"), events))),
        "flow_id": _id_strings(list(map(attrgetter("id"), events))) if b'"id"' in doc else _nulls(n),
        "args": _raw_strings(args_raw, first_index),
    }
    ts = _times(list(map(attrgetter("ts"), events)))
    dur = _times(list(map(attrgetter("dur"), events)))
    if ts is None or dur is None:
        exact = msgspec.json.decode(doc, type=list[_Times])
        ts = _decimal_ns(list(map(attrgetter("ts"), exact)), "ts", first_index)
        dur = _decimal_ns(list(map(attrgetter("dur"), exact)), "dur", first_index)
    cols["ts_ns"], cols["dur_ns"] = ts, dur
    cols.update(_arg_columns(args_raw, _kinds(cols)))
    return pa.table(cols)


def _kinds(cols: dict[str, pa.Array]) -> np.ndarray:
    """Which args struct each event's args are decoded with."""
    kind = np.full(len(cols["ph"]), _OP, dtype=np.int8)
    kind[pc.fill_null(pc.equal(cols["cat"], "python_function"), False).to_numpy(zero_copy_only=False)] = _PYTHON
    memory = pc.fill_null(pc.is_in(cols["name"], pa.array(["[memory]", "[OutOfMemory]"], memory_pool=POOL)), False)
    kind[memory.to_numpy(zero_copy_only=False)] = _MEMORY
    kind[pc.equal(cols["ph"], "M").to_numpy(zero_copy_only=False)] = _META
    return kind


def _arg_columns(args_raw: list[msgspec.Raw], kind: np.ndarray) -> dict[str, pa.Array]:
    """The typed args columns: each kind's rows decoded with its struct, then put back in row order."""
    n = len(args_raw)
    parts: dict[str, list[pa.Array]] = {name: [] for name in _ARG_COLUMNS}
    order = []
    for k, struct in enumerate(_ARG_STRUCTS):
        rows = np.flatnonzero(kind == k)
        if not len(rows):
            continue
        order.append(rows)
        raws = args_raw if len(rows) == n else (
            [args_raw[int(rows[0])]] if len(rows) == 1 else list(itemgetter(*rows.tolist())(args_raw)))
        doc = b"[" + b",".join(raws) + b"]"
        typed = _typed_args(doc, struct)
        mine = {f.name for f in msgspec.structs.fields(struct)}
        for name, typ in _ARG_COLUMNS.items():
            # Keys absent from this kind's args are nulls: one substring search spares a pass.
            if name in mine and _ARG_KEYS[name] in doc:
                parts[name].append(_array(list(map(attrgetter(name), typed)), typ))
            else:
                parts[name].append(_kineto_native.null_array(typ, len(rows)))
    if not order:
        return {name: pa.nulls(0, typ, memory_pool=POOL) for name, typ in _ARG_COLUMNS.items()}
    if len(order) == 1:
        return {name: p[0] for name, p in parts.items()}
    position = np.empty(n, dtype=np.int64)
    position[np.concatenate(order)] = np.arange(n)
    back = pa.array(position, memory_pool=POOL)
    return {name: pc.take(pa.concat_arrays(p, memory_pool=POOL), back) for name, p in parts.items()}


def _nulls(n: int) -> pa.Array:
    return _kineto_native.null_array(pa.string(), n)


def _typed_args(doc: bytes, struct: type[msgspec.Struct]) -> list[Any]:
    try:
        return msgspec.json.decode(doc, type=list[struct])  # type: ignore[valid-type]
    except msgspec.ValidationError:
        pass
    try:  # an explicit "args": null somewhere; rare, so the slow fill is fine
        maybe = msgspec.json.decode(doc, type=list[struct | None])  # type: ignore[valid-type]
        return [a if a is not None else struct() for a in maybe]
    except msgspec.ValidationError:
        # Some writer put an odd type under a key we read (say a string correlation id):
        # convert what converts, leave the rest to the raw args text.
        # Only the keys read are decoded (a value out of range elsewhere is the raw text's business).
        loose = msgspec.json.decode(doc, type=list[dict[str, msgspec.Raw] | None])
        fields = {f.encode_name: f.name for f in msgspec.structs.fields(struct)}
        return [struct(**{fields[k]: _loose(v, k) for k, v in (d or {}).items() if k in fields}) for d in loose]


def _loose(raw: msgspec.Raw, key: str) -> Any:
    try:
        v = msgspec.json.decode(raw)
    except msgspec.ValidationError as exc:  # a number beyond a double: not a value, a damaged file
        raise MalformedTraceError(f"args key {key!r} holds {bytes(raw)[:40]!r}: {exc}") from exc
    return v if isinstance(v, int | float | str) and not isinstance(v, bool) else None


def _empty_events() -> pa.Table:
    return _columns([], 0, b"[]")


def _id_strings(values: list[Any]) -> pa.Array:
    """pids/tids/flow ids are ints or strings in the wild; stored as their text."""
    try:
        arr = pa.array(values, memory_pool=POOL) if values else pa.array([], pa.string(), memory_pool=POOL)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # ints and strings mixed
        return _texts(values)
    if arr.type == pa.string():
        return arr
    if arr.type == pa.null():
        return _nulls(len(values))
    if pa.types.is_integer(arr.type):
        return pc.cast(arr, pa.string())
    return _texts(values)


def _texts(values: list[Any]) -> pa.Array:
    """Each value's str(), None kept as null (builtin str mapped in C where there is no None)."""
    if None not in values:
        return pa.array(list(map(str, values)), pa.string(), memory_pool=POOL)
    return pa.array(list(map(_text_or_none, values)), pa.string(), memory_pool=POOL)


def _text_or_none(v: object) -> str | None:
    return None if v is None else str(v)


def _raw_strings(raws: list[msgspec.Raw], first_index: int) -> pa.Array:
    """The raw JSON texts of ``args`` objects as one string array, built from buffers without copying
    each string; an ``args`` that is not an object (or null) is a named error."""
    n = len(raws)
    if not n:
        return pa.array([], pa.string(), memory_pool=POOL)
    lengths = np.fromiter(map(len, raws), dtype=np.int32, count=n)
    offsets = np.zeros(n + 1, dtype=np.int32)  # a chunk is far below 2 GiB, so int32 offsets hold
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(raws)
    # Absent args were decoded as "{}", explicit ones may be "null": both mean "no args" (null).
    first = np.frombuffer(data, dtype=np.uint8)[np.minimum(offsets[:-1], max(len(data) - 1, 0))]
    empty = ((lengths == 2) & (first == ord("{"))) | ((lengths == 4) & (first == ord("n")))
    odd = np.flatnonzero((first != ord("{")) & ~((lengths == 4) & (first == ord("n"))))
    if len(odd):
        kind = {ord("["): "a list", ord('"'): "a string", ord("t"): "a boolean", ord("f"): "a boolean"}
        raise MalformedTraceError(f"event {first_index + int(odd[0])}: 'args' is "
                                  f"{kind.get(int(first[odd[0]]), 'a number')}, expected a JSON object; the "
                                  "file was not written by torch.profiler or is damaged")
    validity = pa.py_buffer(np.packbits(~empty, bitorder="little"))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), validity,
                                       int(empty.sum()))


def _array(values: list[Any], typ: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(typ):  # the text column, then its codes, as the scanner writes it
        return pc.dictionary_encode(_array(values, typ.value_type))
    try:
        return pa.array(values, typ, memory_pool=POOL)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        if pa.types.is_string(typ):  # int device/stream ids: their text in one cast, as _coerce's str() writes it
            return _id_strings(values)
        return pa.array([_coerce(v, typ) for v in values], typ, memory_pool=POOL)


def _coerce(v: Any, typ: pa.DataType) -> Any:
    """Slow path for the odd value: out-of-range ints become null (the raw args keep them)."""
    if v is None:
        return None
    if pa.types.is_string(typ):
        return str(v)
    if pa.types.is_integer(typ):
        if isinstance(v, bool) or not isinstance(v, int | float) or not abs(v) <= _INT64_MAX:
            return None
        return int(v)
    if pa.types.is_floating(typ):
        return checked_float(v)
    return v


def _times(values: list[int | float | None]) -> pa.Array | None:
    """µs values to exact int64 ns, or None when floats are too large to be exact."""
    if not values:
        return pa.array([], pa.int64(), memory_pool=POOL)
    try:
        arr = pa.array(values, memory_pool=POOL)
    except (pa.ArrowInvalid, OverflowError):
        return None
    if arr.type == pa.null():
        return _kineto_native.null_array(pa.int64(), len(values))
    if pa.types.is_integer(arr.type):
        try:
            return pc.multiply_checked(arr, 1000)
        except pa.ArrowInvalid:  # beyond int64 ns: the exact path names the event
            return None
    f = arr.to_numpy(zero_copy_only=False)
    valid = ~np.isnan(f)
    if valid.any() and np.abs(f[valid]).max() >= EXACT_FLOAT_US:
        return None
    return pa.array(us_to_ns(np.where(valid, f, 0.0)), mask=~valid, memory_pool=POOL)


def us_to_ns(f: np.ndarray) -> np.ndarray:
    """Float µs (below 2**43) to the exact integer ns they were printed from."""
    whole = np.floor(f)
    return np.asarray(whole.astype(np.int64) * 1000 + np.rint((f - whole) * 1000).astype(np.int64))


def _decimal_ns(values: list[Decimal | None], key: str, first_index: int) -> pa.Array:
    ns = [None if v is None else int((v * 1000).to_integral_value()) for v in values]
    for i, v in enumerate(ns):
        if v is not None and not -_INT64_MAX - 1 <= v <= _INT64_MAX:
            raise MalformedTraceError(
                f"event {first_index + i}: {key!r} is {values[i]} µs, beyond what int64 nanoseconds hold "
                "(about ±292 years); the file is damaged")
    return pa.array(ns, pa.int64(), memory_pool=POOL)
