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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import cross_rank
from neurontrace.analysis.contract import Context, Finding, FindingFamily, Section
from neurontrace.analysis.depgraph import KINDS, DepGraph, build
from neurontrace.columns import codes
from neurontrace.trace import Trace
from neurontrace.units import duration, share

TOP_EVENTS = 50  # events kept per path in the JSON (the longest on the path); the counts keep the rest
Label = tuple[str, int | None, str | None, int, int, str | None]  # name, rank, device, start, dur, source


@dataclass
class Path:
    """One path: its length, the length by kind (adding up to it exactly) and the events it ran through."""

    length_ns: int
    breakdown_ns: dict[str, int]
    events: list[dict[str, Any]]  # {name, rank, device, start_ns, dur_ns, on_path_ns, source, kind}
    event_count: int = 0  # events on the path (``events`` holds the TOP_EVENTS longest on it)
    start_ns: int = 0
    end_ns: int = 0

    def check(self) -> None:
        """The conservation law: the parts add up to the length, and no event is on the path longer than it."""
        total = sum(self.breakdown_ns.values())
        assert total == self.length_ns, f"breakdown {total} != length {self.length_ns}"
        assert set(self.breakdown_ns) == set(KINDS), sorted(self.breakdown_ns)
        assert all(v >= 0 for v in self.breakdown_ns.values()), self.breakdown_ns
        assert sum(e["on_path_ns"] for e in self.events) <= self.length_ns

    def as_dict(self) -> dict[str, Any]:
        return {"length_ns": self.length_ns, "breakdown_ns": dict(self.breakdown_ns), "events": self.events,
                "event_count": self.event_count, "start_ns": self.start_ns, "end_ns": self.end_ns}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Path:
        return cls(int(d["length_ns"]), {k: int(v) for k, v in d["breakdown_ns"].items()}, list(d["events"]),
                   int(d.get("event_count") or 0), int(d.get("start_ns") or 0), int(d.get("end_ns") or 0))


@dataclass
class Segment:
    """What one rank did before an anchor (a collective's arrival, or its window end), back to the previous
    collective end on its path (``stop``) or the window start: the pieces a job's path is stitched from."""

    pieces: Pieces
    stop: str | None  # the collective key the segment stopped at (its end), None at the window start
    begin_ns: int


@dataclass
class Collective:
    key: str
    start_ns: int
    end_ns: int
    label: Label


@dataclass
class CriticalPath:
    """The section's value: the window's path (the job's, across ranks, for several ranks) and each step's."""

    path: Path
    steps: list[dict[str, Any]]  # {step, rank, **Path.as_dict()}
    ranks: list[int]
    cross_rank: bool  # the path crosses ranks through matched collectives
    per_rank: list[dict[str, Any]] = field(default_factory=list)  # {rank, length_ns, breakdown_ns}
    dropped_edges: dict[str, int] = field(default_factory=dict)  # edges going back in time, by type
    small_kernels: dict[str, int] = field(default_factory=dict)  # {count, ns} of short kernels on the path
    # per rank, for the job's combine (not in the JSON): segments by anchor, collectives by key
    segments: dict[str, Segment] = field(default_factory=dict, repr=False)
    collectives: dict[str, Collective] = field(default_factory=dict, repr=False)
    rank: int | None = None
    # a time slice's value (Options.owned), for ``merge`` only: the slice, the whole window, the path's pieces
    # (the longest events and every event crossing the slice's edges) and those crossing events
    owned: tuple[int, int] | None = field(default=None, repr=False)
    window: tuple[int, int] | None = field(default=None, repr=False)
    pieces: Pieces | None = field(default=None, repr=False)
    crossing: set[Label] = field(default_factory=set, repr=False)

    def check(self) -> None:
        self.path.check()
        for s in self.steps:
            Path.from_dict(s).check()

    def as_dict(self) -> dict[str, Any]:
        return {**self.path.as_dict(), "cross_rank": self.cross_rank, "ranks": self.ranks,
                "steps": self.steps, "per_rank": self.per_rank, "dropped_edges": self.dropped_edges,
                "small_kernels": self.small_kernels, "rank": self.rank}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CriticalPath:
        return cls(Path.from_dict(d), list(d.get("steps") or []), list(d.get("ranks") or []),
                   bool(d.get("cross_rank")), list(d.get("per_rank") or []), dict(d.get("dropped_edges") or {}),
                   dict(d.get("small_kernels") or {}), rank=d.get("rank"))


# -- walking the graph -------------------------------------------------------------------------------

SMALL_KERNEL_NS = 10_000  # a kernel shorter than this is launch-latency sized


