"""The track index: every event of a Trace on a lane, sorted so that a zoom is a binary search.

Tracks are where events ran: host → process → thread on the host side, device → stream / engine /
DMA queue on the device side. Events that nest on one track (a Python frame, the op inside it, the
runtime call inside that) are stacked by nesting depth, so a *lane* is one (track, depth) pair.

    track "thread 7712"   lane d0  [== train_step ===============================]
                          lane d1    [= forward =====]   [= backward ========]
                          lane d2      [aten::mm] [relu]    [mm_bwd]

Events are stored once, in numpy arrays sorted by (lane, start). Per lane the running maximum of
event ends is kept too, so the events of a lane overlapping ``[t0, t1)`` are the slice
``searchsorted(cummax_end, t0, "right") : searchsorted(start, t1)``, with no scan, even when events
of one lane overlap each other. Building the index costs a few sorts of plain int64 keys (a track or
lane number packed above a time), stable ones, which take a trace in nearly time order in about linear
time; nothing loops per event or per track.

Each thread is split into *layers* so that what a reader looks for first is not buried under what
wraps it: Python frames get a layer of their own (the viewer shows it on request, innermost levels
first), so the thread's own layer starts with its framework ops and runtime calls; on a device,
step and annotation ranges (a GPU-side ``ProfilerStep#N`` spanning every kernel) go to a *markers*
layer drawn as thin bars above the device's streams instead of a lane pushing the kernels down.
A track is one (thread or stream, layer) pair. Tracks holding only zero-length events (a lone
"Record Window End" instant) are kept in the index but marked ``empty``; the timeline hides them.

Times are nanoseconds relative to ``origin_ns`` (the earliest event), so they fit a JavaScript
number exactly for traces of up to about 104 days.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.app.compile_view import with_compile
from neurontrace.app.palette import CATEGORIES
from neurontrace.columns import codes, row_codes
from neurontrace.trace import Trace

HOST = "host"
DEVICE = "device"
SYSTEM_TABLE, DEVICE_TABLE = 0, 1
# Device tracks are ordered by what mostly runs on them: whole executions, compute engines and
# streams, collectives, data movement, waits, the rest.
_DEVICE_TRACK_ORDER = ("execution", "compute", "collective", "memcpy", "dma", "memset", "sync_wait")
WORK, PYTHON, MARKERS = "work", "python", "markers"  # a track's layer
_LAYER_ORDER = (MARKERS, PYTHON, None)  # top to bottom within a thread (None: the work layer)
MARKER_LAYER_CATEGORIES = ("step", "annotation")  # device-side ranges drawn as thin markers


@dataclass(frozen=True)
class Track:
    index: int
    side: str  # HOST or DEVICE
    group: int  # index into TrackIndex.groups
    label: str
    n_events: int
    depth: int  # number of lanes (deepest nesting level + 1)
    first_lane: int  # lane id of depth 0; depth d is first_lane + d
    layer: str = WORK  # WORK, PYTHON (a thread's Python frames) or MARKERS (device steps, annotations)
    empty: bool = False  # only zero-length events: not drawn


@dataclass(frozen=True)
class Group:
    """A process (host side) or a device (device side): the unit that collapses in the viewer."""

    index: int
    side: str
    key: str  # stable id used by the page ("host:<host>:<pid>", "device:<rank>:<device>")
    label: str
    tracks: tuple[int, ...]
    device: str | None = None  # the device name, for device groups
    rank: int | None = None


@dataclass
class TrackIndex:
    origin_ns: int
    span_ns: int
    # per event, sorted by (lane, start)
    start: np.ndarray  # int64 ns relative to origin
    end: np.ndarray  # int64
    cat: np.ndarray  # int16, index into categories
    name: np.ndarray  # int32, index into names
    event_id: np.ndarray  # int64
    table: np.ndarray  # int8, SYSTEM_TABLE or DEVICE_TABLE
    row: np.ndarray  # int64, row in that table
    # per lane
    lane_offsets: np.ndarray  # int64, n_lanes + 1
    lane_track: np.ndarray  # int32
    lane_depth: np.ndarray  # int32
    cummax_end: np.ndarray  # int64, running max of end within each lane (per event)
    tracks: list[Track]
    groups: list[Group]
    names: np.ndarray  # object: the event names
    categories: list[str]  # the categories present, in palette order (cat codes index this)
    coarse: dict[int, Any] = field(default_factory=dict)  # lane -> lod.Coarse, filled by lod.prepare
    group_coarse: dict[int, Any] = field(default_factory=dict)  # group -> lod.Coarse (header rows)
    _ids_sorted: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    _id_pos: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n_events(self) -> int:
        return len(self.start)

    @property
    def n_lanes(self) -> int:
        return len(self.lane_track)

    def lane_slice(self, lane: int, t0: int, t1: int) -> tuple[int, int]:
        """Positions [lo, hi) of the events of ``lane`` that overlap [t0, t1) (instants at t0 included)."""
        a, b = int(self.lane_offsets[lane]), int(self.lane_offsets[lane + 1])
        lo = a + int(np.searchsorted(self.cummax_end[a:b], t0, side="left"))
        hi = a + int(np.searchsorted(self.start[a:b], t1, side="left"))
        return lo, max(lo, hi)

    def position(self, event_id: int) -> int | None:
        """Where the event with this id sits in the sorted arrays (None if not indexed)."""
        i = int(np.searchsorted(self._ids_sorted, event_id))
        if i < len(self._ids_sorted) and self._ids_sorted[i] == event_id:
            return int(self._id_pos[i])
        return None

    def positions(self, event_ids: np.ndarray) -> np.ndarray:
        """:meth:`position` of many ids at once; the ids not indexed are left out."""
        if not len(self._ids_sorted):
            return np.zeros(0, dtype=np.int64)
        ids = np.asarray(event_ids, dtype=np.int64)
        i = np.minimum(np.searchsorted(self._ids_sorted, ids), len(self._ids_sorted) - 1)
        return np.asarray(self._id_pos[i[self._ids_sorted[i] == ids]], dtype=np.int64)

    def lane_of(self, pos: int) -> int:
        return int(np.searchsorted(self.lane_offsets, pos, side="right") - 1)


def build(trace: Trace) -> TrackIndex:
    """Index every event of both event tables of ``trace``."""
    process_names = kineto_process_names(trace)
    parts = [_columns(trace.system_events, SYSTEM_TABLE), _columns(trace.device_events, DEVICE_TABLE)]
    parts[1]["name"] = parts[1]["name"] + len(parts[0]["names"])  # one name list for both tables
    parts[1]["track_key"] = parts[1]["track_key"] + len(parts[0]["tracks"])
    cols = {k: np.concatenate([p[k] for p in parts]) for k in ("ts", "dur", "cat", "name", "event_id", "table",
                                                              "row", "track_key")}
    names = np.array(parts[0]["names"] + parts[1]["names"], dtype=object)
    track_info = parts[0]["tracks"] + parts[1]["tracks"]  # one entry per distinct track key, in key order
    n = len(cols["ts"])
    origin = int(cols["ts"].min()) if n else 0
    start = cols["ts"] - origin
    end = start + np.maximum(cols["dur"], 0)
    span = int(end.max()) if n else 1

    # Order by track, then start, longer first, so that a parent precedes the events it contains.
    n_tracks = len(track_info)
    clock = _Clock(start, end, n)
    order = _track_order(cols["track_key"], clock, end - start)
    track_key = cols["track_key"][order]
    s_key = clock.packed(track_key, clock.start[order])
    e_key = clock.packed(track_key, clock.end[order])
    track_first = np.searchsorted(track_key, np.arange(n_tracks + 1))  # tracks hold contiguous slices now
    # Depth = events of the track begun before this one (in order) minus those that ended by its start.
    ended = np.searchsorted(np.sort(e_key, kind="stable"), s_key, side="right")  # ends are nearly in order
    depth = np.maximum(np.arange(n) - ended, 0).astype(np.int32)
    counts = np.diff(track_first)
    nonempty = np.flatnonzero(counts)
    firsts = track_first[nonempty]
    length_sorted = (end - start)[order]
    max_depth = dict(zip(nonempty.tolist(), (np.maximum.reduceat(depth, firsts) + 1).tolist(), strict=True)) if n else {}
    longest = dict(zip(nonempty.tolist(), np.maximum.reduceat(length_sorted, firsts).tolist(), strict=True)) if n else {}
    per_cat = np.bincount(track_key * len(CATEGORIES) + cols["cat"][order], minlength=n_tracks * len(CATEGORIES))
    dominant = dict(enumerate(per_cat.reshape(n_tracks, len(CATEGORIES)).argmax(axis=1).tolist()))
    count_of = dict(enumerate(counts.tolist()))

    tracks, groups, lane_base = _layout(track_info, max_depth, dominant, count_of, longest, process_names)
    n_lanes = int(sum(t.depth for t in tracks))
    lane_of_event = lane_base[track_key] + depth
    # Start order is kept within each lane; lane numbers that fit 16 bits are sorted by radix, in linear time.
    order2 = np.argsort(lane_of_event.astype(np.uint16) if n_lanes <= 1 << 16 else lane_of_event, kind="stable")
    final = order[order2]
    lane_sorted = lane_of_event[order2]
    lane_offsets = np.searchsorted(lane_sorted, np.arange(n_lanes + 1)).astype(np.int64)
    start, end = start[final], end[final]
    # Running max of ends per lane, all lanes in one pass: a lane's packed keys exceed every earlier lane's.
    lane_end = clock.packed(lane_sorted, clock.end[final])
    cummax = clock.unpacked(np.maximum.accumulate(lane_end) if n else lane_end)
    lane_track = np.zeros(n_lanes, dtype=np.int32)
    lane_depth = np.zeros(n_lanes, dtype=np.int32)
    for t in tracks:
        lane_track[t.first_lane:t.first_lane + t.depth] = t.index
        lane_depth[t.first_lane:t.first_lane + t.depth] = np.arange(t.depth)
    present = np.unique(cols["cat"]) if n else np.zeros(0, np.int16)
    compact = np.zeros(len(CATEGORIES), dtype=np.int16)
    compact[present] = np.arange(len(present), dtype=np.int16)
    event_id = cols["event_id"][final]
    id_order = np.argsort(event_id, kind="stable")
    return TrackIndex(
        origin_ns=origin, span_ns=max(span, 1), start=start, end=end,
        cat=compact[cols["cat"][final]], name=cols["name"][final].astype(np.int32),
        event_id=event_id, table=cols["table"][final].astype(np.int8), row=cols["row"][final],
        lane_offsets=lane_offsets, lane_track=lane_track, lane_depth=lane_depth, cummax_end=cummax,
        tracks=tracks, groups=groups, names=names, categories=[CATEGORIES[int(c)] for c in present], _ids_sorted=event_id[id_order], _id_pos=id_order,
    )


def kineto_process_names(trace: Trace) -> dict[str, str]:
    """Kineto's ``process_name`` metadata: pid -> name."""
    names: dict[str, str] = {}
    for names_fact in trace.meta_all("kineto.names"):
        if isinstance(names_fact, dict):
            names.update({str(k): str(v) for k, v in names_fact.items() if "/" not in str(k) and "#" not in str(k)})
    return names


