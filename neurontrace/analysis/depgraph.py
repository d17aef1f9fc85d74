"""The dependency graph of a trace: what had to finish before each piece of recorded work could run.

Arrays, not objects: every kept event ``i`` has two nodes, ``2i`` (its start) and ``2i + 1`` (its end), at the
times the trace recorded; an edge ``u -> v`` says *v could not happen before u*. The edges (docs/critical_path.md
draws each):

- ``chain``: the points of one host thread, or of one device track (stream, engine, queue), in time order, nesting
  included (a parent's time between its children is its own); an edge is attributed to the innermost event open
  over it, or to none (idle);
- ``launch``: the runtime call that launched a device op (launch flows, else correlation ids:
  :func:`driving.correlation_calls`), from the call's start to the op's start; a CUDA-graph launch links to
  every kernel of its graph (they share its correlation id);
- ``sync``: a blocking call (``names.SYNC``: device/stream/event synchronize, a blocking copy) ends after the
  last device op of its rank that ended inside it; across streams, CUDA events (``cudaEventRecord`` ->
  ``cudaStreamWaitEvent`` / ``cudaEventSynchronize``, from Kineto's cuda_sync records): :func:`_stream_waits`;
- ``wake``: a host thread idle (nothing but annotations open) until just after work on another thread of its
  process ended (within :data:`WAKE_NS` or :data:`WAKE_SHARE` of the gap, or with nothing of the process starting
  in between: a loaded host wakes threads late; and idle longer before that end than after it) resumed because of
  it (gloo's caller after the worker thread's
  collective, a thread join);
- ``enqueue``: a host collective range (``names.HOST_COLLECTIVE``) on a backend thread starts after the c10d op
  that queued it (``names.C10D_OP``, another thread of the process, within :data:`ENQUEUE_NS`);
- ``flow``: a recorded dependency flow (``flows.kind == "dependency"``: Neuron's Flow table), src end -> dst start;
- ``collective``: across ranks (:func:`add_collectives`), every rank's arrival at a matched collective -> one
  release node -> every rank's end: the last arrival releases everyone.

The *binding* in-edge of a node is the one whose source happened last (the dependency that actually released
it); the critical path follows binding edges back (analysis/critical_path.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import names
from neurontrace.analysis.driving import correlation_calls
from neurontrace.analysis.work import HOST_WORK, device_category_codes
from neurontrace.columns import codes, isin, matches, row_codes
from neurontrace.trace import Trace

# What a piece of the path is (the breakdown's keys).
KINDS = ("cpu_op", "launch", "kernel", "copy", "collective", "collective_wait", "sync", "idle")
K = {k: i for i, k in enumerate(KINDS)}
EDGE_TYPES = ("chain", "launch", "sync", "wake", "enqueue", "flow", "collective")
E = {k: i for i, k in enumerate(EDGE_TYPES)}
WAKE_NS = 1_000_000  # a thread resuming within 1 ms of another thread's work ending was woken by it ...
WAKE_SHARE = 0.05  # ... or within 5% of its idle gap (a loaded host wakes a thread late after a long wait)
ENQUEUE_NS = 5_000_000  # a host collective starting within 5 ms of a c10d op starting was queued by it
HOST_KEEP = (*HOST_WORK, "collective", "annotation", "step")  # work, and the marks it nests in (not the
# profiler's own span, allocator records or profiler overhead)
_WAIT_ON_STREAM = re.compile(r'"wait_on_stream"\s*:\s*(-?\d+)')
_WAIT_ON_RECORD = re.compile(r'"wait_on_cuda_event_record_corr_id"\s*:\s*(-?\d+)')
CUDA_EVENT_WAITS = ("Stream Wait Event", "Event Sync")  # Kineto cuda_sync records that name a cudaEventRecord
DEVICE_SKIP = ("throttle",)  # a clock window, not work on a track
CUDA_SYNC = "cuda_sync"  # Kineto's records of a sync (raw category): the wait itself, not work on the stream
# The columns the graph reads (the rows kept are copied: only these)
HOST_COLUMNS = ("event_id", "ts_ns", "dur_ns", "name", "category", "rank", "pid", "tid", "correlation", "frame_id")
DEVICE_COLUMNS = (*HOST_COLUMNS, "device", "track", "raw_category")
_HOST_KIND = {"framework_op": "cpu_op", "python": "cpu_op", "compile": "cpu_op", "load": "cpu_op",
              "transfer": "copy", "collective": "collective", "annotation": "idle", "step": "idle",
              "overhead": "cpu_op", "other": "cpu_op"}
_DEVICE_KIND = {"compute": "kernel", "execution": "kernel", "memcpy": "copy", "memset": "copy", "dma": "copy",
                "collective": "collective", "sync_wait": "sync"}


@dataclass
class DepGraph:
    """Events (host rows, then device rows, then release nodes), their nodes and the edges between them."""

    host: pa.Table  # the host events kept (no args)
    dev: pa.Table  # the device events kept (no args)
    ev_ts: np.ndarray
    ev_end: np.ndarray
    ev_kind: np.ndarray  # int8 index into KINDS: what the event's own time is
    ev_rank: np.ndarray  # -1 when unknown
    ev_chain: np.ndarray  # the thread / track the event is on (-1: a release node)
    src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # edge source node
    dst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    etype: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # index into EDGE_TYPES
    event: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the event the edge's time is, -1
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # index into KINDS
    dropped: dict[str, int] = field(default_factory=dict)  # edges refused (going back in time), by type
    binding: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per node: its binding edge, -1
    n_chain: int = 0  # edges [0, n_chain) are the thread/track chains, in chain order (consecutive points)
    live: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # per event: on a chain, in edges
    _pending: list[tuple[np.ndarray, ...]] = field(default_factory=list, repr=False)

    @property
    def n_host(self) -> int:
        return int(self.host.num_rows)

    @property
    def n_events(self) -> int:
        return len(self.ev_ts)

    def node_t(self) -> np.ndarray:
        t = np.empty(2 * self.n_events, dtype=np.int64)
        t[0::2], t[1::2] = self.ev_ts, self.ev_end
        return t

    def add(self, src: np.ndarray, dst: np.ndarray, etype: str, event: np.ndarray | int,
            kind: np.ndarray | int) -> None:
        """Queue edges (joined to the arrays once, by :meth:`flush`: not one copy of every edge per call)."""
        n = len(src)
        if n:
            self._pending.append((src.astype(np.int64), dst.astype(np.int64), np.full(n, E[etype], np.int8),
                                  np.broadcast_to(np.asarray(event, np.int64), n),
                                  np.broadcast_to(np.asarray(kind, np.int8), n)))

    def flush(self) -> None:
        if not self._pending:
            return
        if not len(self.src) and len(self._pending) == 1:  # the first edges (the chains): no copy of them
            self.src, self.dst, self.etype, self.event, self.kind = (np.array(col, copy=not col.flags.owndata)
                                                                     for col in self._pending[0])
            self._pending = []
            return
        parts = [(self.src, self.dst, self.etype, self.event, self.kind), *self._pending]
        self.src, self.dst, self.etype, self.event, self.kind = (np.concatenate(col) for col in zip(*parts,
                                                                                                     strict=True))
        self._pending = []

    def name(self, i: int) -> str:
        if i < self.n_host:
            return str(self.host["name"][i].as_py())
        if i < self.n_host + self.dev.num_rows:
            return str(self.dev["name"][i - self.n_host].as_py())
        return "collective release"

    def device(self, i: int) -> str | None:
        if i < self.n_host:
            return "cpu"
        if i < self.n_host + self.dev.num_rows:
            return str(self.dev["device"][i - self.n_host].as_py())
        return None

    def solve(self, owned: tuple[int, int] | None = None) -> None:
        """Drop edges that go back in time (clock disagreements), then pick every node's binding in-edge.
        ``owned`` (a time slice, analysis/slices.py): count only the dropped edges whose destination lies in it."""
        self.flush()
        t = self.node_t()
        back = (t[self.src] > t[self.dst]) & (self.etype != E["chain"])
        counted = back if owned is None else back & (t[self.dst] >= owned[0]) & (t[self.dst] < owned[1])
        for ty in np.unique(self.etype[counted]).tolist():
            self.dropped[EDGE_TYPES[ty]] = int((self.etype[counted] == ty).sum())
        if back.any():  # else every edge stays: no copy
            keep = ~back
            for name in ("src", "dst", "etype", "event", "kind"):
                setattr(self, name, getattr(self, name)[keep])
        self.binding = np.full(len(t), -1, dtype=np.int64)
        indeg = np.bincount(self.dst, minlength=len(t))
        one = indeg[self.dst] == 1  # most nodes have one in-edge: it binds
        self.binding[self.dst[one]] = np.flatnonzero(one)
        many = np.flatnonzero(~one)
        # several: the latest source first; on a tie the chain edge (lowest type) wins
        order = many[np.lexsort((self.etype[many], -t[self.src[many]], self.dst[many]))]
        first = np.r_[True, self.dst[order][1:] != self.dst[order][:-1]] if len(order) else np.zeros(0, bool)
        self.binding[self.dst[order][first]] = order[first]


def build(trace: Trace, owned: tuple[int, int] | None = None) -> DepGraph:
    """The dependency graph of ``trace`` (one rank or several; across ranks see :func:`add_collectives`).

    ``owned``: ``trace`` is the time slice ``[start, end)`` of a rank (analysis/slices.py), holding only the
    events overlapping it; a thread idle since before the slice has its first point's idle gap begin at the
    slice's start (:func:`_wakes`).

    Every row of both event tables is an event of the graph (no copy of the tables); rows that are not work or
    marks (zero durations, allocator records, throttle windows, Kineto's cuda_sync wait records, threads holding
    marks only) are ``live == False``: on no chain and in no edge."""
    host = trace.system_events.select([c for c in HOST_COLUMNS if c in trace.system_events.column_names])
    dev = trace.device_events.select([c for c in DEVICE_COLUMNS if c in trace.device_events.column_names])
    nh, nd = host.num_rows, dev.num_rows
    ts = np.r_[host["ts_ns"].to_numpy(), dev["ts_ns"].to_numpy()].astype(np.int64)
    dur = np.r_[host["dur_ns"].to_numpy(), dev["dur_ns"].to_numpy()].astype(np.int64)
    rank = np.r_[_ints(host, "rank"), _ints(dev, "rank")]
    kinds = np.r_[_host_kinds(host), _device_kinds(dev)].astype(np.int8)
    g = DepGraph(host, dev, ts, ts + dur, kinds, rank, np.zeros(nh + nd, np.int64))
    h_chain = row_codes(rank[:nh], codes(host["pid"])[0], codes(host["tid"])[0]) if nh else np.zeros(0, np.int64)
    d_chain = row_codes(rank[nh:], codes(dev["device"])[0], codes(dev["track"])[0]) if nd else np.zeros(0, np.int64)
    live = dur > 0
    if nh:
        live[:nh] &= isin(host["category"], HOST_KEEP) | matches(host["name"], names.HOST_COLLECTIVE)
        has_work = np.zeros(int(h_chain.max()) + 1, bool)  # the profiler's own "Trace" span: a thread of marks
        has_work[h_chain[live[:nh] & (kinds[:nh] != K["idle"])]] = True
        live[:nh] &= has_work[h_chain]
    if nd:
        live[nh:] &= ~isin(dev["category"], DEVICE_SKIP) & ~isin(dev["raw_category"], [CUDA_SYNC])
    g.live = live
    g.ev_chain = np.where(live, np.r_[h_chain, d_chain + (int(h_chain.max()) + 1 if nh else 0)], -1).astype(np.int64)
    _chains(g)
    _launches(trace, g)
    _syncs(g)
    _stream_waits(trace, g)
    _wakes(g, codes(host["pid"])[0] if nh else np.zeros(0, np.int64), owned)
    _enqueues(g, codes(host["pid"])[0] if nh else np.zeros(0, np.int64))
    _flows(trace, g)
    g.flush()
    return g


def _ints(t: pa.Table, col: str) -> np.ndarray:
    return np.asarray(pc.fill_null(t[col], -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def _host_kinds(host: pa.Table) -> np.ndarray:
    cat_codes, cats = codes(host["category"])
    by_cat = np.array([K[_HOST_KIND.get(str(c), "cpu_op")] for c in cats] + [K["cpu_op"]], np.int8)
    out = by_cat[cat_codes]
    runtime = isin(host["category"], ["runtime", "driver"])
    out[runtime & matches(host["name"], names.SYNC)] = K["sync"]
    out[runtime & (matches(host["name"], names.LAUNCH) | matches(host["name"], names.GRAPH_LAUNCH))] = K["launch"]
    out[matches(host["name"], names.HOST_COLLECTIVE)] = K["collective"]
    return np.asarray(out, np.int8)


def _device_kinds(dev: pa.Table) -> np.ndarray:
    if not dev.num_rows:
        return np.zeros(0, np.int8)
    code, cats = device_category_codes(dev)  # mapped once per category, not once per event
    if not cats:
        return np.full(dev.num_rows, K["kernel"], np.int8)
    by_cat = np.array([K[_DEVICE_KIND.get(str(c), "kernel")] for c in cats], np.int8)
    return np.asarray(by_cat[code], np.int8)


def _chains(g: DepGraph) -> None:
    """Each thread's / track's points in time order, each gap attributed to the innermost open event."""
    lv = np.flatnonzero(g.ev_chain >= 0)
    n = len(lv)
    if not n:
        return
    ev = np.r_[lv, lv]
    is_start = np.r_[np.ones(n, np.int8), np.zeros(n, np.int8)]
    t = np.r_[g.ev_ts[lv], g.ev_end[lv]]
    chain = g.ev_chain[ev]
    # at one time: ends before starts; ends inner first (later start), starts outer first (later end)
    order = _point_order(chain, t, is_start, np.r_[g.ev_end[lv], g.ev_ts[lv]])
    del t
    pe, ps, pc_ = ev[order], is_start[order], chain[order]
    del ev, chain, is_start, order
    depth = np.cumsum(np.where(ps == 1, 1, -1))
    npt = len(pe)
    a = np.flatnonzero(pc_[1:] == pc_[:-1])  # an edge from point a to point a + 1
    event = np.where(ps[a] == 1, pe[a], -1)  # after a start: that event is the innermost open
    ends = a[ps[a] == 0]  # after an end: the latest start at the depth left open, if it is still open
    starts = np.flatnonzero(ps == 1)
    key = depth[starts] * (npt + 1) + starts
    # by depth, then position: starts ascend, so a stable sort of the depths alone (radix when they fit 16 bits)
    sd = depth[starts]
    korder = np.argsort(sd.astype(np.int16) if len(sd) and sd.min() >= 0 and sd.max() < 2**15 else sd, kind="stable")
    del sd
    skey, spos = key[korder], starts[korder]
    del key, korder
    j = np.searchsorted(skey, depth[ends] * (npt + 1) + ends, side="right") - 1
    cand = spos[np.maximum(j, 0)]
    end_pos = np.empty(len(g.ev_ts), np.int64)
    end_pos[pe[ps == 0]] = np.flatnonzero(ps == 0)
    ok = (j >= 0) & (depth[ends] > 0) & (depth[cand] == depth[ends]) & (pc_[cand] == pc_[ends]) & \
        (end_pos[pe[cand]] > ends)
    event[ps[a] == 0] = np.where(ok, pe[cand], -1)
    src = 2 * pe[a] + (1 - ps[a])
    dst = 2 * pe[a + 1] + (1 - ps[a + 1])
    kind = np.where(event >= 0, g.ev_kind[np.maximum(event, 0)], K["idle"]).astype(np.int8)
    g.add(src, dst, "chain", event, kind)
    g.flush()
    g.n_chain = len(src)


def _point_order(chain: np.ndarray, t: np.ndarray, is_start: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Points sorted by (chain, time, ends first, later ``other`` first): two packed int64 keys when the times
    span under 2^44 ns (4.9 hours) and chains number under 2^19, else four keys (same order, slower)."""
    t0 = int(min(t.min(), other.min()))
    span = int(max(t.max(), other.max())) - t0
    if span < (1 << 44) and int(chain.max()) < (1 << 19):
        major = (chain << 44) | (t - t0)
        minor = (is_start.astype(np.int64) << 45) | ((1 << 44) - 1 - (other - t0))
        # np.lexsort((minor, major)), in less time: one stable sort by major, then only the points that tie on
        # it (in runs, each in position order) sorted by minor within their run
        order = np.argsort(major, kind="stable")
        m = major[order]
        tie = np.r_[False, m[1:] == m[:-1]]
        tied = np.flatnonzero(tie | np.r_[tie[1:], False])
        if len(tied):
            sub = order[tied]
            order[tied] = sub[np.lexsort((minor[sub], np.cumsum(~tie)[tied]))]
        return order
    return np.lexsort((-other, is_start, t, chain))


