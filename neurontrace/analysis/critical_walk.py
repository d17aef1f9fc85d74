"""The critical path's model and walk: a path's pieces and parts, and the backtracking of a solved dependency
graph's binding edges (analysis/depgraph.py) that analysis/critical_path.py runs per window, step and segment."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.depgraph import KINDS, DepGraph
from neurontrace.columns import codes

TOP_EVENTS = 50  # events kept per path in the JSON (the longest on the path); the counts keep the rest
Label = tuple[str, int | None, str | None, int, int, str | None]  # name, rank, device, start, dur, source


def _order(item: tuple[Label, int]) -> tuple[int, int, int, str, str, int, str]:
    """Longest on the path first, then a total order of labels: which of several events tied at the
    TOP_EVENTS-th place are shown must not depend on how the path was put together (whole or from slices)."""
    (name, rank, device, start, dur, source), n = item
    return (-n, start, -1 if rank is None else rank, name, device or "", dur, source or "")


def _keep_top(top: dict[Label, list[int]]) -> dict[Label, list[int]]:
    """The events as long on the path as the TOP_EVENTS-th longest, or longer (ties at that place all kept, so
    that any later choice among them sees every one)."""
    if len(top) <= TOP_EVENTS:
        return top
    cut = sorted((v[0] for v in top.values()), reverse=True)[TOP_EVENTS - 1]
    return {lab: v for lab, v in top.items() if v[0] >= cut}


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
            self.top = _keep_top(self.top)


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
        if len(tot) <= TOP_EVENTS:
            keep = np.arange(len(tot))
        else:  # ties at the TOP_EVENTS-th place all kept: path_of chooses among them in the labels' order
            keep = np.flatnonzero(tot >= -np.partition(-tot, TOP_EVENTS - 1)[TOP_EVENTS - 1])
        out.top = {self.label(int(uniq[j])): [int(tot[j]), int(kinds[j])] for j in keep.tolist()}
        return out


def _view(a: np.ndarray) -> memoryview:
    """An int64 array as a memoryview: indexing it gives Python ints, several times faster than numpy's."""
    return np.ascontiguousarray(a, dtype=np.int64).data


def _ints(t: pa.Table, col: str) -> np.ndarray:
    return np.asarray(pc.fill_null(t[col], -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def path_of(pieces: Pieces, lo: int, hi: int) -> Path:
    """A Path over [lo, hi] from its pieces; what they do not cover (before the first event) is idle."""
    breakdown = dict(zip(KINDS, pieces.breakdown, strict=True))
    breakdown["idle"] += (hi - lo) - sum(pieces.breakdown)
    top = sorted(((lab, n, kd) for lab, (n, kd) in pieces.top.items() if n > 0),
                 key=lambda x: _order((x[0], x[1])))[:TOP_EVENTS]
    top.sort(key=lambda x: (x[0][3], x[0][1] or 0))
    events = [{"name": lab[0], "rank": lab[1], "device": lab[2], "start_ns": lab[3], "dur_ns": lab[4],
               "on_path_ns": n, "source": lab[5], "kind": KINDS[kd]} for lab, n, kd in top]
    return Path(hi - lo, breakdown, events, pieces.count, lo, hi)


def last_node(g: DepGraph, hi: int) -> int:
    """The last node at or before ``hi`` (its latest end; -1 when none). Of several at that instant, one a chain
    edge leaves across ``hi`` (what ``with_tail`` continues on): timestamps of whole microseconds put a frame's
    start, and the start of the frame it opens, at one instant before a cut inside them."""
    t = g.node_t()
    ok = np.flatnonzero((t <= hi) & (np.repeat(g.ev_chain, 2) >= 0))
    if not len(ok):
        return -1
    last = ok[t[ok] == t[ok].max()]
    if len(last) > 1:
        src, dst = g.src[:g.n_chain], g.dst[:g.n_chain]
        across = src[np.isin(src, last) & (t[dst] > hi)]
        if len(across):
            return int(across[0])
    return int(last[0])


def window_path(w: Walker, lo: int, hi: int) -> Path:
    node = last_node(w.g, hi)
    if node < 0:
        return path_of(Pieces(), lo, hi)
    edges, ns, _, _ = w.walk(node, lo)
    edges, ns = with_tail(w, node, lo, hi, edges, ns)
    return path_of(w.pieces(edges, ns), lo, hi)  # after the last recorded point, if nothing was open: idle


def with_tail(w: Walker, node: int, lo: int, hi: int, edges: np.ndarray, ns: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """The walk with the time from its last recorded point to ``hi`` (the window's or a slice's end), on the
    edge of that point's thread or track that crosses ``hi``: what was still running there (a matmul the window
    ends in is on the path to its end, not idle; a slice's path crosses its cut on it, as the whole rank's
    does); where none crosses, that time stays idle."""
    g = w.g
    t = w.t_np
    if t[node] >= hi:
        return edges, ns
    out = np.flatnonzero((g.src[:g.n_chain] == node) & (t[g.dst[:g.n_chain]] > hi))
    if not len(out):
        return edges, ns
    return np.r_[out[:1], edges], np.r_[hi - max(int(t[node]), lo), ns]


def small_kernels(p: Path) -> dict[str, int]:
    small = [e for e in p.events if e["kind"] == "kernel" and e["dur_ns"] < SMALL_KERNEL_NS]
    return {"count": len(small), "ns": sum(e["on_path_ns"] for e in small)}
