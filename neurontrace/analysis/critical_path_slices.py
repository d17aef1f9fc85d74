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

import numpy as np

from neurontrace.analysis.critical_walk import (
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


def merge_slices(parts: list[CriticalPath | None]) -> CriticalPath | None:
    """The rank's value from its slices' values, in time order (see the module's docstring for what is exact)."""
    vals = [p for p in parts if p is not None]
    if not vals:
        return None
    if any(p.owned is None or p.pieces is None or p.window is None for p in vals):
        raise ValueError("critical_path.merge takes values computed with Options.owned")
    lo = min(p.window[0] for p in vals if p.window is not None)
    hi = max(p.window[1] for p in vals if p.window is not None)
    pieces = Pieces()
    seen: Counter[Label] = Counter()
    for p in vals:
        if p.pieces is not None:
            _join(pieces, p.pieces)
        seen.update(p.crossing)
    pieces.count -= sum(n - 1 for n in seen.values())  # an event crossing a cut is one event
    path = path_of(pieces, lo, hi)
    dropped: Counter[str] = Counter()
    for p in vals:
        dropped.update(p.dropped_edges)
    ranks = sorted({r for p in vals for r in p.ranks})
    cp = CriticalPath(path, [s for p in vals for s in p.steps], ranks, False, dropped_edges=dict(dropped),
                      small_kernels=small_kernels(path), rank=ranks[0] if ranks else None)
    cp.per_rank = [{"rank": cp.rank, "length_ns": path.length_ns, "breakdown_ns": path.breakdown_ns}]
    _merge_segments(cp, vals)
    cp.check()
    return cp


def _merge_segments(cp: CriticalPath, vals: list[CriticalPath]) -> None:
    """Each collective's segment from the slice its collective starts in, continued back through the slices
    before it where it reached its slice's start; the rank's last segment likewise."""
    def resolved(seg: Segment, k: int, idle: int = 0) -> Segment:
        pieces = Pieces()
        _join(pieces, seg.pieces)
        pieces.breakdown[KINDS.index("idle")] += idle
        while seg.stop is None and k > 0 and seg.begin_ns <= _start(vals[k]):
            k -= 1
            prev = vals[k].segments.get("")
            if prev is None:
                continue
            _join(pieces, prev.pieces)
            seg = prev
        return Segment(pieces, seg.stop, seg.begin_ns)

    for k, p in enumerate(vals):
        assert p.owned is not None
        for key, c in p.collectives.items():
            if p.owned[0] <= c.start_ns < p.owned[1] and key in p.segments:
                cp.collectives[key] = c
                cp.segments[key] = resolved(p.segments[key], k)
    last = next((k for k in range(len(vals) - 1, -1, -1) if "" in vals[k].segments), None)
    if last is not None:
        cp.segments[""] = resolved(vals[last].segments[""], last, _idle_after(vals, last))


def _start(p: CriticalPath) -> int:
    assert p.owned is not None and p.window is not None
    return min(max(p.window[0], p.owned[0]), p.window[1])


def _idle_after(vals: list[CriticalPath], last: int) -> int:
    """The window after the last slice holding work: idle, as after the last recorded point in memory."""
    p = vals[last]
    assert p.owned is not None and p.window is not None
    hi = max(v.window[1] for v in vals if v.window is not None)
    return max(0, hi - max(min(p.window[1], p.owned[1]), p.window[0]))
