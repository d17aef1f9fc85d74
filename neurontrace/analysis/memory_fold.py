"""The memory section out of core as a running fold: each time slice's rows folded in, in time order, and dropped.

``memory.from_rows`` reads a device's allocator events whole; out of core a slice's events
(analysis/memory_slices.MemorySlice) are folded into a state that keeps only what the figures need of the
slices before (``python bench/fold_state.py`` prints its size after each slice):

- the running totals (the last recorded ``Total Allocated`` / ``Total Reserved``, or the running sum of
  ``Bytes``), the peak so far with the groups live at it (computed when a slice raises the peak: top
  ``TOP_GROUPS``), the reserved peak, the out-of-memory events with what was live then;
- the **live blocks**: per address, the allocation last made there and not freed or reused since (its bytes,
  op, source, op event): the allocator's state, what the live-at-peak, never-freed and each step's largest
  temporary read; it grows only with the blocks that stay allocated (a leak: what ``never_freed`` reports);
- per step (``ProfilerStep#N``, the steps the slices report, merged by number as phases does) and device,
  its figures so far: peak, bytes allocated and freed, the total at the last event before its end, its
  largest temporary. A step is added when the slice it starts in is folded (its end is known then: the
  slice holds the whole step event), so every later event is counted in it.

The value equals what ``from_rows`` gives on the rank's rows joined (tests/test_sliced_sections.py, cuts at
arbitrary instants), with one bound stated: whether a device's totals (and its reserve) are recorded is read
from the first slice holding its events (a Kineto process records them on every event or on none), and a step
number that another process marks again in a later slice with a later end counts the events after the
earlier end only from that slice on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.memory_slices import MemorySlice
from neurontrace.analysis.neuron_memory import NeuronMemory
from neurontrace.columns import codes, row_codes

TOP_GROUPS = 10  # groups of live / never-freed allocations kept per device (memory.TOP_GROUPS)

# a live block: (bytes, op, source, op event id, ts, order of its event in the device's rows)
Block = tuple[int, str | None, str | None, int | None, int, int]
# a group of blocks: (op, source, bytes, count, largest bytes, op event id of the largest): memory.LiveGroup's fields
Group = tuple[str | None, str | None, int, int, int, int | None]
# an out-of-memory event: (ts, requested bytes, op, source, allocated, reserved, live groups): memory.OutOfMemory's
Oom = tuple[int, int | None, str | None, str | None, int, int | None, list[Group]]


class Makers(NamedTuple):
    """The section's value types (memory.py's: this module cannot import it, memory.py imports this one)."""

    group: Callable[..., Any]
    step: Callable[..., Any]
    oom: Callable[..., Any]
    device: Callable[..., Any]
    memory: Callable[..., Any]


def _group(blocks: list[Block], top: int = TOP_GROUPS) -> list[Group]:
    """Blocks (in row order) grouped by op and source, most bytes first (as memory._Rows.group)."""
    acc: dict[tuple[str | None, str | None], list[Any]] = {}
    for b, op, src, ev, _, _ in blocks:
        g = acc.setdefault((op, src), [0, 0, 0, ev])
        g[0], g[1] = g[0] + b, g[1] + 1
        if b > g[2]:
            g[2], g[3] = b, ev
    groups = [(op, src, b, n, big, ev) for (op, src), (b, n, big, ev) in acc.items()]
    return sorted(groups, key=lambda g: (-g[2], g[0] or "", g[1] or ""))[:top]


@dataclass
class _Step:
    """One step's figures on one device so far."""

    peak: int | None = None
    allocated: int = 0
    freed: int = 0
    end: int | None = None
    temp: tuple[int, int, Group] | None = None  # (-bytes, order, group) of the largest temporary so far


