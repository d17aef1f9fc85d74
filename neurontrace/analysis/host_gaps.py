"""Idle gaps the host caused without a recorded op: the next launch began inside the gap.

A trace may hold device activity and the runtime's launch calls but no CPU ops (a GPU-only trace, a profile with
``activities=[ProfilerActivity.CUDA]``, CUPTI's runtime records alone). A gap in the device's work then looks
unexplained, yet when the launch of the work that ends the gap *began inside the gap*, the device was waiting for
the host to issue it: whatever the host did before that launch was not recorded, but it was the host's time.
Such a gap is ``host_overhead.unrecorded`` (the launch call's own time stays ``host_overhead.launch``, which
comes first). A gap whose closing work was launched before the gap began (queued behind a dependency, a
cross-stream wait) stays unexplained.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.driving import correlation_calls
from neurontrace.analysis.intervals import union
from neurontrace.analysis.labels import Label, spans
from neurontrace.analysis.work import DEVICE_WORK, device_categories
from neurontrace.columns import isin, matches


def unrecorded_host_gaps(host: pa.Table, flows: pa.Table, dev: pa.Table) -> list[Label]:
    """The ``host_overhead.unrecorded`` label of one device (empty when the host recorded ops, or no gap qualifies)."""
    if not dev.num_rows or not host.num_rows or isin(host["category"], ["framework_op"]).any():
        return []
    launch = isin(host["category"], ["runtime", "driver"])
    launch &= matches(host["name"], names.DEVICE_LAUNCH) if launch.any() else launch
    work = np.flatnonzero(np.isin(device_categories(dev), list(DEVICE_WORK)))
    if not launch.any() or not len(work):
        return []
    sub = dev.take(pa.array(work))
    call = correlation_calls(host, flows, sub, np.flatnonzero(launch))
    s, e = spans(sub)
    us, ue = union(s, e)
    gap_lo, gap_hi = ue[:-1], us[1:]  # the gaps between device work
    if not len(gap_lo):
        return []
    host_start = host["ts_ns"].to_numpy()
    # The work that closes each gap: the first to start at the gap's end (the union's run starts there).
    order = np.argsort(s, kind="stable")
    closing = order[np.searchsorted(s[order], gap_hi, side="left")]
    linked = call[closing]
    launched = np.where(linked >= 0, host_start[np.maximum(linked, 0)], np.iinfo(np.int64).max)
    hit = (linked >= 0) & (launched >= gap_lo) & (launched < gap_hi)
    if not hit.any():
        return []
    rows = np.maximum(linked[hit], 0)
    return [Label("host_overhead", "unrecorded", gap_lo[hit], gap_hi[hit], host, rows)]