class Pieces:
    """What a walk ran through: the time by kind, how many events, and the TOP_EVENTS longest of them."""

    def __init__(self, breakdown: list[int] | None = None, count: int = 0,
                 top: dict[Label, list[int]] | None = None) -> None:
        self.breakdown = breakdown or [0] * len(KINDS)
        self.count = count
        self.top = top or {}

    def add(self, label: Label, ns: int, kind: int) -> None:
        self.breakdown[kind] += ns
        self.count += 1
        self.top[label] = [self.top.get(label, [0, kind])[0] + ns, kind]

    def merge(self, other: Pieces) -> None:
        self.breakdown = [a + b for a, b in zip(self.breakdown, other.breakdown, strict=True)]
        self.count += other.count
        for lab, (n, kd) in other.top.items():
            self.top[lab] = [self.top.get(lab, [0, kd])[0] + n, kd]
        if len(self.top) > 4 * TOP_EVENTS:
            self.top = dict(sorted(self.top.items(), key=lambda kv: -kv[1][0])[:TOP_EVENTS])


class Walker:
    """Backtracks binding edges of a solved graph (one Python loop over the path, reading memoryviews)."""

    def __init__(self, g: DepGraph, frames: dict[int, str] | None = None) -> None:
        self.g = g
        t = self.t_np = g.node_t()
        b = g.binding
        self.t, self.bedge, self.srcs = _view(t), _view(b), _view(g.src)
        # A run: consecutive chain edges each binding its end, so a walk crosses it in one step. It breaks where
        # the next edge back does not bind, where the chain changes, and at every collective's end (a stop).
        m = g.n_chain
        e = np.arange(m)
        binds = b[g.dst[:m]] == e
        coll_end = np.zeros(len(t), bool)
        coll_end[2 * np.flatnonzero(g.ev_kind == KINDS.index("collective")) + 1] = True
        joined = np.zeros(m, bool)
        if m > 1:
            joined[1:] = (g.dst[:m - 1] == g.src[1:m]) & binds[:-1] & ~coll_end[g.src[1:m]]
        self.run_start = _view(np.maximum.accumulate(np.where(joined, 0, e)) if m else np.zeros(0, np.int64))
        self.m = m
        self.frames = frames or {}
        self.fid = np.r_[_ints(g.host, "frame_id"), _ints(g.dev, "frame_id")]
        self._names: tuple[np.ndarray, list[Any], np.ndarray, list[Any], np.ndarray, list[Any]] | None = None

    def walk(self, node: int, lo: int, stop: set[int] | None = None) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(edges, ns on the path of each) from ``node`` back to time ``lo`` (or a ``stop`` node, or a node nothing
        released), the node it ended at and the time it reached."""
        runs: list[tuple[int, int]] = []
        t, bedge, run_start, m, srcs = self.t, self.bedge, self.run_start, self.m, self.srcs
        while True:
            e = bedge[node]
            if e < 0 or t[node] <= lo:
                break
            first = run_start[e] if e < m else e
            runs.append((first, e))
            node = srcs[first]
            if t[node] <= lo or (stop is not None and node in stop):
                break
        edges = np.concatenate([np.arange(a, b_ + 1)[::-1] for a, b_ in runs]) if runs else np.zeros(0, np.int64)
        g = self.g
        tn = self.t_np
        if len(edges):
            ts, td = tn[g.src[edges]], tn[g.dst[edges]]
            past = np.flatnonzero(ts < lo)
            if len(past):  # the walk went past lo inside the last run: cut it there
                cut = int(past[0])
                edges, ts, td = edges[:cut + 1], ts[:cut + 1], td[:cut + 1]
                node = int(g.src[edges[-1]])
            ns = td - np.maximum(ts, lo)
        else:
            ns = np.zeros(0, np.int64)
        return edges, ns, node, max(int(tn[node]), lo)

    def label(self, i: int) -> Label:
        g = self.g
        if self._names is None:
            self._names = (*codes(g.host["name"]), *codes(g.dev["name"]), *codes(g.dev["device"]))
        hn, hv, dn, dv, dd, ddv = self._names
        nh, nd = g.n_host, g.dev.num_rows
        if i < nh:
            name, device = str(hv[hn[i]]), "cpu"
        elif i < nh + nd:
            name, device = str(dv[dn[i - nh]]), str(ddv[dd[i - nh]])
        else:
            name, device = "collective release", None
        fid = int(self.fid[i]) if i < len(self.fid) else -1
        rank = int(g.ev_rank[i])
        return (name, None if rank < 0 else rank, device, int(g.ev_ts[i]), int(g.ev_end[i] - g.ev_ts[i]),
                self.frames.get(fid) if fid >= 0 else None)

    def pieces(self, edges: np.ndarray, ns: np.ndarray) -> Pieces:
        out = Pieces()
        if not len(edges):
            return out
        ev, kind = self.g.event[edges], self.g.kind[edges].astype(np.int64)
        # float64 sums of integers stay exact below 2^53 ns (104 days)
        out.breakdown = np.rint(np.bincount(kind, weights=ns, minlength=len(KINDS))).astype(np.int64).tolist()
        real = ev >= 0
        # Summed per distinct event of this path only: a bincount over raw event ids would be as long as the
        # trace up to the path's last event, for every step (quadratic in the trace's length).
        seen, inverse = np.unique(ev[real], return_inverse=True)
        per = np.bincount(inverse.ravel(), weights=ns[real], minlength=len(seen))
        has = per > 0
        uniq = seen[has]
        tot = np.rint(per[has]).astype(np.int64)
        kinds = self.g.ev_kind[uniq].astype(np.int64)
        out.count = len(uniq)
        keep = np.argsort(-tot, kind="stable")[:TOP_EVENTS] if len(tot) <= 4 * TOP_EVENTS else \
            np.argpartition(-tot, TOP_EVENTS)[:TOP_EVENTS]
        out.top = {self.label(int(uniq[j])): [int(tot[j]), int(kinds[j])] for j in keep.tolist()}
        return out


def _view(a: np.ndarray) -> memoryview:
    """An int64 array as a memoryview: indexing it gives Python ints, several times faster than numpy's."""
    return np.ascontiguousarray(a, dtype=np.int64).data