class _Clock:
    """Event times packed below a small number (a track, a lane) into one int64 sort key,
    ``number << bits | time``, so that one sort of plain integers orders by both. A trace whose span
    leaves too few bits for that (times longer than 2**62 over the event count) is packed by the
    times' ranks among all starts and ends instead: same order, and :meth:`unpacked` maps them back."""

    def __init__(self, start: np.ndarray, end: np.ndarray, n: int) -> None:
        self.values: np.ndarray | None = None
        span = int(end.max()) if n else 0
        if span.bit_length() + max(n, 1).bit_length() > 62:
            self.values, ranks = np.unique(np.concatenate([start, end]), return_inverse=True)
            start, end = ranks.ravel()[:n], ranks.ravel()[n:]
            span = len(self.values)
        self.start, self.end = start, end
        self.bits = max(span.bit_length(), 1)

    def packed(self, number: np.ndarray, times: np.ndarray) -> np.ndarray:
        return np.asarray((number.astype(np.int64) << self.bits) | times, dtype=np.int64)

    def unpacked(self, keys: np.ndarray) -> np.ndarray:
        times = keys & ((1 << self.bits) - 1)
        return times if self.values is None else np.asarray(self.values[times], dtype=np.int64)


def _track_order(track_key: np.ndarray, clock: _Clock, length: np.ndarray) -> np.ndarray:
    """``np.lexsort((-length, start, track_key))``: by track, then start, longer first, ties in row order.
    One stable sort of the packed (track, start) key, which takes a trace in nearly time order (as they
    come) in about linear time, then the few rows that tie on it ordered by length."""
    key = clock.packed(track_key, clock.start)
    order = np.argsort(key, kind="stable")
    tie = key[order[1:]] == key[order[:-1]]
    if tie.any():
        pos = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])
        run = np.cumsum(np.r_[True, ~tie])[pos]
        tied = order[pos]
        order[pos] = tied[np.lexsort((-length[tied], run))]
    return order


