"""Memory: per device, the exact peak and what was live at it, per-step figures, growth and its source, OOMs.

Reads the ``memory_events`` table (Kineto ``[memory]`` events, PyTorch memory snapshots, Neuron memory
tables; docs/memory.md). Per device of each rank:

- **peak**: the maximum of the recorded ``Total Allocated`` (and, apart, ``Total Reserved``) totals, exact;
  events without totals (torch 1.8/1.9) give the peak of the running sum of ``Bytes`` since the trace
  started instead (``totals_recorded`` false: relative to the memory already allocated then);
- **live at the peak**: each allocation made before the peak whose block (same address) was not freed or
  reused by then, grouped by op and source line; memory allocated before the trace began is the rest;
- **steps** (``ProfilerStep#N``): the step's peak, bytes allocated and freed in it, allocated at its end;
  ``growth_bytes_per_step`` is the median step-to-step change of the end-of-step total, and
  ``never_freed`` the sources of allocations made before the last step and never freed in the trace;
- the **largest temporary** of each step (allocated and freed inside it), **capacity** (``deviceProperties``
  ``totalGlobalMem``), and each **out-of-memory** event with what asked and what was live.

The findings over these figures are in :mod:`neurontrace.analysis.memory_findings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import trace_facts, units
from neurontrace.analysis import memory_fold, memory_slices
from neurontrace.analysis import phases as phases_section
from neurontrace.analysis.contract import Context, Section
from neurontrace.analysis.memory_slices import MemorySlice
from neurontrace.analysis.neuron_memory import NeuronMemory, neuron_memory
from neurontrace.analysis.phases import phases
from neurontrace.analysis.stalls import frame_sources
from neurontrace.columns import codes, row_codes
from neurontrace.trace import Trace

TOP_GROUPS = 10  # groups of live / never-freed allocations kept per device


@dataclass
class LiveGroup:
    """Allocations of one op at one source line: how many, their bytes, the largest."""

    op: str | None
    source: str | None  # "file:line function"
    bytes: int
    count: int
    largest_bytes: int
    op_event_id: int | None = None  # the op event that allocated the largest block (system_events.event_id)

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "source": self.source, "bytes": self.bytes, "count": self.count,
                "largest_bytes": self.largest_bytes, "op_event_id": self.op_event_id}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LiveGroup:
        return cls(d.get("op"), d.get("source"), int(d["bytes"]), int(d["count"]), int(d["largest_bytes"]),
                   _opt(d.get("op_event_id")))

    def label(self) -> str:
        where = self.source or "an unknown source"
        return f"{self.op} at {where}" if self.op else where


@dataclass
class StepMemory:
    step: int
    peak_allocated_bytes: int | None
    allocated_bytes: int
    freed_bytes: int
    end_allocated_bytes: int | None
    largest_temporary: LiveGroup | None = None  # the largest block allocated and freed within the step

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "peak_allocated_bytes": self.peak_allocated_bytes,
                "allocated_bytes": self.allocated_bytes, "freed_bytes": self.freed_bytes,
                "end_allocated_bytes": self.end_allocated_bytes,
                "largest_temporary": self.largest_temporary.as_dict() if self.largest_temporary else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepMemory:
        tmp = d.get("largest_temporary")
        return cls(int(d["step"]), _opt(d.get("peak_allocated_bytes")), int(d["allocated_bytes"]),
                   int(d["freed_bytes"]), _opt(d.get("end_allocated_bytes")),
                   LiveGroup.from_dict(tmp) if tmp else None)


@dataclass
class OutOfMemory:
    """An allocation that failed: what asked, and what was live then."""

    ts_ns: int
    requested_bytes: int | None
    op: str | None
    source: str | None
    allocated_bytes: int | None
    reserved_bytes: int | None
    live: list[LiveGroup] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ts_ns": self.ts_ns, "requested_bytes": self.requested_bytes, "op": self.op, "source": self.source,
                "allocated_bytes": self.allocated_bytes, "reserved_bytes": self.reserved_bytes,
                "live": [g.as_dict() for g in self.live]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutOfMemory:
        return cls(int(d["ts_ns"]), _opt(d.get("requested_bytes")), d.get("op"), d.get("source"),
                   _opt(d.get("allocated_bytes")), _opt(d.get("reserved_bytes")),
                   [LiveGroup.from_dict(g) for g in d.get("live") or []])


@dataclass
class DeviceMemory:
    """One allocator's figures: a device of one process of one rank (each process has its own totals)."""

    device: str
    rank: int | None
    pid: str | None
    events: int
    totals_recorded: bool  # false: peaks are of the running sum of Bytes since the trace began
    addresses_recorded: bool  # false: blocks cannot be followed (no live-at-peak, no never-freed)
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    peak_ts_ns: int | None
    reserved_at_peak_bytes: int | None  # reserved when allocated peaked
    allocated_at_reserved_peak_bytes: int | None  # allocated when reserved peaked (fragmentation)
    capacity_bytes: int | None
    capacity_source: str | None
    live_at_peak: list[LiveGroup] = field(default_factory=list)
    live_at_peak_before_trace_bytes: int | None = None  # live at the peak, allocated before the trace began
    steps: list[StepMemory] = field(default_factory=list)
    growth_bytes_per_step: int | None = None
    never_freed: list[LiveGroup] = field(default_factory=list)
    ooms: list[OutOfMemory] = field(default_factory=list)
    categories_at_peak: dict[str, int] = field(default_factory=dict)  # usage by category at the peak (Neuron)
    usage_samples: bool = False  # the events are usage samples (Neuron HBM, host memory), not allocations

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "rank": self.rank, "pid": self.pid, "events": self.events,
            "totals_recorded": self.totals_recorded, "addresses_recorded": self.addresses_recorded,
            "peak_allocated_bytes": self.peak_allocated_bytes, "peak_reserved_bytes": self.peak_reserved_bytes,
            "peak_ts_ns": self.peak_ts_ns, "reserved_at_peak_bytes": self.reserved_at_peak_bytes,
            "allocated_at_reserved_peak_bytes": self.allocated_at_reserved_peak_bytes,
            "capacity_bytes": self.capacity_bytes, "capacity_source": self.capacity_source,
            "live_at_peak": [g.as_dict() for g in self.live_at_peak],
            "live_at_peak_before_trace_bytes": self.live_at_peak_before_trace_bytes,
            "steps": [s.as_dict() for s in self.steps], "growth_bytes_per_step": self.growth_bytes_per_step,
            "never_freed": [g.as_dict() for g in self.never_freed], "ooms": [o.as_dict() for o in self.ooms],
            "categories_at_peak": self.categories_at_peak, "usage_samples": self.usage_samples,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceMemory:
        return cls(
            str(d["device"]), _opt(d.get("rank")), d.get("pid"), int(d["events"]), bool(d["totals_recorded"]),
            bool(d["addresses_recorded"]),
            _opt(d.get("peak_allocated_bytes")), _opt(d.get("peak_reserved_bytes")), _opt(d.get("peak_ts_ns")),
            _opt(d.get("reserved_at_peak_bytes")), _opt(d.get("allocated_at_reserved_peak_bytes")),
            _opt(d.get("capacity_bytes")), d.get("capacity_source"),
            [LiveGroup.from_dict(g) for g in d.get("live_at_peak") or []],
            _opt(d.get("live_at_peak_before_trace_bytes")),
            [StepMemory.from_dict(s) for s in d.get("steps") or []], _opt(d.get("growth_bytes_per_step")),
            [LiveGroup.from_dict(g) for g in d.get("never_freed") or []],
            [OutOfMemory.from_dict(o) for o in d.get("ooms") or []],
            {str(k): int(v) for k, v in (d.get("categories_at_peak") or {}).items()},
            bool(d.get("usage_samples")))


