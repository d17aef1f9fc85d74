"""Which op owns each kernel: the op that launched it, and the op whose FLOPs and bytes it inherits.

    host thread   [aten::linear (float inputs, autocast) ............................]
                     [aten::to > aten::copy_]   [aten::addmm (c10::Half) .....]
                        [cudaLaunchKernel]          [cudaLaunchKernel]
    device stream          [cast kernel]               [fp16 gemm kernel .....]
                           owner: aten::copy_          owner: aten::linear

A kernel's launch call is found by correlation within its process, and the launching op is the innermost
CPU op enclosing that call on its thread (``driving.launching_ops``: ``External id`` only where it agrees).
The owner is the outermost op with a FLOP formula around the launching op on its thread (``aten::linear``
rather than the ``aten::addmm`` inside it: one count, no double counting), except for kernels a data-moving
op launched inside it (``names.CAST_OPS``: autocast's casts, ``.contiguous()`` copies): they do none of the
owner's math, so they are the launching op's own (its bytes), or nobody's when it has no formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from neurontrace.analysis import names
from neurontrace.analysis.driving import launching_ops
from neurontrace.analysis.opcost import FORMULAS
from neurontrace.columns import isin


@dataclass
class Owners:
    """Per kernel: the owner (host row or -1), the launching op (host row or -1), how the launch was linked."""

    owner: np.ndarray
    launcher: np.ndarray
    by: np.ndarray  # driving.LINKED_BY index


def outermost(host: pa.Table, thread: np.ndarray) -> np.ndarray:
    """Per host row: the row of the outermost op with a formula around it on its thread when the row is
    itself an op with a formula (itself when nothing encloses it), else -1. aten::mm in aten::linear -> linear."""
    out = np.full(host.num_rows, -1, dtype=np.int64)
    rows = np.flatnonzero(isin(host["category"], ["framework_op"]) & isin(host["name"], FORMULAS))
    if not len(rows):
        return out
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    for th in np.unique(thread[rows]).tolist():  # a few threads; within one, a sweep in start order
        mine = rows[thread[rows] == th]
        mine = mine[np.lexsort((-end[mine], ts[mine]))]
        reach = np.maximum.accumulate(end[mine])
        # Not inside an earlier op: it ends past everything before it started.
        top = np.r_[True, end[mine][1:] > reach[:-1]]
        out[mine] = mine[top][np.cumsum(top) - 1]
    return out


def kernel_owners(host: pa.Table, flows: pa.Table, dev: pa.Table, top_of: np.ndarray,
                  thread: np.ndarray) -> Owners:
    """The owner and the launching op of each row of ``dev`` (``top_of``: ``outermost``, on ``thread``)."""
    links = launching_ops(host, flows, dev)
    launch = links.op
    owner = np.full(dev.num_rows, -1, dtype=np.int64)
    tops = np.flatnonzero(top_of == np.arange(len(top_of)))
    ok = np.flatnonzero(launch >= 0)
    if not len(tops) or not len(ok):
        return Owners(owner, launch, links.by)
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    lr = launch[ok]
    for th in np.unique(thread[lr]).tolist():  # a few threads: tops are disjoint within each
        mine = tops[thread[tops] == th]
        if not len(mine):
            continue
        mine = mine[np.argsort(ts[mine], kind="stable")]
        q = thread[lr] == th
        ops_q = lr[q]
        pos = np.searchsorted(ts[mine], ts[ops_q], side="right") - 1
        cand = mine[np.maximum(pos, 0)]
        inside = (pos >= 0) & (end[cand] >= end[ops_q])
        owner[ok[q]] = np.where(inside, cand, -1)
    cast_op = isin(host["name"], names.CAST_OPS)
    cast = (owner >= 0) & (owner != launch) & cast_op[np.maximum(launch, 0)] & ~cast_op[np.maximum(owner, 0)]
    # A cast inside a formula op is its own launcher's (aten::copy_ has a formula: its bytes), never the op's math.
    has_formula = isin(host["name"], FORMULAS)
    owner[cast] = np.where(has_formula[launch[cast]], launch[cast], -1)
    return Owners(owner, launch, links.by)