def _launches(trace: Trace, g: DepGraph) -> None:
    host, dev = g.host, g.dev
    if not g.n_host or not dev.num_rows:
        return
    calls = np.flatnonzero(isin(host["category"], ["runtime", "driver"]) & ~pc.is_null(host["correlation"])
                           .to_numpy(zero_copy_only=False) & g.live[:g.n_host])
    call = correlation_calls(host, trace.flows, dev, calls)
    d = np.flatnonzero((call >= 0) & g.live[g.n_host:g.n_host + dev.num_rows])
    c = call[d]
    g.add(2 * c, 2 * (g.n_host + d), "launch", c, K["launch"])
    blocking = matches(host["name"], names.SYNC)[c]  # a blocking copy returns when its copy is done
    g.add(2 * (g.n_host + d[blocking]) + 1, 2 * c[blocking] + 1, "sync", c[blocking], K["sync"])


def _syncs(g: DepGraph) -> None:
    """A synchronize call ends after the last device op of its rank that ended inside it."""
    host = g.host
    if not g.n_host or not g.dev.num_rows:
        return
    sync = np.flatnonzero(isin(host["category"], ["runtime", "driver"]) & matches(host["name"], names.DEVICE_SYNC)
                          & g.live[:g.n_host])
    if not len(sync):
        return
    nh = g.n_host
    d_rank, d_end = g.ev_rank[nh:nh + g.dev.num_rows], g.ev_end[nh:nh + g.dev.num_rows]
    work = g.live[nh:nh + g.dev.num_rows]
    for r in np.unique(g.ev_rank[sync]).tolist():
        mine = sync[g.ev_rank[sync] == r]
        rows = np.flatnonzero((d_rank == r) & work)
        if not len(rows):
            continue
        order = rows[np.argsort(d_end[rows], kind="stable")]
        j = np.searchsorted(d_end[order], g.ev_end[mine], side="right") - 1
        hit = (j >= 0) & (d_end[order][np.maximum(j, 0)] >= g.ev_ts[mine])
        g.add(2 * (nh + order[j[hit]]) + 1, 2 * mine[hit] + 1, "sync", mine[hit], K["sync"])


