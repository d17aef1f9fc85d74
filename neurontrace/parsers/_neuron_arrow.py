"""Arrow building blocks for the Neuron parsers: cheap constant columns, vectorized JSON ``args``,
columns filled batch by batch.

Neuron profiles reach tens of millions of rows, so nothing here loops over rows in Python:
- constant and all-null columns repeat one small block (a chunked array of the same chunk), so a
  10M-row ``host`` column costs one block of memory, not 10M values;
- ``args`` JSON objects are assembled column by column with Arrow string kernels; only values
  Arrow cannot spell as JSON (nested lists, strings with control characters) go through ``json``;
- a big table read a batch at a time lands in one buffer per column (:class:`ColumnSink`), and
  the event tables get one dictionary per column without rewriting their big chunks
  (:func:`one_dictionary`), so peak memory stays close to the size of the result.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.schema import DICT_STRING

from ._arrow import flat

_BLOCK = 1 << 16


def constant(value: Any, typ: pa.DataType, n: int) -> pa.ChunkedArray:
    """``n`` copies of ``value`` (None → nulls) as repeats of one block: memory O(block), not O(n)."""
    block = _block(value, typ) if n else pa.array([], typ)
    full, rest = divmod(n, _BLOCK)
    chunks = [block] * full + ([block.slice(0, rest)] if rest else [])
    return pa.chunked_array(chunks, typ)


@functools.lru_cache(maxsize=256)
def _block(value: Any, typ: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(typ):
        return pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(_BLOCK, np.int32), pa.int32()) if value is not None else pa.nulls(_BLOCK, pa.int32()),
            pa.array([value] if value is not None else [], typ.value_type),
        )
    return pa.array([value] * _BLOCK, typ)


def dict_strings(values: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """A string column as ``dictionary<int32, string>`` (the schema's type), chunk by chunk."""
    col = values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])
    out = []
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            out.append(chunk if chunk.type == DICT_STRING else chunk.cast(DICT_STRING))
        else:
            out.append(pc.dictionary_encode(chunk.cast(pa.string())).cast(DICT_STRING))
    return pa.chunked_array(out, DICT_STRING)


def map_dict(values: pa.Array | pa.ChunkedArray, fn: Any, typ: pa.DataType = DICT_STRING) -> pa.ChunkedArray:
    """Apply ``fn`` to each distinct value of each chunk (few) and spread the results over the rows.

    Results of a dictionary type stay dictionary encoded (indices reused, no strings copied).
    """
    col = dict_strings(values) if not pa.types.is_dictionary(values.type) else (
        values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values]))
    out = []
    for chunk in col.chunks:
        mapped = [fn(v) for v in chunk.dictionary.to_pylist()]
        null_result = fn(None)
        if pa.types.is_dictionary(typ) and None not in mapped and len(set(mapped)) == len(mapped) and (
                null_result is None or chunk.null_count == 0):
            # One-to-one: keep the indices, swap the dictionary (no per-row work).
            out.append(pa.DictionaryArray.from_arrays(chunk.indices, pa.array(mapped, typ.value_type), safe=False))
        elif pa.types.is_dictionary(typ):
            distinct = sorted({m for m in [*mapped, null_result] if m is not None})
            where = {m: i for i, m in enumerate(distinct)}
            remap = pa.array([where.get(m) for m in mapped], pa.int32())
            idx = pc.take(remap, chunk.indices) if len(chunk.dictionary) else pa.nulls(len(chunk), pa.int32())
            if null_result is not None:
                idx = pc.fill_null(idx, where[null_result])
            out.append(pa.DictionaryArray.from_arrays(idx, pa.array(distinct, typ.value_type)))
        else:
            taken = pc.take(pa.array(mapped, typ), chunk.indices) if len(chunk.dictionary) else \
                pa.nulls(len(chunk), typ)
            out.append(pc.fill_null(taken, null_result) if null_result is not None else taken)
    return pa.chunked_array(out, typ)


