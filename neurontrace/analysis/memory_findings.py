"""Memory findings: growth (a leak), a large temporary every step, near capacity, fragmentation, OOM.

Each rule reads the memory section's figures (:mod:`neurontrace.analysis.memory`) and fires only with
their evidence; thresholds are listed here and in docs/memory.md.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from neurontrace import units
from neurontrace.analysis import memory as mem
from neurontrace.analysis.contract import Context, Finding, FindingFamily

MIB = 1024**2
LEAK_MIN_BYTES = 1 * MIB  # end-of-step growth below this per step is noise (caches, counters)
LEAK_MIN_STEPS = 3  # at least this many steps, ...
LEAK_RISING_SHARE = 0.75  # ... and the end-of-step total rises in at least this share of step pairs
TEMPORARY_MIN_BYTES = 32 * MIB  # a temporary smaller than this is not worth a finding ...
TEMPORARY_PEAK_SHARE = 0.25  # ... nor one below this share of its step's peak
NEAR_CAPACITY = 0.90  # peak reserved (else allocated) above this share of the device's memory
FRAGMENTATION_SHARE = 0.30  # reserved minus allocated above this share of reserved, at the reserved peak ...
FRAGMENTATION_MIN_BYTES = 1024 * MIB  # ... and above this


def _who(d: mem.DeviceMemory) -> str:
    return d.device if d.rank is None else f"rank {d.rank} {d.device}"


def growth(d: mem.DeviceMemory) -> Finding | None:
    ends = [s.end_allocated_bytes for s in d.steps if s.end_allocated_bytes is not None]
    if d.growth_bytes_per_step is None or len(ends) < LEAK_MIN_STEPS or d.growth_bytes_per_step < LEAK_MIN_BYTES:
        return None
    rises = sum(b > a for a, b in pairwise(ends))
    if rises < LEAK_RISING_SHARE * (len(ends) - 1):
        return None
    top = d.never_freed[0] if d.never_freed else None
    source = f"; never freed: {top.label()} ({units.size(top.bytes)} in {top.count} blocks)" if top else ""
    return Finding(
        "memory_growth", "warning", "Memory grows every step (a leak)",
        f"{_who(d)}: allocated memory at the end of each step rises by {units.size(d.growth_bytes_per_step)} per "
        f"step ({units.size(ends[0])} -> {units.size(ends[-1])} over {len(ends)} steps){source}",
        "Find what keeps the tensors alive: a list or dict that grows every step, a loss kept with its graph "
        "(append loss.item() or loss.detach(), not loss), hooks or caches holding outputs.", d.device)


def temporary(d: mem.DeviceMemory) -> Finding | None:
    big = [s for s in d.steps if s.largest_temporary is not None and s.peak_allocated_bytes
           and s.largest_temporary.bytes >= TEMPORARY_MIN_BYTES
           and s.largest_temporary.bytes >= TEMPORARY_PEAK_SHARE * s.peak_allocated_bytes]
    if len(big) < 2 or len(big) * 2 < len(d.steps):
        return None
    sizes = [s.largest_temporary.bytes for s in big if s.largest_temporary]
    shares = [s.largest_temporary.bytes / s.peak_allocated_bytes for s in big
              if s.largest_temporary and s.peak_allocated_bytes]
    t = max((s.largest_temporary for s in big if s.largest_temporary), key=lambda g: g.bytes)
    return Finding(
        "large_temporary", "info", "A large temporary is allocated and freed every step",
        f"{_who(d)}: in {len(big)} of {len(d.steps)} steps a block of "
        f"{_span(min(sizes), max(sizes))} is allocated and freed within the step ({t.label()}); the median is "
        f"{units.share(float(np.median(shares)))} of its step's peak",
        "If it raises the peak you need to fit, compute it in chunks, in place, or under activation "
        "checkpointing, or keep one buffer across steps instead of allocating it every step.", d.device)


def _span(lo: int, hi: int) -> str:
    return units.size(lo) if units.size(lo) == units.size(hi) else f"{units.size(lo)} to {units.size(hi)}"


def near_capacity(d: mem.DeviceMemory) -> Finding | None:
    peak = d.peak_reserved_bytes if d.peak_reserved_bytes is not None else d.peak_allocated_bytes
    if not d.capacity_bytes or peak is None or not d.totals_recorded or peak < NEAR_CAPACITY * d.capacity_bytes:
        return None
    return Finding(
        "memory_near_capacity", "warning", "Memory use is near the device's capacity",
        f"{_who(d)}: peak {units.size(peak)} {'reserved' if d.peak_reserved_bytes is not None else 'allocated'} "
        f"of {units.size(d.capacity_bytes)} ({units.share(peak / d.capacity_bytes)}; {d.capacity_source})",
        "A larger batch or sequence will run out of memory: see what is live at the peak (neurontrace memory), "
        "and consider activation checkpointing, a smaller micro-batch or sharding optimizer state.", d.device)


def fragmentation(d: mem.DeviceMemory) -> Finding | None:
    res, alloc = d.peak_reserved_bytes, d.allocated_at_reserved_peak_bytes
    if res is None or alloc is None or not d.totals_recorded:
        return None
    gap = res - alloc
    if gap < FRAGMENTATION_MIN_BYTES or gap < FRAGMENTATION_SHARE * res:
        return None
    return Finding(
        "memory_fragmentation", "info", "The allocator reserves much more than is allocated",
        f"{_who(d)}: at the reserved peak {units.size(res)} was reserved but {units.size(alloc)} allocated "
        f"({units.size(gap)}, {units.share(gap / res)} of the reserve, cached but unused)",
        "Cached blocks that do not fit new requests fragment the reserve: set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or allocate large buffers once, early.", d.device)


def oom(d: mem.DeviceMemory) -> list[Finding]:
    out = []
    for o in d.ooms:
        live = "; ".join(f"{units.size(g.bytes)} {g.label()}" for g in o.live[:3])
        out.append(Finding(
            "out_of_memory", "error", "An allocation ran out of memory",
            f"{_who(d)}: {units.size(o.requested_bytes)} asked at {mem.LiveGroup(o.op, o.source, 0, 0, 0).label()} "
            f"with {units.size(o.allocated_bytes)} allocated and "
            f"{units.size(o.reserved_bytes)} reserved" + (f"; live then: {live}" if live else ""),
            "Free or shrink what was live (largest first above); a request larger than the device's free "
            "memory needs a smaller batch, chunking or sharding.", d.device))
    return out


def _find(ctx: Context) -> list[Finding]:
    m = ctx.sections.get(mem.SECTION.key)
    return findings(m) if isinstance(m, mem.Memory) else []


def findings(m: mem.Memory) -> list[Finding]:
    """Every memory finding over the section's devices, worst first."""
    out: list[Finding] = []
    for d in m.devices:
        out += [f for f in (growth(d), temporary(d), near_capacity(d), fragmentation(d)) if f is not None]
        out += oom(d)
    return sorted(out, key=lambda f: ("error", "warning", "info").index(f.severity))


FINDINGS = FindingFamily("memory", _find)
