"""What-if: re-time the dependency graph with some work made faster, and say how much of the gain the step keeps.

The model (docs/critical_path.md, "What-if"): every node happens as soon as all its in-edges allow,
``T[v] = max(T[u] + lag(u -> v))``; nodes nothing releases keep their recorded time. A binding edge's lag is the
recorded time between its nodes (an event's own time, a launch latency, an unexplained gap); an edge that did not
bind had slack and lags 0 (a synchronize returns as soon as the work it waits for is done, a woken thread resumes
at once). Sped-up work is its own time on the graph (its chain edges) divided by the factor; nothing else changes:
launch latencies, gaps and the work of other events stay as recorded, no new contention appears.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace import errors
from neurontrace.analysis import cross_rank, names
from neurontrace.analysis.critical_path import collective_keys, record_events
from neurontrace.analysis.depgraph import DepGraph, E, K, add_collectives, build
from neurontrace.trace import Trace

SPEC = re.compile(r"^(?P<op>.+)=(?P<factor>\d+(\.\d+)?)x?$")


def parse_speedup(text: str) -> tuple[str, float]:
    """``OP=2x`` -> ("OP", 2.0); a named error otherwise."""
    m = SPEC.match(text.strip())
    if not m or float(m.group("factor")) <= 0:
        raise errors.SpeedupError(f"--speedup expects OP=FACTOR (e.g. aten::mm=2x), got {text!r}")
    return m.group("op"), float(m.group("factor"))


def matched_events(g: DepGraph, op: str) -> np.ndarray:
    """Events named ``op``, device events of kernel class ``op``, and everything inside an annotation named ``op``
    (its host descendants on its thread and the device work they launched)."""
    nh, nd = g.n_host, g.dev.num_rows
    hn = np.asarray(g.host["name"].cast(pa.string()).to_pylist(), dtype=object)
    dn = np.asarray(g.dev["name"].cast(pa.string()).to_pylist(), dtype=object)
    hit = np.zeros(g.n_events, bool)
    hit[:nh] = hn == op
    if nd:
        hit[nh:nh + nd] = (dn == op) | (np.array([names.kernel_class(str(n)) for n in dn], dtype=object) == op)
    marks = np.flatnonzero(hit[:nh] & (g.ev_kind[:nh] == K["idle"]))
    for a in marks.tolist():
        inside = (g.ev_chain[:nh] == g.ev_chain[a]) & (g.ev_ts[:nh] >= g.ev_ts[a]) & (g.ev_end[:nh] <= g.ev_end[a])
        hit[:nh] |= inside
    launch = g.etype == E["launch"]
    launched = g.dst[launch] // 2
    hit[launched[hit[g.src[launch] // 2]]] = True
    return np.flatnonzero(hit)


def retime(g: DepGraph, factor: np.ndarray) -> np.ndarray:
    """New node times with each event's own time divided by ``factor[event]`` (1: unchanged)."""
    t = g.node_t()
    n = len(t)
    binding = np.zeros(len(g.src), bool)
    binding[g.binding[g.binding >= 0]] = True
    lag = np.where(binding, t[g.dst] - t[g.src], 0).astype(np.float64)
    own = (g.etype == E["chain"]) & (g.event >= 0)
    lag[own] = lag[own] / factor[g.event[own]]
    order = np.argsort(g.dst, kind="stable")
    dsts, srcs, lags = g.dst[order], g.src[order].tolist(), lag[order].tolist()
    starts = np.searchsorted(dsts, np.arange(n + 1)).tolist()
    outs: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(g.src.tolist(), g.dst.tolist(), strict=True):
        outs[s].append(d)
    indeg = np.bincount(g.dst, minlength=n).tolist()
    new = t.astype(np.float64).tolist()
    ready = deque(i for i in range(n) if indeg[i] == 0)
    done = 0
    while ready:
        v = ready.popleft()
        done += 1
        a, b = starts[v], starts[v + 1]
        if a < b:
            new[v] = max(new[srcs[j]] + lags[j] for j in range(a, b))
        for w in outs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    del done  # nodes on a cycle (equal-time edges both ways; solve() refuses backward ones) keep their times
    out: np.ndarray = np.rint(np.asarray(new)).astype(np.int64)
    return out


