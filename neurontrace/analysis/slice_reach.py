"""How far beyond its instants a time slice's trace must reach for the device sections to merge exactly.

A slice (analysis/slices.py) counts what starts in its instants ``[start, end)`` and sums time inside them,
so events its trace holds beyond them change nothing by themselves; but two device sections *link* events
across time: ``launch`` ties a device op to the host call that launched it (up to the queue's length
earlier) and measures the queue's depth at each launch, ``ops`` ties a kernel to the op owning it and splits
the op's FLOPs over all its kernels. Their slice values are exact when the slice's trace holds the events
overlapping ``[start - H, end + H)`` with ``H = halo_ns(...)``: twice the longest time from a launch call's
start, or an owning op's start, to the end of its device op (the depth at a launch counts ops launched up to
one reach before it, whose own calls are one reach earlier still). ``engine_waits`` finds a Neuron wait's
producer among the events ending up to ``TOLERANCE_NS`` after the wait: the longest wait plus that tolerance
is its reach (``wait_reach``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from neurontrace.analysis.attribution import device_rows
from neurontrace.analysis.driving import driving_host_events, host_threads
from neurontrace.analysis.engine_waits import TOLERANCE_NS
from neurontrace.analysis.kernel_owner import kernel_owners
from neurontrace.analysis.launch import LAUNCHED, launch_calls
from neurontrace.analysis.ops import OpsIndex
from neurontrace.columns import isin, keep
from neurontrace.trace import Trace


def launch_reach(host: pa.Table, flows: pa.Table, dev: pa.Table) -> int:
    """The longest time from a launch call's start to the end of the op it launched (0 without any)."""
    dev = keep(dev, isin(dev["category"], LAUNCHED))
    call = launch_calls(host, flows, dev)
    ok = call >= 0
    if not ok.any():
        return 0
    end = dev["ts_ns"].to_numpy()[ok] + dev["dur_ns"].to_numpy()[ok]
    return int((end - host["ts_ns"].to_numpy()[call[ok]]).max())


def ops_reach(trace: Trace, device: str, rank: int | None) -> int:
    """The longest time from the start of the op owning (else launching) a kernel of ``device`` to the kernel's
    end or the op's, whichever is later (0 without any): a slice holding that much before and after a kernel it
    owns holds the op and every kernel of it."""
    index = OpsIndex(trace, device=device, rank=rank, many_windows=False)
    if index.cpu or not index.dev.num_rows:
        return 0
    owners = kernel_owners(index.host, trace.flows, index.dev, index.top_of, index.thread)
    label = np.where(owners.owner >= 0, owners.owner, owners.launcher)
    ok = label >= 0
    if not ok.any():
        return 0
    end = index.dev["ts_ns"].to_numpy()[ok] + index.dev["dur_ns"].to_numpy()[ok]
    start = index.host["ts_ns"].to_numpy()[label[ok]]
    return int((np.maximum(end, start + index.host["dur_ns"].to_numpy()[label[ok]]) - start).max())


def wait_reach(dev: pa.Table) -> int:
    """The longest engine wait of a device's events plus ``engine_waits.TOLERANCE_NS`` (0 without waits)."""
    waits = keep(dev, isin(dev["category"], ["sync_wait"]))
    return int(waits["dur_ns"].to_numpy().max()) + TOLERANCE_NS if waits.num_rows else 0


def halo_ns(trace: Trace, devices: Iterable[tuple[str, int | None]] | None = None) -> int:
    """``H`` (the module doc) for the (device, rank) ``devices`` of ``trace`` (every device of its device events
    by default): 0 where nothing is launched."""
    if devices is None:
        pairs = trace.device_events.select(["device", "rank"]).group_by(["device", "rank"]).aggregate([])
        devices = [(str(d), r) for d, r in zip(pairs["device"].to_pylist(), pairs["rank"].to_pylist(), strict=True)
                   if d is not None]
    reach = 0
    for device, rank in devices:
        dev = device_rows(trace, device, rank)
        reach = max(reach, launch_reach(driving_host_events(trace, dev), trace.flows, dev),
                    ops_reach(trace, device, rank), wait_reach(dev))
    return 2 * reach


