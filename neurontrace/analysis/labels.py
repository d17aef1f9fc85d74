"""Labels: the intervals of one ``cause.detail`` and the events behind them, built once per distinct value.

The attribution sweep, the cause runs and the stall search all read labels. A label's ``(cause, detail)``
comes from a function of a few dictionary-encoded columns, run once per distinct combination of their
values (few), never per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.columns import codes


@dataclass
class Label:
    cause: str
    detail: str
    starts: np.ndarray
    ends: np.ndarray
    table: pa.Table  # the events behind the intervals ...
    rows: np.ndarray  # ... at these positions


def labels_of(table: pa.Table, columns: list[Any], fn: Any, mask: np.ndarray) -> list[Label]:
    """One label per distinct (cause, detail) that ``fn`` gives the rows selected by ``mask``."""
    codes, keys = per_distinct(columns, fn)
    rows = np.flatnonzero(mask)
    if not len(rows):
        return []
    start, end = spans(table)
    code = codes[rows]
    # Few labels: 16-bit codes let numpy's stable sort use radix sort, linear in the rows.
    order = np.argsort(code.astype(np.int16) if len(keys) < 2**15 else code, kind="stable")
    counts = np.bincount(code, minlength=len(keys))
    out = []
    for k, part in zip(keys, np.split(rows[order], np.cumsum(counts)[:-1]), strict=True):
        if len(part):
            out.append(Label(k[0], k[1], start[part], end[part], table, part))
    return out


def per_distinct(columns: list[Any], fn: Any) -> tuple[np.ndarray, list[Any]]:
    """(code per row, ``fn`` of each distinct combination of the columns' values): fn runs once per
    distinct combination (few), never per row."""
    n = len(columns[0])
    combined = np.zeros(n, dtype=np.int64)
    dictionaries = []
    for col in columns:
        idx, values = codes(col)  # Trace string columns are dictionaries already
        combined = combined * (len(values) + 1) + idx + 1  # 0 = null
        dictionaries.append([None, *values])
    if int(combined.max(initial=0)) < 4 * n + 1024:  # few combinations: count instead of sorting
        present = np.flatnonzero(np.bincount(combined))
        lookup = np.zeros(int(present[-1]) + 1 if len(present) else 1, dtype=np.int64)
        lookup[present] = np.arange(len(present))
        distinct, inverse = present, lookup[combined]
    else:
        distinct, inverse = np.unique(combined, return_inverse=True)
    results: list[Any] = []
    code_of_combo = []
    for combo in distinct.tolist():
        values, rest = [], combo
        for d in reversed(dictionaries):
            rest, i = divmod(rest, len(d))
            values.append(d[i])
        result = fn(*reversed(values))
        if result not in results:
            results.append(result)
        code_of_combo.append(results.index(result))
    return np.asarray(code_of_combo, dtype=np.int64)[inverse.reshape(-1)], results


def spans(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) ns of every row."""
    s = t["ts_ns"].to_numpy()
    return s, s + t["dur_ns"].to_numpy()
