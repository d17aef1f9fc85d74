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
# the same, given the charged fallback event ids of those slices (what labels the events there)
DescribeWith = Callable[[list[int], int, int, str, LabelKey, np.ndarray], Stall]
NO_IDS = np.zeros(0, np.int64)


@dataclass
class _Open:
    """A run joined across cuts so far, with the charged fallback event ids of the slices it spans."""

    chain: _Chain
    ids: list[np.ndarray]


class StallFold:
    """The top stalls of one device, its slices folded in time order (as :func:`merge_stalls`), holding only
    the ``top`` longest runs found so far, the run open at the last cut, and the previous slice's longest runs
    (whether the run at its end is cut is known at the next slice)."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.found: list[tuple[tuple[int, int, int, int, int], Stall | _Open]] = []
        self.open: _Open | None = None
        self.pending: tuple[int, list[Stall], set[int]] | None = None  # (slice, its runs, starts excluded)
        self.closed = 0

    def add(self, k: int, stalls: list[Stall], ss: SliceStalls, ids: np.ndarray = NO_IDS) -> None:
        """Slice ``k``'s longest runs and edge runs (and its charged fallback event ids)."""
        mine: set[int] = set()
        joined = False
        op = self.open
        if op is not None and ss.head is not None and ss.head.cause == op.chain.cause and \
                ss.head.start == op.chain.end:
            op.chain.members.append((k, ss.head))
            op.ids.append(ids)
            joined = True
            mine.add(ss.head.start)
            if self.pending is not None:  # the chain is cut now: its member in the slice before is excluded
                self.pending[2].update(r.start for j, r in op.chain.members if j == self.pending[0])
            if ss.head is ss.tail:
                self._settle(k, stalls, mine)
                return  # the run fills the slice: it may go on into the next
        if op is not None:
            self._close(op)
            self.open = None
        if ss.tail is not None and not (joined and ss.tail is ss.head):
            self.open = _Open(_Chain([(k, ss.tail)]), [ids])
        self._settle(k, stalls, mine)

    def _settle(self, k: int, stalls: list[Stall], mine: set[int]) -> None:
        """The previous slice's runs are final now; this slice's wait for the next."""
        if self.pending is not None:
            j, runs, excluded = self.pending
            for n, s in enumerate(runs):
                if s.start_ns not in excluded:
                    self._push((-s.dur_ns, s.start_ns, 1, j, n), s)
        self.pending = (k, stalls, mine)

    def _close(self, op: _Open) -> None:
        c = op.chain
        self.closed += 1
        if len(c.members) >= 2 and c.end - c.start >= MIN_STALL_NS:
            self._push((c.start - c.end, c.start, 0, self.closed, 0), op)

    def _push(self, key: tuple[int, int, int, int, int], item: Stall | _Open) -> None:
        self.found.append((key, item))
        if len(self.found) > 2 * self.top + 8:
            self.found = sorted(self.found, key=lambda f: f[0])[:self.top]

    def finish(self, describe: DescribeWith) -> list[Stall]:
        """The ``top`` longest stalls, longest first; a run joined across cuts described on its slices."""
        self._settle(-1, [], set())
        if self.open is not None:
            self._close(self.open)
            self.open = None
        out = []
        for _, s in sorted(self.found, key=lambda f: f[0])[:self.top]:
            if isinstance(s, Stall):
                out.append(s)
                continue
            c = s.chain
            ids = np.unique(np.concatenate(s.ids)) if s.ids else NO_IDS
            out.append(describe([k for k, _ in c.members], c.start, c.end, c.cause, c.owner(), ids))
        return out


def merge_stalls(parts: list[tuple[list[Stall], SliceStalls]], top: int, describe: Describe) -> list[Stall]:
    """The ``top`` longest stalls of a device (longest first) from its slices' (longest runs, edge runs), in
    time order."""
    fold = StallFold(top)
    for k, (stalls, ss) in enumerate(parts):
        fold.add(k, stalls, ss)
    return fold.finish(lambda members, s, e, c, owner, _: describe(members, s, e, c, owner))
