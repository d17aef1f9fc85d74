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
from neurontrace.columns import flat, matches
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
KEYS = ("kind", "unit", "name", "source", "shapes")
LAYER = ("kind", "unit", "name", "source")  # the key without the shapes: one line of code, every layer it runs
# An op's recorded input shapes (torch.profiler record_shapes=True), as the args JSON writes them.
SHAPES = r'"Input Dims":\s*(?P<v>\[.*?\])\s*(?:,\s*"|\}\s*$)'
SHAPES_DIFFER = "name+source (shapes differ)"
STATUSES = ("added", "removed", "slower", "faster", "unchanged")

OP_SCHEMA = pa.schema([
    pa.field("kind", pa.string()), pa.field("unit", pa.string()), pa.field("name", pa.string()),
    pa.field("source", pa.string()), pa.field("shapes", pa.string()), pa.field("count", pa.int64()),
    pa.field("total_ns", pa.int64()),
])
COMPARED_SCHEMA = pa.schema([
    pa.field("status", pa.string()), pa.field("kind", pa.string()), pa.field("unit", pa.string()),
    pa.field("name", pa.string()), pa.field("source", pa.string()), pa.field("shapes", pa.string()),
    pa.field("change_source", pa.string()), pa.field("matched_by", pa.string()),
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
    """One row per ``(kind, unit, name, source, shapes)``: how many events and their summed duration.

    ``kind`` is ``op`` (framework ops), ``annotation``, ``runtime``, ``driver``, ``compile``, ``load``,
    ``transfer`` for host events; ``kernel`` (GPU compute), ``engine_op`` (NeuronCore instruction, with
    the engine as ``unit``), ``collective``, ``memcpy``, ``memset``, ``dma`` (with the queue as
    ``unit``), ``sync_wait``, ``throttle``, ``execution`` for device events. ``source`` is
    ``file:line function`` of the innermost user frame (null when the trace has no stacks). Times
    are summed inclusive durations, over all devices and ranks of the trace. ``shapes`` is a framework op's
    ``Input Dims`` when ``record_shapes`` was on (null otherwise, and for every other kind): the layers one line
    of code runs (``fc1``/``fc2``/``fc3`` through one ``forward``) are rows of their own.
    """
    parts = [_host_ops(trace), _device_ops(trace)]
    rows = pa.concat_tables([p for p in parts if p.num_rows] or [OP_SCHEMA.empty_table()])
    if rows.num_rows == 0:
        return OP_SCHEMA.empty_table()
    out = rows.group_by(list(KEYS), use_threads=False).aggregate([("dur_ns", "sum"), ("dur_ns", "count")])
    out = pa.table({"kind": out["kind"], "unit": out["unit"], "name": out["name"], "source": out["source"],
                    "shapes": out["shapes"], "count": out["dur_ns_count"].cast(pa.int64()), "total_ns": out["dur_ns_sum"].cast(pa.int64())},
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
    is_op = pc.fill_null(pc.equal(kind, "op"), False).combine_chunks() if isinstance(kind, pa.ChunkedArray) \
        else pc.fill_null(pc.equal(kind, "op"), False)
    found = pc.struct_field(pc.extract_regex(pc.fill_null(h["args"].filter(is_op), ""), SHAPES), "v")
    shapes = pc.replace_with_mask(pa.nulls(h.num_rows, pa.string()), is_op, flat(found))  # ops only: the args
    return _rows(trace, h, kind, pa.nulls(h.num_rows, pa.string()), shapes)  # of runtime calls are not read


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
    return _rows(trace, dev, kind, unit, pa.nulls(dev.num_rows, pa.string()))


def _rows(trace: Trace, t: pa.Table, kind: pa.Array, unit: pa.Array, shapes: pa.Array) -> pa.Table:
    return pa.table({"kind": kind, "unit": unit, "name": t["name"].cast(pa.string()),
                     "source": source_column(trace, t["frame_id"]), "shapes": shapes, "dur_ns": t["dur_ns"]})


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

    Rows match on ``(kind, unit, name, source, shapes)``: the layers one line runs are told apart by their input
    shapes (when only one side recorded shapes, neither side's count). What is left unmatched with the same
    ``(kind, unit, name, source)`` on both sides is summed over its shapes and matched so (``matched_by``
    ``name+source (shapes differ)``: shapes that change from run to run). What is left then with the same
    ``(kind, unit, name, shapes)`` and a single source on each side is matched by name (the code moved:
    ``matched_by`` says ``name`` and ``change_source`` gives the new place). A matched row is
    ``slower`` when its total time grew by more than ``max(relative * baseline, absolute_ns)``,
    ``faster`` when it shrank by more than that, ``unchanged`` otherwise; ``added`` and
    ``removed`` rows occur on one side only.
    """
    a, b = _keyed(baseline, "baseline"), _keyed(change, "change")
    if not (_has_shapes(a) and _has_shapes(b)):  # one side without record_shapes: shapes cannot match
        a, b = _without_shapes(a, "baseline"), _without_shapes(b, "change")
    both, only_a, only_b = _join(a, b, list(KEYS))
    both = _with(both, change_source=pa.nulls(both.num_rows, pa.string()),
                 matched_by=pa.array(["name+source"] * both.num_rows, pa.string()))
    folded, only_a, only_b = _match_folded(only_a, only_b)
    moved, only_a, only_b = _match_moved(only_a, only_b)
    only_a = _with(only_a, change_source=pa.nulls(only_a.num_rows, pa.string()),
                   matched_by=pa.nulls(only_a.num_rows, pa.string()))
    only_b = _with(only_b, change_source=pa.nulls(only_b.num_rows, pa.string()),
                   matched_by=pa.nulls(only_b.num_rows, pa.string()))
    cols = [*KEYS, "change_source", "matched_by", "baseline_count", "change_count", "baseline_ns", "change_ns"]
    t = pa.concat_tables([x.select(cols) for x in (both, folded, moved, only_a, only_b)], promote_options="permissive")
    return _classify(t, relative, absolute_ns)


def _join(a: pa.Table, b: pa.Table, keys: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(rows on both sides, baseline-only rows, change-only rows) of the full outer join on ``keys``."""
    if "shapes" not in keys:
        b = b.drop_columns(["shapes"])
    joined = a.join(b, keys=keys, join_type="full outer", use_threads=False)
    only_a = joined.filter(pc.is_null(joined["change_count"]))
    only_b = joined.filter(pc.is_null(joined["baseline_count"]))
    both = joined.filter(pc.and_(pc.is_valid(joined["baseline_count"]), pc.is_valid(joined["change_count"])))
    return both, only_a, only_b


def _has_shapes(t: pa.Table) -> bool:
    return bool(pc.any(pc.not_equal(t["shapes"], "")).as_py()) if t.num_rows else False


def _summed(t: pa.Table, side: str, keys: list[str]) -> pa.Table:
    """``t`` summed over the rows that share ``keys`` (the shapes column kept, "")."""
    g = t.group_by(keys, use_threads=False).aggregate([(f"{side}_count", "sum"), (f"{side}_ns", "sum")])
    g = g.rename_columns([*keys, f"{side}_count", f"{side}_ns"])
    if "shapes" not in keys:
        g = g.append_column("shapes", pa.array([""] * g.num_rows, pa.string()))
    return g.select([*KEYS, f"{side}_count", f"{side}_ns"])


def _without_shapes(t: pa.Table, side: str) -> pa.Table:
    return _summed(t, side, list(LAYER))


def _match_folded(only_a: pa.Table, only_b: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Pair the one-sided rows of one line of code summed over their shapes (shapes that changed between runs)."""
    if only_a.num_rows == 0 or only_b.num_rows == 0:
        return _empty_moved(), only_a, only_b
    both, _, _ = _join(_summed(only_a, "baseline", list(LAYER)), _summed(only_b, "change", list(LAYER)), list(LAYER))
    both = _with(both, change_source=pa.nulls(both.num_rows, pa.string()),
                 matched_by=pa.array([SHAPES_DIFFER] * both.num_rows, pa.string()))
    paired = pc.binary_join_element_wise(*(both[k] for k in LAYER), "\x1f")

    def rest(t: pa.Table) -> pa.Table:
        key = pc.binary_join_element_wise(*(t[k] for k in LAYER), "\x1f")
        return t.filter(pc.invert(pc.is_in(key, value_set=paired)))

    return both, rest(only_a), rest(only_b)


def _keyed(t: pa.Table, side: str) -> pa.Table:
    """Null keys become "" (Arrow joins never match nulls), counts and times take the side's name; a table
    without a ``shapes`` column (written before it existed) has none."""
    if "shapes" not in t.column_names:
        t = t.append_column("shapes", pa.nulls(t.num_rows, pa.string()))
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
    name_keys = ["kind", "unit", "name", "shapes"]
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
        ["kind", "unit", "name", "change_source", "shapes", "change_count", "change_ns"])
    moved = a.join(b, keys=name_keys, join_type="inner", use_threads=False)
    moved = _with(moved, matched_by=pa.array(["name"] * moved.num_rows, pa.string()))
    paired = pc.binary_join_element_wise(*(pairs[k] for k in name_keys), "\x1f")

    def rest(t: pa.Table) -> pa.Table:
        key = pc.binary_join_element_wise(*(t[k] for k in name_keys), "\x1f")
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
        "name": t["name"], "source": blank_to_null(t["source"]), "shapes": blank_to_null(t["shapes"]),
        "change_source": blank_to_null(t["change_source"]), "matched_by": t["matched_by"],
        "baseline_count": pa.array(ac, pa.int64()), "change_count": pa.array(bc, pa.int64()),
        "baseline_ns": pa.array(an, pa.int64()), "change_ns": pa.array(bn, pa.int64()),
        "delta_ns": pa.array(delta, pa.int64()), "delta_pct": pa.array(pct, pa.float64(), from_pandas=True),
    }, schema=COMPARED_SCHEMA)
    order = np.lexsort((out["name"].to_numpy(zero_copy_only=False).astype(str), -np.abs(delta)))
    return out.take(pa.array(order))