# -- columns of one table ------------------------------------------------------------------------


def _columns(table: pa.Table, which: int) -> dict[str, Any]:
    n = table.num_rows
    cat_idx, cat_values = codes(table["category"])
    cat_map = np.array([CATEGORIES.index(c) if c in CATEGORIES else CATEGORIES.index("other")
                        for c in cat_values] + [CATEGORIES.index("other")], dtype=np.int16)
    name_idx, name_values = codes(table["name"])
    # Host: Python frames, and ProfilerStep#N (the step lines mark it already); device: steps and
    # annotations. Host annotations (record_function ranges) stay: they nest ops like callers do.
    layer_values: list[object] = [PYTHON, MARKERS]
    layer_of = {"python": 0, "step": 1} if which == SYSTEM_TABLE else dict.fromkeys(MARKER_LAYER_CATEGORIES, 1)
    lookup = np.array([layer_of.get(str(c), -1) for c in cat_values] + [-1], dtype=np.int64)
    layer = (lookup[cat_idx], layer_values)
    if which == SYSTEM_TABLE:
        keys = [codes(table[c]) for c in ("host", "pid", "tid", "track")] + [layer]
    else:
        keys = [codes(table["rank"].cast(pa.string())), codes(table["device"]), codes(table["track"]), layer]
    track_key = row_codes(*(idx for idx, _values in keys))  # ranks of the distinct key rows, in key order
    one_row = np.zeros(int(track_key.max()) + 1 if n else 0, dtype=np.int64)
    one_row[track_key] = np.arange(n)  # a row of each track (any: they share the key), to name it
    tracks = [(which, tuple(values[idx[r]] if idx[r] >= 0 else None for idx, values in keys))
              for r in one_row.tolist()]
    return {
        "ts": table["ts_ns"].to_numpy(), "dur": table["dur_ns"].to_numpy(),
        "cat": with_compile(table, cat_map[cat_idx]) if which == SYSTEM_TABLE else cat_map[cat_idx],
        "name": np.where(name_idx < 0, 0, name_idx),
        "event_id": table["event_id"].to_numpy(), "table": np.full(n, which, dtype=np.int8),
        "row": np.arange(n, dtype=np.int64), "names": [str(v) for v in name_values] or [""],
        "tracks": tracks, "track_key": track_key,
    }


