"""Neuron memory → ``memory_events`` (formats/neuron.md §3: ``SystemProfileHbmUsage``, ``HostMemUsage``,
``SbufAllocation``).

Both are usage samples, not allocations: each ``SystemProfileHbmUsage`` row is one HBM's bytes in use at a
timestamp, ``total_bytes`` over all usage types and one ``<type>_bytes`` column per type (tensors, weights,
io, dram_spill, scratchpad, collectives, ...); each ``HostMemUsage`` row is the host's ``used_bytes``. They
become ``usage`` rows: the total as ``total_allocated_bytes``, each type as a row of its own with its
``category`` and ``bytes``, right after the total it belongs to. They are read from the counters the loader
already made of these tables (which keep the accounting), so the two stay equal.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._neuron_events import Context
from ._neuron_read import SourceTable

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


# SbufAllocation (formats/neuron.md §3.3 "Timeline events", §3.8; Explorer profile-schema-reference 7.4.0): "State
# Buffer memory occupancy periods showing which specific address ranges are occupied over time"; columns
# start_ts / end_ts [ns], start_address / end_address [B], partition, tensor_name, hlo_name, opcode, pcore_idx.
SBUF_COLUMNS = ("start_ts", "end_ts", "start_address", "end_address", "partition", "tensor_name", "hlo_name",
                "opcode", "pcore_idx")
PARTITION_SHIFT = 32  # addr = partition << 32 | start_address: a partition's ranges stay apart from another's


def sbuf_events(ctx: Context, table: SourceTable) -> pa.Table | None:
    """Each occupancy period as an ``alloc`` at its start and a ``free`` at its end on device
    ``<core>.sbuf`` (category ``sbuf``), its bytes the period's address range (``end_address -
    start_address``: the schema gives both in bytes and does not say more), its ``op`` the tensor (else the
    HLO, else the opcode) that occupies it. Periods without both times or a positive range are skipped,
    counted."""
    n = table.num_rows
    ctx.acct.events_read += n
    need = ("start_ts", "end_ts", "start_address", "end_address")
    if not all(table.has(c) for c in need):
        ctx.acct.skip(f"SbufAllocation: no {'/'.join(c for c in need if not table.has(c))} column", n)
        return None
    t = table.read(table.present(SBUF_COLUMNS))
    start, end = t["start_ts"].cast(pa.int64()), t["end_ts"].cast(pa.int64())
    lo, hi = t["start_address"].cast(pa.int64()), t["end_address"].cast(pa.int64())
    size = pc.subtract(hi, lo)
    ok = pc.fill_null(pc.and_(pc.and_(pc.is_valid(start), pc.greater_equal(end, start)),
                              pc.greater(size, 0)), False)
    kept = t.filter(ok)
    bad = n - kept.num_rows
    if bad:
        ctx.acct.skip("SbufAllocation: no start/end time, end before start, or no positive address range", bad)
    ctx.acct.keep("memory_events", kept.num_rows)
    if kept.num_rows == 0:
        return None
    start, end = kept["start_ts"].cast(pa.int64()), kept["end_ts"].cast(pa.int64())
    lo = kept["start_address"].cast(pa.int64())
    size = pc.subtract(kept["end_address"].cast(pa.int64()), lo)
    part = pc.fill_null(kept["partition"].cast(pa.int64()), 0) if "partition" in kept.column_names \
        else pa.array(np.zeros(kept.num_rows, np.int64))
    addr = pc.add(pc.shift_left(part, PARTITION_SHIFT), lo)
    op = pa.nulls(kept.num_rows, pa.string())
    for c in ("opcode", "hlo_name", "tensor_name"):  # the most specific name that is there wins
        if c in kept.column_names:
            op = pc.coalesce(kept[c].cast(pa.string()), op)
    device = pa.array([f"{ctx.device}.sbuf"] * kept.num_rows, pa.string())
    if ctx.multi_pcore and "pcore_idx" in kept.column_names:
        device = pc.binary_join_element_wise(f"{ctx.device}.pcore",
                                             pc.fill_null(kept["pcore_idx"].cast(pa.string()), "?"), ".sbuf", "")
    m = kept.num_rows

    def rows(ts: pa.ChunkedArray, action: str, nbytes: pa.ChunkedArray, order: int) -> pa.Table:
        return pa.table({"ts_ns": pc.add(ts, ctx.offset_ns), "device": device,
                         "rank": pa.array([ctx.rank] * m, pa.int32()), "action": pa.array([action] * m, pa.string()),
                         "addr": addr, "bytes": nbytes, "op": op, "category": pa.array(["sbuf"] * m, pa.string()),
                         "order": pa.array([order] * m, pa.int8())})

    both = pa.concat_tables([rows(start, "alloc", size, 1), rows(end, "free", pc.negate(size), 0)])
    # a range freed and another taken at the same instant: the free first, so the occupancy never counts both
    return both.sort_by([("ts_ns", "ascending"), ("order", "ascending")]).drop_columns(["order"])