@dataclass
class Memory:
    """The memory section: one entry per device and rank; ``neuron``: a Neuron profile's HBM by usage type and
    spill figures per NeuronCore (analysis/neuron_memory.py)."""

    devices: list[DeviceMemory]
    neuron: list[NeuronMemory] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"devices": [d.as_dict() for d in self.devices], "neuron": [n.as_dict() for n in self.neuron]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Memory:
        return cls([DeviceMemory.from_dict(x) for x in d.get("devices") or []],
                   [NeuronMemory.from_dict(x) for x in d.get("neuron") or []])


def _opt(v: Any) -> int | None:
    return None if v is None else int(v)


# -- computing it -------------------------------------------------------------------------------------


def memory(trace: Trace, frames: dict[int, str] | None = None) -> Memory | None:
    """The memory figures of a trace (one rank or several); None when it holds no memory events and no Neuron
    memory figures."""
    t = trace.memory_events
    neuron = neuron_memory(trace)
    if t.num_rows == 0:
        return Memory([], neuron) if neuron else None
    frames = frame_sources(trace) if frames is None else frames
    steps = [(s["step"], s["start_ns"], s["start_ns"] + s["dur_ns"]) for s in phases(trace).steps]
    return from_rows(t, steps, frames, lambda device: _capacity(trace, device), neuron)


