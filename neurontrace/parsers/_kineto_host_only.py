"""Kineto traces of an accelerator run that recorded no device activity, and the profiler's own log lists.

Two things a host-only trace of an accelerator backend needs (neuron.md addendum 2: a real TorchNeuron
eager-mode trace had no device events and a top-level ``ERROR`` list):

- :func:`log_warnings`: the ``ERROR`` and ``WARNING`` lists Kineto writes at the top level (its logger's
  messages, e.g. ``gpuGetDeviceCount failed with code 35``; the real MTIA trace of the corpus carries that
  very line) become load warnings, so they reach every report;
- :func:`device_copies`: with no device events, the host op that moves a tensor to (or from) the device is
  the only record of that transfer, and it is not CPU compute. ``Tensor.to(device)`` dispatches to the
  ``aten::to.dtype_layout`` overload, recorded with **8 inputs** (self, dtype, layout, device, pin_memory,
  non_blocking, copy, memory_format), while a cast ``Tensor.to(dtype)`` is ``aten::to.dtype`` with 5 and
  ``Tensor.to(other)`` ``aten::to.other`` with 5 (seen in real torch 2.13 runs with ``record_shapes``;
  the device itself is not recorded). Such an ``aten::to`` with an ``aten::copy_`` nested in it (one that
  copies nothing returns its input) and the ops nested in it on its thread are ``transfer``. In the real
  CUDA and ROCm traces of the corpus that record runtime calls, every such op holds a ``cudaMemcpy*`` /
  ``hipMemcpy*`` call (15 of 15) and no 5-input ``aten::to`` does. Without recorded inputs (no ``record_shapes``)
  nothing is re-labelled, and the fact :func:`unrecorded_device` records says so (``shapes``: false): the one
  warning about such a trace is made by analysis/device_activity.py, which reads that fact.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace.columns import codes
from neurontrace.parsers._pool import POOL, pc

LOG_KEYS = ("ERROR", "WARNING")
TO_DEVICE_INPUTS = 8  # aten::to.dtype_layout, the overload Tensor.to(device) calls


def log_warnings(top: dict[str, Any], source: str) -> list[str]:
    """One warning per top-level log list (``ERROR``, ``WARNING``), with its count and its lines."""
    out = []
    for key in LOG_KEYS:
        lines = top.get(key)
        if not isinstance(lines, list) or not lines:
            continue
        shown = "; ".join(str(x).strip() for x in lines[:5])
        more = f" (and {len(lines) - 5} more)" if len(lines) > 5 else ""
        out.append(f"{source}: the profiler logged {len(lines)} {key} message(s) in the trace: {shown}{more}")
    return out


def device_copies(system: pa.Table) -> tuple[pa.Table, int]:
    """``system`` with each host-to-device ``aten::to`` (and the ops nested in it) as ``transfer``; and
    how many ``aten::to`` ops were re-labelled."""
    name = pc.fill_null(pc.cast(system["name"], pa.string()), "")
    is_to = pc.and_(pc.equal(name, "aten::to"), pc.equal(pc.cast(system["category"], pa.string()), "framework_op"))
    rows = np.flatnonzero(np.asarray(pc.fill_null(is_to, False).to_numpy(zero_copy_only=False)))
    if not len(rows):
        return system, 0
    args = pc.take(system["args"], pa.array(rows, memory_pool=POOL)).to_pylist()
    picked = rows[[_inputs(a) == TO_DEVICE_INPUTS for a in args]]
    if not len(picked):
        return system, 0
    ts = np.asarray(system["ts_ns"].to_numpy(), np.int64)
    end = ts + np.asarray(pc.fill_null(system["dur_ns"], 0).to_numpy(), np.int64)
    thread = (codes(system["pid"])[0] + 1) * (1 << 32) + codes(system["tid"])[0]
    host_op = np.asarray(pc.fill_null(pc.equal(pc.cast(system["category"], pa.string()), "framework_op"), False)
                         .to_numpy(zero_copy_only=False))
    is_copy = np.asarray(pc.fill_null(pc.equal(name, "aten::copy_"), False).to_numpy(zero_copy_only=False))
    mark = np.zeros(system.num_rows, bool)
    moved = 0
    for r in picked.tolist():  # few ops: each marks the framework ops of its thread inside its span
        inside = host_op & (thread == thread[r]) & (ts >= ts[r]) & (end <= end[r])
        if (inside & is_copy).any():  # an aten::to that copies nothing returned its input: no transfer
            mark |= inside
            moved += 1
    if not moved:
        return system, 0
    category = pc.if_else(pa.array(mark, memory_pool=POOL), "transfer", pc.cast(system["category"], pa.string()))
    i = system.schema.get_field_index("category")
    return system.set_column(i, system.schema.field(i), pc.cast(category, system.schema.field(i).type)), moved


def _inputs(args: Any) -> int | None:
    if not isinstance(args, str) or '"Input type"' not in args:
        return None
    try:
        types = json.loads(args).get("Input type")
    except ValueError:
        return None
    return len(types) if isinstance(types, list) else None


def unrecorded_device(system: pa.Table, backend: str) -> tuple[pa.Table, dict[str, Any]]:
    """An accelerator trace without device events: ``system`` with its moves to the device as ``transfer``
    (:func:`device_copies`), and the fact the parser records (``schema.DEVICE_ACTIVITY``). The parser warns
    nothing: analysis/device_activity.py is the one rule that decides what such a trace means, and warns once."""
    system, moved = device_copies(system)
    args = system["args"]
    shapes = bool(moved) or bool(pc.any(pc.fill_null(pc.match_substring(args, '"Input type"'), False)).as_py()) \
        if system.num_rows else False
    return system, {"recorded": False, "backend": backend, "transfers": moved, "shapes": shapes}