class StreamedReach:
    """``halo_ns`` found slice by slice, in memory bounded by the launches in flight at a cut: what ``diagnose
    DATASET`` can compute in its first pass over plain slices (``add`` each slice's trace, in time order).

    Within a slice, the kernels whose launch call it holds give the reach exactly (:func:`launch_reach`,
    :func:`ops_reach` on the slice). A launch flow whose call starts in the slice but whose kernel does not is
    carried to the slice holding the kernel with the call's start and the span of the outermost framework op
    around the call on its thread, which holds the kernel's owning or launching op: its reach there is at
    least as long as the kernel's own, so the halo is never too short for a kernel linked by a launch flow.
    (A kernel linked only by a correlation id to a call in an earlier slice is not seen across the cut.)"""

    def __init__(self) -> None:
        self.reach = 0
        # kernel event id -> (call start, op start, op end, the flow's end marker time)
        self._carried: dict[int, tuple[int, int, int, int]] = {}

    @property
    def halo_ns(self) -> int:
        return 2 * self.reach

    def add(self, trace: Trace, owned: tuple[int, int]) -> None:
        self.reach = max(self.reach, halo_ns(trace) // 2)
        launch = trace.flows.filter(pa.array(isin(trace.flows["kind"], ["launch"]))) if trace.flows.num_rows else None
        if launch is None or not launch.num_rows:
            return
        src = launch["src_event_id"].fill_null(-1).to_numpy()
        dst = launch["dst_event_id"].fill_null(-1).to_numpy()
        dev = trace.device_events
        d_ids, d_ts = dev["event_id"].to_numpy(), dev["ts_ns"].to_numpy()
        d_end = d_ts + dev["dur_ns"].to_numpy()
        for i in np.flatnonzero(np.isin(d_ids, list(self._carried))).tolist():  # kernels launched before
            c_ts, op_s, op_e, _ = self._carried.pop(int(d_ids[i]))
            self.reach = max(self.reach, int(d_end[i]) - c_ts, max(int(d_end[i]), op_e) - op_s)
        # A kernel not found by a slice after its flow's end has none to find (sanitize drops zero-length device
        # ops): forgotten, or the carried launches grew with the rank (34 K of them at 2.1 GB, 138 K at 8.5 GB).
        self._carried = {k: v for k, v in self._carried.items() if v[3] >= owned[0]}
        host = trace.system_events
        h_ids, h_ts = host["event_id"].to_numpy(), host["ts_ns"].to_numpy()
        mine = (h_ts >= owned[0]) & (h_ts < owned[1])
        away = np.isin(src, h_ids[mine]) & ~np.isin(dst, d_ids) & (dst >= 0)  # its kernel is in a later slice
        if not away.any():
            return
        order = np.argsort(h_ids, kind="stable")
        calls = order[np.searchsorted(h_ids, src[away], sorter=order)]
        starts, ends = _outer_op(host, calls)
        arrive = launch["dst_ts_ns"].fill_null(np.iinfo(np.int64).max).to_numpy()[away].tolist()
        for k, c, s, e, at in zip(dst[away].tolist(), calls.tolist(), starts.tolist(), ends.tolist(), arrive,
                                  strict=True):
            self._carried[int(k)] = (int(h_ts[c]), int(s), int(e), int(at))


def _outer_op(host: pa.Table, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per call row: the span of the outermost framework op around it on its thread (the call's own without one)."""
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    s, e = ts[calls].copy(), end[calls].copy()
    thread = host_threads(host)
    ops = np.flatnonzero(isin(host["category"], ["framework_op"]))
    for th in np.unique(thread[calls]).tolist():
        rows = ops[thread[ops] == th]
        if not len(rows):
            continue
        rows = rows[np.lexsort((-end[rows], ts[rows]))]
        reach = np.maximum.accumulate(end[rows])
        top = rows[np.r_[True, end[rows][1:] > reach[:-1]]]  # not inside an earlier op: disjoint, in time order
        q = np.flatnonzero(thread[calls] == th)
        pos = np.searchsorted(ts[top], ts[calls[q]], side="right") - 1
        cand = top[np.maximum(pos, 0)]
        inside = (pos >= 0) & (end[cand] >= end[calls[q]])
        s[q[inside]], e[q[inside]] = ts[cand[inside]], end[cand[inside]]
    return s, e