def from_rows(t: pa.Table, steps: list[tuple[int, int, int]], frames: dict[int, str],
              capacity: Callable[[str], tuple[int | None, str | None]], neuron: list[NeuronMemory]) -> Memory:
    """The section's value from memory events (``schema.MEMORY_EVENTS`` columns, in recorded order), the
    steps ``(number, start, end)``, the frames' sources and each device's capacity."""
    rank = pc.fill_null(t["rank"], -1).to_numpy()
    dev_code, dev_names = codes(t["device"])
    pid_code, pid_names = codes(pc.fill_null(t["pid"].cast(pa.string()), ""))
    code = row_codes(rank, dev_code, pid_code)
    out = []
    _, at = np.unique(code, return_index=True)
    parts = [(int(rank[i]), str(dev_names[dev_code[i]]), str(pid_names[pid_code[i]]), i) for i in at.tolist()]
    for r, d, p, i in sorted(parts):
        rows = np.flatnonzero(code == code[i])
        out.append(_device(capacity(d), t.take(pa.array(rows)), d, None if r < 0 else r, p or None, steps,
                           frames))
    return Memory(out, neuron)


class _Coded:
    """A column as int codes into its distinct values (-1: None), indexed like a list."""

    def __init__(self, code: np.ndarray, values: list[Any]) -> None:
        self.code, self.values = code, values

    def __getitem__(self, i: int) -> Any:
        c = int(self.code[i])
        return None if c < 0 else self.values[c]


class _Ints:
    """An integer column indexed like a list (None where null), each value through ``fn`` when given: ids
    (op events, frames) are near-unique, so coding them by distinct value would cost a Python int per row."""

    def __init__(self, col: pa.ChunkedArray | pa.Array, fn: Any = None) -> None:
        self.valid = col.is_valid().to_numpy(zero_copy_only=False)
        self.value = pc.fill_null(col, 0).to_numpy(zero_copy_only=False)
        self.fn = fn

    def __getitem__(self, i: int) -> Any:
        if not self.valid[i]:
            return None
        v = int(self.value[i])
        return v if self.fn is None else self.fn(v)


def _coded(col: pa.ChunkedArray | pa.Array, fn: Any = None) -> _Coded | _Ints:
    """``col`` as a :class:`_Coded` (each distinct value through ``fn`` when given); an integer column as
    :class:`_Ints`."""
    if pa.types.is_integer(col.type):
        return _Ints(col, fn)
    code, values = codes(col)
    return _Coded(code, values if fn is None else [fn(v) for v in values])