# -- groups and lanes ----------------------------------------------------------------------------


def _layout(track_info: list[tuple[int, tuple[Any, ...]]], max_depth: dict[int, int], dominant: dict[int, int],
            counts: dict[int, int], longest: dict[int, int], process_names: dict[str, str]
            ) -> tuple[list[Track], list[Group], np.ndarray]:
    """Groups (processes, devices) and tracks in display order; the first lane of each track key."""
    members: dict[tuple[object, ...], list[int]] = {}
    for key, (which, parts) in enumerate(track_info):
        if which == SYSTEM_TABLE:
            host, pid, _tid, _track, _layer = parts
            gkey: tuple[object, ...] = (HOST, host, pid)
        else:
            rank_, device_, _track, _layer = parts
            gkey = (DEVICE, rank_, device_)
        members.setdefault(gkey, []).append(key)
    ranks = {g[1] for g in members if g[0] == DEVICE and g[1] is not None}
    hosts = {g[1] for g in members if g[0] == HOST}

    groups: list[Group] = []
    tracks: list[Track] = []
    lane_base = np.zeros(len(track_info), dtype=np.int64)
    lane = 0
    for gkey in sorted(members, key=group_order):
        side = str(gkey[0])
        keys = members[gkey]
        if side == HOST:
            # Per thread: its steps, its Python frames (callers), then its ops and runtime calls.
            keys.sort(key=lambda k: (_natural(track_info[k][1][2]), str(track_info[k][1][3]),
                                     _LAYER_ORDER.index(track_info[k][1][4])))
        else:
            # Markers (steps, annotations) first, then streams by what mostly runs on them.
            keys.sort(key=lambda k: (track_info[k][1][3] is None, _device_rank(dominant.get(k, 0)),
                                     _natural(track_info[k][1][2])))
        gid, label, device, rank = group_naming(gkey, hosts, ranks, process_names)
        g_index = len(groups)
        track_ids = []
        for k in keys:
            parts = track_info[k][1]
            t_layer = str(parts[-1] or WORK)
            t_label = str(parts[3] or f"thread {parts[2]}") if side == HOST else str(parts[2])
            if t_layer == PYTHON:
                t_label += " · Python"
            elif t_layer == MARKERS:
                t_label = "steps & annotations" if side == DEVICE else f"{t_label} · steps"
            depth = max_depth.get(k, 1)
            t = Track(len(tracks), side, g_index, t_label, counts.get(k, 0), depth, lane, t_layer,
                      longest.get(k, 0) <= 0)
            lane_base[k] = lane
            lane += depth
            tracks.append(t)
            track_ids.append(t.index)
        groups.append(Group(g_index, side, gid, label, tuple(track_ids), device, rank))
    return tracks, groups, lane_base