def _ints(t: pa.Table, col: str) -> np.ndarray:
    return np.asarray(pc.fill_null(t[col], -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def _path(pieces: Pieces, lo: int, hi: int) -> Path:
    """A Path over [lo, hi] from its pieces; what they do not cover (before the first event) is idle."""
    breakdown = dict(zip(KINDS, pieces.breakdown, strict=True))
    breakdown["idle"] += (hi - lo) - sum(pieces.breakdown)
    top = sorted(((lab, n, kd) for lab, (n, kd) in pieces.top.items() if n > 0), key=lambda x: -x[1])[:TOP_EVENTS]
    top.sort(key=lambda x: (x[0][3], x[0][1] or 0))
    events = [{"name": lab[0], "rank": lab[1], "device": lab[2], "start_ns": lab[3], "dur_ns": lab[4],
               "on_path_ns": n, "source": lab[5], "kind": KINDS[kd]} for lab, n, kd in top]
    return Path(hi - lo, breakdown, events, pieces.count, lo, hi)


def last_node(g: DepGraph, hi: int) -> int:
    """The last node at or before ``hi`` (its latest end; -1 when none)."""
    t = g.node_t()
    ok = np.flatnonzero((t <= hi) & (np.repeat(g.ev_chain, 2) >= 0))
    return int(ok[np.argmax(t[ok])]) if len(ok) else -1


def window_path(w: Walker, lo: int, hi: int) -> Path:
    node = last_node(w.g, hi)
    if node < 0:
        return _path(Pieces(), lo, hi)
    edges, ns, _, _ = w.walk(node, lo)
    return _path(w.pieces(edges, ns), lo, hi)  # after the last recorded point nothing ran: idle


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
    ranks = sorted({int(r) for r in np.unique(g.ev_rank) if r >= 0})
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
        p = _path(w.pieces(edges, ns), s, e)
        steps.append({"step": g.name(i), "rank": int(g.ev_rank[i]) if g.ev_rank[i] >= 0 else None, **p.as_dict()})
    cp = CriticalPath(path, steps, ranks, False, dropped_edges=dict(g.dropped),
                      small_kernels=_small_kernels(path), rank=ranks[0] if ranks else None)
    cp.per_rank = [{"rank": cp.rank, "length_ns": path.length_ns, "breakdown_ns": path.breakdown_ns}]
    if records is not None and records.num_rows:
        _segments(cp, w, records, lo, hi)
    if owned is not None:
        from neurontrace.analysis.critical_path_slices import keep_slice

        keep_slice(cp, w, lo, hi, owned, whole)
    return cp


def _small_kernels(p: Path) -> dict[str, int]:
    small = [e for e in p.events if e["kind"] == "kernel" and e["dur_ns"] < SMALL_KERNEL_NS]
    return {"count": len(small), "ns": sum(e["on_path_ns"] for e in small)}


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
    return _path(pieces, lo, hi)  # before where the walk began (window starts differ by rank): idle


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
    return CriticalPath(job, steps, ranks, True, per_rank, dict(dropped), _small_kernels(job))


def _compute(ctx: Context) -> CriticalPath | None:
    wins = [d.window for d in ctx.devices]
    window = ctx.options.window or ((min(w[0] for w in wins), max(w[1] for w in wins)) if wins else None)
    part = ctx.sections.get(cross_rank.SECTION.key)
    records = part.records if isinstance(part, cross_rank.RankPart) else None
    cp = analyse(ctx.trace, window, ctx.frames, records, ctx.options.owned)
    if cp is not None:
        cp.check()
    return cp


def merge(parts: list[CriticalPath | None]) -> CriticalPath | None:
    """One rank's value from its time slices' (analysis/critical_path_slices.py)."""
    from neurontrace.analysis.critical_path_slices import merge_slices

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
                  from_json=CriticalPath.from_dict, text=_text, combine=combine, merge=merge)
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
    return ids[ev], _path(w.pieces(edges, ns), lo, hi).breakdown_ns
