"""Neuron memory usage → ``memory_events`` (formats/neuron.md §3, ``SystemProfileHbmUsage`` and ``HostMemUsage``).

Both are usage samples, not allocations: each ``SystemProfileHbmUsage`` row is one HBM's bytes in use at a
timestamp, ``total_bytes`` over all usage types and one ``<type>_bytes`` column per type (tensors, weights,
io, dram_spill, scratchpad, collectives, ...); each ``HostMemUsage`` row is the host's ``used_bytes``. They
become ``usage`` rows: the total as ``total_allocated_bytes``, each type as a row of its own with its
``category`` and ``bytes``, right after the total it belongs to. They are read from the counters the loader
already made of these tables (which keep the accounting), so the two stay equal.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_TOTALS = {("SystemProfileHbmUsage", "total_bytes"), ("HostMemUsage", "used_bytes")}


def memory_events(counters: pa.Table) -> pa.Table | None:
    """The usage rows of the memory counters (None when the profile has none)."""
    name = counters["name"].cast(pa.string())
    field = counters["field"].cast(pa.string())
    hbm = pc.and_(pc.equal(name, "SystemProfileHbmUsage"), pc.ends_with(field, "_bytes"))
    host = pc.and_(pc.equal(name, "HostMemUsage"), pc.equal(field, "used_bytes"))
    keep = pc.fill_null(pc.or_(hbm, host), False)
    t = counters.filter(keep)
    if t.num_rows == 0:
        return None
    fname, series = t["field"].cast(pa.string()), t["name"].cast(pa.string())
    is_total = pc.or_(pc.and_(pc.equal(series, "SystemProfileHbmUsage"), pc.equal(fname, "total_bytes")),
                      pc.and_(pc.equal(series, "HostMemUsage"), pc.equal(fname, "used_bytes")))
    value = pc.cast(pc.round(t["value"]), pa.int64(), safe=False)
    valid = pc.and_(pc.is_finite(t["value"]), pc.greater_equal(t["value"], 0))
    value = pc.if_else(valid, value, pa.scalar(None, pa.int64()))
    category = pc.if_else(is_total, pa.scalar(None, pa.string()), pc.utf8_slice_codeunits(fname, 0, -6))
    out = pa.table({
        "ts_ns": t["ts_ns"], "device": pc.fill_null(t["device"].cast(pa.string()), "neuron"), "rank": t["rank"],
        "action": pa.array(["usage"] * t.num_rows, pa.string()),
        "bytes": pc.if_else(is_total, pa.scalar(None, pa.int64()), value),
        "total_allocated_bytes": pc.if_else(is_total, value, pa.scalar(None, pa.int64())),
        "category": category,
        "order": pc.if_else(is_total, 0, 1),
    })
    return out.sort_by([("ts_ns", "ascending"), ("order", "ascending")]).drop_columns(["order"])
