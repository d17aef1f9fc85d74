"""The rows a time slice keeps for a section's merge (analysis/memory_slices.py, analysis/compile_slices.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def kept(table: pa.Table, mask: np.ndarray, columns: Sequence[str]) -> pa.Table:
    """The rows of ``mask``, the ``columns`` of them, each dictionary column re-encoded to the values those rows
    use (a filter keeps the whole dictionary: every distinct name of the slice, in every slice's part)."""
    rows = table.filter(pa.array(mask)).select([c for c in columns if c in table.column_names])
    for i, field in enumerate(rows.schema):
        if pa.types.is_dictionary(field.type):
            col = pc.dictionary_encode(rows.column(i).cast(field.type.value_type))
            rows = rows.set_column(i, field.with_type(col.type), col)
    return rows