@dataclass
class _Rows:
    """One device's memory events in time order, as numpy columns."""

    ts: np.ndarray
    action: np.ndarray
    nbytes: np.ndarray  # 0 where unknown
    allocated: np.ndarray  # the recorded total, or the running sum of bytes
    reserved: np.ndarray | None
    freed_at: np.ndarray  # per row: the position at which its block is freed or reused (len: never)
    tracked: np.ndarray  # per row: an allocation of a known block (with its address)
    op: _Coded | _Ints  # per row, from a code array and the distinct values: no Python object per memory event
    source: _Coded | _Ints
    op_event: _Coded | _Ints
    is_alloc: np.ndarray = field(init=False)  # action == "alloc", once: each step's figures read it
    is_free: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.is_alloc, self.is_free = self.action == "alloc", self.action == "free"

    def group(self, rows: np.ndarray, top: int = TOP_GROUPS) -> list[LiveGroup]:
        """Rows (allocations) grouped by op and source, most bytes first."""
        acc: dict[tuple[str | None, str | None], list[int]] = {}
        for i in rows.tolist():
            g = acc.setdefault((self.op[i], self.source[i]), [0, 0, 0, i])
            b = int(self.nbytes[i])
            g[0], g[1] = g[0] + b, g[1] + 1
            if b > g[2]:
                g[2], g[3] = b, i
        groups = [LiveGroup(op, src, b, n, big, self.op_event[i]) for (op, src), (b, n, big, i) in acc.items()]
        return sorted(groups, key=lambda g: (-g.bytes, g.op or "", g.source or ""))[:top]

    def live_at(self, p: int) -> np.ndarray:
        """Allocations live just after row ``p``."""
        upto = np.arange(len(self.ts)) <= p
        return np.flatnonzero(upto & self.tracked & (self.freed_at > p))


def _device(capacity: tuple[int | None, str | None], t: pa.Table, device: str, rank: int | None, pid: str | None,
            steps: list[tuple[int, int, int]], frames: dict[int, str]) -> DeviceMemory:
    order = np.argsort(t["ts_ns"].to_numpy(), kind="stable")
    t = t.take(pa.array(order))
    rows = _rows(t, frames)
    recorded = t["total_allocated_bytes"].null_count < t.num_rows
    followed = bool(rows.tracked.any())
    p = int(np.argmax(rows.allocated))
    res = rows.reserved
    rp = int(np.argmax(res)) if res is not None else None
    live = rows.live_at(p)
    cap, cap_source = capacity
    out = DeviceMemory(
        device, rank, pid, t.num_rows, recorded, followed,
        peak_allocated_bytes=int(rows.allocated[p]),
        peak_reserved_bytes=int(res[rp]) if res is not None and rp is not None else None,
        peak_ts_ns=int(rows.ts[p]),
        reserved_at_peak_bytes=int(res[p]) if res is not None else None,
        allocated_at_reserved_peak_bytes=int(rows.allocated[rp]) if rp is not None else None,
        capacity_bytes=cap, capacity_source=cap_source, live_at_peak=rows.group(live),
        live_at_peak_before_trace_bytes=int(rows.allocated[p]) - int(rows.nbytes[live].sum())
        if recorded and followed else None)
    at_peak = np.flatnonzero((rows.ts == rows.ts[p]) & (rows.action == "usage"))
    cat = t["category"].take(pa.array(at_peak)).cast(pa.string()).to_pylist()
    out.categories_at_peak = {str(c): int(rows.nbytes[i]) for c, i in zip(cat, at_peak.tolist(), strict=True)
                              if c is not None and rows.nbytes[i] > 0}
    out.usage_samples = bool((rows.action == "usage").all())
    out.steps = [_step(rows, n, lo, hi) for n, lo, hi in steps]
    ends = [s.end_allocated_bytes for s in out.steps if s.end_allocated_bytes is not None]
    if len(ends) >= 3:
        out.growth_bytes_per_step = int(np.median(np.diff(np.asarray(ends, dtype=np.int64))))
    before_last = rows.ts < steps[-1][1] if steps else np.ones(len(rows.ts), bool)
    after_first = rows.ts >= steps[0][1] if steps else np.ones(len(rows.ts), bool)
    never = np.flatnonzero(rows.tracked & (rows.freed_at == len(rows.ts)) & before_last & after_first)
    out.never_freed = rows.group(never)
    for i in np.flatnonzero(rows.action == "oom").tolist():
        before = max(i - 1, 0)
        out.ooms.append(OutOfMemory(int(rows.ts[i]), int(rows.nbytes[i]) or None, rows.op[i], rows.source[i],
                                    int(rows.allocated[i]), int(res[i]) if res is not None else None,
                                    rows.group(rows.live_at(before), top=5)))
    return out


