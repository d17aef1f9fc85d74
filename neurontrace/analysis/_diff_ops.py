"""Op-level tables for run comparison: what ran, how often and for how long, keyed by source.

:func:`op_table` groups one trace's events by ``(kind, unit, name, source)`` with one pyarrow
``group_by``; :func:`compare_ops` joins two such tables and classifies every row. No Python loop
runs per event: per-row work is done by Arrow kernels and NumPy, and Python runs once per distinct
value of a dictionary (categories, tracks, frames).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.stalls import frame_sources
from neurontrace.columns import matches
from neurontrace.trace import Trace

# Host categories compared op by op, and the kind each becomes. Python frames are left out (they are
# the source locations themselves), and so are step markers (their names carry the step number).
HOST_KINDS = {"framework_op": "op", "annotation": "annotation", "runtime": "runtime", "driver": "driver",
              "compile": "compile", "load": "load", "transfer": "transfer"}
# NeuronCore engine tracks: compute on them is an engine instruction, compared per engine and opcode.
ENGINE_TRACK = re.compile(r"^(tensor|vector|scalar|gpsimd|sync|pe|act|pool|dve|sp)\b|engine", re.IGNORECASE)
# GPU stream tracks say where work was queued, which changes from run to run: not part of the key.
STREAM_TRACK = re.compile(r"^(stream\b|\d+$)", re.IGNORECASE)
# Ranges that mark the profile itself rather than work (torch.profiler's whole-session range).
NOT_OPS = re.compile(r"^PyTorch Profiler \(\d+\)$")
KEYS = ("kind", "unit", "name", "source")
STATUSES = ("added", "removed", "slower", "faster", "unchanged")

OP_SCHEMA = pa.schema([
    pa.field("kind", pa.string()), pa.field("unit", pa.string()), pa.field("name", pa.string()),
    pa.field("source", pa.string()), pa.field("count", pa.int64()), pa.field("total_ns", pa.int64()),
])
COMPARED_SCHEMA = pa.schema([
    pa.field("status", pa.string()), pa.field("kind", pa.string()), pa.field("unit", pa.string()),
    pa.field("name", pa.string()), pa.field("source", pa.string()), pa.field("change_source", pa.string()),
    pa.field("matched_by", pa.string()),
    pa.field("baseline_count", pa.int64()), pa.field("change_count", pa.int64()),
    pa.field("baseline_ns", pa.int64()), pa.field("change_ns", pa.int64()),
    pa.field("delta_ns", pa.int64()), pa.field("delta_pct", pa.float64()),
])


def device_kind(category: str, track: str) -> tuple[str, str | None]:
    """(kind, unit) of a device event: engine instructions keep their engine, GPU streams are dropped."""
    if category == "compute":
        if ENGINE_TRACK.search(track):
            return "engine_op", track
        return "kernel", None
    if not track or STREAM_TRACK.search(track):
        return category, None
    return category, track


def op_table(trace: Trace) -> pa.Table:
    """One row per ``(kind, unit, name, source)``: how many events and their summed duration.

    ``kind`` is ``op`` (framework ops), ``annotation``, ``runtime``, ``driver``, ``compile``, ``load``,
    ``transfer`` for host events; ``kernel`` (GPU compute), ``engine_op`` (NeuronCore instruction, with
    the engine as ``unit``), ``collective``, ``memcpy``, ``memset``, ``dma`` (with the queue as
    ``unit``), ``sync_wait``, ``throttle``, ``execution`` for device events. ``source`` is
    ``file:line function`` of the innermost user frame (null when the trace has no stacks). Times
    are summed inclusive durations, over all devices and ranks of the trace.
    """
    parts = [_host_ops(trace), _device_ops(trace)]
    rows = pa.concat_tables([p for p in parts if p.num_rows] or [OP_SCHEMA.empty_table()])
    if rows.num_rows == 0:
        return OP_SCHEMA.empty_table()
    out = rows.group_by(list(KEYS), use_threads=False).aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    out = pa.table({"kind": out["kind"], "unit": out["unit"], "name": out["name"], "source": out["source"],
                    "count": out["dur_ns_count"].cast(pa.int64()), "total_ns": out["dur_ns_sum"].cast(pa.int64())},
                   schema=OP_SCHEMA)
    order = pc.sort_indices(out, [("total_ns", "descending"), ("name", "ascending")])
    return out.take(order)


def _host_ops(trace: Trace) -> pa.Table:
    host = trace.system_events
    cat = host["category"].cast(pa.string())
    keys = pa.array(list(HOST_KINDS), pa.string())
    idx = pc.index_in(cat, value_set=keys)
    keep = pc.and_(pc.is_valid(idx), pa.array(~matches(host["name"], NOT_OPS)))
    h = host.filter(keep)
    kind = pc.take(pa.array(list(HOST_KINDS.values()), pa.string()), idx.filter(keep))
    return _rows(trace, h, kind, pa.nulls(h.num_rows, pa.string()))


def _device_ops(trace: Trace) -> pa.Table:
    dev = trace.device_events
    if dev.num_rows == 0:
        return OP_SCHEMA.empty_table()
    cat = dev["category"].cast(pa.string())
    track = pc.fill_null(dev["track"].cast(pa.string()), "")
    combined = pc.dictionary_encode(pc.binary_join_element_wise(cat, track, "\x1f")).combine_chunks()
    kinds, units = [], []
    for value in combined.dictionary.to_pylist():  # once per distinct (category, track): a handful
        c, _, t = str(value).partition("\x1f")
        k, u = device_kind(c, t)
        kinds.append(k)
        units.append(u)
    kind = pc.take(pa.array(kinds, pa.string()), combined.indices)
    unit = pc.take(pa.array(units, pa.string()), combined.indices)
    return _rows(trace, dev, kind, unit)


def _rows(trace: Trace, t: pa.Table, kind: pa.Array, unit: pa.Array) -> pa.Table:
    return pa.table({"kind": kind, "unit": unit, "name": t["name"].cast(pa.string()),
                     "source": source_column(trace, t["frame_id"]), "dur_ns": t["dur_ns"]})


def source_column(trace: Trace, frame_ids: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``file:line function`` of each frame id's nearest user frame (null without a frame)."""
    sources = frame_sources(trace)  # once per frame, not per event
    if not sources:
        return pa.nulls(len(frame_ids), pa.string())
    ids = pa.array(list(sources), pa.int64())
    text = pa.array(list(sources.values()), pa.string())
    return pc.take(text, pc.index_in(frame_ids, value_set=ids))


