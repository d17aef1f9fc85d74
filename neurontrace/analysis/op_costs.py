"""The cost of each host op of a trace (FLOPs, bytes, dtype, class), evaluated once per distinct op.

``opcost.op_cost`` gives one op's cost from its args; this evaluates it for many rows of a host table at once:
repeats of one op (the same name and args, ids aside) are evaluated once (analysis/ops.py asks for the rows it
needs, when it needs them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.analysis.opcost import op_cost
from neurontrace.columns import flat, take


@dataclass
class Costs:
    """FLOPs, bytes, dtype and class per host row (NaN / -1 where unknown), and why an op with a formula
    got no cost (no shapes recorded, or shapes that do not fit it)."""

    flops: np.ndarray
    bytes: np.ndarray
    dtype: np.ndarray  # index into DTYPE_NAMES
    cls: np.ndarray  # index into CLASS_NAMES
    no_shapes: np.ndarray
    misfit: np.ndarray

    @classmethod
    def empty(cls, n: int) -> Costs:
        return cls(np.full(n, np.nan), np.full(n, np.nan), np.full(n, -1, dtype=np.int64),
                   np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))


DTYPE_NAMES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
CLASS_NAMES = ("gemm", "conv", "attention", "elementwise", "reduce", "norm")
COST_CHUNK = 1 << 16  # host rows whose cost keys are built at once
# Ids that differ between repeats of one op; the rest of its args (shapes, types, values) decide its cost.
_ID_FIELDS = r'("(?:External id|Ev Idx|Record function id|Sequence number|Fwd thread id)":\s*)-?\d+'


def evaluate(host: pa.Table, rows: np.ndarray, out: Costs) -> None:
    """Write the cost of the ops at ``rows`` into ``out``; each distinct (name, args without ids) is evaluated once."""
    if not len(rows):
        return
    seen: dict[str, tuple[float, float, float, float]] = {}
    for lo in range(0, len(rows), COST_CHUNK):  # by chunks: the keys are copies of args, most of a rank's bytes
        part = rows[lo:lo + COST_CHUNK]
        sub = take(host.select(["name", "args"]), part)
        key = pc.binary_join_element_wise(
            sub["name"].cast(pa.string()),
            pc.replace_substring_regex(pc.fill_null(sub["args"], ""), _ID_FIELDS, r"\1 0"), "\x00")
        enc = flat(key).dictionary_encode()
        per_key = np.array([seen[k] if k in seen else seen.setdefault(k, _key_cost(k))
                            for k in enc.dictionary.to_pylist()], dtype=np.float64).reshape(-1, 4)
        got = per_key[enc.indices.to_numpy(zero_copy_only=False)]
        out.flops[part], out.bytes[part] = got[:, 0], got[:, 1]
        out.dtype[part] = np.nan_to_num(got[:, 2], nan=-1).astype(np.int64)
        out.cls[part] = np.nan_to_num(got[:, 3], nan=-1).astype(np.int64)
        failed = np.isnan(got[:, 0])
        if failed.any():
            has_dims = pc.fill_null(pc.match_substring(sub["args"], "Input Dims"), False).to_numpy(zero_copy_only=False)
            out.no_shapes[part] = failed & ~has_dims
            out.misfit[part] = failed & has_dims


def _key_cost(key: str) -> tuple[float, float, float, float]:
    """(FLOPs, bytes, dtype index, class index) of one "name\\x00args without ids" key; NaNs when unknown."""
    name, _, text = key.partition("\x00")
    try:
        args = json.loads(text) if text else {}
    except ValueError:
        args = {}
    c = op_cost(name, args) if isinstance(args, dict) else None
    if c is None:
        return (np.nan, np.nan, np.nan, np.nan)
    return (c.flops, c.bytes, DTYPE_NAMES.index(c.dtype) if c.dtype in DTYPE_NAMES else -1,
            CLASS_NAMES.index(c.op_class))
