"""What a Neuron profile says of memory that is not a time series: HBM by usage type and the compiler's spills.

Part of the memory section (:mod:`neurontrace.analysis.memory`, ``memory.neuron`` in ``--json``), per NeuronCore:

- ``hbm_by_type``: Explorer's ``HbmUsageSummaryByType`` ("HBM memory usage information summarized by type";
  columns ``neuron_device_idx``, ``neuroncore_idx``, ``usage_type``, ``usage_bytes`` [B]; formats/neuron.md §3.8,
  profile-schema-reference 7.4.0), kept whole in metadata by the loader (``neuron.hbm_usage_summary_by_type``):
  each usage type's bytes as the table gives them, summed where a type repeats;
- ``spill_save_bytes`` / ``spill_reload_bytes``: the summary's "total bytes of spilled data that was saved to HBM"
  / "reloaded back to SBUF" (``Summary`` §3.7; summary-json and summary-text hold the same keys, §4.2), with
  ``hbm_read_bytes`` beside them to weigh the reloads. The summary omits the spill keys when they are zero
  (§3.2, observed on 2.32): absent is reported as null, never as 0.

The spill finding (reloads a large share of HBM reads) is the Neuron summary's (``spill_reload``,
analysis/neuron_summary.py); this module only reports the figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc

from neurontrace import units
from neurontrace.analysis.neuron_summary import neuron_summaries
from neurontrace.trace import Trace

HBM_BY_TYPE_KEY = "neuron.hbm_usage_summary_by_type"  # _neuron_meta: LOOKUP_TABLES, key neuron.<snake_name>


@dataclass
class NeuronMemory:
    device: str  # neuron:nc<neuroncore_idx>, as the device profile names its core
    rank: int | None
    hbm_by_type: dict[str, int] = field(default_factory=dict)
    spill_save_bytes: int | None = None
    spill_reload_bytes: int | None = None
    hbm_read_bytes: int | None = None

    @property
    def hbm_total_bytes(self) -> int | None:
        return sum(self.hbm_by_type.values()) if self.hbm_by_type else None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "rank": self.rank, "hbm_by_type": self.hbm_by_type,
                "hbm_total_bytes": self.hbm_total_bytes, "spill_save_bytes": self.spill_save_bytes,
                "spill_reload_bytes": self.spill_reload_bytes, "hbm_read_bytes": self.hbm_read_bytes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NeuronMemory:
        return cls(str(d["device"]), _opt(d.get("rank")), {str(k): int(v) for k, v in (d.get("hbm_by_type") or {}).items()},
                   _opt(d.get("spill_save_bytes")), _opt(d.get("spill_reload_bytes")), _opt(d.get("hbm_read_bytes")))

    def text(self) -> list[str]:
        who = self.device if self.rank is None else f"rank {self.rank} {self.device}"
        out = []
        if self.hbm_by_type:
            top = sorted(self.hbm_by_type.items(), key=lambda kv: -kv[1])
            out.append(f"{who}: HBM {units.size(self.hbm_total_bytes)} by type: "
                       + ", ".join(f"{k} {units.size(v)}" for k, v in top[:6]) + (" ..." if len(top) > 6 else ""))
        if self.spill_save_bytes is not None or self.spill_reload_bytes is not None:
            reads = f" (HBM reads {units.size(self.hbm_read_bytes)})" if self.hbm_read_bytes is not None else ""
            out.append(f"{who}: spills: {units.size(self.spill_save_bytes)} saved to HBM, "
                       f"{units.size(self.spill_reload_bytes)} reloaded to SBUF{reads}")
        return out


def _opt(v: Any) -> int | None:
    return None if v is None else int(v)


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def neuron_memory(trace: Trace) -> list[NeuronMemory]:
    """Per NeuronCore of each rank: HBM by usage type and the summary's spill figures (empty when neither)."""
    out: dict[tuple[int | None, str], NeuronMemory] = {}
    m = trace.metadata
    rows = m.filter(pc.equal(m["key"], HBM_BY_TYPE_KEY))
    for value, rank in zip(rows["value"].to_pylist(), rows["rank"].to_pylist(), strict=True):
        for r in json.loads(value) or []:
            n = _int(r.get("usage_bytes")) if isinstance(r, dict) else None
            if n is None or r.get("usage_type") is None:
                continue
            core = _int(r.get("neuroncore_idx"))
            dev = f"neuron:nc{core}" if core is not None else "neuron"
            nm = out.setdefault((rank, dev), NeuronMemory(dev, rank))
            nm.hbm_by_type[str(r["usage_type"])] = nm.hbm_by_type.get(str(r["usage_type"]), 0) + n
    for s in neuron_summaries(trace):
        save, reload = _int(s.metrics.get("spill_save_bytes")), _int(s.metrics.get("spill_reload_bytes"))
        if save is None and reload is None:
            continue
        dev = str(s.device or "neuron")
        nm = out.setdefault((None, dev), next((v for (r, d), v in out.items() if d == dev), NeuronMemory(dev, None)))
        nm.spill_save_bytes, nm.spill_reload_bytes = save, reload
        nm.hbm_read_bytes = _int(s.metrics.get("hbm_read_bytes"))
    seen: list[NeuronMemory] = []
    for v in out.values():
        if all(v is not x for x in seen):
            seen.append(v)
    return sorted(seen, key=lambda v: (v.rank is None, v.rank or 0, v.device))