def count_true(mask: pa.Array | pa.ChunkedArray) -> int:
    return int(pc.sum(mask).as_py() or 0)  # (nulls are not counted)


# -- JSON args ----------------------------------------------------------------------------------


def json_objects(table: pa.Table, columns: Sequence[str], *, batch_rows: int = 1 << 20) -> pa.ChunkedArray:
    """One JSON object per row holding ``columns`` (null values left out); null when all are null.

    Built with Arrow string kernels a batch at a time, so temporaries stay bounded: each column
    becomes ``"key":value`` pieces (null where the value is null), joined with commas skipping nulls.
    """
    n = table.num_rows
    if not columns:
        return constant(None, pa.string(), n)
    chunks = []
    for start in range(0, max(n, 1), batch_rows):
        part = table.slice(start, batch_rows)
        if part.num_rows == 0:
            break
        pieces = [_pieces(json.dumps(name) + ":", flat(part[name])) for name in columns]
        # (one input array with "skip" loses its rows in pyarrow; one piece needs no join anyway)
        body = pc.fill_null(pieces[0], "") if len(pieces) == 1 else \
            pc.binary_join_element_wise(*pieces, ",", null_handling="skip")
        obj = pc.binary_join_element_wise("{", body, "}", "")
        chunks.append(pc.if_else(pc.equal(body, ""), pa.scalar(None, pa.string()), obj))
    return pa.chunked_array(chunks, pa.string()) if chunks else constant(None, pa.string(), 0)


def _pieces(key: str, arr: pa.Array) -> pa.Array:
    """``"key":value`` per row (null for null values); dictionary columns are spelled once per value."""
    if pa.types.is_dictionary(arr.type):
        spelled = pc.binary_join_element_wise(key, json_values(arr.dictionary), "")
        if not len(arr.dictionary):
            return pa.nulls(len(arr), pa.string())
        return pc.take(spelled, arr.indices)
    return pc.binary_join_element_wise(key, json_values(arr), "")


def json_values(arr: pa.Array) -> pa.Array:
    """Each value spelled as JSON text (null where the value is null, NaN or infinite)."""
    typ = arr.type
    if pa.types.is_dictionary(typ):
        spelled = json_values(arr.dictionary)
        return pc.take(spelled, arr.indices) if len(arr.dictionary) else pa.nulls(len(arr), pa.string())
    if pa.types.is_null(typ):
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        return arr.cast(pa.string())
    if pa.types.is_floating(typ):
        text = arr.cast(pa.string())
        return pc.if_else(pc.is_finite(arr), text, pa.scalar(None, pa.string()))
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return _json_strings(arr.cast(pa.string()))
    if pa.types.is_timestamp(typ) or pa.types.is_date(typ) or pa.types.is_time(typ):
        return _json_strings(arr.cast(pa.string()))
    return _python_json(arr.to_pylist())


def _json_strings(arr: pa.Array) -> pa.Array:
    escaped = pc.replace_substring(pc.replace_substring(arr, "\\", "\\\\"), '"', '\\"')
    quoted = pc.binary_join_element_wise('"', escaped, '"', "")
    control = pc.fill_null(pc.match_substring_regex(arr, "[\\x00-\\x1f]"), False)
    if not pc.any(control).as_py():
        return quoted
    # Control characters need \\u escapes; they are rare, so json.dumps does those rows.
    idx = np.flatnonzero(control.to_numpy(zero_copy_only=False))
    fixed = pa.array([json.dumps(v) for v in arr.take(pa.array(idx)).to_pylist()], pa.string())
    values = quoted.to_pylist()
    for i, v in zip(idx.tolist(), fixed.to_pylist(), strict=True):
        values[i] = v
    return pa.array(values, pa.string())


def _python_json(values: Iterable[Any]) -> pa.Array:
    return pa.array(
        [None if v is None else json.dumps(v, sort_keys=False, default=str) for v in values], pa.string()
    )


