"""FLOPs and HBM bytes NeuronCore instructions record themselves (Neuron Explorer's instruction table)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.columns import codes as column_codes
from neurontrace.columns import take


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    idx, values = column_codes(col)
    return idx, [str(v) for v in values]


def _arg_number(args: pa.ChunkedArray | pa.Array, key: str) -> np.ndarray:
    """A numeric field of the args JSON per row (NaN where absent), without decoding the JSON."""
    found = pc.extract_regex(pc.fill_null(args, ""), rf'"{key}":\s*(?P<v>-?\d+(?:\.\d+)?)')
    return np.asarray(pc.cast(pc.struct_field(found, "v"), pa.float64()).to_numpy(zero_copy_only=False),
                      dtype=np.float64)


def neuron_counters(dev: pa.Table) -> tuple[np.ndarray, ...] | None:
    """For NeuronCore instructions: (has a FLOP counter, FLOPs, HBM bytes, FLOPs are BF16-equivalent, HLO op
    code, HLO op names). Neuron Explorer records per instruction ``raw_flops`` (a MAC is 2) and
    ``adjusted_flops`` (BF16-equivalent: to compare with the BF16 peak), and ``hbm_read_bytes`` /
    ``hbm_write_bytes`` (formats/neuron.md, the instruction table). None without Neuron devices."""
    dev_code, dev_names = _codes(dev["device"])
    neuron = np.array([d.startswith("neuron") for d in dev_names], dtype=bool)
    rows = np.flatnonzero(neuron[np.maximum(dev_code, 0)] & (dev_code >= 0)) if len(dev_names) else np.zeros(0, int)
    if not len(rows):
        return None
    n = dev.num_rows
    args = take(dev["args"], rows)
    adjusted, raw = _arg_number(args, "adjusted_flops"), _arg_number(args, "raw_flops")
    read, write = _arg_number(args, "hbm_read_bytes"), _arg_number(args, "hbm_write_bytes")
    full = [np.full(n, np.nan) for _ in range(3)]
    full[0][rows] = np.where(np.isnan(adjusted), raw, adjusted)
    full[1][rows] = np.nan_to_num(read) + np.nan_to_num(write)
    bf16 = np.zeros(n, dtype=bool)
    bf16[rows] = ~np.isnan(adjusted)
    hlo = pc.extract_regex(pc.fill_null(args, ""), r'"hlo_name":\s*"(?P<v>[^"]*)"')
    hlo_code, hlo_names = _codes(pc.struct_field(hlo, "v"))
    codes = np.full(n, -1, dtype=np.int64)
    codes[rows] = hlo_code
    has = ~np.isnan(full[0])
    return has, full[0], full[1], bf16, codes, np.asarray(hlo_names, dtype=object)
