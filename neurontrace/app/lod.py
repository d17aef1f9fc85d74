"""Level of detail: what the timeline sends for a view window, as bins or as individual events.

Pure numpy (no Dash, no plotly), so it is tested and benchmarked on its own.

For a window ``[t0, t1)`` drawn ``n_bins`` pixels wide, each lane is sent one of two ways:

- **events**, when the lane holds few events in the window (at most ``per_lane`` and within the
  page-wide ``event_budget``): every event, so it can be hovered and clicked;
- **bins**, otherwise: one cell per pixel column holding how much of the pixel each category
  kept busy (0..1). Intervals are clipped to the window and spread over the bins they cover with
  ``np.bincount`` (first and last partial bins as weights, the full bins between through a
  difference array and one cumulative sum), so the cost is a handful of vectorized passes over the
  events of the window and never a Python loop per event.

Zoomed far out, the events of a whole lane fall in the window and binning them costs one pass over
millions of events. So lanes with many events (and each device's cause runs) also keep their
coverage over the whole trace at ``COARSE_BINS`` resolution as cumulative sums (:class:`Coarse`);
a view whose pixel spans at least ``COARSE_RATIO`` of those bins reads its bins from the sums by
interpolation (error under 1/``COARSE_RATIO`` of a pixel at each pixel edge), in time proportional
to the pixels, not the events.

Cells are then encoded for one plotly heatmap: ``0`` empty, else ``1 + category * LEVELS + level``
where ``level`` is the busy fraction in ``LEVELS`` steps (see ``palette.binned_colorscale``). A cell
touched by any event, even an instant or a 10 ns kernel, is drawn at least at the lightest level,
so sparse activity stays visible when zoomed out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from neurontrace.app.palette import LEVELS
from neurontrace.app.tracks import TrackIndex

EVENT_BUDGET = 4000  # individual events sent per view, all lanes together
MIN_WIDTH_NS = 100  # the narrowest window the timeline zooms to
COARSE_BINS = 16384  # resolution of the precomputed whole-trace coverage of big lanes
COARSE_MIN_EVENTS = 5_000  # lanes (and groups) with fewer events are binned from their events
COARSE_RATIO = 8  # a view uses the precomputed coverage when its pixel spans this many coarse bins
CHUNK = 1 << 17  # events binned at a time (:func:`busy`): 1 MiB per int64 temporary


@dataclass(frozen=True)
class Window:
    t0: int  # ns, relative to the index origin
    t1: int
    n_bins: int

    @property
    def bin_ns(self) -> float:
        return (self.t1 - self.t0) / self.n_bins


def window(t0: float, t1: float, n_bins: int) -> Window:
    """A valid window: ordered, at least ``MIN_WIDTH_NS`` wide, ``n_bins`` >= 1."""
    lo, hi = int(min(t0, t1)), int(max(t0, t1))
    if hi - lo < MIN_WIDTH_NS:
        mid = (lo + hi) // 2
        lo, hi = mid - MIN_WIDTH_NS // 2, mid + MIN_WIDTH_NS // 2
    return Window(lo, hi, max(1, int(n_bins)))


@dataclass
class LaneView:
    """What one query returns: per lane either its binned busy matrix or its events."""

    window: Window
    counts: dict[int, int]  # lane -> events overlapping the window
    binned: dict[int, np.ndarray] = field(default_factory=dict)  # lane -> (n_cat, n_bins) busy fraction
    touched: dict[int, np.ndarray] = field(default_factory=dict)  # lane -> (n_bins,) bool: any event
    event_lanes: list[int] = field(default_factory=list)
    event_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # positions in the index


def busy(start: np.ndarray, end: np.ndarray, cat: np.ndarray, w: Window, n_cat: int
         ) -> tuple[np.ndarray, np.ndarray]:
    """(busy fraction per category and bin, shape (n_cat, n_bins); bool per bin: touched by an event).

    Busy fractions of one category add up over overlapping events (a lane's events do not overlap,
    so per lane they stay <= 1). Many events are binned ``CHUNK`` at a time and the chunks' matrices
    summed: the dozen temporaries per event then stay small enough for the allocator to reuse, where a
    pass over millions of events at once maps (and faults in) fresh memory for each of them, several
    times the arithmetic on a machine slow to fault pages in (a 1 M-event lane: 175 to 928 ms at once,
    67 to 109 ms chunked). A bin that two chunks share gets its weights summed in another order:
    equal to within float rounding (1e-16 of a pixel).
    """
    if len(start) <= CHUNK:
        return _busy(start, end, cat, w, n_cat)
    matrix = np.zeros((n_cat, w.n_bins), dtype=np.float64)
    touched = np.zeros(w.n_bins, dtype=bool)
    for i in range(0, len(start), CHUNK):
        m, t = _busy(start[i:i + CHUNK], end[i:i + CHUNK], cat[i:i + CHUNK], w, n_cat)
        matrix += m
        touched |= t
    return matrix, touched


def _busy(start: np.ndarray, end: np.ndarray, cat: np.ndarray, w: Window, n_cat: int
          ) -> tuple[np.ndarray, np.ndarray]:
    n = w.n_bins
    bw = w.bin_ns
    x0 = (np.maximum(start, w.t0) - w.t0) / bw
    x1 = (np.minimum(end, w.t1) - w.t0) / bw
    inside = (x1 >= x0) & (x0 < n) & (x1 >= 0)
    touched = np.zeros(n, dtype=bool)
    first = np.minimum(np.floor(x0[inside]).astype(np.int64), n - 1)
    touched[first] = True
    keep = x1 > x0
    x0, x1, c = x0[keep], np.minimum(x1[keep], n), cat[keep].astype(np.int64)
    b0 = np.minimum(np.floor(x0).astype(np.int64), n - 1)
    b1 = np.maximum(np.minimum(np.ceil(x1).astype(np.int64) - 1, n - 1), b0)
    size = n_cat * n
    base = c * n
    same = b0 == b1
    out = np.zeros(size, dtype=np.float64)
    out += np.bincount(base[same] + b0[same], weights=(x1 - x0)[same], minlength=size)
    m = ~same
    if m.any():
        out += np.bincount(base[m] + b0[m], weights=(b0[m] + 1 - x0[m]), minlength=size)
        out += np.bincount(base[m] + b1[m], weights=(x1[m] - b1[m]), minlength=size)
        full = m & (b1 > b0 + 1)
        if full.any():
            stride = n + 1
            diff = np.bincount(c[full] * stride + b0[full] + 1, minlength=n_cat * stride)
            diff -= np.bincount(c[full] * stride + b1[full], minlength=n_cat * stride)
            out += np.cumsum(diff.reshape(n_cat, stride), axis=1)[:, :n].reshape(-1)
    return out.reshape(n_cat, n), touched


@dataclass
class Coarse:
    """Cumulative coverage of one set of intervals over [t0, t0 + n * bin_ns), per category present."""

    t0: int
    bin_ns: float
    n_cat: int  # categories of the index (rows of what :meth:`query` returns)
    cats: np.ndarray  # the categories present, one row of ``cum`` each
    cum: np.ndarray  # (len(cats), n + 1) float32: busy ns before each coarse bin edge
    count: np.ndarray  # (n + 1,) int64: events starting before each coarse bin edge

    def usable(self, w: Window) -> bool:
        return w.bin_ns >= COARSE_RATIO * self.bin_ns

    def query(self, w: Window) -> tuple[np.ndarray, np.ndarray]:
        """(busy fraction (n_cat, n_bins), touched (n_bins,)) for window ``w``, from the sums."""
        n = self.count.shape[0] - 1
        pos = np.clip((w.t0 + np.arange(w.n_bins + 1) * w.bin_ns - self.t0) / self.bin_ns, 0, n)
        i = np.minimum(np.floor(pos).astype(np.int64), n - 1)
        frac = pos - i
        lo_cum = self.cum[:, i].astype(np.float64)
        at = lo_cum + frac * (self.cum[:, i + 1] - lo_cum)
        matrix = np.zeros((self.n_cat, w.n_bins), dtype=np.float64)
        matrix[self.cats] = np.maximum(np.diff(at, axis=1) / w.bin_ns, 0.0)
        lo = np.floor(pos[:-1]).astype(np.int64)
        hi = np.ceil(pos[1:]).astype(np.int64)
        return matrix, self.count[hi] - self.count[lo] > 0


def coarse(start: np.ndarray, end: np.ndarray, cat: np.ndarray, t0: int, t1: int, n_cat: int,
           n: int = COARSE_BINS) -> Coarse:
    """The :class:`Coarse` coverage of intervals over [t0, t1)."""
    w = coarse_window(t0, t1, n)
    matrix, _touched = busy(start, end, cat, w, n_cat)
    return coarse_from(matrix, np.bincount(coarse_bin(start, w), minlength=n), w, n_cat)


def coarse_window(t0: int, t1: int, n: int = COARSE_BINS) -> Window:
    """The window of a :class:`Coarse` coverage of [t0, t1)."""
    return Window(int(t0), int(max(t1, t0 + n)), n)


def coarse_bin(start: np.ndarray, w: Window) -> np.ndarray:
    """The coarse bin each start falls in (clipped to the window)."""
    return np.clip(np.floor((start - w.t0) / w.bin_ns).astype(np.int64), 0, w.n_bins - 1)


def coarse_from(matrix: np.ndarray, starts_per_bin: np.ndarray, w: Window, n_cat: int) -> Coarse:
    """The :class:`Coarse` of a busy matrix over ``w`` (:func:`busy`) and the events starting in each bin."""
    cats = np.flatnonzero(matrix.any(axis=1))
    cum = np.zeros((len(cats), w.n_bins + 1), dtype=np.float32)
    cum[:, 1:] = np.cumsum(matrix[cats] * w.bin_ns, axis=1)
    count = np.zeros(w.n_bins + 1, dtype=np.int64)
    np.cumsum(starts_per_bin, out=count[1:])
    return Coarse(w.t0, w.bin_ns, n_cat, cats, cum, count)


def prepare(ix: TrackIndex, *, markers: Iterable[str] = ()) -> None:
    """Precompute :class:`Coarse` coverage: of every lane with many events (``ix.coarse``), and of
    every group with many events, ``markers`` categories left out (``ix.group_coarse``)."""
    n_cat = max(1, len(ix.categories))
    for lane in range(ix.n_lanes):
        a, b = int(ix.lane_offsets[lane]), int(ix.lane_offsets[lane + 1])
        if b - a >= COARSE_MIN_EVENTS:
            ix.coarse[lane] = coarse(ix.start[a:b], ix.end[a:b], ix.cat[a:b], 0, ix.span_ns, n_cat)
    drop = [ix.categories.index(c) for c in markers if c in ix.categories]
    for g in ix.groups:
        a, b = _group_span(ix, g.index)  # a group's lanes, hence its events, are contiguous
        if b - a < COARSE_MIN_EVENTS:
            continue
        keep = ~np.isin(ix.cat[a:b], drop)
        ix.group_coarse[g.index] = coarse(ix.start[a:b][keep], ix.end[a:b][keep], ix.cat[a:b][keep], 0,
                                          ix.span_ns, n_cat)


def _group_span(ix: TrackIndex, group: int) -> tuple[int, int]:
    tracks = [ix.tracks[t] for t in ix.groups[group].tracks]
    first = min(t.first_lane for t in tracks)
    last = max(t.first_lane + t.depth for t in tracks)
    return int(ix.lane_offsets[first]), int(ix.lane_offsets[last])


def group_busy(ix: TrackIndex, group: int, w: Window, *, markers: Iterable[str] = ()
               ) -> tuple[np.ndarray, np.ndarray]:
    """(busy per category and bin, touched) of every event of a group (a process or a device), all
    nesting levels summed, ``markers`` categories left out: what a group's header row shows."""
    n_cat = max(1, len(ix.categories))
    pre: Coarse | None = ix.group_coarse.get(group)
    if pre is not None and pre.usable(w):
        return pre.query(w)
    lanes = [lane for t in ix.groups[group].tracks
             for lane in range(ix.tracks[t].first_lane, ix.tracks[t].first_lane + ix.tracks[t].depth)]
    drop = [ix.categories.index(c) for c in markers if c in ix.categories]
    matrix = np.zeros((n_cat, w.n_bins), dtype=np.float64)
    for lane in lanes:  # each lane's slice of the window, CHUNK events at a time (see busy): no gather of them all
        lo, hi = ix.lane_slice(lane, w.t0, w.t1)
        for a in range(lo, hi, CHUNK):
            b = min(a + CHUNK, hi)
            start, end, cat = ix.start[a:b], ix.end[a:b], ix.cat[a:b]
            if drop:
                keep = ~np.isin(cat, drop)
                start, end, cat = start[keep], end[keep], cat[keep]
            matrix += _busy(start, end, cat, w, n_cat)[0]
    return matrix, matrix.sum(axis=0) > 0


