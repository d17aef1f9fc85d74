"""Launch latency and queue depth: how far ahead of the device the host runs.

For every device op the host launched (kernels, collectives, copies, memsets), its launch call is the
source of its launch flow (Kineto ``ac2g``), or, when the trace has no flow for it, the runtime or
driver call with the same correlation id:

    host   [cudaLaunchKernel]                        call_ns = the call's duration (launch cost)
    device          :          [kernel ........]
                    |<-delay ->|                     delay = kernel start - call start

Queue depth on a stream is the number of ops launched but not finished: +1 at the start of the launch
call, -1 at the end of the op (at one instant, ends count before launches). The device's depth is the
sum over its streams. A shallow queue means the device drains work as fast as the host supplies it;
ops shorter than their own launch call mean the host cannot get ahead however it tries: together
they are the ``launch_bound`` finding.

Out of core (``Options.owned``, analysis/slices.py): a slice counts the ops that start in it; it links every op
of the window its trace holds (a queue's depth at a launch counts ops of other slices) and keeps, in ``parts``,
exact value counts (analysis/value_counts.py) of its ops' delays, call times and depths, per stream too;
``merge`` adds them and reads the medians, percentiles and maxima off the sums. A slice links an op only when its
trace holds the op's launch call, and measures a depth only when it holds every op in flight then: **exact when
the slice's trace reaches ``2 * R`` beyond its instants on both sides**, where ``R`` is the longest time from a
launch call's start to its op's end (analysis/slice_reach.py). A slice of exactly its instants (``slices.slice_of``)
misses the calls of the ops it owns that were launched before it, which a GPU running behind its host always
has (resnet50's queue holds hundreds of ops at every step boundary): those come out unmatched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis import graph_replay, value_counts
from neurontrace.analysis.attribution import DeviceAttribution
from neurontrace.analysis.contract import Context, DeviceSection, Finding, FindingFamily
from neurontrace.analysis.device_window import whole_window
from neurontrace.analysis.driving import correlation_calls
from neurontrace.analysis.overlap import device_and_host
from neurontrace.analysis.slices import owned_rows
from neurontrace.columns import isin, keep
from neurontrace.units import duration

LAUNCHED = ("compute", "collective", "memcpy", "memset")


@dataclass
class StreamParts:
    """One stream's share of a time slice's launches: its ops, their delays (value counts), its deepest queue."""

    kernels: int
    delay: value_counts.Counts
    queue_depth_max: int

    def as_dict(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "delay": self.delay.as_list(), "queue_depth_max": self.queue_depth_max}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StreamParts:
        return cls(int(d["kernels"]), value_counts.Counts.from_list(d["delay"]), int(d["queue_depth_max"]))


@dataclass
class LaunchParts:
    """What ``merge`` needs of a time slice's launches: value counts of its ops' call times and queue depths, how
    many were shorter than their call, and per stream (the device's delays are the streams' together)."""

    call: value_counts.Counts
    depth: value_counts.Counts
    short: int
    streams: dict[str, StreamParts] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"call": self.call.as_list(), "depth": self.depth.as_list(), "short": self.short,
                "streams": {k: v.as_dict() for k, v in self.streams.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchParts:
        return cls(value_counts.Counts.from_list(d["call"]), value_counts.Counts.from_list(d["depth"]),
                   int(d["short"]), {k: StreamParts.from_dict(v) for k, v in (d.get("streams") or {}).items()})


@dataclass
class Launch:
    kernels: int  # device ops with a launch call found
    unmatched: int  # device ops in the window without one (launched before the profile, GPU-only traces)
    delay_ns_median: int | None
    delay_ns_p90: int | None
    delay_ns_max: int | None
    call_ns_median: int | None
    queue_depth_max: int
    queue_depth_median: float | None  # the device's depth just after each launch, median over launches
    short_kernel_share: float | None  # ops shorter than their launch call
    streams: list[dict[str, Any]] = field(default_factory=list)
    # A slice's value only (Options.owned): value counts of its ops' figures, for ``merge`` (see the module doc).
    parts: LaunchParts | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kernels": self.kernels, "unmatched": self.unmatched, "delay_ns_median": self.delay_ns_median,
                               "delay_ns_p90": self.delay_ns_p90, "delay_ns_max": self.delay_ns_max,
                               "call_ns_median": self.call_ns_median, "queue_depth_max": self.queue_depth_max,
                               "queue_depth_median": self.queue_depth_median,
                               "short_kernel_share": self.short_kernel_share, "streams": self.streams}
        if self.parts is not None:
            out["parts"] = self.parts.as_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Launch:
        fields: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__ if k not in ("streams", "parts")}
        parts = d.get("parts")
        return cls(**fields, streams=list(d.get("streams") or []),
                   parts=None if parts is None else LaunchParts.from_dict(parts))


def launch_calls(host: pa.Table, flows: pa.Table, dev: pa.Table) -> np.ndarray:
    """Per row of ``dev``, the row of ``host`` that launched it (-1 when none is recorded)."""
    out = np.full(dev.num_rows, -1, dtype=np.int64)
    if dev.num_rows == 0 or host.num_rows == 0:
        return out
    host_ids = host["event_id"].to_numpy()
    order = np.argsort(host_ids, kind="stable")
    dev_ids = dev["event_id"].to_numpy()

    def host_row(ids: np.ndarray) -> np.ndarray:
        pos = np.minimum(np.searchsorted(host_ids[order], ids), len(order) - 1)
        return np.where(host_ids[order][pos] == ids, order[pos], -1)

    fl = keep(flows, isin(flows["kind"], ["launch"]))
    src = pc.fill_null(fl["src_event_id"], -1).to_numpy(zero_copy_only=False)
    dst = pc.fill_null(fl["dst_event_id"], -1).to_numpy(zero_copy_only=False)
    ok = (src >= 0) & (dst >= 0)
    if ok.any():
        d_order = np.argsort(dev_ids, kind="stable")
        pos = np.minimum(np.searchsorted(dev_ids[d_order], dst[ok]), len(d_order) - 1)
        hit = dev_ids[d_order][pos] == dst[ok]
        out[d_order[pos[hit]]] = host_row(src[ok][hit])
    # No flow: the runtime/driver call with the same correlation id (rank, and pid where it is known).
    missing = np.flatnonzero(out < 0)
    calls = np.flatnonzero(isin(host["category"], ["runtime", "driver"]))
    if len(missing) and len(calls):
        found = correlation_calls(host, flows, dev, calls)
        out[missing] = found[missing]
    return out


def _depth(launch_at: np.ndarray, done_at: np.ndarray) -> tuple[int, np.ndarray]:
    """(max depth, depth just after each launch) of ops launched at ``launch_at`` and done at ``done_at``."""
    n = len(launch_at)
    if n == 0:
        return 0, np.zeros(0)
    t = np.concatenate([launch_at, done_at])
    delta = np.r_[np.ones(n, dtype=np.int64), -np.ones(n, dtype=np.int64)]
    order = np.lexsort((delta, t))  # at one instant -1 (done) sorts before +1 (launched)
    depth = np.cumsum(delta[order])
    after = np.empty(2 * n, dtype=np.int64)
    after[order] = depth
    return int(depth.max()), after[:n]


def _ns(values: np.ndarray, q: float) -> int | None:
    return int(np.percentile(values, q, method="lower")) if len(values) else None


def launch_stats(host: pa.Table, flows: pa.Table, dev: pa.Table, window: tuple[int, int],
                 owned: tuple[int, int] | None = None) -> Launch:
    """Launch statistics of one device (``dev``: that device and rank) for ops starting in ``window``
    (and in ``owned``, a slice's instants: see the module doc)."""
    dev = keep(dev, isin(dev["category"], LAUNCHED))
    ts = dev["ts_ns"].to_numpy()
    dev = keep(dev, (ts >= window[0]) & (ts < window[1]))
    call = launch_calls(host, flows, dev)
    if owned is not None:
        return _slice_stats(host, dev, call, owned)
    ok = call >= 0
    k_ts = dev["ts_ns"].to_numpy()[ok]
    k_end = k_ts + dev["dur_ns"].to_numpy()[ok]
    c_ts = host["ts_ns"].to_numpy()[call[ok]]
    c_dur = host["dur_ns"].to_numpy()[call[ok]]
    delay = k_ts - c_ts
    short = (k_end - k_ts) < c_dur
    qmax, at_launch = _depth(c_ts, k_end)
    tracks = np.asarray(dev["track"].cast(pa.string()).to_pylist(), dtype=object)[ok] if ok.any() else np.zeros(0)
    streams = []
    for track in sorted(set(tracks.tolist())):
        m = tracks == track
        smax, _ = _depth(c_ts[m], k_end[m])
        streams.append({"stream": track, "kernels": int(m.sum()), "delay_ns_median": _ns(delay[m], 50),
                        "delay_ns_p90": _ns(delay[m], 90), "delay_ns_max": int(delay[m].max()),
                        "queue_depth_max": smax})
    return Launch(
        kernels=int(ok.sum()), unmatched=int((~ok).sum()), delay_ns_median=_ns(delay, 50),
        delay_ns_p90=_ns(delay, 90), delay_ns_max=int(delay.max()) if len(delay) else None,
        call_ns_median=_ns(c_dur, 50), queue_depth_max=qmax,
        queue_depth_median=float(np.median(at_launch)) if len(at_launch) else None,
        short_kernel_share=round(float(short.mean()), 4) if len(short) else None, streams=streams)


def _slice_stats(host: pa.Table, dev: pa.Table, call: np.ndarray, owned: tuple[int, int]) -> Launch:
    """A slice's value: counts of the ops starting in ``owned``, their figures as value counts in ``parts``;
    depths are measured over every linked op the slice holds, and kept for its own ops."""
    ok = call >= 0
    mine = owned_rows(dev, owned)
    k_ts = dev["ts_ns"].to_numpy()[ok]
    k_end = k_ts + dev["dur_ns"].to_numpy()[ok]
    c_ts = host["ts_ns"].to_numpy()[call[ok]]
    c_dur = host["dur_ns"].to_numpy()[call[ok]]
    own = mine[ok]
    _, at_launch = _depth(c_ts, k_end)
    tracks = np.asarray(dev["track"].cast(pa.string()).to_pylist(), dtype=object)[ok] if ok.any() else np.zeros(0)
    streams: dict[str, StreamParts] = {}
    for track in sorted(set(tracks[own].tolist())):
        m = tracks == track
        _, after = _depth(c_ts[m], k_end[m])
        streams[str(track)] = StreamParts(int((m & own).sum()), value_counts.of((k_ts - c_ts)[m & own]),
                                          int(after[own[m]].max()))
    parts = LaunchParts(value_counts.of(c_dur[own]), value_counts.of(at_launch[own]),
                        int(((k_end - k_ts) < c_dur)[own].sum()), streams)
    return Launch(kernels=int((ok & mine).sum()), unmatched=int((~ok & mine).sum()), delay_ns_median=None,
                  delay_ns_p90=None, delay_ns_max=None, call_ns_median=None,
                  queue_depth_max=int(at_launch[own].max()) if own.any() else 0, queue_depth_median=None,
                  short_kernel_share=None, parts=parts)


def merge(values: list[Launch | None]) -> Launch | None:
    """One device's per-slice values (time order) -> the rank's: counts added, figures read off the summed
    value counts (exactly :func:`launch_stats` on the whole rank, given the reach the module doc names)."""
    got = [v for v in values if v is not None]
    if not got:
        return None
    parts = [v.parts for v in got if v.parts is not None]
    streams, delays = [], []
    for track in sorted({t for p in parts for t in p.streams}):
        mine = [p.streams[track] for p in parts if track in p.streams]
        d = value_counts.merge(s.delay for s in mine)
        delays.append(d)
        streams.append({"stream": track, "kernels": sum(s.kernels for s in mine),
                        "delay_ns_median": value_counts.lower(d, 50), "delay_ns_p90": value_counts.lower(d, 90),
                        "delay_ns_max": value_counts.largest(d),
                        "queue_depth_max": max(s.queue_depth_max for s in mine)})
    delay = value_counts.merge(delays)  # every op is on one stream
    call, depth = value_counts.merge(p.call for p in parts), value_counts.merge(p.depth for p in parts)
    n = value_counts.size(delay)
    short = sum(p.short for p in parts)
    return Launch(
        kernels=sum(v.kernels for v in got), unmatched=sum(v.unmatched for v in got),
        delay_ns_median=value_counts.lower(delay, 50), delay_ns_p90=value_counts.lower(delay, 90),
        delay_ns_max=value_counts.largest(delay), call_ns_median=value_counts.lower(call, 50),
        queue_depth_max=max(v.queue_depth_max for v in got), queue_depth_median=value_counts.median(depth),
        short_kernel_share=round(short / n, 4) if n else None,  # = the mean of the 0/1 flags
        streams=streams)


LAUNCH_BOUND_SHORT = 0.5  # at least half of the launched ops are shorter than their own launch call ...
LAUNCH_BOUND_DEPTH = 2.0  # ... and the median queue depth after a launch is at most 2 (the device drains it)
LAUNCH_BOUND_MIN_OPS = 100  # evidence enough: at least this many launches


def _text(v: Launch) -> list[str]:
    if not v.kernels:
        return [f"no launch calls recorded for {v.unmatched} device ops"] if v.unmatched else []
    share = f"{100 * v.short_kernel_share:.1f}%" if v.short_kernel_share is not None else "-"
    line = (f"{v.kernels} launches: launch-to-start delay median {duration(v.delay_ns_median)}, p90 "
            f"{duration(v.delay_ns_p90)}; queue depth max {v.queue_depth_max} (median {v.queue_depth_median}); {share} "
            f"of ops shorter than their launch call (median call {duration(v.call_ns_median)})")
    return [line]


def _compute(ctx: Context, d: DeviceAttribution) -> Launch | None:
    dev, host = device_and_host(ctx, d)
    if dev.num_rows == 0:
        return None
    return launch_stats(host, ctx.trace.flows, dev, whole_window(ctx, d), ctx.options.owned)


_ADVICE = ("Launch fewer, larger kernels: CUDA graphs (torch.compile mode='reduce-overhead'), fused ops, "
           "larger batches; keep the launching thread free of Python work.")
# Never advise CUDA graphs to a trace that already replays them (graph_replay.py).
_ADVICE_REPLAYING = ("The trace already replays CUDA/HIP graphs: capture the ops still launched one by one "
                     "into the graph, fuse small ops, batch more work per launch.")


def launch_bound(ctx: Context) -> list[Finding]:
    out = []
    for d in ctx.devices:
        v = d.sections.get(SECTION.key)
        if (not isinstance(v, Launch) or v.kernels < LAUNCH_BOUND_MIN_OPS or v.short_kernel_share is None
                or v.queue_depth_median is None):
            continue
        if v.short_kernel_share >= LAUNCH_BOUND_SHORT and v.queue_depth_median <= LAUNCH_BOUND_DEPTH:
            out.append(Finding(
                "launch_bound", "warning", "The device runs ops faster than the host can launch them",
                f"{100 * v.short_kernel_share:.1f}% of {v.kernels} ops on {d.device} are shorter than their launch "
                f"call (median call {duration(v.call_ns_median)}) and the queue holds a median {v.queue_depth_median:g} "
                f"op(s) after each launch",
                _ADVICE_REPLAYING if graph_replay.replays(d) else _ADVICE, d.device, d.rank))
    return out


SECTION = DeviceSection("launch", "launch latency", _compute, to_json=lambda v: v.as_dict(), from_json=Launch.from_dict,
                        text=_text, merge=merge)
FINDINGS = FindingFamily("launch bound", launch_bound)