# -- columns filled batch by batch ---------------------------------------------------------------

_UNSET = object()


class ColumnSink:
    """The columns of one big table, filled a batch at a time into buffers allocated once.

    Appending one chunk per batch leaves a column as many separate allocations (the allocator
    keeps the gaps between them) and, for strings read as dictionaries, as many dictionaries in
    different orders, which ``unify_dictionaries`` then rewrites at the end, when everything else
    is in memory too. Here instead:
    - an int64 column is one array of ``capacity`` rows (pages never written cost no memory);
    - a dictionary column is one int32 index array over one dictionary that only grows;
    - any other column (JSON ``args``) keeps its chunks;
    - a column that only ever gets one scalar stays that scalar (a constant costs one block).

    In the int64 columns named in ``negative_null`` (ids), a negative value stands for null.
    """

    def __init__(self, spec_types: dict[str, pa.DataType], capacity: int, *,
                 negative_null: tuple[str, ...] = ()) -> None:
        self.capacity = capacity
        self.n = 0
        self._types = spec_types
        self._negative_null = negative_null
        self._cols: dict[str, _Sink] = {}

    def append(self, n: int, values: dict[str, Any]) -> None:
        """Add ``n`` rows; each value is an array, a chunked array or a scalar for every row."""
        if self.n + n > self.capacity:
            raise ValueError(f"ColumnSink: {self.n + n} rows exceed its capacity {self.capacity}")
        for name in self._cols.keys() - values.keys():
            self._cols[name].put(self.n, n, None)
        for name, value in values.items():
            self._sink(name).put(self.n, n, value)
        self.n += n

    def view(self, name: str, n: int) -> np.ndarray:
        """The next ``n`` rows of int64 column ``name``, to write in place and then pass to
        :meth:`append` (which then copies nothing)."""
        sink = self._sink(name)
        if not isinstance(sink, _Ints):
            raise TypeError(f"ColumnSink.view: {name} is not an int64 column")
        return sink.view(self.n, n)

    def _sink(self, name: str) -> _Sink:
        sink = self._cols.get(name)
        if sink is None:
            sink = self._cols[name] = _sink(self._types[name], self.capacity)
            if isinstance(sink, _Ints):
                sink.negative_null = name in self._negative_null
            if self.n:
                sink.put(0, self.n, None)  # a column first seen now: null in the rows before
        return sink

    def columns(self) -> dict[str, Any]:
        """``{name: array or scalar}`` of the ``n`` rows appended; the sink is empty afterwards."""
        out = {name: sink.finish(self.n) for name, sink in self._cols.items()}
        self._cols = {}
        return out


def _sink(typ: pa.DataType, capacity: int) -> _Sink:
    if typ == pa.int64():
        return _Ints(typ, capacity)
    if typ == DICT_STRING:
        return _Dict(typ, capacity)
    return _Sink(typ, capacity)


class _Sink:
    """A column kept as its chunks (the base case): a scalar until an array arrives."""

    def __init__(self, typ: pa.DataType, capacity: int) -> None:
        self.typ = typ
        self.capacity = capacity
        self.scalar: Any = _UNSET
        self.allocated = False
        self.chunks: list[pa.Array] = []

    def put(self, at: int, n: int, value: Any) -> None:
        array = isinstance(value, pa.Array | pa.ChunkedArray)
        if not self.allocated:
            if not array and (self.scalar is _UNSET or self.scalar == value):
                self.scalar = value
                return
            self.allocated = True
            self.allocate()
            if at:
                self.fill(0, at, None if self.scalar is _UNSET else self.scalar)
        if array:
            self.write(at, value)
        else:
            self.fill(at, n, value)

    def finish(self, n: int) -> Any:
        if not self.allocated:
            return None if self.scalar is _UNSET else self.scalar
        return self.build(n)

    # overridden below
    def allocate(self) -> None:
        pass

    def fill(self, at: int, n: int, value: Any) -> None:
        if n:
            self.chunks.extend(constant(value, self.typ, n).chunks)

    def write(self, at: int, value: pa.Array | pa.ChunkedArray) -> None:
        col = value.cast(self.typ) if value.type != self.typ else value
        self.chunks.extend(col.chunks if isinstance(col, pa.ChunkedArray) else [col])

    def build(self, n: int) -> Any:
        return pa.chunked_array(self.chunks, self.typ)