def group_order(g: tuple[object, ...]) -> tuple[object, ...]:
    """Display order of groups keyed ``(HOST, host, pid)`` / ``(DEVICE, rank, device)``: processes first."""
    return (g[0] != HOST, _natural(g[1]), _natural(g[2]))


def group_naming(gkey: tuple[object, ...], hosts: set[object], ranks: set[object], process_names: dict[str, str]
                 ) -> tuple[str, str, str | None, int | None]:
    """(page key, label, device, rank) of the group keyed ``gkey`` among groups of these hosts and ranks."""
    if gkey[0] == HOST:
        host, pid = gkey[1], gkey[2]
        label = f"process {pid}" if pid not in (None, "") else "process ?"
        if str(pid) in process_names:
            label += f" ({process_names[str(pid)]})"
        if len(hosts) > 1 or host:
            label = f"{host or 'host ?'} · {label}"
        return f"host:{host}:{pid}", label, None, None
    rank = int(str(gkey[1])) if gkey[1] is not None else None
    device = str(gkey[2])
    return f"device:{rank}:{device}", device if len(ranks) < 2 else f"rank {rank} · {device}", device, rank


def _device_rank(cat_code: int) -> int:
    cat = CATEGORIES[cat_code]
    return _DEVICE_TRACK_ORDER.index(cat) if cat in _DEVICE_TRACK_ORDER else len(_DEVICE_TRACK_ORDER)


def _natural(value: object) -> tuple[int, float, str]:
    """Sort key: missing last, numbers by value, then text."""
    if value is None:
        return (2, 0.0, "")
    try:
        return (0, float(str(value)), "")
    except ValueError:
        return (1, 0.0, str(value))
