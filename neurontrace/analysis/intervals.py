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
    """Merge overlapping or touching intervals into disjoint sorted ones."""
    if len(starts) == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # A new run starts where an interval begins after everything before it has ended.
    new = np.r_[True, s[1:] > reach[:-1]]
    run = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s), dtype=np.int64)
    np.maximum.at(out_e, run, e)
    return out_s, out_e


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    s, e = union(starts, ends)
    return int((e - s).sum())


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
    clipped = [clip(s, e, lo, hi) for s, e in labelled]
    points = [np.array([lo, hi], dtype=np.int64)] + [a for se in clipped for a in se]
    bounds = np.unique(np.concatenate(points))
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