def _rows(t: pa.Table, frames: dict[int, str]) -> _Rows:
    code, names = codes(t["action"])  # a numpy text array (a few bytes a row), not a Python str per row
    action = np.array([*(str(n) for n in names), ""])[code]
    nbytes = pc.fill_null(t["bytes"], 0).to_numpy()
    alloc_col = t["total_allocated_bytes"]
    change = np.where(np.isin(action, ["alloc", "free"]), nbytes, 0)
    # the recorded totals, carried over rows without one; else the running sum
    allocated = _carried(alloc_col) if alloc_col.null_count < len(alloc_col) else np.cumsum(change)
    res_col = t["total_reserved_bytes"]
    reserved = _carried(res_col) if res_col.null_count < len(res_col) else None
    if reserved is not None and not reserved.any() and allocated.any():
        reserved = None  # all zero: an allocator that reserves nothing (the CPU's) records no reserve
    # the source of each row, looked up once per distinct frame (not once per allocator record)
    tracked = (action == "alloc") & (nbytes > 0) & t["addr"].is_valid().to_numpy(zero_copy_only=False)
    return _Rows(t["ts_ns"].to_numpy(), action, nbytes, allocated, reserved, _freed_at(t["addr"], action), tracked,
                 _coded(t["op"]), _coded(t["frame_id"], frames.get), _coded(t["op_event_id"]))


