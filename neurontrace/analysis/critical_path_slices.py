"""The critical path out of core: one rank's value from the values of its time slices (analysis/slices.py).

A slice (``Options.owned``) holds every event overlapping it and reports

- the **steps** that start in it, each walked back to its own start as in memory;
- the **window's path inside the slice**: from the slice's last recorded point back to its start, the time after
  that point on the edge of its thread or track that crosses the slice's end (what was open there), else idle;
- the **dropped edges** (going back in time) that end in it, and the **segments** a job's path is stitched
  from (several ranks): a segment reaching its slice's start continues with the previous slice's last one.

The slice's graph (depgraph.build with ``owned``) gives a thread idle since before the slice an idle gap from
the slice's start, so a wake that ended it is found as in memory. ``merge`` joins the slices in time order: the
window's length and breakdown always add up exactly (the conservation law), an event crossing a cut counts once.

**Exact when the cuts fall at step boundaries** (``ProfilerStep#N`` starts: diagnose DATASET's planner cuts
there): a step then lies in one slice with everything it depends on back to its start, and the whole rank's path
crosses each cut on the edge open on the slice's last recorded point (tests/test_sliced_sections.py: resnet50,
a real CPU run with steps and compiles). **Not exact at an arbitrary instant**: a step cut in two is walked
back from its end only to the cut (its earlier part is lost to the slice that holds it); the window's path may
cross the cut on another dependency (a kernel still queued, a launch from before the cut) than the one the
slice ends on; a thread whose idle gap spans the cut is woken only when the wake shows within the slice's part
of the gap (a shorter gap: a wake found is one the whole rank finds, not always the reverse); a cut where no
event crosses from the slice before (every thread idle, not even the profiler's own span open) leaves the
first gaps without a wake; and on a thread whose events do not nest (overlapping Python frames), the gap after
an end is given to the latest start at the depth left open (depgraph._chains), which in the whole rank may be an
event that ended before the cut (the gap idle) and in the slice the enclosing frame still open (cpu_op).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from neurontrace.analysis.critical_walk import (
    Collective,
    CriticalPath,
    Label,
    Pieces,
    Segment,
    Walker,
    last_node,
    path_of,
    small_kernels,
    with_tail,
)
from neurontrace.analysis.depgraph import KINDS


def keep_slice(cp: CriticalPath, w: Walker, lo: int, hi: int, owned: tuple[int, int],
               whole: tuple[int, int]) -> None:
    """What ``merge`` needs of a slice's value: its bounds, the window's path pieces inside it with every event
    that crosses the slice's edges (summed with the neighbours' share of it), and those events."""
    cp.owned, cp.window = owned, whole
    node = last_node(w.g, hi)
    if node < 0:
        cp.pieces = Pieces()
        return
    edges, ns, _, _ = w.walk(node, lo)
    edges, ns = with_tail(w, node, lo, hi, edges, ns)
    pieces = w.pieces(edges, ns)
    if len(edges):
        g = w.g
        ev = g.event[edges]
        on = np.unique(ev[(ev >= 0) & (ns > 0)])
        cross = on[(g.ev_ts[on] < lo) | (g.ev_end[on] > hi)]
        for i in cross.tolist():
            lab = w.label(int(i))
            cp.crossing.add(lab)
            if lab not in pieces.top:
                got = ns[ev == i]
                pieces.top[lab] = [int(np.rint(got.sum())), int(g.ev_kind[i])]
    cp.pieces = pieces


def _join(into: Pieces, part: Pieces) -> None:
    into.breakdown = [a + b for a, b in zip(into.breakdown, part.breakdown, strict=True)]
    into.count += part.count
    for lab, (n, kd) in part.top.items():
        into.top[lab] = [into.top.get(lab, [0, kd])[0] + n, kd]


class PathFold:
    """The running state of the critical path over one rank's slices, in time order: the pieces joined, the
    events crossing cuts, the steps (a row each in the JSON: O(steps), the output), the collectives'
    segments resolved as their slice is folded, and for the segments still to come, the latest slice's own
    segment resolved back (with the starts of the slices after it that hold none). A slice's value is not
    kept."""

    def __init__(self) -> None:
        self.window: tuple[int, int] | None = None
        self.pieces = Pieces()
        self.seen: Counter[Label] = Counter()
        self.dropped: Counter[str] = Counter()
        self.ranks: set[int] = set()
        self.steps: list[dict[str, Any]] = []
        self.collectives: dict[str, Collective] = {}
        self.segments: dict[str, Segment] = {}
        self.last: Segment | None = None  # the latest slice's own segment, resolved back
        self.last_bounds: tuple[tuple[int, int], tuple[int, int]] | None = None  # its (owned, window)
        self.skipped: list[int] = []  # the starts of the slices after it (none: no segment of their own)
        self.count = 0

    def add(self, p: CriticalPath | None) -> None:
        if p is None:
            return
        if p.owned is None or p.pieces is None or p.window is None:
            raise ValueError("critical_path.merge takes values computed with Options.owned")
        w = self.window
        self.window = p.window if w is None else (min(w[0], p.window[0]), max(w[1], p.window[1]))
        _join(self.pieces, p.pieces)
        self.seen.update(p.crossing)
        self.dropped.update(p.dropped_edges)
        self.ranks.update(p.ranks)
        self.steps += p.steps
        start = _start(p)
        for key, c in p.collectives.items():
            if p.owned[0] <= c.start_ns < p.owned[1] and key in p.segments:
                self.collectives[key] = c
                self.segments[key] = self._resolved(p.segments[key], start)
        own = p.segments.get("")
        if own is None:
            self.skipped.append(start)
        else:
            self.last, self.last_bounds, self.skipped = self._resolved(own, start), (p.owned, p.window), []
        self.count += 1

    def _resolved(self, seg: Segment, start: int) -> Segment:
        """``seg`` of the slice starting at ``start`` continued back through the slices before it while it reaches
        its slice's start (as _merge_segments did over the held values)."""
        pieces = Pieces()
        _join(pieces, seg.pieces)
        if seg.stop is not None or self.count == 0 or seg.begin_ns > start:
            return Segment(pieces, seg.stop, seg.begin_ns)
        for s in reversed(self.skipped):  # the slices between, holding no segment: the test moves back
            if seg.begin_ns > s:
                return Segment(pieces, seg.stop, seg.begin_ns)
        if self.last is None:
            return Segment(pieces, seg.stop, seg.begin_ns)
        _join(pieces, self.last.pieces)
        return Segment(pieces, self.last.stop, self.last.begin_ns)

    def finish(self) -> CriticalPath | None:
        if self.window is None:
            return None
        lo, hi = self.window
        pieces = self.pieces
        pieces.count -= sum(n - 1 for n in self.seen.values())  # an event crossing a cut is one event
        path = path_of(pieces, lo, hi)
        ranks = sorted(self.ranks)
        cp = CriticalPath(path, self.steps, ranks, False, dropped_edges=dict(self.dropped),
                          small_kernels=small_kernels(path), rank=ranks[0] if ranks else None)
        cp.per_rank = [{"rank": cp.rank, "length_ns": path.length_ns, "breakdown_ns": path.breakdown_ns}]
        cp.collectives, cp.segments = self.collectives, self.segments
        if self.last is not None and self.last_bounds is not None:
            (owned, window) = self.last_bounds
            seg = self.last
            tail = Pieces()
            _join(tail, seg.pieces)
            tail.breakdown[KINDS.index("idle")] += max(0, hi - max(min(window[1], owned[1]), window[0]))
            cp.segments[""] = Segment(tail, seg.stop, seg.begin_ns)
        cp.check()
        return cp


def fold(state: PathFold | None, part: CriticalPath | None) -> PathFold:
    """``state`` with one more slice's value folded in (the slices in time order)."""
    st = state or PathFold()
    st.add(part)
    return st


def finish(state: PathFold | None) -> CriticalPath | None:
    """The rank's value from the folded state (see the module's docstring for what is exact)."""
    return None if state is None else state.finish()


def merge_slices(parts: list[CriticalPath | None]) -> CriticalPath | None:
    """The rank's value from its slices' values, in time order (see the module's docstring for what is exact)."""
    state: PathFold | None = None
    for p in parts:
        state = fold(state, p)
    return finish(state)


def _start(p: CriticalPath) -> int:
    assert p.owned is not None and p.window is not None
    return min(max(p.window[0], p.owned[0]), p.window[1])
