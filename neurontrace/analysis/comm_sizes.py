"""Message sizes of collectives: from the collective's own args, else from the host range that launched it.

Kineto copies ``In msg nelems`` / ``Out msg nelems`` / ``dtype`` onto NCCL kernels since torch 2.1; older traces
carry the size only on the host side: ``record_param_comms`` (``In msg nelems`` and ``dtype``, or ``Input Dims``
and ``Input type``) and the ``nccl:*`` record_function range (``Input Dims`` / ``Input type``) that enclose the
kernel's launch on its thread. :func:`sizes_from_launching_ranges` finds that range through the kernel's
correlation id (its launch call), then the innermost such range around the call.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pyarrow as pa

from neurontrace._numbers import int_of
from neurontrace.analysis.driving import correlation_calls
from neurontrace.analysis.labels import spans
from neurontrace.columns import codes, isin, matches, row_codes

# Bytes per element of the dtype names Kineto writes (``dtype`` arg of NCCL records, ``Input type``).
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "c10::half": 2, "float16": 2,
    "bfloat16": 2, "c10::bfloat16": 2, "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4,
    "short": 2, "int16": 2, "byte": 1, "unsigned char": 1, "uint8": 1, "char": 1, "signed char": 1,
    "int8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
}
# Host ranges that record a collective's tensors (c10d's ParamCommsUtils, ProcessGroupNCCL's ranges).
SIZED_RANGE = re.compile(r"^record_param_comms$|^nccl:")


def args_of(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message_bytes(op: str, args: dict[str, Any], group_size: int | None) -> int | None:
    """The collective's data size S of NCCL's bandwidth formulas: the larger of input and output."""
    dtype = args.get("dtype")
    if dtype is None and isinstance(args.get("Input type"), list) and args["Input type"]:
        dtype = args["Input type"][0]
    width = DTYPE_BYTES.get(str(dtype).lower()) if dtype is not None else None
    if width is None:
        return None
    n_in, n_out = int_of(args.get("In msg nelems")), int_of(args.get("Out msg nelems"))
    if n_in is None and n_out is None:  # a host range: only its input tensor's shape is recorded
        dims = args.get("Input Dims")
        if not (isinstance(dims, list) and dims and isinstance(dims[0], list)):
            return None
        n_in = int(np.prod([d for d in dims[0] if isinstance(d, int)], dtype=np.int64)) if dims[0] else 1
        if op == "all_gather" and group_size:  # the output is every rank's input
            n_out = n_in * group_size
    return max(n_in or 0, n_out or 0) * width


def sizes_from_launching_ranges(host: pa.Table, flows: pa.Table, coll: pa.Table, want: np.ndarray,
                                ops: list[str], group_sizes: list[int | None]) -> dict[int, int]:
    """Per row of ``coll`` in ``want`` (collective kernels without a size): the bytes recorded by the innermost
    ``record_param_comms`` / ``nccl:*`` range enclosing its launch call on the launching thread, where one has
    them."""
    if not len(want) or not host.num_rows:
        return {}
    sized = np.flatnonzero(matches(host["name"], SIZED_RANGE))
    calls = np.flatnonzero(isin(host["category"], ["runtime", "driver"]))
    if not len(sized) or not len(calls):
        return {}
    link = correlation_calls(host, flows, coll, calls)
    start, end = spans(host)
    thread = row_codes(codes(host["pid"])[0], codes(host["tid"])[0])
    args = host["args"].take(pa.array(sized)).to_pylist() if "args" in host.column_names else [None] * len(sized)
    by_thread: dict[int, list[int]] = {}  # positions in ``sized`` per launching thread
    for j, th in enumerate(thread[sized].tolist()):
        by_thread.setdefault(int(th), []).append(j)
    out: dict[int, int] = {}
    for i in want.tolist():
        call = int(link[i])
        if call < 0 or int(thread[call]) not in by_thread:
            continue
        t = start[call]
        mine = np.asarray(by_thread[int(thread[call])], dtype=np.int64)
        around = mine[(start[sized][mine] <= t) & (end[sized][mine] >= t)]
        for j in around[np.argsort(-start[sized][around], kind="stable")].tolist():  # innermost first
            nbytes = message_bytes(ops[i], args_of(args[j]), group_sizes[i])
            if nbytes is not None:
                out[i] = nbytes
                break
    return out
