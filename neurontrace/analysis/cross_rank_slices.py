"""The cross-rank section out of core: one rank's collectives found slice by slice (docs/scale.md).

A collective's row looks back to the end of the rank's previous collective (``before_start_ns``): the
device and host time busy since then and the work that took most of it (``before_top``). That stretch may
begin in an earlier slice. A slice (``Options.owned`` set) therefore keeps, for the collectives that start
in it, their rows with the look-back cut at the slice's start, the per-name totals behind ``before_top``
(not only the first ``TOP_WORK``: the merge adds the earlier slices' part), and its **tail**: the busy time
and per-name totals from the end of its last collective (or its start) to its end. :func:`merge_rows`
joins the slices in time order: it numbers the ordinals over the whole rank, finds each look-back's start
from the previous collectives of every slice, and completes a look-back begun in an earlier slice with the
tails of the slices it crosses. The rows are few next to the events (one per collective).

Why the tails suffice: a look-back reaching before its slice's start belongs to the slice's first
collective, and begins at ``G``, the latest end of the collectives before it (or the rank's first event).
Every earlier slice it crosses holds each collective that overlaps it, so its tail begins at ``G`` too.
Which events count is a whole-rank choice (device collectives if the rank has any, else host ones; kernel
names if it has compute kernels, else host ops): each slice keeps both, and the merge chooses.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.intervals import union
from neurontrace.columns import flat

TOP_WORK = 3  # names kept per collective of what the rank did before it
KINDS = ("device", "host")  # device collectives, else (a rank without any) host collectives
SOURCES = ("kernels", "host")  # the work named in before_top: compute kernels, else outermost host ops


def first_ts(*tables: pa.Table) -> int:
    firsts = [int(pc.min(t["ts_ns"]).as_py()) for t in tables if t.num_rows]
    return min(firsts) if firsts else 0


def busy(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    s = t["ts_ns"].to_numpy().astype(np.int64)
    return union(s, s + t["dur_ns"].to_numpy().astype(np.int64))


def covered(busy: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Nanoseconds of the disjoint sorted ``busy`` intervals inside each [lo[i], hi[i]) (any windows)."""
    s, e = busy
    if len(s) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    cum = np.r_[0, np.cumsum(e - s)]

    def upto(t: np.ndarray) -> np.ndarray:  # busy time before t
        i = np.searchsorted(s, t, side="right")
        part = np.where(i > 0, np.minimum(t, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0)
        return np.asarray(cum[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(part, 0))

    covered: np.ndarray = np.maximum(upto(hi) - upto(lo), 0).astype(np.int64)
    return covered


def outermost(t: pa.Table) -> pa.Table:
    """Host ops not nested in another op of the same thread (so nested time is not counted twice)."""
    if not t.num_rows:
        return t
    tid = flat(t["tid"]).cast(pa.string()).fill_null("")
    codes = pc.dictionary_encode(tid).indices.to_numpy().astype(np.int64)
    s = t["ts_ns"].to_numpy().astype(np.int64)
    e = s + t["dur_ns"].to_numpy().astype(np.int64)
    order = np.lexsort((-e, s, codes))
    c, eo = codes[order], e[order]
    nested = np.zeros(len(order), dtype=bool)
    starts_of_thread = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    for a, b in zip(starts_of_thread, np.r_[starts_of_thread[1:], len(order)], strict=True):
        reach = np.maximum.accumulate(eo[a:b])
        nested[a + 1:b] = reach[:-1] >= eo[a + 1:b]
    return t.take(pa.array(np.sort(order[~nested])))


def name_totals(t: pa.Table, lo: np.ndarray, hi: np.ndarray) -> list[dict[str, int]]:
    """Per window [lo[i], hi[i]), the time of each name of ``t`` inside it (names in order of first start)."""
    if not t.num_rows or not len(lo):
        return [{} for _ in lo]
    s = t["ts_ns"].to_numpy().astype(np.int64)
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = s + t["dur_ns"].to_numpy().astype(np.int64)[order]
    nm = np.asarray(t["name"].cast(pa.string()).to_pylist(), dtype=object)[order]
    longest = int((e - s).max())
    out = []
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        i, j = np.searchsorted(s, a - longest), np.searchsorted(s, b)
        part = np.minimum(e[i:j], b) - np.maximum(s[i:j], a)
        hit = part > 0
        totals: dict[str, int] = defaultdict(int)
        for n, ns in zip(nm[i:j][hit], part[hit].tolist(), strict=True):
            totals[str(n)] += int(ns)
        out.append(dict(totals))
    return out


def top_of(totals: dict[str, int]) -> list[list[Any]]:
    """The TOP_WORK names with the most time (ties in order of first start)."""
    return [[n, ns] for n, ns in sorted(totals.items(), key=lambda kv: -kv[1])[:TOP_WORK]]


def top_names(t: pa.Table, lo: np.ndarray, hi: np.ndarray) -> list[list[list[Any]]]:
    """Per window, the TOP_WORK names of ``t`` with the most time inside it."""
    return [top_of(totals) for totals in name_totals(t, lo, hi)]


@dataclass
class Tail:
    """A slice's work from the end of its last collective (or its start) to its end, per kind of collective."""

    from_ns: int
    device_ns: int
    host_ns: int
    names: dict[str, dict[str, int]]  # source -> name -> ns


@dataclass
class KindPart:
    """One kind of a slice's collectives: the rows of those starting in it (look-back cut at the slice's start;
    ``before_top`` holds the per-source name totals as JSON), and its tail."""

    rows: pa.Table
    tail: Tail


@dataclass
class SliceCarry:
    """What one slice of one rank keeps for the merge (per rank of the slice's trace)."""

    owned: tuple[int, int]
    first_ts: int  # the slice's first event (the rank's look-back start before its first collective)
    has_compute: bool  # the slice holds compute kernels (busy time): kernel names name the work
    kinds: dict[str, KindPart] = field(default_factory=dict)


def merge_rows(carries: list[SliceCarry], schema: pa.Schema) -> pa.Table:
    """One rank's collective rows (``schema``: cross_rank.RECORDS) from its slices' carries, in time order."""
    kind = "device" if any(c.kinds["device"].rows.num_rows for c in carries) else "host"
    source = "kernels" if kind == "device" and any(c.has_compute for c in carries) else "host"
    parts = [c.kinds[kind].rows for c in carries]
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    if not table.num_rows:
        return schema.empty_table()
    cols = {n: table[n].to_pylist() for n in schema.names}
    slice_of = np.repeat(np.arange(len(parts)), [p.num_rows for p in parts])
    starts = np.asarray(cols["start_ns"], dtype=np.int64)
    ends = np.asarray(cols["end_ns"], dtype=np.int64)
    prev_end = np.r_[min(c.first_ts for c in carries), np.maximum.accumulate(ends)[:-1]]
    before = np.minimum(prev_end, starts)
    counts: dict[tuple[Any, ...], int] = defaultdict(int)
    tops = []
    for i in range(table.num_rows):
        key = (cols["group"][i], cols["op"][i], cols["bytes"][i])
        cols["ordinal"][i] = counts[key]
        counts[key] += 1
        totals: dict[str, int] = {}
        k = int(slice_of[i])
        if before[i] < carries[k].owned[0]:  # the look-back began in earlier slices: add their tails
            for c in carries[:k]:
                if c.owned[1] > before[i]:
                    t = c.kinds[kind].tail
                    cols["before_device_ns"][i] += t.device_ns
                    cols["before_host_ns"][i] += t.host_ns
                    _add(totals, t.names[source])
        _add(totals, json.loads(cols["before_top"][i])[source])
        cols["before_start_ns"][i] = int(before[i])
        tops.append(json.dumps(top_of(totals)))
    cols["before_top"] = tops
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in schema}, schema=schema)


def _add(totals: dict[str, int], more: dict[str, int]) -> None:
    for name, ns in more.items():
        totals[name] = totals.get(name, 0) + ns