def _chunks(value: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return value.chunks if isinstance(value, pa.ChunkedArray) else [value]


def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


class _Ints(_Sink):
    """int64 values in one buffer; nulls in a byte mask made only when one occurs."""

    buf: np.ndarray
    valid: np.ndarray | None = None
    negative_null = False
    has_negative = False  # (a negative value was written to a negative_null column)

    def allocate(self) -> None:
        self.buf = np.empty(self.capacity, np.int64)

    def _mask(self, at: int) -> np.ndarray:
        if self.valid is None:
            self.valid = np.empty(self.capacity, np.bool_)
            self.valid[:at] = True
        return self.valid

    def view(self, at: int, n: int) -> np.ndarray:
        if not self.allocated:
            self.allocated = True
            self.allocate()
            if at:
                self.fill(0, at, None if self.scalar is _UNSET else self.scalar)
        return self.buf[at:at + n]

    def fill(self, at: int, n: int, value: Any) -> None:
        if self.negative_null and n and (value is None or int(value) < 0):
            self.buf[at:at + n] = -1
            self.has_negative = True
            return
        self.buf[at:at + n] = 0 if value is None else int(value)
        if value is None or self.valid is not None:
            self._mask(at)[at:at + n] = value is not None

    def put(self, at: int, n: int, value: Any) -> None:
        if isinstance(value, np.ndarray):  # a view from view() is already in place
            dst = self.view(at, n)
            if value.ctypes.data != dst.ctypes.data:
                dst[:] = value
            if self.negative_null and n and not self.has_negative:
                self.has_negative = bool(dst.min() < 0)
            if self.valid is not None:
                self.valid[at:at + n] = True
            return
        super().put(at, n, value)

    def write(self, at: int, value: pa.Array | pa.ChunkedArray) -> None:
        for chunk in _chunks(value):
            k = len(chunk)
            c = chunk.cast(pa.int64()) if chunk.type != pa.int64() else chunk
            if c.null_count:
                self._mask(at)[at:at + k] = c.is_valid().to_numpy(zero_copy_only=False)
                c = pc.fill_null(c, 0)
            elif self.valid is not None:
                self.valid[at:at + k] = True
            self.buf[at:at + k] = c.to_numpy()
            if self.negative_null and k and not self.has_negative:
                self.has_negative = bool(self.buf[at:at + k].min() < 0)
            at += k

    def build(self, n: int) -> Any:
        data = self.buf[:n]
        valid = self.valid[:n] if self.valid is not None else None
        if self.has_negative:
            neg = data < 0
            valid = ~neg if valid is None else valid & ~neg
            data[neg] = 0
        bitmap = _bitmap(valid) if valid is not None else None
        if valid is not None and not valid.any():
            return None
        return pa.Array.from_buffers(pa.int64(), n, [bitmap, pa.py_buffer(data)])


class _Dict(_Sink):
    """Strings as int32 codes into one dictionary that grows as batches bring new values."""

    codes: np.ndarray
    nulls = False

    def allocate(self) -> None:
        self.codes = np.empty(self.capacity, np.int32)
        self.values: list[str] = []
        self.index: dict[str, int] = {}

    def _code(self, value: Any) -> int:
        if value is None:
            self.nulls = True
            return -1
        s = str(value)
        code = self.index.get(s)
        if code is None:
            code = self.index[s] = len(self.values)
            self.values.append(s)
        return code

    def fill(self, at: int, n: int, value: Any) -> None:
        self.codes[at:at + n] = self._code(value)

    def write(self, at: int, value: pa.Array | pa.ChunkedArray) -> None:
        for chunk in dict_strings(value).chunks:
            k = len(chunk)
            mapping = np.array([self._code(v) for v in chunk.dictionary.to_pylist()] + [-1], np.int32)
            idx = chunk.indices
            if idx.null_count:
                self.nulls = True
                idx = pc.fill_null(idx, len(mapping) - 1)
            np.take(mapping, idx.to_numpy(), out=self.codes[at:at + k], mode="clip")  # (clip: no checked copy)
            at += k

    def build(self, n: int) -> Any:
        codes = self.codes[:n]
        bitmap = None
        if self.nulls:
            neg = codes < 0
            bitmap = _bitmap(~neg)
            codes[neg] = 0
        indices = pa.Array.from_buffers(pa.int32(), n, [bitmap, pa.py_buffer(codes)])
        # (safe=False: the codes index ``values`` by construction; checking 10M of them costs ~20 ms)
        return pa.DictionaryArray.from_arrays(indices, pa.array(self.values, pa.string()), safe=False)


# -- one dictionary per column --------------------------------------------------------------------


def one_dictionary(table: pa.Table) -> pa.Table:
    """Every dictionary column of ``table`` with one dictionary for all its chunks.

    ``Table.unify_dictionaries`` (which ``Trace`` applies) puts the first chunk's values first and
    rewrites the indices of every chunk whose values it moved: after a few small tables that is
    the whole of a 10M-row table, constant columns included. Here the largest chunk's dictionary
    comes first, so its indices stay as they are, the other chunks are rewritten once per distinct
    chunk (a constant column's repeated block once), and the unify that follows has nothing to do.
    """
    cols = []
    changed = False
    for i, f in enumerate(table.schema):
        col = table.column(i)
        if pa.types.is_dictionary(f.type) and col.num_chunks > 1:
            new = _one_dictionary(col)
            changed = changed or new is not col
            col = new
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=table.schema) if changed else table


