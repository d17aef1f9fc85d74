"""Arrow building blocks for the Neuron parsers: cheap constant columns and vectorized JSON ``args``.

Neuron profiles reach tens of millions of rows, so nothing here loops over rows in Python:
- constant and all-null columns repeat one small block (a chunked array of the same chunk), so a
  10M-row ``host`` column costs one block of memory, not 10M values;
- ``args`` JSON objects are assembled column by column with Arrow string kernels; only values
  Arrow cannot spell as JSON (nested lists, strings with control characters) go through ``json``.
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

_BLOCK = 1 << 16


def flat(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


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
            out.append(pa.DictionaryArray.from_arrays(chunk.indices, pa.array(mapped, typ.value_type)))
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
    return int(pc.sum(pc.cast(pc.fill_null(mask, False), pa.int64())).as_py() or 0)


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
