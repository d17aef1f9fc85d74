"""Small vectorized helpers over Arrow arrays shared by the parsers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.parsers._pool import POOL, pc

__all__ = ["codes", "constant", "dictionary", "encoded", "first_seen", "flat", "lookup", "map_unique", "min_by_key",
           "pair_codes", "pair_index"]


def flat(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One array (a single chunk is not copied): ``neurontrace.columns.flat`` on the parse's pool."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    if col.num_chunks == 1:
        return col.chunk(0)
    if not col.num_chunks:
        return pa.array([], col.type)
    return pa.concat_arrays(col.chunks, memory_pool=POOL)  # combine_chunks of a dictionary column ignores the pool


def encoded(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The column as one dictionary array: ``neurontrace.columns.encoded`` on the parse's pool."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)  # one dictionary for every chunk
    return flat(col)


def dictionary(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """(int64 code per row, -1 for null; the distinct values as an array) of a column."""
    enc = encoded(values)
    return pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary


def first_seen(codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes (of ``n`` values) renumbered in order of first appearance, as ``dictionary_encode`` numbers values:
    (the codes used, in that order; each row's new code)."""
    used, first = np.unique(codes, return_index=True)
    order = used[np.argsort(first)]
    remap = np.zeros(n, dtype=np.int64)
    remap[order] = np.arange(len(order))
    return order, remap[codes]


def codes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return dictionary(values)[0]


def pair_codes(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """(code per row, the distinct (a, b) pairs) of two string columns (nulls read as "").

    Cheaper than joining the two into one string column and hashing that: each column is
    hashed once and the pairs are numbered in numpy.
    """
    code, uniq, nb, da, db = _pairs(a, b)
    va, vb = da.to_pylist(), db.to_pylist()
    return code, [(va[u // nb], vb[u % nb]) for u in uniq.tolist()]


def pair_index(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The codes of :func:`pair_codes` alone (no list of the pairs: a flow's (category, id) pairs are
    nearly as many as its markers)."""
    return _pairs(a, b)[0]


def _pairs(a: pa.Array | pa.ChunkedArray,
           b: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, int, pa.Array, pa.Array]:
    ca, da = _filled(a)
    cb, db = _filled(b)
    nb = max(len(db), 1)
    pair = ca * nb + cb
    size = len(da) * nb
    if size <= 4 * len(pair) + 4096:  # few combinations: number them with a dense table, O(n)
        seen = np.zeros(size, dtype=bool)
        seen[pair] = True
        uniq = np.flatnonzero(seen)
        lut = np.zeros(size, dtype=np.int64)
        lut[uniq] = np.arange(len(uniq))
        code = lut[pair]
    else:
        uniq, code = np.unique(pair, return_inverse=True)
    return code.reshape(-1), uniq, nb, da, db


def _filled(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """:func:`dictionary` with nulls read as "": on a dictionary column, Arrow's fill_null costs more than the
    rest of the column's handling (12 ms on 107 K rows, pyarrow 26), so the codes are filled instead."""
    idx, distinct = dictionary(values)
    missing = idx < 0
    if missing.any():
        at = pc.index(distinct, "").as_py()
        if at < 0:
            distinct = pa.concat_arrays([distinct, pa.array([""], distinct.type)], memory_pool=POOL)
            at = len(distinct) - 1
        idx[missing] = at
    return idx, distinct


def constant(value: Any, n: int, typ: pa.DataType) -> pa.Array:
    """``value`` on ``n`` rows, without a list of ``n`` Python objects: a text as a one-entry dictionary (4 bytes a
    row, where a plain string column costs its length again on every row), None as nulls."""
    if value is None:
        return pa.nulls(n, typ, memory_pool=POOL)
    if pa.types.is_dictionary(typ):
        zeros = pa.array(np.zeros(n, np.int32), memory_pool=POOL)
        return pa.DictionaryArray.from_arrays(zeros, pa.array([value], typ.value_type))
    return pa.array(np.full(n, value), typ, memory_pool=POOL)


def map_unique(values: pa.Array | pa.ChunkedArray, fn: Callable[[Any], Any], typ: pa.DataType, *,
               null_as_empty: bool = False) -> pa.Array:
    """Apply ``fn`` to each distinct value (few) and spread the results over all rows; ``null_as_empty``: null
    rows read as "" (``map_unique(pc.fill_null(values, ""), ...)`` without filling the column)."""
    idx, distinct = _filled(values) if null_as_empty else dictionary(values)
    return pc.take(pa.array([fn(v) for v in distinct.to_pylist()], typ), pa.array(idx, memory_pool=POOL))


def valid_utf8(col: pa.Array | pa.ChunkedArray) -> tuple[pa.Array | pa.ChunkedArray, int]:
    """A string column with every cell that is not valid UTF-8 decoded with U+FFFD replacements, and
    how many cells were; valid columns (the rule) are checked in C and returned as they are."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out, bad = [], 0
    for chunk in chunks:
        try:
            chunk.validate(full=True)
            out.append(chunk)
        except pa.ArrowInvalid:
            cells: list[bytes | None] = pc.cast(chunk, pa.binary()).to_pylist()
            fixed = [None if c is None else c.decode("utf-8", "replace") for c in cells]
            bad += sum(c is not None and c.decode("utf-8", "replace").encode() != c for c in cells)
            out.append(pa.array(fixed, chunk.type, memory_pool=POOL))
    if not bad:
        return col, 0
    return (pa.chunked_array(out, col.type) if isinstance(col, pa.ChunkedArray) else out[0]), bad


def min_by_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys, sorted; the smallest value of each): a group-by-min as one numpy sort, without an
    Acero plan (Arrow's group_by here took 0.37 s of a 35 MB trace's load, profiled on a loaded machine)."""
    if not len(keys):
        return keys[:0], values[:0]
    order = np.lexsort((values, keys))
    k = keys[order]
    first = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1]
    return k[first], values[order][first]


def lookup(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in the sorted unique ``keys`` of each wanted key, whether it is there)."""
    if not len(keys):
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return pos, keys[pos] == wanted