def _carried(col: pa.ChunkedArray) -> np.ndarray:
    """The column with each null replaced by the last value before it (0 before the first)."""
    filled = pc.fill_null_forward(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return np.asarray(pc.fill_null(filled, 0).to_numpy(), dtype=np.int64)


def _freed_at(addr: pa.ChunkedArray, action: np.ndarray) -> np.ndarray:
    """Per row: the position of the next event on the same address (its free, or a reuse of the block);
    ``len`` when none follows (never freed in the trace) or the address is unknown."""
    n = len(action)
    out = np.full(n, n, dtype=np.int64)
    a = pc.fill_null(addr, -1).to_numpy()
    block = np.isin(action, ["alloc", "free"]) & (a >= 0)
    rows = np.flatnonzero(block)
    rows = rows[np.lexsort((rows, a[rows]))]  # by address, then time
    same = a[rows[1:]] == a[rows[:-1]]
    out[rows[:-1][same]] = rows[1:][same]
    return out


def _step(rows: _Rows, number: int, lo: int, hi: int) -> StepMemory:
    first, last = np.searchsorted(rows.ts, lo, side="left"), np.searchsorted(rows.ts, hi, side="left")
    inside = np.arange(first, last)
    alloc = inside[rows.is_alloc[first:last]]
    free = inside[rows.is_free[first:last]]
    end = int(rows.allocated[last - 1]) if last > 0 else None
    temps = alloc[(rows.freed_at[alloc] < last) & rows.tracked[alloc]]
    tmp = None
    if len(temps):
        big = temps[np.argmax(rows.nbytes[temps])]
        tmp = rows.group(np.asarray([big]))[0]
    return StepMemory(number, int(rows.allocated[inside].max()) if len(inside) else None,
                      int(rows.nbytes[alloc].sum()), int(-rows.nbytes[free].sum()), end, tmp)


def _capacity(trace: Trace, device: str) -> tuple[int | None, str | None]:
    """The device's memory size, as its input states it (trace_facts; CUDA/ROCm: ``deviceProperties`` of the
    device's id), and where that was read."""
    if device.partition(":")[0] not in ("cuda", "rocm"):
        return None, None
    found = trace_facts.devices(trace).get(device)
    if found is None or found.memory_bytes is None:
        return None, None
    return found.memory_bytes, f"{found.memory_source} ({found.name})"


# -- the section -----------------------------------------------------------------------------------------


def _compute(ctx: Context) -> Memory | MemorySlice | None:
    """The rank's Memory; a time slice's rows for ``merge`` with ``Options.owned`` (analysis/memory_slices.py)."""
    if ctx.options.owned is not None:
        ph = ctx.sections.get(phases_section.SECTION.key)
        return memory_slices.slice_value(ctx.trace, ctx.frames, ctx.options.owned, _capacity,
                                         ph.steps if ph is not None else phases(ctx.trace).steps)
    return memory(ctx.trace, ctx.frames)


def merge(parts: list[MemorySlice | None]) -> Memory | None:
    """One rank's Memory from its time slices' values, in time order (analysis/memory_fold.py)."""
    got: Memory | None = memory_fold.merge(parts, _MAKE)
    return got


def _finish(state: memory_fold.MemoryFold | None) -> Memory | None:
    got: Memory | None = memory_fold.finish(state, _MAKE)
    return got


def combine(parts: list[Memory]) -> Memory:
    """A job's memory: every rank's devices, in rank order."""
    return Memory([d for p in parts for d in p.devices], [n for p in parts for n in p.neuron])


def text(m: Memory) -> list[str]:
    out = []
    for d in m.devices:
        who = d.device if d.rank is None else f"rank {d.rank} {d.device}"
        rel = "" if d.totals_recorded else " (running sum of Bytes since the trace began: no totals recorded)"
        cap = (f" of {units.size(d.capacity_bytes)} ({units.share(d.peak_reserved_bytes / d.capacity_bytes)} reserved)"
               if d.capacity_bytes and d.peak_reserved_bytes is not None else "")
        out.append(f"{who}: peak {units.size(d.peak_allocated_bytes)} allocated, "
                   f"{units.size(d.peak_reserved_bytes)} reserved{cap}{rel}; {d.events} events")
        for g in d.live_at_peak[:5]:
            out.append(f"  live at peak: {units.size(g.bytes)} in {g.count} blocks, {g.label()}")
        top = sorted(d.categories_at_peak.items(), key=lambda kv: -kv[1])[:5]
        if top:
            out.append("  in use at peak: " + ", ".join(f"{k} {units.size(v)}" for k, v in top))
        if d.live_at_peak_before_trace_bytes:
            out.append(f"  live at peak: {units.size(d.live_at_peak_before_trace_bytes)} allocated before the "
                       "trace began")
        if d.growth_bytes_per_step is not None:
            out.append(f"  growth per step: {units.size(d.growth_bytes_per_step)} over {len(d.steps)} steps")
        for g in d.never_freed[:3]:
            out.append(f"  never freed: {units.size(g.bytes)} in {g.count} blocks, {g.label()}")
        for o in d.ooms:
            asked = LiveGroup(o.op, o.source, 0, 0, 0).label()  # where the failed request came from
            out.append(f"  out of memory: {units.size(o.requested_bytes)} asked at {asked} with "
                       f"{units.size(o.allocated_bytes)} allocated")
    for n in m.neuron:
        out += n.text()
    return out


_MAKE = memory_fold.Makers(LiveGroup, StepMemory, OutOfMemory, DeviceMemory, Memory)
SECTION = Section("memory", "memory", _compute, to_json=lambda v: v.as_dict(), from_json=Memory.from_dict,
                  text=text, combine=combine, merge=merge, fold=memory_fold.fold, finish=_finish)
