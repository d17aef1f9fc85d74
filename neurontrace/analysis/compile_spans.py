"""Where a trace compiles: the host ranges that are compilation, by category or name (analysis/names.py).

A compile range is a host event of category ``compile`` or whose name is compile work (``is_compile``:
``<phase> (dynamo_timed)`` ranges, Dynamo/Inductor/AOTAutograd compile frames, the Neuron compiler), never one
of the compiled function's runtime wrappers. Phases, the attribution of a CPU-only trace and the compile
section all read the same spans from here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.intervals import union
from neurontrace.analysis.labels import per_distinct
from neurontrace.analysis.table_memo import per_table


def compile_mask(host: pa.Table) -> np.ndarray:
    """Per host event: is it compilation (computed once per distinct category and name, once per table;
    read-only)."""
    if host.num_rows == 0:
        return np.zeros(0, dtype=bool)
    return per_table(host, "compile_mask", lambda: _compile_mask(host))  # phases, attribution, compile: one table


def _compile_mask(host: pa.Table) -> np.ndarray:
    codes, keys = per_distinct([host["category"], host["name"]],
                               lambda c, n: c == "compile" or names.is_compile(n or ""))
    return np.asarray(keys, dtype=bool)[codes] if len(keys) else np.zeros(host.num_rows, dtype=bool)


def compile_spans(host: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The union of the compile ranges: sorted, disjoint ``(starts, ends)``."""
    return per_table(host, "compile_spans", lambda: _compile_spans(host))


def _compile_spans(host: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    mask = compile_mask(host)
    s = host["ts_ns"].to_numpy()[mask]
    return union(s, s + host["dur_ns"].to_numpy()[mask])


def inside(starts: np.ndarray, spans: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per time in ``starts``: does it fall inside one of the disjoint, sorted ``spans``."""
    us, ue = spans
    if not len(us):
        return np.zeros(len(starts), dtype=bool)
    i = np.searchsorted(us, starts, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(starts), dtype=bool)
    out[ok] = starts[ok] < ue[i[ok]]
    return out