def compare_ops(baseline: pa.Table, change: pa.Table, *, relative: float, absolute_ns: int) -> pa.Table:
    """Join two :func:`op_table` results and classify each row (docs/diff.md, "Ops").

    Rows match on ``(kind, unit, name, source)``. What is left unmatched on both sides with the
    same ``(kind, unit, name)`` and a single source on each side is matched by name (the code moved:
    ``matched_by`` says ``name`` and ``change_source`` gives the new place). A matched row is
    ``slower`` when its total time grew by more than ``max(relative * baseline, absolute_ns)``,
    ``faster`` when it shrank by more than that, ``unchanged`` otherwise; ``added`` and
    ``removed`` rows occur on one side only.
    """
    a, b = _keyed(baseline, "baseline"), _keyed(change, "change")
    joined = a.join(b, keys=list(KEYS), join_type="full outer", use_threads=False)
    only_a = joined.filter(pc.is_null(joined["change_count"]))
    only_b = joined.filter(pc.is_null(joined["baseline_count"]))
    both = joined.filter(pc.and_(pc.is_valid(joined["baseline_count"]), pc.is_valid(joined["change_count"])))
    moved, only_a, only_b = _match_moved(only_a, only_b)
    both = _with(both, change_source=pa.nulls(both.num_rows, pa.string()),
                 matched_by=pa.array(["name+source"] * both.num_rows, pa.string()))
    only_a = _with(only_a, change_source=pa.nulls(only_a.num_rows, pa.string()),
                   matched_by=pa.nulls(only_a.num_rows, pa.string()))
    only_b = _with(only_b, change_source=pa.nulls(only_b.num_rows, pa.string()),
                   matched_by=pa.nulls(only_b.num_rows, pa.string()))
    cols = [*KEYS, "change_source", "matched_by", "baseline_count", "change_count", "baseline_ns", "change_ns"]
    t = pa.concat_tables([x.select(cols) for x in (both, moved, only_a, only_b)], promote_options="permissive")
    return _classify(t, relative, absolute_ns)


