"""The memory section out of core: one rank's value from the values of its time slices (analysis/slices.py).

The allocator's figures are a running state: the totals carried over rows without one, the blocks live at the
peak (allocated in any earlier slice and not freed since), each block's free (perhaps slices later), the growth
from step to step and the blocks never freed. Rather than fold that state slice by slice, a slice keeps its own
memory events (those at instants in it: each event is in exactly one slice) projected to the columns the
section reads, with the steps that start in it, the sources of the frames its events name and each device's
capacity; ``merge`` joins them in time order and computes the section once, by the same code as in memory, so
the value is the whole rank's exactly, wherever the cuts fall.

What this holds is the memory events table alone, projected (``python bench/slice_parts.py TRACE``): 1.04 MB
of Arrow for resnet50's 12,838 allocator events, 2.97% of its 35.2 MB of JSON (docs/memory.md, "Out of core").
The events, kernels and ops (the bulk) are never held whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.neuron_memory import NeuronMemory, neuron_memory
from neurontrace.analysis.slice_rows import kept
from neurontrace.analysis.slices import owned_rows
from neurontrace.trace import Trace

# What memory.from_rows reads of the memory events (not tid, stream)
COLUMNS = ("ts_ns", "device", "rank", "pid", "action", "addr", "bytes", "total_allocated_bytes",
           "total_reserved_bytes", "op_event_id", "op", "frame_id", "category")


@dataclass
class MemorySlice:
    """A time slice's part of the memory section (see the module's docstring)."""

    owned: tuple[int, int]
    rows: pa.Table  # its memory events, projected to COLUMNS, in recorded order
    steps: list[tuple[int, int, int]]  # (number, start, end) of the steps starting in the slice
    frames: dict[int, str]  # the sources of the frames its rows name
    capacity: dict[str, tuple[int | None, str | None]] = field(default_factory=dict)  # device -> (bytes, source)
    neuron: list[NeuronMemory] = field(default_factory=list)  # from metadata: the same in every slice


def slice_value(trace: Trace, frames: dict[int, str], owned: tuple[int, int],
                capacity: Callable[[Trace, str], tuple[int | None, str | None]],
                steps_of_slice: list[dict[str, int]]) -> MemorySlice:
    """A slice's part: its memory events, and of ``steps_of_slice`` (phases' steps of the slice's trace) those
    starting in it."""
    t = trace.memory_events
    rows = kept(t, owned_rows(t, owned), COLUMNS)
    steps = [(s["step"], s["start_ns"], s["start_ns"] + s["dur_ns"]) for s in steps_of_slice
             if owned[0] <= s["start_ns"] < owned[1]]
    fids = np.unique(pc.fill_null(rows["frame_id"], -1).to_numpy()) if rows.num_rows else np.zeros(0, np.int64)
    devices = pc.unique(rows["device"].cast(pa.string())).to_pylist() if rows.num_rows else []
    return MemorySlice(owned, rows, steps, {int(f): frames[int(f)] for f in fids.tolist() if int(f) in frames},
                       {str(d): capacity(trace, str(d)) for d in devices}, neuron_memory(trace))


T = TypeVar("T")
Capacity = Callable[[str], tuple[int | None, str | None]]


def merge_slices(parts: list[MemorySlice | None],
                 compute: Callable[[pa.Table | None, list[tuple[int, int, int]], dict[int, str], Capacity,
                                    list[NeuronMemory]], T | None]) -> T | None:
    """The rank's value from its slices' values, in time order: ``compute`` (memory.py's, on the rank's rows:
    None when there are none) on the slices' rows joined, exactly what ``compute`` gives on the rank."""
    vals = [p for p in parts if p is not None]
    if not vals:
        return None
    if not all(isinstance(p, MemorySlice) for p in vals):
        raise ValueError("memory.merge takes values computed with Options.owned")
    neuron = vals[0].neuron
    tables = [p.rows for p in vals if p.rows.num_rows]
    rows = pa.concat_tables(tables).unify_dictionaries().combine_chunks() if tables else None
    by_step: dict[int, tuple[int, int, int]] = {}
    for p in vals:  # a step several processes mark, cut between them: earliest start, latest end (as phases)
        for n, lo, hi in p.steps:
            cur = by_step.get(n)
            by_step[n] = (n, lo, hi) if cur is None else (n, min(cur[1], lo), max(cur[2], hi))
    steps = sorted(by_step.values(), key=lambda s: s[1])
    frames: dict[int, str] = {}
    capacity: dict[str, tuple[int | None, str | None]] = {}
    for p in vals:
        frames.update(p.frames)
        capacity.update(p.capacity)
    return compute(rows, steps, frames, lambda d: capacity.get(d, (None, None)), neuron)