def _dict_key(d: pa.Array) -> tuple[Any, ...]:
    return (len(d), d.offset, *(b.address if b is not None else 0 for b in d.buffers()))


def _one_dictionary(col: pa.ChunkedArray) -> pa.ChunkedArray:
    chunks = [c for c in col.chunks if len(c)]
    if not chunks:
        return col
    first = chunks[0].dictionary
    if all(c.dictionary.equals(first) for c in chunks[1:]):
        return col
    big = max(chunks, key=len)
    dicts: dict[tuple[Any, ...], pa.Array] = {}
    for c in chunks:
        dicts.setdefault(_dict_key(c.dictionary), c.dictionary)
    values: list[Any] = big.dictionary.to_pylist()
    index: dict[Any, int] = {}
    for i, v in enumerate(values):
        index.setdefault(v, i)
    maps: dict[tuple[Any, ...], pa.Array | None] = {}
    for key, d in dicts.items():
        codes = []
        for v in d.to_pylist():
            if v not in index:
                index[v] = len(values)
                values.append(v)
            codes.append(index[v])
        same = codes == list(range(len(codes)))
        maps[key] = None if same else pa.array(codes, pa.int32())
    unified = pa.array(values, col.type.value_type)
    done: dict[tuple[Any, ...], pa.Array] = {}
    out = []
    for c in chunks:
        key = _dict_key(c.dictionary)
        remap = maps[key]
        if remap is None:
            out.append(pa.DictionaryArray.from_arrays(c.indices, unified, safe=False))  # (a prefix of it)
            continue
        ckey = (key, _dict_key(c.indices))
        if ckey not in done:
            done[ckey] = pa.DictionaryArray.from_arrays(pc.take(remap, c.indices), unified, safe=False)
        out.append(done[ckey])
    return pa.chunked_array(out, col.type)
