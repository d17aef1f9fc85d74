"""Explorer ``Flow`` rows (dependency edges between device rows) → ``flows`` (neuron.md §3.4, §3.7).

``Flow(in_table, in_id) → Flow(out_table, out_id)`` names rows by a lower-case table token and the
row's id. Each edge becomes one ``flows`` row of kind ``dependency``: ``flow_id`` keeps the edge as
written (``instruction:5->dma_block:9``), ``raw_category`` is ``dependency_type``, ``src_ts_ns`` the
end of the input row and ``dst_ts_ns`` the start of the output row; when only one end is found,
``gap_time`` (out.start - in.end) gives the time of the other.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema

from ._arrow import flat
from ._neuron_arrow import constant, dict_strings
from ._neuron_events import Context
from ._neuron_read import KNOWN_TABLES, SourceTable

# Flow's table tokens, for names that do not just lower-case a table name.
_TOKENS = {"dmablock": "DmaPacketAggregated", "dma": "DmaPacketAggregated", "dmaaggregated": "DmaPacketAggregated",
           "cc": "CcOp", "collective": "CcOp", "barrier": "CoreBarriers", "corebarrier": "CoreBarriers",
           "execution": "ExecutionInfo"}
_BY_LOWER = {t.lower(): t for t in KNOWN_TABLES}


def table_for(token: str | None) -> str | None:
    if token is None:
        return None
    key = token.lower().replace("_", "").replace(" ", "")
    return _TOKENS.get(key) or _BY_LOWER.get(key) or _BY_LOWER.get(key.rstrip("s"))


def referenced_tables(flow: SourceTable) -> set[str]:
    """The tables a Flow table points into (read from its two small token columns)."""
    cols = flow.present(["in_table", "out_table"])
    if not cols:
        return set()
    t = flow.read(cols, dictionary=cols)
    out: set[str] = set()
    for c in cols:
        for chunk in t[c].chunks:
            out |= {name for v in chunk.dictionary.to_pylist() if (name := table_for(v)) is not None}
    return out


class _Lookup:
    """Source id → event id for one table, vectorized (dense ids: arithmetic; else binary search)."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
        src = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        ev = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        self.dense = bool(len(src)) and bool(np.array_equal(src, np.arange(src[0], src[0] + len(src))))
        if self.dense:
            self.base, self.ev = int(src[0]), ev
        else:
            order = np.argsort(src, kind="stable")
            self.src, self.ev = src[order], ev[order]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        if len(self.ev) == 0:
            return np.full(len(ids), -1, np.int64)
        if self.dense:
            pos = ids - self.base
            ok = (pos >= 0) & (pos < len(self.ev))
            return np.where(ok, self.ev[np.clip(pos, 0, len(self.ev) - 1)], -1)
        pos = np.clip(np.searchsorted(self.src, ids), 0, len(self.src) - 1)
        return np.where(self.src[pos] == ids, self.ev[pos], -1)


def load_flows(ctx: Context, flow: SourceTable, device: pa.Table) -> None:
    n_total = flow.num_rows
    ctx.acct.events_read += n_total
    need = ["in_id", "out_id", "in_table", "out_table"]
    if any(not flow.has(c) for c in need):
        ctx.acct.skip("Flow: missing in/out columns", n_total)
        return
    lookups = {t: _Lookup(parts) for t, parts in ctx.id_maps.items()}
    base = ctx.first_device_id or 0
    ts = np.asarray(device["ts_ns"].to_numpy(), np.int64) if device.num_rows else np.zeros(0, np.int64)
    end = ts + (np.asarray(device["dur_ns"].to_numpy(), np.int64) if device.num_rows else 0)
    cols = flow.present([*need, "dependency_type", "gap_time"])
    for batch in flow.batches(cols, dictionary=("in_table", "out_table", "dependency_type")):
        src = _resolve(batch, "in", lookups)
        dst = _resolve(batch, "out", lookups)
        src_ts = _at(end, src, base)
        dst_ts = _at(ts, dst, base)
        if "gap_time" in batch.column_names:
            gap = flat(batch["gap_time"]).cast(pa.int64())
            src_ts = pc.coalesce(src_ts, pc.subtract(dst_ts, gap))
            dst_ts = pc.coalesce(dst_ts, pc.add(src_ts, gap))
        n = batch.num_rows
        text = [flat(batch[c]).cast(pa.string()) for c in need]
        flow_id = pc.binary_join_element_wise(
            pc.binary_join_element_wise(text[2], text[0], ":"), pc.binary_join_element_wise(text[3], text[1], ":"),
            "->")
        raw = dict_strings(batch["dependency_type"]) if "dependency_type" in batch.column_names else "Flow"
        ctx.flows.append(pa.table({
            "flow_id": flow_id, "kind": constant("dependency", schema.DICT_STRING, n),
            "raw_category": raw if not isinstance(raw, str) else constant(raw, schema.DICT_STRING, n),
            "src_event_id": pa.array(src, mask=src < 0), "dst_event_id": pa.array(dst, mask=dst < 0),
            "src_ts_ns": src_ts, "dst_ts_ns": dst_ts, "rank": constant(ctx.rank, pa.int32(), n),
        }))
        ctx.acct.keep("flows", n)


def _resolve(batch: pa.Table, side: str, lookups: dict[str, _Lookup]) -> np.ndarray:
    tokens = flat(batch[f"{side}_table"])
    if not pa.types.is_dictionary(tokens.type):
        tokens = pc.dictionary_encode(tokens)
    ids = np.asarray(pc.fill_null(flat(batch[f"{side}_id"]).cast(pa.int64()), -1).to_numpy(), np.int64)
    which = np.asarray(pc.fill_null(tokens.indices, -1).to_numpy(zero_copy_only=False), np.int64)
    out = np.full(len(ids), -1, np.int64)
    for k, token in enumerate(tokens.dictionary.to_pylist()):
        table = table_for(token)
        if table is None or table not in lookups:
            continue
        mask = which == k
        out[mask] = lookups[table](ids[mask])
    return out


def _at(values: np.ndarray, events: np.ndarray, base: int) -> pa.Array:
    pos = events - base
    ok = (events >= 0) & (pos >= 0) & (pos < len(values))
    got = values[np.clip(pos, 0, max(len(values) - 1, 0))] if len(values) else np.zeros(len(events), np.int64)
    return pa.array(got, pa.int64(), mask=~ok)