def query(ix: TrackIndex, lanes: Sequence[int], w: Window, *, event_budget: int = EVENT_BUDGET,
          per_lane: int | None = None, always_bin: Iterable[int] = ()) -> LaneView:
    """Bins or events for each of ``lanes`` in window ``w``.

    A lane is sent as events when it holds at most ``per_lane`` events in the window (default: one
    per two pixels) and the lanes chosen so far, fewest events first, stay within ``event_budget``.
    Lanes in ``always_bin`` are binned whatever their count (and sent as events too if chosen).
    """
    per_lane = w.n_bins // 2 if per_lane is None else per_lane
    always_bin = list(always_bin)
    wanted = list(dict.fromkeys([*lanes, *always_bin]))
    slices = {lane: ix.lane_slice(lane, w.t0, w.t1) for lane in wanted}
    counts = {lane: hi - lo for lane, (lo, hi) in slices.items()}
    view = LaneView(w, counts)
    budget = event_budget
    shown = set(lanes)
    for lane in sorted(shown, key=lambda k: (counts[k], k)):
        if counts[lane] <= per_lane and counts[lane] <= budget:
            view.event_lanes.append(lane)
            budget -= counts[lane]
    as_events = set(view.event_lanes)
    needed = set(always_bin)
    n_cat = max(1, len(ix.categories))
    for lane in wanted:
        if lane in as_events and lane not in needed:
            continue
        pre = ix.coarse.get(lane)
        if pre is not None and pre.usable(w):
            view.binned[lane], view.touched[lane] = pre.query(w)
            continue
        lo, hi = slices[lane]
        view.binned[lane], view.touched[lane] = busy(ix.start[lo:hi], ix.end[lo:hi], ix.cat[lo:hi], w, n_cat)
    view.event_lanes.sort()
    if view.event_lanes:
        view.event_pos = np.concatenate([np.arange(*slices[lane], dtype=np.int64) for lane in view.event_lanes])
    return view


