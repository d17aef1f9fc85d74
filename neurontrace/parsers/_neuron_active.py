"""The profile's own engine-active time, checked against the instructions read as compute.

Neuron writes the engine-active timeline beside the instructions: ``ActiveTime`` in Parquet and the
``active_time`` section of legacy JSON (neuron.md §3.7 ``ActiveTime``: "Engines are considered active
when it is processing at least one instruction (excluding semaphore waits). This is created by merging
the intervals of all instructions on the engine"; addendum 2 saw the same rule in real JSON files).
Its union over engines is therefore what the instructions read as ``compute`` must cover. Where a
file carries it, :func:`check` compares the two unions and records the result as metadata
``neuron.active_time_check``; a difference above :data:`TOLERANCE` is a load warning with both figures,
so a rule that counts waits as compute (or drops work) cannot pass unseen.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.errors import NeuronProfileWarning

from ._neuron_common import warn
from ._neuron_events import Context

TOLERANCE = 0.05  # the bar: compute equals the file's engine-active time within 5%


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of the intervals [start, end)."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    # An interval opens a new run where it starts after every earlier one has ended; a run ends at
    # the running maximum of the ends just before the next run opens.
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    run_start = s[first]
    run_end = e[np.r_[first[1:] - 1, len(s) - 1]]
    return int((run_end - run_start).sum())


def compute_intervals(ctx: Context, raw_category: str) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) of the device rows of ``raw_category`` read as compute so far."""
    starts, ends = [], []
    for chunk in ctx.device_chunks:
        mask = pc.and_(pc.equal(chunk["raw_category"].cast(pa.string()), raw_category),
                       pc.equal(chunk["category"].cast(pa.string()), "compute"))
        part = chunk.filter(pc.fill_null(mask, False))
        if part.num_rows:
            ts = np.asarray(part["ts_ns"].to_numpy(), np.int64)
            starts.append(ts)
            ends.append(ts + np.asarray(part["dur_ns"].to_numpy(), np.int64))
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(ends)


def check(ctx: Context, file_active: tuple[np.ndarray, np.ndarray], *, section: str,
          instructions: str) -> dict[str, Any]:
    """Compare the union of the file's active intervals with the union of the compute instructions."""
    active_ns = union_ns(*file_active)
    compute_ns = union_ns(*compute_intervals(ctx, instructions))
    ratio = compute_ns / active_ns if active_ns else None
    ok = ratio is not None and abs(ratio - 1.0) <= TOLERANCE
    fact: dict[str, Any] = {
        "section": section, "intervals": len(file_active[0]), "file_active_ns": active_ns,
        "instructions": instructions, "compute_ns": compute_ns, "ratio": ratio, "within_5_percent": ok,
        "rule": "union of engine-active intervals (semaphore waits excluded) vs union of the instructions "
                "read as compute",
    }
    if active_ns and not ok:
        warn(ctx.acct, f"{ctx.source}: the instructions read as compute cover {compute_ns} ns but the file's own "
             f"{section} (engine-active time, semaphore waits excluded) says {active_ns} ns "
             f"({len(file_active[0])} intervals); the device's compute share may be wrong",
             NeuronProfileWarning, stacklevel=5)
    return fact
