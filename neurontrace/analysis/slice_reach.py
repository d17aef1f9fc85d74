"""How far beyond its instants a time slice's trace must reach for the device sections to merge exactly.

A slice (analysis/slices.py) counts what starts in its instants ``[start, end)`` and sums time inside them,
so events its trace holds beyond them change nothing by themselves; but two device sections *link* events
across time: ``launch`` ties a device op to the host call that launched it (up to the queue's length
earlier) and measures the queue's depth at each launch, ``ops`` ties a kernel to the op owning it and splits
the op's FLOPs over all its kernels. Their slice values are exact when the slice's trace holds the events
overlapping ``[start - H, end + H)`` with ``H = halo_ns(...)``: twice the longest time from a launch call's
start, or an owning op's start, to the end of its device op (the depth at a launch counts ops launched up to
one reach before it, whose own calls are one reach earlier still).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from neurontrace.analysis.attribution import device_rows
from neurontrace.analysis.driving import driving_host_events
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
                    ops_reach(trace, device, rank))
    return 2 * reach