def _keyed(t: pa.Table, side: str) -> pa.Table:
    """Null keys become "" (Arrow joins never match nulls), counts and times take the side's name."""
    cols = {k: pc.fill_null(t[k].cast(pa.string()), "") for k in KEYS}
    cols[f"{side}_count"] = t["count"].cast(pa.int64())
    cols[f"{side}_ns"] = t["total_ns"].cast(pa.int64())
    return pa.table(cols)


def _with(t: pa.Table, **cols: pa.Array) -> pa.Table:
    for name, col in cols.items():
        t = t.append_column(name, col)
    return t


def _match_moved(only_a: pa.Table, only_b: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Pair one-sided rows whose name is unique on both sides: the same op at a new source line."""
    name_keys = ["kind", "unit", "name"]
    if only_a.num_rows == 0 or only_b.num_rows == 0:
        return _empty_moved(), only_a, only_b

    def unique(t: pa.Table) -> pa.Table:
        counts = t.group_by(name_keys, use_threads=False).aggregate([("source", "count")])
        return counts.filter(pc.equal(counts["source_count"], 1)).select(name_keys)

    pairs = unique(only_a).join(unique(only_b), keys=name_keys, join_type="inner", use_threads=False)
    if pairs.num_rows == 0:
        return _empty_moved(), only_a, only_b
    a = only_a.select([*KEYS, "baseline_count", "baseline_ns"]).join(pairs, keys=name_keys, join_type="inner",
                                                                      use_threads=False)
    b = only_b.select([*KEYS, "change_count", "change_ns"]).rename_columns(
        ["kind", "unit", "name", "change_source", "change_count", "change_ns"])
    moved = a.join(b, keys=name_keys, join_type="inner", use_threads=False)
    moved = _with(moved, matched_by=pa.array(["name"] * moved.num_rows, pa.string()))
    paired = pc.binary_join_element_wise(pairs["kind"], pairs["unit"], pairs["name"], "\x1f")

    def rest(t: pa.Table) -> pa.Table:
        key = pc.binary_join_element_wise(t["kind"], t["unit"], t["name"], "\x1f")
        return t.filter(pc.invert(pc.is_in(key, value_set=paired)))

    return moved, rest(only_a), rest(only_b)


def _empty_moved() -> pa.Table:
    fields = [pa.field(k, pa.string()) for k in (*KEYS, "change_source", "matched_by")]
    fields += [pa.field(k, pa.int64()) for k in ("baseline_count", "change_count", "baseline_ns", "change_ns")]
    return pa.schema(fields).empty_table()


def _classify(t: pa.Table, relative: float, absolute_ns: int) -> pa.Table:
    ac = pc.fill_null(t["baseline_count"], 0).to_numpy()
    bc = pc.fill_null(t["change_count"], 0).to_numpy()
    an = pc.fill_null(t["baseline_ns"], 0).to_numpy()
    bn = pc.fill_null(t["change_ns"], 0).to_numpy()
    delta = bn - an
    limit = np.maximum(relative * an, absolute_ns)
    status = np.select([ac == 0, bc == 0, delta > limit, delta < -limit],
                       ["added", "removed", "slower", "faster"], "unchanged")
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(an > 0, 100.0 * delta / np.maximum(an, 1), np.nan)

    def blank_to_null(col: pa.ChunkedArray) -> pa.Array:
        s = col.combine_chunks()
        return pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)

    out = pa.table({
        "status": pa.array(status, pa.string()), "kind": t["kind"], "unit": blank_to_null(t["unit"]),
        "name": t["name"], "source": blank_to_null(t["source"]),
        "change_source": blank_to_null(t["change_source"]), "matched_by": t["matched_by"],
        "baseline_count": pa.array(ac, pa.int64()), "change_count": pa.array(bc, pa.int64()),
        "baseline_ns": pa.array(an, pa.int64()), "change_ns": pa.array(bn, pa.int64()),
        "delta_ns": pa.array(delta, pa.int64()), "delta_pct": pa.array(pct, pa.float64(), from_pandas=True),
    }, schema=COMPARED_SCHEMA)
    order = np.lexsort((out["name"].to_numpy(zero_copy_only=False).astype(str), -np.abs(delta)))
    return out.take(pa.array(order))
