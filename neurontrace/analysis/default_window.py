"""The default analysis window of one device and the rule that chose it (docs/diagnose.md, "Window").

The user's ``--window`` is parsed in :mod:`neurontrace.analysis.window`; without one, the first rule of
:func:`choose_window` that applies picks the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.executions import device_executions
from neurontrace.analysis.labels import spans
from neurontrace.analysis.work import DEVICE_WORK, HOST_WORK, device_categories
from neurontrace.columns import isin, keep, select
from neurontrace.trace import Trace


@dataclass
class Window:
    """The analysis window of one device and the rule that chose it (docs/diagnose.md, "Window")."""

    span: tuple[int, int]
    rule: str  # option | launched_in_steps | steps | executions | activity | empty
    source: str  # the rule in words, for the report
    lag_ns: tuple[int, int] | None = None  # (first launched device start - steps start, last end - steps end)
    steps: int = 0  # profiled steps the window covers (the step rules)


def choose_window(trace: Trace, host: pa.Table, dev: pa.Table) -> Window:
    """The default window of one device, first rule that applies:

    1. ``launched_in_steps``: when the device work launched inside the profiled steps (ProfilerStep#N
       of the driving process, largest back-to-back run; linked by launch flows or correlation ids)
       runs past the steps' end, the device lags the host (deep launch queues): the window is the
       span of that work, not the host's step boundaries.
    2. ``steps``: the profiled steps themselves (the device kept up, or no device work links to them).
    With step rules the lag (device work start/end minus the steps' start/end) is reported.
    3. ``executions``: Neuron device executions.
    4. ``activity``: first to last activity of the device and of the host work that drove it.
    """
    steps = select(host, "category", "step")
    if steps.num_rows:  # a step of no extent (a damaged record) delimits nothing
        steps = keep(steps, np.asarray(steps["dur_ns"].to_numpy(zero_copy_only=False)) > 0)
    if steps.num_rows:
        s, e = spans(steps)
        lo, hi, n = step_cluster(s, e)
        more = "" if n == steps.num_rows else f" of {steps.num_rows}, the largest contiguous run"
        rows = launched_rows(trace, host, dev, lo, hi) if dev.num_rows else np.zeros(0, dtype=np.int64)
        if len(rows):
            ds, de = spans(dev)
            dlo, dhi = int(ds[rows].min()), int(de[rows].max())
            lag = (dlo - lo, dhi - hi)
            if dhi > hi:  # the device lags: the steps' work runs past the steps
                return Window((dlo, dhi), "launched_in_steps",
                              f"device work launched in {n} profiled steps{more}", lag, n)
            return Window((lo, hi), "steps", f"{n} profiled steps{more}", lag, n)
        return Window((lo, hi), "steps", f"{n} profiled steps{more}", steps=n)
    execs = device_executions(dev)  # each execution once (ExecutionInfo and nc_exec_running are one run)
    if execs.num_rows:
        s, e = spans(execs)
        return Window((int(s.min()), int(e.max())), "executions", f"{execs.num_rows} device executions")
    work = keep(host, isin(host["category"], HOST_WORK)) if host.num_rows else host
    span_list = [spans(t) for t in (dev, work) if t.num_rows]
    if not span_list:
        return Window((0, 0), "empty", "empty trace")
    return Window((min(int(a.min()) for a, _ in span_list), max(int(b.max()) for _, b in span_list)), "activity",
                  "first to last activity")


def default_window(host: pa.Table, dev: pa.Table) -> tuple[tuple[int, int], str]:
    """The default window without link information (the steps, executions or activity rules)."""
    w = choose_window(Trace(), host, dev)
    return w.span, w.source


def step_cluster(starts: np.ndarray, ends: np.ndarray) -> tuple[int, int, int]:
    """The longest run of back-to-back steps (ties: the later, steady-state one).

    A schedule may record separate windows (a warm-up step, later the steady state); the time
    between them was not profiled, so one window must not span it. Steps are back to back when
    the gap between them is at most half the median step.
    """
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    slack = np.median(e - s) / 2
    new = np.r_[True, s[1:] > reach[:-1] + slack]
    cluster = np.cumsum(new) - 1
    sizes = np.bincount(cluster)
    best = len(sizes) - 1 - int(np.argmax(sizes[::-1]))
    pick = cluster == best
    return int(s[pick].min()), int(e[pick].max()), int(pick.sum())


def launched_rows(trace: Trace, host: pa.Table, dev: pa.Table, lo: int, hi: int) -> np.ndarray:
    """Rows of ``dev`` (device work) launched by a host event that started inside [lo, hi), plus device
    work with no link at all that overlaps [lo, hi) (excerpts and traces that lost their links). Work
    whose launch flow has no host end was launched before the recording began: it is not the steps'.

    Linked by launch flows (exact event ids), else by correlation id within the rank (the host
    events given are one rank's: ids repeat across ranks).
    """
    hs = host["ts_ns"].to_numpy()
    in_steps = (hs >= lo) & (hs < hi)
    host_ids = host["event_id"].to_numpy()
    dev_ids = dev["event_id"].to_numpy()
    work = np.isin(device_categories(dev), list(DEVICE_WORK))
    flows = select(trace.flows, "kind", "launch") if trace.flows.num_rows else trace.flows
    src = flows["src_event_id"].fill_null(-1).to_numpy()
    dst = flows["dst_event_id"].fill_null(-1).to_numpy()
    hcorr = pc.fill_null(host["correlation"], -1).to_numpy()
    dcorr = pc.fill_null(dev["correlation"], -1).to_numpy()
    by_flow = np.isin(dev_ids, dst)  # any launch flow, its host end recorded or not
    by_corr = (dcorr >= 0) & np.isin(dcorr, hcorr[hcorr >= 0])
    launched = np.isin(dev_ids, dst[np.isin(src, host_ids[in_steps])])
    launched |= ~by_flow & (dcorr >= 0) & np.isin(dcorr, hcorr[in_steps & (hcorr >= 0)])
    ds, de = spans(dev)
    unlinked = ~by_flow & ~by_corr & (ds < hi) & (de > lo)
    if not (launched & work).any():
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero((launched | unlinked) & work)
