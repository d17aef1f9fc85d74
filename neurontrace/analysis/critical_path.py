"""The critical path: the chain of dependent work that sets the step time, per step, per rank and for a job.

From the end of a window (a step's end, the analysis window's end) the path follows each node's *binding*
in-edge (analysis/depgraph.py: the dependency that happened last) back to the window's start. Every edge's time is
the recorded time between its two nodes, so the parts add up exactly to the window: ``length_ns`` is the window,
``breakdown_ns`` splits it by kind (:data:`depgraph.KINDS`), ``events`` says which events the path ran through and
for how long (``on_path_ns``). A job's path (several ranks) crosses ranks at matched collectives: at a rank's
collective end it continues on the rank that arrived last, from that arrival (docs/critical_path.md).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import pyarrow as pa

from neurontrace.analysis import critical_path_slices, cross_rank
from neurontrace.analysis.contract import Context, Finding, FindingFamily, Section
from neurontrace.analysis.critical_path_slices import keep_slice, merge_slices
from neurontrace.analysis.critical_walk import (
    SMALL_KERNEL_NS,
    TOP_EVENTS,
    Collective,
    CriticalPath,
    Label,
    Path,
    Pieces,
    Segment,
    Walker,
    last_node,
    path_of,
    small_kernels,
    window_path,
)
from neurontrace.analysis.depgraph import KINDS, DepGraph, build
from neurontrace.columns import codes
from neurontrace.trace import Trace
from neurontrace.units import duration, share

__all__ = ["FINDINGS", "SECTION", "SMALL_KERNEL_NS", "TOP_EVENTS", "Collective", "CriticalPath", "Label", "Path",
           "Pieces", "Segment", "Walker", "analyse", "collective_keys", "combine", "findings", "job_path",
           "last_node", "merge", "path_event_ids", "record_events", "window_path"]


# -- the section -----------------------------------------------------------------------------------------

def analyse(trace: Trace, window: tuple[int, int] | None = None, frames: dict[int, str] | None = None,
            records: pa.Table | None = None, owned: tuple[int, int] | None = None) -> CriticalPath | None:
    """The critical path of one rank's trace: its window's, each step's, and the segments a job stitches.

    ``owned`` (a time slice, analysis/slices.py): the window's path inside the slice only, the steps that start
    in it, the dropped edges that end in it; ``merge`` (analysis/critical_path_slices.py) joins the slices."""
    g = build(trace, owned)
    if not g.n_events:
        return None
    g.solve(owned)
    w = Walker(g, frames)
    lo, hi = window if window is not None else (int(g.ev_ts.min()), int(g.ev_end.max()))
    whole = (lo, hi)
    if owned is not None:
        lo = min(max(lo, owned[0]), hi)
        hi = max(min(hi, owned[1]), lo)
    path = window_path(w, lo, hi)
    ranks = (np.flatnonzero(np.bincount(g.ev_rank[g.ev_rank >= 0])).tolist()  # ranks are small: no sort
             if (g.ev_rank >= 0).any() else [])
    steps = []
    host = g.host
    cat, cats = codes(host["category"])
    is_step = np.flatnonzero(cat == cats.index("step")) if "step" in cats else np.zeros(0, np.int64)
    for i in is_step.tolist():
        s, e = int(g.ev_ts[i]), int(g.ev_end[i])
        if e <= s or e <= whole[0] or s >= whole[1]:  # a step of no extent (a damaged record) has no path
            continue
        if owned is not None and not owned[0] <= s < owned[1]:  # a slice's steps: those starting in it
            continue
        edges, ns, _, _ = w.walk(2 * i + 1, s)
        p = path_of(w.pieces(edges, ns), s, e)
        steps.append({"step": g.name(i), "rank": int(g.ev_rank[i]) if g.ev_rank[i] >= 0 else None, **p.as_dict()})
    cp = CriticalPath(path, steps, ranks, False, dropped_edges=dict(g.dropped),
                      small_kernels=small_kernels(path), rank=ranks[0] if ranks else None)
    cp.per_rank = [{"rank": cp.rank, "length_ns": path.length_ns, "breakdown_ns": path.breakdown_ns}]
    if records is not None and records.num_rows:
        _segments(cp, w, records, lo, hi)
    if owned is not None:
        keep_slice(cp, w, lo, hi, owned, whole)
    return cp


def collective_keys(records: pa.Table) -> list[str]:
    """The match key of each cross_rank record (cross_rank.cross_rank's grouping, as text)."""
    out = []
    for group, seq, op, nbytes, ordinal in zip(*(records[c].to_pylist() for c in (
            "group", "seq", "op", "bytes", "ordinal")), strict=True):
        out.append(f"{group}|seq|{seq}" if seq is not None else f"{group}|{op}|{nbytes}|{ordinal}")
    return out


def record_events(g: DepGraph, records: pa.Table) -> np.ndarray:
    """The graph event of each cross_rank record (same rank, start and end), -1 when not in the graph."""
    coll = np.flatnonzero((g.ev_kind == KINDS.index("collective")) & g.live)
    at = {(int(g.ev_rank[i]), int(g.ev_ts[i]), int(g.ev_end[i])): int(i) for i in coll.tolist()}
    return np.array([at.get((-1 if r is None else int(r), int(s), int(e)), -1) for r, s, e in zip(
        records["rank"].to_pylist(), records["start_ns"].to_pylist(), records["end_ns"].to_pylist(),
        strict=True)], np.int64)


def _segments(cp: CriticalPath, w: Walker, records: pa.Table, lo: int, hi: int) -> None:
    keys = collective_keys(records)
    evs = record_events(w.g, records)
    ends = {2 * int(i) + 1: k for k, i in zip(keys, evs.tolist(), strict=True) if i >= 0}
    stop = set(ends)
    for k, i in zip(keys, evs.tolist(), strict=True):
        if i < 0:
            continue
        cp.collectives[k] = Collective(k, int(w.g.ev_ts[i]), int(w.g.ev_end[i]), w.label(i))
        edges, ns, node, reached = w.walk(2 * i, lo, stop)
        cp.segments[k] = Segment(w.pieces(edges, ns), ends.get(node), reached)
    node = last_node(w.g, hi)
    if node >= 0:
        edges, ns, end_node, reached = w.walk(node, lo, stop)
        pieces = w.pieces(edges, ns)
        pieces.breakdown[KINDS.index("idle")] += hi - w.t[node]  # after the last recorded point
        cp.segments[""] = Segment(pieces, ends.get(end_node), reached)


def job_path(parts: list[CriticalPath]) -> Path | None:
    """The job's path: from the rank that ends last, back through its work; at a collective's end, on to the rank
    that arrived last at it, from its arrival (the last arrival released everyone)."""
    ends = [(p.path.end_ns, p) for p in parts if "" in p.segments]
    if len(ends) < 2:
        return None
    hi, cur = max(ends, key=lambda x: (x[0], -(x[1].rank or 0)))
    lo = min(p.path.start_ns for p in parts)
    by_rank = {p.rank: p for p in parts}
    arrivals: dict[str, list[tuple[int, CriticalPath]]] = defaultdict(list)
    for p in parts:
        for k, c in p.collectives.items():
            arrivals[k].append((c.start_ns, p))
    pieces = Pieces()
    seg = cur.segments[""]
    seen: set[tuple[int | None, str]] = set()
    while True:
        pieces.merge(seg.pieces)
        stop = seg.stop
        if stop is None or (cur.rank, stop) in seen:
            break
        k = stop
        seen.add((cur.rank, k))
        mine = cur.collectives[k]
        last_t, last = max(arrivals[k], key=lambda x: (x[0], -(x[1].rank or 0)))
        if last is cur or last_t >= mine.end_ns:  # this rank arrived last: its whole collective is on the path
            last, last_t = cur, mine.start_ns
        pieces.add(mine.label, mine.end_ns - last_t, KINDS.index("collective"))
        cur = by_rank[last.rank]
        seg = cur.segments[k]
    return path_of(pieces, lo, hi)  # before where the walk began (window starts differ by rank): idle


def combine(parts: list[CriticalPath]) -> CriticalPath:
    """The job's value (the per-rank stitching data is used here and dropped: it is not part of the document)."""
    if len(parts) == 1:
        return replace(parts[0], segments={}, collectives={})
    job = job_path(parts)
    ranks = sorted({r for p in parts for r in p.ranks})
    steps = [s for p in parts for s in p.steps]
    per_rank = [r for p in parts for r in p.per_rank]
    dropped: dict[str, int] = defaultdict(int)
    for p in parts:
        for k, v in p.dropped_edges.items():
            dropped[k] += v
    if job is None:  # ranks without matched collectives: the longest rank's path stands for the job
        job = max((p.path for p in parts), key=lambda p: p.length_ns)
    return CriticalPath(job, steps, ranks, True, per_rank, dict(dropped), small_kernels(job))


def _compute(ctx: Context) -> CriticalPath | None:
    plan = ctx.options.plan  # a time slice: its devices' windows are their parts in it; the plan has the rank's
    wins = [dp.window.span for dp in plan.devices] if plan is not None else [d.window for d in ctx.devices]
    window = ctx.options.window or ((min(w[0] for w in wins), max(w[1] for w in wins)) if wins else None)
    part = ctx.sections.get(cross_rank.SECTION.key)
    records = part.records if isinstance(part, cross_rank.RankPart) else None
    cp = analyse(ctx.trace, window, ctx.frames, records, ctx.options.owned)
    if cp is not None:
        cp.check()
    return cp


def merge(parts: list[CriticalPath | None]) -> CriticalPath | None:
    """One rank's value from its time slices' (analysis/critical_path_slices.py)."""
    return merge_slices(parts)


def _text(cp: CriticalPath) -> list[str]:
    p = cp.path
    parts = ", ".join(f"{k} {duration(v)} ({share(v / p.length_ns)})" for k, v in sorted(
        p.breakdown_ns.items(), key=lambda kv: -kv[1]) if v > 0) if p.length_ns else ""
    where = f"the job's path across ranks {cp.ranks}" if cp.cross_rank else "the window's path"
    lines = [f"{where}: {duration(p.length_ns)} = {parts}"]
    for e in sorted(p.events, key=lambda e: -e["on_path_ns"])[:5]:
        rank = f"rank {e['rank']} " if e["rank"] is not None and cp.cross_rank else ""
        src = f" at {e['source']}" if e["source"] else ""
        lines.append(f"  {rank}{e['name']} ({e['kind']}): {duration(e['on_path_ns'])} on the path{src}")
    if cp.steps:
        lens = [s["length_ns"] for s in cp.steps]
        lines.append(f"{len(cp.steps)} steps, path median {duration(float(np.median(lens)))}")
    return lines


# -- findings ------------------------------------------------------------------------------------------------

SMALL_KERNEL_SHARE = 0.20  # short kernels on the path above this share of it: a chain of dependent launches
SYNC_SHARE = 0.10  # host/stream synchronisation on the path above this share of it
JOB_RANK_SHARE = 0.50  # one rank's own work above this share of the job's path: the job waits on it


def findings(ctx: Context) -> list[Finding]:
    cp: CriticalPath | None = ctx.sections.get(SECTION.key)
    if cp is None or cp.path.length_ns <= 0:
        return []
    p, out = cp.path, []
    small = cp.small_kernels
    if small.get("count", 0) >= 20 and small.get("ns", 0) >= SMALL_KERNEL_SHARE * p.length_ns:
        out.append(Finding(
            "path_small_kernels", "warning", f"A chain of {small['count']} short kernels sets the step time",
            f"{small['count']} kernels under {duration(SMALL_KERNEL_NS)} each are on the critical path for "
            f"{duration(small['ns'])} ({share(small['ns'] / p.length_ns)} of {duration(p.length_ns)})",
            "Each waits for the one before it: fuse them (torch.compile) or capture them in a CUDA graph; "
            "making any one of them faster barely moves the step.", None))
    sync = p.breakdown_ns.get("sync", 0)
    if sync >= SYNC_SHARE * p.length_ns:
        out.append(Finding(
            "path_sync", "warning", "Synchronisation is on the critical path",
            f"{duration(sync)} ({share(sync / p.length_ns)}) of the {duration(p.length_ns)} path is waiting for "
            "a synchronize, a blocking copy or another thread",
            "Remove the blocking call from the step (.item(), .cpu(), torch.cuda.synchronize(), a blocking "
            "copy) or move it after the next step's launches, so the streams keep running.", None))
    if cp.cross_rank and p.events:
        per_rank: dict[int, int] = defaultdict(int)
        for e in p.events:
            if e["rank"] is not None and e["kind"] not in ("collective", "collective_wait"):
                per_rank[e["rank"]] += e["on_path_ns"]
        if per_rank:
            r = max(per_rank, key=lambda k: (per_rank[k], -k))
            if per_rank[r] >= JOB_RANK_SHARE * p.length_ns:
                top = max((e for e in p.events if e["rank"] == r), key=lambda e: e["on_path_ns"])
                src = f" at {top['source']}" if top["source"] else ""
                out.append(Finding(
                    "job_waits_on", "warning", f"The job's critical path runs through rank {r}",
                    f"{duration(per_rank[r])} ({share(per_rank[r] / p.length_ns)}) of the job's "
                    f"{duration(p.length_ns)} path is rank {r}'s own work; its largest piece is {top['name']} "
                    f"({duration(top['on_path_ns'])} on the path){src}",
                    f"Every rank waits for rank {r}: shorten {top['name']} on rank {r} first; speeding up the "
                    "other ranks does not move the step.", None))
    return out


SECTION = Section("critical_path", "critical path", _compute, to_json=lambda v: v.as_dict(),
                  from_json=CriticalPath.from_dict, text=_text, combine=combine, merge=merge,
                  fold=critical_path_slices.fold, finish=critical_path_slices.finish)
FINDINGS = FindingFamily("critical path", findings)


def path_event_ids(g: DepGraph, window: tuple[int, int]) -> tuple[np.ndarray, dict[str, int]]:
    """Every event on the window's path (its ``event_id``, not only the TOP_EVENTS longest: what a viewer
    highlights) and the path's breakdown, of a solved graph (one rank, or ranks joined: ``whatif.job_graph``)."""
    lo, hi = window
    w = Walker(g)
    node = last_node(g, hi)
    if node < 0:
        return np.zeros(0, np.int64), dict.fromkeys(KINDS, 0) | {"idle": hi - lo}
    edges, ns, _, _ = w.walk(node, lo)
    ev = np.unique(g.event[edges][(g.event[edges] >= 0) & (ns > 0)])
    ev = ev[ev < g.n_host + g.dev.num_rows]
    ids = np.r_[g.host["event_id"].to_numpy(), g.dev["event_id"].to_numpy()].astype(np.int64)
    return ids[ev], path_of(w.pieces(edges, ns), lo, hi).breakdown_ns