@dataclass
class _Device:
    """One allocator's running state (see the module's docstring)."""

    recorded: bool
    res_recorded: bool
    events: int = 0
    seen: int = 0  # rows folded (the order of the next one)
    alloc: int = 0  # the running total (carried, or the running sum)
    res: int = 0
    alloc_any: bool = False
    res_any: bool = False
    followed: bool = False
    usage_only: bool = True
    live: dict[int, Block] = field(default_factory=dict)  # address -> its live block, in row order
    peak: tuple[int, int, int | None, list[Group], int, dict[str, int]] | None = None
    rpeak: tuple[int, int] | None = None  # (reserved, allocated then)
    ooms: list[Oom] = field(default_factory=list)
    steps: dict[int, _Step] = field(default_factory=dict)


@dataclass
class MemoryFold:
    """The running state of the memory section over one rank's slices."""

    devices: dict[tuple[int, str, str], _Device] = field(default_factory=dict)
    steps: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # number -> (number, start, end)
    capacity: dict[str, tuple[int | None, str | None]] = field(default_factory=dict)
    neuron: list[NeuronMemory] | None = None
    owned: tuple[int, int] | None = None  # the last slice folded


def fold(state: MemoryFold | None, part: MemorySlice | None) -> MemoryFold | None:
    """``state`` with one more slice's value folded in (the slices in time order)."""
    if part is None:
        return state
    if not isinstance(part, MemorySlice):
        raise ValueError("memory.merge takes values computed with Options.owned")
    st = state or MemoryFold()
    if st.neuron is None:
        st.neuron = part.neuron
    st.owned = part.owned
    for n, lo, hi in part.steps:  # a step several processes mark, cut between them: earliest start, latest end
        cur = st.steps.get(n)
        st.steps[n] = (n, lo, hi) if cur is None else (n, min(cur[1], lo), max(cur[2], hi))
        for d in st.devices.values():
            if n not in d.steps:
                d.steps[n] = _Step(end=d.alloc if d.seen else None)
    st.capacity.update(part.capacity)
    t = part.rows
    if t.num_rows:
        rank = pc.fill_null(t["rank"], -1).to_numpy()
        dev_code, dev_names = codes(t["device"])
        pid_code, pid_names = codes(pc.fill_null(t["pid"].cast(pa.string()), ""))
        key = row_codes(rank, dev_code, pid_code)  # one code per (rank, device, pid)
        _, at = np.unique(key, return_index=True)
        for i in at.tolist():
            k = (int(rank[i]), str(dev_names[dev_code[i]]), str(pid_names[pid_code[i]]))
            rows = t.take(pa.array(np.flatnonzero(key == key[i])))
            _fold_device(st, k, rows, part.frames)
    return st


