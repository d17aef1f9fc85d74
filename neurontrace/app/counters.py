"""Counter tracks: the ``counters`` table (allocator memory, Neuron HBM/SBUF usage, host CPU
utilisation...) as one series per (name, field, where), binned to the timeline's pixels.

A counter sample holds until the next one (the allocator's total stays at its value between
events), so a pixel shows the highest value held during it: the largest sample inside it, or the
value carried in from before it. That keeps a short peak visible at any zoom, like the event bins
do. Pure numpy and Arrow; no Dash.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from neurontrace.app.lod import Window
from neurontrace.trace import Trace

MAX_SERIES = 16  # counter rows drawn at most
# Kineto's [memory] "Bytes" is each allocation's own size (a change, not a level); its running sum is
# "Total Allocated", which is drawn.
NOT_LEVELS = {("[memory]", "Bytes")}


@dataclass(frozen=True)
class Series:
    label: str  # "[memory] Total Allocated · cuda:0"
    unit: str  # "bytes", "percent", "" when unknown
    ts: np.ndarray  # int64 ns after the trace's first event, sorted
    values: np.ndarray  # float64
    peak: float


def series(trace: Trace, origin_ns: int) -> list[Series]:
    """The counter series of ``trace`` worth drawing (not constant zero), largest peak first per name."""
    c = trace.counters
    if c.num_rows == 0:
        return []
    cols = {k: _strings(c[k]) for k in ("name", "field", "unit", "device", "pid")}
    ts = c["ts_ns"].to_numpy() - origin_ns
    values = c["value"].to_numpy(zero_copy_only=False).astype(np.float64)
    keys = list(zip(cols["name"], cols["field"], cols["device"], cols["pid"], strict=True))
    order: dict[tuple[str, ...], list[int]] = {}
    for i, key in enumerate(keys):
        order.setdefault(key, []).append(i)
    out = []
    for (name, fld, device, pid), rows in order.items():
        if (name, fld) in NOT_LEVELS:
            continue
        idx = np.asarray(rows, dtype=np.int64)
        idx = idx[np.argsort(ts[idx], kind="stable")]
        v = values[idx]
        finite = np.isfinite(v)
        if not finite.any() or not np.any(v[finite] != 0):
            continue
        where = device or (f"pid {pid}" if pid else "")
        label = " ".join(p for p in (name, fld) if p) + (f" · {where}" if where else "")
        out.append(Series(label, cols["unit"][rows[0]], ts[idx][finite], v[finite], float(np.max(np.abs(v[finite])))))
    out.sort(key=lambda s: s.label)
    return out[:MAX_SERIES]


def binned(s: Series, w: Window) -> np.ndarray:
    """The highest value held in each pixel of ``w`` (NaN before the first sample)."""
    edges = w.t0 + np.arange(w.n_bins + 1) * w.bin_ns
    lo = np.searchsorted(s.ts, edges[:-1], side="left")
    hi = np.searchsorted(s.ts, edges[1:], side="left")
    carried = np.where(lo > 0, s.values[np.maximum(lo - 1, 0)], np.nan)  # the value held at the pixel's start
    out = carried.copy()
    has = hi > lo
    if has.any():
        padded = np.r_[s.values, -np.inf]  # reduceat needs every start index inside the array
        pairs = np.ravel(np.column_stack([lo[has], hi[has]]))
        inside = np.maximum.reduceat(padded, pairs)[::2]
        out[has] = np.fmax(inside, carried[has])
    return np.asarray(out, dtype=np.float64)


def _strings(col: pa.ChunkedArray) -> list[str]:
    arr = col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col
    return ["" if v is None else str(v) for v in arr.to_pylist()]