def encode(matrix: np.ndarray, touched: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Heatmap codes (uint8, 0 = empty) and busy percent (uint8) of a (n_cat, n_bins) busy matrix."""
    total = matrix.sum(axis=0)
    dominant = matrix.argmax(axis=0)
    level = np.minimum((np.minimum(total, 1.0) * LEVELS).astype(np.int64), LEVELS - 1)
    code = np.where(touched | (total > 0), 1 + dominant * LEVELS + level, 0)
    pct = np.rint(np.minimum(total, 1.0) * 100)
    return code.astype(np.uint8), pct.astype(np.uint8)


def runs_busy(starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, w: Window, n_labels: int,
              pre: Coarse | None = None) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Like :func:`busy` for disjoint sorted intervals (attribution runs), found by binary search.

    Returns (matrix, touched, (lo, hi)): the slice of runs overlapping the window. ``pre`` (their
    :class:`Coarse` coverage) answers zoomed-out windows without touching the runs.
    """
    lo = int(np.searchsorted(ends, w.t0, side="right"))
    hi = int(np.searchsorted(starts, w.t1, side="left"))
    hi = max(lo, hi)
    if pre is not None and pre.usable(w):
        matrix, touched = pre.query(w)
        return matrix, touched, (lo, hi)
    matrix, touched = busy(starts[lo:hi], ends[lo:hi], labels[lo:hi], w, n_labels)
    return matrix, touched, (lo, hi)
