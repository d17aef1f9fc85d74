"""The one set of helpers over the Trace's dictionary-encoded string columns (parsers, analyses, viewer).

Names, categories and devices are dictionary encoded: a test runs once per distinct value and is
spread to the rows through the indices, instead of decoding millions of strings first; ``codes`` gives
any string column as integers for numpy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def flat(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One array (a single chunk is not copied)."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def encoded(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The column as one dictionary array (encoded here when it is not one already; the chunks of a
    chunked column are encoded as they are, so their strings are never copied into one array)."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)  # one dictionary for every chunk
    return flat(col)


def codes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """(int64 code per row, -1 for null; the values the codes index) of a string column."""
    arr = encoded(col)
    return pc.fill_null(arr.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64), arr.dictionary.to_pylist()


def row_codes(*columns: np.ndarray) -> np.ndarray:
    """Per row of the integer ``columns`` (one length), the rank of the row among the distinct rows in
    lexicographic order: ``np.unique(np.stack(columns, 1), axis=0, return_inverse=True)[1]``, without the
    structured-row sort that makes that several times slower than a sort of plain integers."""
    n = len(columns[0])
    code, count = np.zeros(n, dtype=np.int64), 1
    for col in columns:
        inverse, k = dense_ranks(np.asarray(col))
        if count * k > 2 * n + 65_536:  # made dense first: code < rows and inverse < k, so code * k fits int64
            code, count = dense_ranks(code)
        code, count = code * k + inverse, count * k
    return dense_ranks(code)[0]


def dense_ranks(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(per value, its rank among the distinct values; how many distinct there are): the inverse of
    ``np.unique(values, return_inverse=True)``. Values spanning a range not much wider than their count
    (codes, small ids) are ranked without a sort, by marking a table of the range and counting."""
    if not len(values):
        return np.zeros(0, dtype=np.int64), 0
    lo = int(values.min())
    width = int(values.max()) - lo + 1
    if width > 2 * len(values) + 65_536:
        uniq, inverse = np.unique(values, return_inverse=True)
        return inverse.ravel().astype(np.int64), len(uniq)
    shifted = values.astype(np.int64) - lo
    seen = np.zeros(width, dtype=bool)
    seen[shifted] = True
    rank = np.cumsum(seen) - 1
    return rank[shifted], int(rank[-1]) + 1


def _spread(arr: pa.Array, per_value: np.ndarray) -> np.ndarray:
    idx = arr.indices.to_numpy(zero_copy_only=False)
    if arr.null_count:
        idx = np.where(np.isnan(idx), 0, idx).astype(np.int64) if idx.dtype.kind == "f" else idx
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        return np.asarray(per_value[idx] & valid) if len(per_value) else np.zeros(len(arr), bool)
    return np.asarray(per_value[idx]) if len(per_value) else np.zeros(len(arr), bool)


def isin(col: pa.Array | pa.ChunkedArray, values: Iterable[str]) -> np.ndarray:
    """Boolean mask: the row's value is one of ``values`` (null rows are False)."""
    arr = encoded(col)
    wanted = set(values)
    per_value = np.array([v in wanted for v in arr.dictionary.to_pylist()], dtype=bool)
    return _spread(arr, per_value)


def matches(col: pa.Array | pa.ChunkedArray, pattern: re.Pattern[str] | str) -> np.ndarray:
    """Boolean mask: the row's value matches the regular expression (searched, null rows False)."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    arr = encoded(col)
    per_value = np.array([bool(v is not None and rx.search(v)) for v in arr.dictionary.to_pylist()], dtype=bool)
    return _spread(arr, per_value)


def keep(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """The rows where ``mask`` holds; the table itself, uncopied, when it holds everywhere."""
    return table if bool(mask.all()) else table.filter(pa.array(mask))


def take(data: pa.Table | pa.ChunkedArray, rows: np.ndarray) -> Any:
    """``data.take(rows)``, copying only the rows taken: Arrow's take first concatenates a chunked column
    (for a rank's ``args``, a copy of hundreds of MB; pyarrow 26), while its filter works chunk by chunk."""
    rows = np.asarray(rows, dtype=np.int64)
    if (isinstance(data, pa.ChunkedArray) and data.num_chunks <= 1) or not len(rows):
        return data.take(pa.array(rows))
    mask = np.zeros(len(data), dtype=bool)
    mask[rows] = True
    picked = data.filter(pa.array(mask))  # each row once, in order
    if len(rows) == len(picked) and bool(np.all(rows[1:] > rows[:-1])):
        return picked
    return picked.take(pa.array(np.searchsorted(np.flatnonzero(mask), rows)))  # only the picked rows


def lean(table: pa.Table) -> pa.Table:
    """The table without its ``args`` JSON text (no copy): what to filter when the rows' args are not read,
    since that one column is most of an event table's bytes and every filter would copy it."""
    return table.drop_columns(["args"]) if "args" in table.column_names else table


def select(table: pa.Table, column: str, *values: str) -> pa.Table:
    """Rows of ``table`` whose ``column`` is one of ``values`` (the table itself when all are)."""
    return keep(table, isin(table[column], values))


def distinct(col: pa.Array | pa.ChunkedArray) -> list[str]:
    """The distinct non-null values that occur in the column."""
    arr = encoded(col)
    used: list[int] = np.unique(arr.indices.drop_null().to_numpy(zero_copy_only=False)).tolist()
    values = arr.dictionary.to_pylist()
    return sorted(values[int(i)] for i in used)


def of_rank(table: pa.Table, rank: int | None) -> pa.Table:
    """Rows of ``rank`` (rows without a rank when ``rank`` is None); one rank (the usual case): no copy."""
    mask = pc.is_null(table["rank"]) if rank is None else pc.fill_null(pc.equal(table["rank"], rank), False)
    return keep(table, mask.to_numpy(zero_copy_only=False))
