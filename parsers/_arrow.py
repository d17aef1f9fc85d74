"""Small vectorized helpers over Arrow arrays shared by the parsers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def flat(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def dictionary(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """(int64 code per row, distinct values) of a column."""
    enc = flat(pc.dictionary_encode(flat(values)))
    return np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64), enc.dictionary


def codes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return dictionary(values)[0]


def map_unique(values: pa.Array | pa.ChunkedArray, fn: Callable[[Any], Any], typ: pa.DataType) -> pa.Array:
    """Apply ``fn`` to each distinct value (few) and spread the results over all rows."""
    idx, distinct = dictionary(values)
    return pc.take(pa.array([fn(v) for v in distinct.to_pylist()], typ), pa.array(idx))