@dataclass
class WhatIf:
    op: str
    factor: float
    events: int  # events sped up
    own_ns: int  # their own time inside the window, as recorded
    old_ns: int  # the window as recorded
    new_ns: int  # the window re-timed
    steps: list[dict[str, Any]]  # {step, rank, old_ns, new_ns}

    @property
    def saved_ns(self) -> int:
        """What the speed-up saves the work itself: own time x (1 - 1/factor)."""
        return round(self.own_ns * (1 - 1 / self.factor))

    @property
    def gain_ns(self) -> int:
        return self.old_ns - self.new_ns

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "factor": self.factor, "events": self.events, "own_ns": self.own_ns,
                "saved_ns": self.saved_ns, "old_ns": self.old_ns, "new_ns": self.new_ns, "gain_ns": self.gain_ns,
                "kept": round(self.gain_ns / self.saved_ns, 4) if self.saved_ns else None, "steps": self.steps}


def what_if(g: DepGraph, op: str, factor: float, window: tuple[int, int]) -> WhatIf:
    """Re-time ``g`` (solved) with ``op`` ``factor`` times faster; the window's and each step's new length."""
    ev = matched_events(g, op)
    if not len(ev):
        raise errors.SpeedupError(f"--speedup {op}: no event, kernel class or annotation of that name in the trace")
    f = np.ones(g.n_events)
    f[ev] = factor
    new = retime(g, f)
    t = g.node_t()
    lo, hi = window
    own = (g.etype == E["chain"]) & (g.event >= 0) & np.isin(g.event, ev)
    a, b = np.clip(t[g.src[own]], lo, hi), np.clip(t[g.dst[own]], lo, hi)
    # an annotation's descendants' chain edges are attributed to them, not to it: count each edge once
    own_ns = int((b - a).sum())
    inside = np.flatnonzero((t <= hi) & (np.repeat(g.ev_chain, 2) >= 0))
    last = int(inside[np.argmax(t[inside])]) if len(inside) else -1
    old_ns = hi - lo
    new_ns = old_ns if last < 0 else int(old_ns - (t[last] - new[last]))
    steps = []
    cats = np.asarray(g.host["category"].cast(pa.string()).to_pylist(), dtype=object)
    for i in np.flatnonzero(cats == "step").tolist():
        if g.ev_end[i] <= lo or g.ev_ts[i] >= hi:
            continue
        steps.append({"step": g.name(i), "rank": int(g.ev_rank[i]) if g.ev_rank[i] >= 0 else None,
                      "old_ns": int(g.ev_end[i] - g.ev_ts[i]), "new_ns": int(new[2 * i + 1] - new[2 * i])})
    return WhatIf(op, factor, len(ev), own_ns, old_ns, new_ns, steps)


def job_graph(trace: Trace) -> DepGraph:
    """The solved dependency graph of a whole trace, ranks joined at their matched collectives."""
    g = build(trace)
    records = cross_rank.rank_collectives(trace)
    if records.num_rows and len({r for r in records["rank"].to_pylist() if r is not None}) > 1:
        keys = np.unique(np.asarray(collective_keys(records), dtype=object), return_inverse=True)[1]
        add_collectives(g, np.asarray(keys, np.int64), record_events(g, records))
    g.solve()
    return g


def default_window(g: DepGraph) -> tuple[int, int]:
    """The profiled steps' span (first start to last end, every rank), else the whole graph's."""
    cats = np.asarray(g.host["category"].cast(pa.string()).to_pylist(), dtype=object)
    steps = np.flatnonzero(cats == "step")
    if len(steps):
        return int(g.ev_ts[steps].min()), int(g.ev_end[steps].max())
    return int(g.ev_ts.min()), int(g.ev_end.max())
