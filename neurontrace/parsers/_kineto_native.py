"""The compiled fast path of the Kineto decoder (``_kineto_scan.c``), wrapped as Arrow columns.

The scanner writes each event straight into column buffers; this module turns those buffers into
Arrow arrays without copying. It gives the same rows as ``_kineto_json``'s reference decoder, or
``None`` when it cannot (the extension was not built, ``NEURONTRACE_KINETO_DECODER=python`` asks
for the reference, or the input holds something the scanner leaves to the reference), and then
says why in ``reason``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa

from neurontrace.parsers._pool import POOL, pc
from neurontrace.progress import Progress, no_progress

if TYPE_CHECKING:
    from typing_extensions import Buffer


def _import_scanner() -> ModuleType | None:
    try:
        return importlib.import_module(f"{__package__}._kineto_scan")
    except ImportError:  # built without a C compiler: the reference decoder does all the work
        return None


_kineto_scan = _import_scanner()

ENV = "NEURONTRACE_KINETO_DECODER"
CHUNK_BYTES = 4 << 20  # input scanned per call: small buffers stay in cache and grow cheaply
_FLOAT_COLUMNS = frozenset({"mem_bytes", "mem_total_allocated", "mem_total_reserved"})
# Legacy "Call stack" args repeat a few distinct stacks of hundreds of bytes on every op: dictionary
# codes per chunk, instead of the text again on each row (a third of ResNet-50's decoded bytes).
STACKS = pa.dictionary(pa.int32(), pa.string())
_DICTIONARY_COLUMNS = {"call_stack": STACKS}


@dataclass
class Scanned:
    parts: list[pa.Table] | None  # host, device, allocator events, the rest (route() in the C file)
    top: dict[str, msgspec.Raw]  # the document's other keys, undecoded
    reason: str  # which decoder ran, and why not the native one


def available() -> str | None:
    """None when the native scanner can run, else why not."""
    if os.environ.get(ENV, "").lower() == "python":
        return f"{ENV}=python"
    if _kineto_scan is None:
        return "the compiled scanner is not built (no C compiler at install time)"
    return None


def scanner() -> Any:
    """The compiled module (only where :func:`available` says it can run)."""
    assert _kineto_scan is not None
    return _kineto_scan


def scan(data: Buffer, columns: list[str], device_categories: list[str], progress: Progress = no_progress,
         release: Callable[[int, int], None] | None = None) -> Scanned:
    """A whole trace document: its events in parts, and its other top-level keys.

    The scanner checks every byte of the list against the JSON grammar (RFC 8259) as it converts
    it, so a document it accepts is valid JSON; anything else (cut off, corrupt, an odd type) is declined, and the
    reference decoder then reads the document and names the problem. The members around the list
    are checked and decoded by msgspec, without the list.

    Events are routed to parts by phase and category so the normalizer keeps whole parts instead
    of copying rows out of one big table; each part is in file order. ``release(start, end)`` is told
    after each chunk that the list's bytes so far are done with.
    """
    why = available()
    if why is not None or _kineto_scan is None:
        return Scanned(None, {}, f"python ({why})")
    view = memoryview(data)
    n = len(view)
    head = bytes(view[:4096])
    bare = head.lstrip().startswith(b"[")  # the array form: a bare list of events
    first = len(head) - len(head.lstrip()) if bare else _kineto_scan.find_events(view)
    if first < 0:
        return Scanned(None, {}, "python (native scanner found no traceEvents list)")
    cats = tuple(c.encode() for c in device_categories)
    chunks: list[list[pa.Table]] = [[], [], [], []]
    pos, rows_done, closed = first + 1, 0, False
    try:
        while not closed:
            stop, rows, parts, closed = _kineto_scan.scan(view, pos, n, CHUNK_BYTES, rows_done, cats)
            for k, (part_rows, cols) in enumerate(parts):
                if part_rows:
                    chunks[k].append(table(cols, part_rows, columns))
            rows_done += rows
            progress("decode events", stop, n)
            if release is not None:
                release(first + 1, stop)  # the document around the list is read again (outer)
            if not closed and stop == pos:
                return Scanned(None, {}, "python (native scanner: the traceEvents list is not closed)")
            pos = stop
    except (_kineto_scan.UnsupportedError, pa.ArrowInvalid) as exc:
        return Scanned(None, {}, f"python (native scanner declined: {exc})")
    top = outer(bytes(view[:first]), bytes(view[pos + 1:]), bare)
    if top is None:
        return Scanned(None, {}, "python (native scanner: the document around the list is not valid JSON)")
    if not rows_done:
        return Scanned(None, {}, "python (no events)")
    return Scanned([pa.concat_tables(c, memory_pool=POOL) for c in chunks if c], top, "native")


def outer(before: bytes, rest: bytes, bare: bool) -> dict[str, msgspec.Raw] | None:
    """The document without its event list (the text ``before`` its '[' and the ``rest`` after its
    ']'), checked: the other keys, or None when not valid."""
    if bare:
        return {} if not rest.strip() else None
    outer = before + b"[]" + rest
    if outer.count(b'"traceEvents"') != 1:  # a second list would win in the reference: leave it to that
        return None
    try:
        top = msgspec.json.decode(outer, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    top.pop("traceEvents", None)
    return top


class _Zeros:
    """One zero-filled buffer that every all-null column shares (np.zeros: pages never written
    are not even resident), so a column without values costs no memory per chunk."""

    buf = pa.py_buffer(np.zeros(0, np.uint8))

    @classmethod
    def at_least(cls, nbytes: int) -> pa.Buffer:
        if cls.buf.size < nbytes:
            cls.buf = pa.py_buffer(np.zeros(max(nbytes, 2 * cls.buf.size), np.uint8))
        return cls.buf


def null_array(typ: pa.DataType, rows: int) -> pa.Array:
    """An all-null int64, float64, string or dictionary column that costs no memory of its own (_Zeros)."""
    zeros = _Zeros.at_least((rows + 1) * 8)
    if pa.types.is_dictionary(typ):
        codes = pa.Array.from_buffers(typ.index_type, rows, [zeros, zeros], null_count=rows)
        return pa.DictionaryArray.from_arrays(codes, pa.array([], typ.value_type))
    buffers = [zeros, zeros, pa.py_buffer(b"")] if pa.types.is_string(typ) else [zeros, zeros]
    return pa.Array.from_buffers(typ, rows, buffers, null_count=rows)


def table(cols: dict[str, tuple[Any, ...]], rows: int, columns: list[str]) -> pa.Table:
    arrays = {}
    empty: dict[pa.DataType, pa.Array] = {}  # most columns of a part are all null: one array a type serves them
    for name, bufs in cols.items():
        bits, nulls, *data = bufs
        if data[0] is None:  # not one value in this chunk
            typ = (_DICTIONARY_COLUMNS.get(name, pa.string()) if len(data) == 2
                   else pa.float64() if name in _FLOAT_COLUMNS else pa.int64())
            if typ not in empty:
                empty[typ] = null_array(typ, rows)
            arrays[name] = empty[typ]
            continue
        validity = pa.py_buffer(bits) if bits is not None else None
        if len(data) == 2:
            arr = pa.StringArray.from_buffers(rows, pa.py_buffer(data[0]), pa.py_buffer(data[1]), validity, nulls)
            if name in _DICTIONARY_COLUMNS:  # the chunk's text is freed once encoded
                arr = pc.dictionary_encode(arr)
                arr.dictionary.validate(full=True)  # UTF-8, checked once per distinct value
            elif name != "args":  # msgspec checks UTF-8 in the fields it decodes; so does this path
                arr.validate(full=True)
        else:
            typ = pa.float64() if name in _FLOAT_COLUMNS else pa.int64()
            arr = pa.Array.from_buffers(typ, rows, [validity, pa.py_buffer(data[0])], null_count=nulls)
        arrays[name] = arr
    return pa.table([arrays[c] for c in columns], names=columns)
