"""SYNTHETIC Neuron Explorer memory tables (no Trainium here): ``HbmUsageSummaryByType``, ``SbufAllocation`` and the
summary's spill keys, with the columns of the Explorer profile schema 7.4.0 (formats/neuron.md §3.7, §3.8).
Added to a directory :func:`neurontrace.testing.synthetic_neuron.write_explorer` wrote; every file carries the
synthetic label."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from neurontrace.testing.neuron_explorer_files import write_table, write_tables

# usage types: the SystemProfileHbmUsage category names (§3.7; the same set NTFF/NEFF strings show, §10.1)
HBM_BY_TYPE = {"tensors": 3 << 30, "weights": 5 << 30, "dram_spill": 96 << 20, "scratchpad": 512 << 20}
SPILL = {"spill_save_bytes": 40 << 20, "spill_reload_bytes": 120 << 20}


def sbuf_rows(t0_ns: int) -> list[dict[str, Any]]:
    """Occupancy periods on the device clock from ``t0_ns``: two partitions, one address reused the instant it is
    released, and one damaged period (end before start) a reader must skip and count."""
    def period(start: int, end: int, lo: int, hi: int, partition: int, tensor: str | None, hlo: str) -> dict[str, Any]:
        return {"start_ts": t0_ns + start, "end_ts": t0_ns + end, "start_address": lo, "end_address": hi,
                "partition": partition, "op_source_type": "instruction", "opcode": "TENSOR_TENSOR",
                "operands": "", "queue_name": "", "block_id": 0, "tensor_name": tensor, "hlo_name": hlo,
                "pcore_idx": 0}
    return [period(0, 100, 0, 4096, 0, "x", "add.2"), period(50, 150, 4096, 12288, 0, "w", "dot.1"),
            period(50, 120, 0, 4096, 1, "y", "add.2"), period(100, 200, 0, 2048, 0, None, "tanh.3"),
            period(300, 250, 0, 1024, 2, "damaged", "add.2")]


def add_memory_tables(directory: Path, nc_idx: int = 0) -> Path:
    """Write ``HbmUsageSummaryByType`` and ``SbufAllocation`` beside the profile's tables, and the spill keys
    into its ``Summary``; the SBUF periods start at the first instruction."""
    first = pq.read_table(directory / "Instruction.parquet", columns=["start_ts"])["start_ts"]
    t0 = int(min(first.to_pylist()))
    write_tables(directory, {
        "HbmUsageSummaryByType": [{"neuron_device_idx": 0, "neuroncore_idx": nc_idx, "usage_type": k,
                                   "usage_bytes": v} for k, v in HBM_BY_TYPE.items()],
        "SbufAllocation": sbuf_rows(t0)})
    summary = pq.read_table(directory / "Summary.parquet")
    for key, value in SPILL.items():
        summary = summary.append_column(key, [[value] * summary.num_rows])
    write_table(summary, directory, "Summary")
    return directory
