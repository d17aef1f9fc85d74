"""Vectorized interval algebra: unions, and "which label wins here" sweeps over a window.

Every function works on numpy arrays of int64 nanoseconds and loops only over labels (a few
dozen at most), never over intervals.

    window      |--------------------------------------|
    compute         [====]        [==]
    memcpy        [=========]
    host op                           [=====]
    result      m m c c c c m m . . c c h h h . . . . . .   (c > m > h; '.' = unexplained)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NONE = -1


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to [lo, hi); empty ones dropped."""
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping or touching intervals (each end >= its start) into disjoint sorted ones."""
    if len(starts) == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    # With starts s in order, a new run begins at s[i] when s[i] > reach[i-1], the latest end among the
    # i intervals that start first, and reach at a run's last interval is the run's end. reach is the
    # running maximum of ends in start order, or just the ends sorted on their own: before a gap, the
    # i smallest ends are those of the i first intervals. Sorting starts and ends apart is cheaper
    # than an argsort and its gathers, and the stable sort (timsort) merges already sorted stretches
    # (a union of two unions) in linear time.
    if len(starts) > 1 and bool((starts[1:] >= starts[:-1]).all()):  # often already in time order
        s, reach = starts, np.maximum.accumulate(ends)
    else:
        s, reach = np.sort(starts, kind="stable"), np.sort(ends, kind="stable")
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], reach[last]


@dataclass
class Sweep:
    """The window cut into elementary segments, each owned by the highest-priority label covering it."""

    bounds: np.ndarray  # segment i is [bounds[i], bounds[i+1])
    label: np.ndarray  # owning label per segment, NONE where no label covers it

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.bounds)

    def time_per_label(self, n_labels: int) -> np.ndarray:
        """Nanoseconds per label, plus the unlabelled time as the last entry."""
        idx = np.where(self.label >= 0, self.label, n_labels)
        return np.bincount(idx, weights=self.lengths, minlength=n_labels + 1).astype(np.int64)

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Maximal runs of consecutive segments with one label: (start, end, label)."""
        if len(self.label) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        change = np.r_[True, self.label[1:] != self.label[:-1]]
        first = np.flatnonzero(change)
        last = np.r_[first[1:], len(self.label)]
        return self.bounds[first], self.bounds[last], self.label[first]


def sweep(window: tuple[int, int], labelled: list[tuple[np.ndarray, np.ndarray]]) -> Sweep:
    """Assign every nanosecond of ``window`` to the first label (in list order) covering it.

    ``labelled[k]`` holds the (starts, ends) of label k's intervals; earlier labels win overlaps.
    Cost: one sort of all boundaries, then one pass over the segments per non-empty label.
    """
    lo, hi = window
    # Union each label first: overlapping or back-to-back work collapses, so far fewer boundaries.
    clipped = [union(*clip(s, e, lo, hi)) for s, e in labelled]
    points = np.sort(np.concatenate([np.array([lo, hi], dtype=np.int64)] + [a for se in clipped for a in se]))
    bounds = points[np.r_[True, points[1:] != points[:-1]]]
    n_seg = len(bounds) - 1
    label = np.full(n_seg, NONE, dtype=np.int64)
    for k, (s, e) in enumerate(clipped):
        if len(s) == 0:
            continue
        delta = np.bincount(np.searchsorted(bounds, s), minlength=n_seg + 1)
        delta -= np.bincount(np.searchsorted(bounds, e), minlength=n_seg + 1)
        covered = np.cumsum(delta[:n_seg]) > 0
        label[covered & (label == NONE)] = k
    return Sweep(bounds, label)


def layered(window: tuple[int, int], labelled: list[tuple[np.ndarray, np.ndarray]]
            ) -> tuple[list[int], int, list[tuple[np.ndarray, np.ndarray]]]:
    """Like :func:`sweep`, but only the totals: (ns per label, ns covered by none, each label's union).

    Label k owns |U_k + C| - |C| (+ = union) where C is everything earlier labels cover, so the work is one
    merge of sorted disjoint lists per label instead of cutting the window into segments.
    """
    lo, hi = window
    cs = ce = np.zeros(0, dtype=np.int64)
    covered = 0
    owned: list[int] = []
    unions = []
    for s, e in labelled:
        us, ue = union(*clip(s, e, lo, hi))
        unions.append((us, ue))
        if len(cs) == 0:  # the first label with any time: nothing to merge with
            cs, ce = us, ue
        elif len(us):
            cs, ce = union(np.concatenate([cs, us]), np.concatenate([ce, ue]))
        now = int((ce - cs).sum())
        owned.append(now - covered)
        covered = now
    return owned, (hi - lo) - covered, unions


def gaps(window: tuple[int, int], starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the window not covered by the disjoint sorted intervals."""
    lo, hi = window
    s, e = clip(starts, ends, lo, hi)
    gs = np.r_[lo, e]
    ge = np.r_[s, hi]
    keep = ge > gs
    return gs[keep], ge[keep]


def within(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint sorted intervals cut to each of the disjoint sorted windows [lo[i], hi[i]).

    Binary search finds each window's overlapping intervals, no scan: the cost grows with the pieces
    returned, not with the intervals given.
    """
    first = np.searchsorted(ends, lo, side="right")
    count = np.maximum(np.searchsorted(starts, hi, side="left") - first, 0)
    # Positions first[i] .. first[i] + count[i] - 1 for every window i, in one array.
    window = np.repeat(np.arange(len(lo)), count)
    pos = np.arange(int(count.sum())) + np.repeat(first - (np.cumsum(count) - count), count)
    return np.maximum(starts[pos], lo[window]), np.minimum(ends[pos], hi[window])