def _fold_device(st: MemoryFold, k: tuple[int, str, str], t: pa.Table, frames: dict[int, str]) -> None:
    t = t.take(pa.array(np.argsort(t["ts_ns"].to_numpy(), kind="stable")))
    n = t.num_rows
    alloc_col, res_col = t["total_allocated_bytes"], t["total_reserved_bytes"]
    d = st.devices.get(k)
    if d is None:
        d = st.devices[k] = _Device(alloc_col.null_count < n, res_col.null_count < n)
    code, names = codes(t["action"])
    action = np.array([*(str(x) for x in names), ""])[code]
    nbytes = pc.fill_null(t["bytes"], 0).to_numpy().astype(np.int64)
    ts = t["ts_ns"].to_numpy().astype(np.int64)
    change = np.where(np.isin(action, ["alloc", "free"]), nbytes, 0)
    alloc = _carried(alloc_col, d.alloc) if d.recorded else d.alloc + np.cumsum(change)
    res = _carried(res_col, d.res) if d.res_recorded else None
    addr = pc.fill_null(t["addr"], -1).to_numpy().astype(np.int64)
    tracked = (action == "alloc") & (nbytes > 0) & t["addr"].is_valid().to_numpy(zero_copy_only=False)
    op_c, op_v = codes(t["op"])
    fr = pc.fill_null(t["frame_id"], -1).to_numpy().astype(np.int64)
    ev_col = pc.fill_null(t["op_event_id"], -1).to_numpy().astype(np.int64)
    ev_ok = t["op_event_id"].is_valid().to_numpy(zero_copy_only=False)
    base = d.seen

    def block(j: int) -> Block:
        c = int(op_c[j])
        return (int(nbytes[j]), None if c < 0 else op_v[c], frames.get(int(fr[j])) if fr[j] >= 0 else None,
                int(ev_col[j]) if ev_ok[j] else None, int(ts[j]), base + j)

    # the next block event on the same address inside the slice (n: none), and each address's first one
    is_block = np.isin(action, ["alloc", "free"]) & (addr >= 0)
    rows = np.flatnonzero(is_block)
    rows = rows[np.lexsort((rows, addr[rows]))]
    freed_at = np.full(n, n, np.int64)
    same = addr[rows[1:]] == addr[rows[:-1]]
    freed_at[rows[:-1][same]] = rows[1:][same]
    first_of = {int(addr[j]): int(j) for j in rows[np.r_[True, ~same]].tolist()} if len(rows) else {}

    def live_at(p: int, top: int = TOP_GROUPS) -> tuple[list[Group], int]:
        """The blocks live just after local row ``p`` (-1: at the slice's start), grouped; their bytes."""
        before = [b for a, b in d.live.items() if first_of.get(a, n) > p]
        mine = np.flatnonzero(tracked[:p + 1] & (freed_at[:p + 1] > p))
        blocks = before + [block(j) for j in mine.tolist()]
        return _group(blocks, top), sum(b[0] for b in blocks)

    d.events += n
    d.alloc_any = d.alloc_any or bool(alloc.any())
    d.res_any = d.res_any or (res is not None and bool(res.any()))
    d.followed = d.followed or bool(tracked.any())
    d.usage_only = d.usage_only and bool((action == "usage").all())
    p = int(np.argmax(alloc))
    if d.peak is None or int(alloc[p]) > d.peak[0]:
        groups, live_bytes = live_at(p)
        at_peak = np.flatnonzero((ts == ts[p]) & (action == "usage"))
        cat = t["category"].take(pa.array(at_peak)).cast(pa.string()).to_pylist()
        cats = {str(c): int(nbytes[i]) for c, i in zip(cat, at_peak.tolist(), strict=True)
                if c is not None and nbytes[i] > 0}
        d.peak = (int(alloc[p]), int(ts[p]), int(res[p]) if res is not None else None, groups, live_bytes, cats)
    if res is not None:
        rp = int(np.argmax(res))
        if d.rpeak is None or int(res[rp]) > d.rpeak[0]:
            d.rpeak = (int(res[rp]), int(alloc[rp]))
    for i in np.flatnonzero(action == "oom").tolist():
        c = int(op_c[i])
        d.ooms.append((int(ts[i]), int(nbytes[i]) or None, None if c < 0 else op_v[c],
                       frames.get(int(fr[i])) if fr[i] >= 0 else None, int(alloc[i]),
                       int(res[i]) if res is not None else None, live_at(i - 1, top=5)[0]))
    # blocks ended in the slice: (block, local row that ends it), for the steps' largest temporaries
    ended = [(b, first_of[a]) for a, b in d.live.items() if a in first_of]
    ended += [(block(j), int(freed_at[j])) for j in np.flatnonzero(tracked & (freed_at < n)).tolist()]
    _fold_steps(st, d, ts, action, nbytes, alloc, ended)
    for a, j in _last_of(addr, rows, same).items():
        d.live.pop(a, None)
        if tracked[j]:
            d.live[a] = block(j)
    d.seen += n
    d.alloc = int(alloc[-1])
    if res is not None:
        d.res = int(res[-1])


def _last_of(addr: np.ndarray, rows: np.ndarray, same: np.ndarray) -> dict[int, int]:
    """Each address's last block event in the slice (``rows``: sorted by address, then row)."""
    if not len(rows):
        return {}
    last = rows[np.r_[~same, True]]
    return {int(addr[j]): int(j) for j in np.sort(last).tolist()}