def _stream_waits(trace: Trace, g: DepGraph) -> None:
    """CUDA events between streams, from Kineto's cuda_sync records (``wait_on_stream``,
    ``wait_on_cuda_event_record_corr_id``): the work awaited is the last op launched on ``wait_on_stream`` before
    the ``cudaEventRecord`` of that correlation; a ``Stream Wait Event`` holds the next op on the waiting stream
    until it ends, an ``Event Sync`` holds the host's ``cudaEventSynchronize`` call."""
    nh, nd = g.n_host, g.dev.num_rows
    if not nh or not nd:
        return
    rows = np.flatnonzero(isin(g.dev["name"], CUDA_EVENT_WAITS))
    if not len(rows):
        return
    from neurontrace.columns import take

    waits = []  # (row, wait_on_stream, record correlation, is a stream wait)
    for row, name, text in zip(rows.tolist(), take(g.dev["name"], rows).to_pylist(),
                               take(trace.device_events["args"], rows).to_pylist(), strict=True):
        on_stream, on_record = _WAIT_ON_STREAM.search(text or ""), _WAIT_ON_RECORD.search(text or "")
        if on_stream and on_record and int(on_stream.group(1)) >= 0 and int(on_record.group(1)) >= 0:
            waits.append((row, int(on_stream.group(1)), int(on_record.group(1)), name == CUDA_EVENT_WAITS[0]))
    if not waits:
        return
    g.flush()
    launch = g.etype == E["launch"]
    call_ts = np.full(nd, np.iinfo(np.int64).max, np.int64)  # when each device op's launch call started
    call_ts[g.dst[launch] // 2 - nh] = g.ev_ts[g.src[launch] // 2]
    hcorr, drank, dcorr = _ints(g.host, "correlation"), g.ev_rank[nh:nh + nd], _ints(g.dev, "correlation")
    wanted = {rc for _, _, rc, _ in waits} | {int(dcorr[r]) for r, _, _, _ in waits}
    hit = np.flatnonzero(np.isin(hcorr, np.fromiter(wanted, np.int64)))
    calls = {(int(g.ev_rank[i]), int(hcorr[i])): int(i) for i in hit.tolist()}
    dev_code, tid_code = codes(g.dev["device"])[0], codes(g.dev["tid"])
    tid_of = {str(v): i for i, v in enumerate(tid_code[1])}
    work = g.live[nh:nh + nd]
    stream = row_codes(drank, dev_code, tid_code[0])
    by_stream: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # stream -> its rows by launch, by start
    first = np.unique(stream, return_index=True)[1]
    key_of = {(int(drank[i]), int(dev_code[i]), int(tid_code[0][i])): int(stream[i]) for i in first.tolist()}
    blocking = matches(g.host["name"], names.DEVICE_SYNC)
    src, dst = [], []
    for row, ws, rc, stream_wait in waits:
        record = calls.get((int(drank[row]), rc))
        other = key_of.get((int(drank[row]), int(dev_code[row]), tid_of.get(str(ws), -1)))
        if record is None or other is None:
            continue
        for c in (other, int(stream[row])):
            if c not in by_stream:
                mine = np.flatnonzero((stream == c) & work)
                by_stream[c] = (mine[np.argsort(call_ts[mine], kind="stable")],
                                mine[np.argsort(g.ev_ts[nh + mine], kind="stable")])
        launched, _ = by_stream[other]
        j = int(np.searchsorted(call_ts[launched], g.ev_ts[record], side="right")) - 1
        if j < 0:
            continue
        awaited = int(launched[j])
        if stream_wait:
            _, started = by_stream[int(stream[row])]
            k = int(np.searchsorted(g.ev_ts[nh + started], g.ev_ts[nh + row], side="left"))
            if k < len(started):
                src.append(2 * (nh + awaited) + 1)
                dst.append(2 * (nh + int(started[k])))
        else:
            host_call = calls.get((int(drank[row]), int(dcorr[row])))
            if host_call is not None and blocking[host_call]:  # cudaEventSynchronize, not a query
                src.append(2 * (nh + awaited) + 1)
                dst.append(2 * host_call + 1)
    g.add(np.asarray(src, np.int64), np.asarray(dst, np.int64), "sync", -1, K["sync"])


def _wakes(g: DepGraph, pid: np.ndarray, owned: tuple[int, int] | None = None) -> None:
    """Idle host gaps ended just after work on another thread of the process ended. In a time slice
    (``owned``), a thread's first point after the slice's start ends a gap that began before it, at an instant
    the slice does not hold: it is taken to begin at the slice's start (a shorter gap than the real one, so a
    wake found there is one the whole rank finds too). Not in the rank's first slice (no event begins before
    it: its threads had no point before), nor in a slice that no event crosses into (its threads' gaps are
    then left without a wake: a difference from the whole rank, where one was found)."""
    nh = g.n_host
    if not nh:
        return
    m = g.n_chain  # the chain edges come first (_chains): only they can be idle gaps, no flush of the rest
    src_, dst_ = g.src[:m], g.dst[:m]
    gap = (g.etype[:m] == E["chain"]) & (g.kind[:m] == K["idle"]) & (src_ < 2 * nh) & (dst_ < 2 * nh)
    gi = np.flatnonzero(gap)
    t = g.node_t()
    a, b = t[src_[gi]], t[dst_[gi]]
    dst, gap_chain = dst_[gi], g.ev_chain[src_[gi] // 2]
    if owned is not None and len(g.ev_ts) and int(g.ev_ts.min()) < owned[0]:  # not the rank's first slice
        first = _first_points(g, owned[0])
        a, b = np.r_[a, np.full(len(first), owned[0], np.int64)], np.r_[b, g.ev_ts[first]]
        dst, gap_chain = np.r_[dst, 2 * first], np.r_[gap_chain, g.ev_chain[first]]
        gi = np.arange(len(a))
    work = np.flatnonzero((g.ev_kind[:nh] != K["idle"]) & g.live[:nh])
    if not len(gi) or not len(work):
        return
    gpid = row_codes(g.ev_rank[:nh], pid)
    gap_pid = gpid[dst // 2]
    for p in np.unique(gap_pid).tolist():
        w = work[gpid[work] == p]
        q = np.flatnonzero(gap_pid == p)
        if not len(w):
            continue
        order = w[np.argsort(g.ev_end[w], kind="stable")]
        ends = g.ev_end[order]
        j = np.searchsorted(ends, b[q], side="right") - 1
        jj = np.maximum(j, 0)
        other = g.ev_chain[order[jj]] != gap_chain[q]
        soon = b[q] - ends[jj] <= np.maximum(WAKE_NS, WAKE_SHARE * (b[q] - a[q]))
        starts = np.sort(g.ev_ts[w])  # ... or nothing of the process started between that end and the resumption
        quiet = np.searchsorted(starts, b[q], side="left") - np.searchsorted(starts, ends[jj], side="right") == 0
        waited = ends[jj] - a[q] >= b[q] - ends[jj]  # idle longer before the release than after it
        hit = (j >= 0) & (ends[jj] > a[q]) & (soon | quiet) & waited & other
        g.add(2 * order[jj[hit]] + 1, dst[q[hit]], "wake", -1, K["sync"])


def _first_points(g: DepGraph, start: int) -> np.ndarray:
    """The host event whose start is the first point of each host thread, where that comes after ``start``."""
    nh = g.n_host
    rows = np.flatnonzero(g.ev_chain[:nh] >= 0)
    if not len(rows):
        return np.zeros(0, np.int64)
    order = rows[np.lexsort((-g.ev_end[rows], g.ev_ts[rows], g.ev_chain[rows]))]  # the outer one first at a tie
    head = order[np.r_[True, g.ev_chain[order][1:] != g.ev_chain[order][:-1]]]
    return head[g.ev_ts[head] > start]


def _enqueues(g: DepGraph, pid: np.ndarray) -> None:
    """A host collective range on a backend thread starts after the c10d op that queued it."""
    host = g.host
    nh = g.n_host
    if not nh:
        return
    coll = np.flatnonzero(matches(host["name"], names.HOST_COLLECTIVE) & g.live[:nh])
    c10d = np.flatnonzero(matches(host["name"], names.C10D_OP) & g.live[:nh])
    if not len(coll) or not len(c10d):
        return
    gpid = row_codes(g.ev_rank[:nh], pid)
    for p in np.unique(gpid[coll]).tolist():
        cs = coll[gpid[coll] == p]
        ops = c10d[gpid[c10d] == p]
        if not len(ops):
            continue
        order = ops[np.argsort(g.ev_ts[ops], kind="stable")]
        j = np.searchsorted(g.ev_ts[order], g.ev_ts[cs], side="right") - 1
        jj = np.maximum(j, 0)
        hit = (j >= 0) & (g.ev_ts[cs] - g.ev_ts[order[jj]] <= ENQUEUE_NS) & \
            (g.ev_chain[order[jj]] != g.ev_chain[cs])
        g.add(2 * order[jj[hit]], 2 * cs[hit], "enqueue", order[jj[hit]], K["launch"])


def _flows(trace: Trace, g: DepGraph) -> None:
    flows = trace.flows
    if not flows.num_rows:
        return
    dep = flows.filter(pa.array(isin(flows["kind"], ["dependency"])))
    if not dep.num_rows:
        return
    ids = np.r_[g.host["event_id"].to_numpy(), g.dev["event_id"].to_numpy()].astype(np.int64)
    order = np.argsort(ids, kind="stable")

    def find(col: str) -> np.ndarray:
        v = np.asarray(pc.fill_null(dep[col], -1).to_numpy(zero_copy_only=False), np.int64)
        j = np.minimum(np.searchsorted(ids[order], v), len(order) - 1)
        return np.where(ids[order][j] == v, order[j], -1)

    s, d = find("src_event_id"), find("dst_event_id")
    ok = (s >= 0) & (d >= 0)
    ok[ok] = g.live[s[ok]] & g.live[d[ok]]
    g.add(2 * s[ok] + 1, 2 * d[ok], "flow", -1, K["sync"])


def add_collectives(g: DepGraph, keys: np.ndarray, events: np.ndarray) -> None:
    """Matched collectives across ranks: ``events`` (graph event per record) grouped by ``keys`` (one code per
    collective instance). Each group gets a release node at its last arrival: arrivals -> release -> ends."""
    ok = events >= 0
    keys, events = keys[ok], events[ok]
    if not len(keys):
        return
    uniq, inv, count = np.unique(keys, return_inverse=True, return_counts=True)
    multi = count[inv] >= 2
    keys, events, inv = keys[multi], events[multi], inv[multi]
    if not len(keys):
        return
    last = np.full(len(uniq), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(last, inv, g.ev_ts[events])
    used = np.unique(inv)
    rel = np.full(len(uniq), -1, np.int64)
    rel[used] = g.n_events + np.arange(len(used))
    g.ev_ts = np.r_[g.ev_ts, last[used]]
    g.ev_end = np.r_[g.ev_end, last[used]]
    g.ev_kind = np.r_[g.ev_kind, np.full(len(used), K["collective_wait"], np.int8)]
    g.ev_rank = np.r_[g.ev_rank, np.full(len(used), -1, np.int64)]
    g.ev_chain = np.r_[g.ev_chain, np.full(len(used), -1, np.int64)]
    g.live = np.r_[g.live, np.ones(len(used), bool)]
    r = rel[inv]
    g.add(2 * events, 2 * r, "collective", -1, K["collective_wait"])
    g.add(2 * rel[used], 2 * rel[used] + 1, "chain", -1, K["collective_wait"])
    g.add(2 * r + 1, 2 * events + 1, "collective", events, K["collective"])
