"""Top stalls of one device merged over the time slices of a rank (``diagnose`` out of core, analysis/sliced.py).

A stall is a run of one non-compute cause inside a gap between compute (analysis/stalls.py). A slice sees
its part of the device's window only, so a run that a cut crosses comes out of each side as a run touching
the cut. Each slice therefore reports, beside its longest runs, its **edge runs**: the run starting at its
window's start and the run ending at its window's end, with the time each label holds in them. Merging
joins the edge runs that meet at a cut with the same cause (a run through a whole slice joins on both
sides), names each joined run after the label holding most of it (ties: the label seen first, as
stalls._runs_in does), and takes the longest ``top`` of all runs; the events explaining a joined run are
found again on the slices it spans (``describe``), so every stall equals the whole rank's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from neurontrace.analysis.intervals import NONE, sweep, within
from neurontrace.analysis.labels import Label
from neurontrace.analysis.stalls import MIN_STALL_NS, Stall, compute_gaps
from neurontrace.causes import CAUSES

LabelKey = tuple[str, str, int]  # (cause, detail, how many labels of that cause.detail come before it)
IDLE_KEY: LabelKey = ("idle", "unexplained", 0)


@dataclass
class EdgeRun:
    cause: str
    start: int
    end: int
    label_ns: dict[LabelKey, int] = field(default_factory=dict)  # time per label inside the run
    first_at: dict[LabelKey, int] = field(default_factory=dict)  # where each label first holds in it


@dataclass
class SliceStalls:
    """One slice's edge runs (None: compute, or nothing, at that edge); ``head is tail`` when one run fills it."""

    lo: int
    hi: int
    head: EdgeRun | None = None
    tail: EdgeRun | None = None


def label_keys(labels: list[Label]) -> list[LabelKey]:
    """The key of each label (in priority order), the same in every slice that has the label."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for lb in labels:
        n = seen.get((lb.cause, lb.detail), 0)
        seen[(lb.cause, lb.detail)] = n + 1
        out.append((lb.cause, lb.detail, n))
    return out


def edge_runs(win: tuple[int, int], labels: list[Label], unions: list[tuple[np.ndarray, np.ndarray]]
              ) -> SliceStalls:
    """The runs touching the two edges of a slice's part ``win`` of the window."""
    lo, hi = win
    out = SliceStalls(lo, hi)
    if hi <= lo:
        return out
    gs, ge = compute_gaps(win, labels, unions)
    keys = [*label_keys(labels), IDLE_KEY]
    if len(gs) and gs[0] == lo:
        out.head = _edge(int(gs[0]), int(ge[0]), labels, unions, keys, first=True)
    if len(gs) and ge[-1] == hi:
        out.tail = out.head if out.head is not None and out.head.end == hi else \
            _edge(int(gs[-1]), int(ge[-1]), labels, unions, keys, first=False)
    return out


def _edge(g0: int, g1: int, labels: list[Label], unions: list[tuple[np.ndarray, np.ndarray]],
          keys: list[LabelKey], *, first: bool) -> EdgeRun:
    lo, hi = np.array([g0], np.int64), np.array([g1], np.int64)
    cut = [within(us, ue, lo, hi) for us, ue in unions] + [(lo, hi)]  # the gap itself last: idle
    start, end, label = sweep((g0, g1), cut).runs()
    keep = label != NONE
    start, end, label = start[keep], end[keep], label[keep]
    cause = np.array([CAUSES.index(lb.cause) for lb in labels] + [CAUSES.index("idle")])[label]
    other = np.flatnonzero(cause != (cause[0] if first else cause[-1]))  # the leading (trailing) run: one cause
    pick = np.arange(other[0] if len(other) else len(cause)) if first else \
        np.arange(other[-1] + 1 if len(other) else 0, len(cause))
    run = EdgeRun(CAUSES[int(cause[pick[0]])], int(start[pick[0]]), int(end[pick[-1]]))
    for s, e, k in zip(start[pick].tolist(), end[pick].tolist(), label[pick].tolist(), strict=True):
        key = keys[k]
        run.label_ns[key] = run.label_ns.get(key, 0) + e - s
        run.first_at.setdefault(key, s)
    return run


@dataclass
class _Chain:
    members: list[tuple[int, EdgeRun]]

    @property
    def cause(self) -> str:
        return self.members[0][1].cause

    @property
    def start(self) -> int:
        return self.members[0][1].start

    @property
    def end(self) -> int:
        return self.members[-1][1].end

    def owner(self) -> LabelKey:
        """The label holding most of the run (a tie: the one holding first)."""
        ns: dict[LabelKey, int] = {}
        at: dict[LabelKey, int] = {}
        for _, r in self.members:
            for k, v in r.label_ns.items():
                ns[k] = ns.get(k, 0) + v
                at[k] = min(at.get(k, r.first_at[k]), r.first_at[k])
        return min(ns, key=lambda k: (-ns[k], at[k]))


# (slices it spans, start, end, cause, owner label) -> the stall, its events found on those slices
Describe = Callable[[list[int], int, int, str, LabelKey], Stall]


def merge_stalls(parts: list[tuple[list[Stall], SliceStalls]], top: int, describe: Describe) -> list[Stall]:
    """The ``top`` longest stalls of a device (longest first) from its slices' (longest runs, edge runs), in
    time order."""
    chains: list[_Chain] = []
    open_: _Chain | None = None
    for k, (_, ss) in enumerate(parts):
        joined = False
        if open_ is not None and ss.head is not None and ss.head.cause == open_.cause and ss.head.start == open_.end:
            open_.members.append((k, ss.head))
            joined = True
            if ss.head is ss.tail:
                continue  # the run fills the slice: it may go on into the next
        if open_ is not None:
            chains.append(open_)
            open_ = None
        if ss.tail is not None and not (joined and ss.tail is ss.head):
            open_ = _Chain([(k, ss.tail)])
    if open_ is not None:
        chains.append(open_)
    excluded = set()
    found: list[tuple[int, int, Stall | _Chain]] = []
    for c in chains:
        if len(c.members) < 2:
            continue  # not cut: the slice's own run, among its longest if it is long enough
        excluded |= {(k, r.start) for k, r in c.members}
        if c.end - c.start >= MIN_STALL_NS:
            found.append((c.end - c.start, c.start, c))
    for k, (stalls, _) in enumerate(parts):
        found += [(s.dur_ns, s.start_ns, s) for s in stalls if (k, s.start_ns) not in excluded]
    found.sort(key=lambda f: (-f[0], f[1]))
    out = []
    for _, _, s in found[:top]:
        out.append(s if isinstance(s, Stall) else
                   describe([k for k, _ in s.members], s.start, s.end, s.cause, s.owner()))
    return out