def _fold_steps(st: MemoryFold, d: _Device, ts: np.ndarray, action: np.ndarray, nbytes: np.ndarray,
                alloc: np.ndarray, ended: list[tuple[Block, int]]) -> None:
    lo_slice = int(ts[0])
    for num, (_, lo, hi) in st.steps.items():
        if hi <= lo_slice:
            continue  # ended before the slice: nothing in it counts
        s = d.steps.get(num)
        if s is None:
            s = d.steps[num] = _Step(end=d.alloc if d.seen else None)
        first, last = int(np.searchsorted(ts, lo, "left")), int(np.searchsorted(ts, hi, "left"))
        if last > 0:
            s.end = int(alloc[last - 1])
        if last > first:
            act = action[first:last]
            peak = int(alloc[first:last].max())
            s.peak = peak if s.peak is None else max(s.peak, peak)
            s.allocated += int(nbytes[first:last][act == "alloc"].sum())
            s.freed += int(-nbytes[first:last][act == "free"].sum())
        for b, at in ended:  # allocated in the step, freed before its end
            if lo <= b[4] < hi and at < last:
                cand = (-b[0], b[5])
                if s.temp is None or cand < s.temp[:2]:
                    s.temp = (cand[0], cand[1], (b[1], b[2], b[0], 1, b[0], b[3]))


def _carried(col: pa.ChunkedArray, carry: int) -> np.ndarray:
    """The column with each null replaced by the last value before it (``carry`` before the first)."""
    filled = pc.fill_null_forward(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return np.asarray(pc.fill_null(filled, carry).to_numpy(), dtype=np.int64)


def finish(state: MemoryFold | None, make: Makers) -> Any:
    """The rank's Memory (``make``'s types) from the folded state (None: no slice had memory events or Neuron
    figures)."""
    if state is None:
        return None
    neuron = state.neuron or []
    if not state.devices:
        return make.memory([], neuron) if neuron else None
    steps = sorted(state.steps.values(), key=lambda s: s[1])
    out = [_device(d, dev, None if r < 0 else r, pid or None, steps, state.capacity.get(dev, (None, None)), make)
           for (r, dev, pid), d in sorted(state.devices.items())]
    return make.memory(out, neuron)


def _device(d: _Device, device: str, rank: int | None, pid: str | None, steps: list[tuple[int, int, int]],
            cap: tuple[int | None, str | None], make: Makers) -> Any:
    assert d.peak is not None
    reserved = d.res_recorded and not (not d.res_any and d.alloc_any)  # all zero: no reserve recorded
    value, ts, res_at, groups, live_bytes, cats = d.peak

    def grouped(gs: list[Group]) -> list[Any]:
        return [make.group(*g) for g in gs]

    out = make.device(
        device, rank, pid, d.events, d.recorded, d.followed,
        peak_allocated_bytes=value,
        peak_reserved_bytes=d.rpeak[0] if reserved and d.rpeak else None,
        peak_ts_ns=ts,
        reserved_at_peak_bytes=res_at if reserved else None,
        allocated_at_reserved_peak_bytes=d.rpeak[1] if reserved and d.rpeak else None,
        capacity_bytes=cap[0], capacity_source=cap[1], live_at_peak=grouped(groups),
        live_at_peak_before_trace_bytes=value - live_bytes if d.recorded and d.followed else None)
    out.categories_at_peak = cats
    out.usage_samples = d.usage_only
    for num, _, _ in steps:
        s = d.steps.get(num) or _Step()
        out.steps.append(make.step(num, s.peak, s.allocated, s.freed, s.end,
                                   make.group(*s.temp[2]) if s.temp else None))
    ends = [s.end for s in (d.steps.get(num) or _Step() for num, _, _ in steps) if s.end is not None]
    if len(ends) >= 3:
        out.growth_bytes_per_step = int(np.median(np.diff(np.asarray(ends, dtype=np.int64))))
    never = [b for b in d.live.values() if not steps or steps[0][1] <= b[4] < steps[-1][1]]
    out.never_freed = grouped(_group(never))
    for t, asked, op, src, alloc, res, live in d.ooms:
        out.ooms.append(make.oom(t, asked, op, src, alloc, res if reserved else None, grouped(live)))
    return out


def merge(parts: list[MemorySlice | None], make: Makers) -> Any:
    """One rank's Memory from its slices' values, in time order: the fold over them, finished."""
    state: MemoryFold | None = None
    for p in parts:
        state = fold(state, p)
    return finish(state, make)
