"""The memory section out of core: one rank's value from the values of its time slices (analysis/slices.py).

The allocator's figures are a running state: the totals carried over rows without one, the blocks live at the
peak (allocated in any earlier slice and not freed since), each block's free (perhaps slices later), the growth
from step to step and the blocks never freed. A slice keeps its own
memory events (those at instants in it: each event is in exactly one slice) projected to the columns the
section reads, with the steps that start in it, the sources of the frames its events name and each device's
capacity; analysis/memory_fold.py folds them into the rank's running state in time order as each slice is
computed (and ``memory.merge`` over a list), so the value is the whole rank's, wherever the cuts fall, and no
slice's rows outlive its fold (docs/memory.md, "Out of core").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
