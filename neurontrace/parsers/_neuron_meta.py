"""Profile-level facts of an Explorer directory: schema version, device identity, clock anchors,
Summary metrics, lookup tables and the ``Warning`` table (neuron.md §3.2, §3.5, §3.7)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from neurontrace.errors import NeuronProfileWarning, SchemaVersionWarning
from neurontrace.trace import ParseAccounting

from ._neuron_common import SYNTHETIC_NOTE, is_synthetic_text, percent_to_fraction, warn
from ._neuron_read import SourceTable

_VERSION = re.compile(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?")

# Small tables kept whole in metadata (key `neuron.<snake_name>`), one JSON list of rows each.
LOOKUP_TABLES = ("NeffHeader", "OpcodeSummary", "ThrottleSummary", "DeviceProfileList",
                 "SystemProfileMetadata", "TensorInfo", "DmaQueuesInfo", "CcStream", "HbmUsageSummaryByType")
# Tables left out on purpose, with the reason the accounting gives.
SKIPPED_TABLES = {
    "FrameworkInstruction": "IR hierarchy roll-up of Instruction rows (not loaded)",
    "HloInstruction": "IR hierarchy roll-up of Instruction rows (not loaded)",
    "PenguinInstruction": "IR hierarchy roll-up of Instruction rows (not loaded)",
    "BirInstruction": "IR hierarchy roll-up of Instruction rows (not loaded)",
    "FrameworkNode": "IR hierarchy roll-up of Instruction rows (not loaded)",
    "AssemblyInstruction": "compiler simulation assembly listing (not loaded)",
    "DmaUsageSummary": "Explorer's internal pre-bucketed copy of DmaUsage (not loaded)",
    "KernelIterationVariables": "NKI loop iteration variables (not mapped yet)",
}
# Description and lookup tables that are read into the model, not skipped: their rows are counted kept in
# the table they went into (a schema description is not data lost, and a report must not say so).
READ_INTO = {
    "SchemaFields": "metadata",  # the schema description, summarised as neuron.schema_fields
    "StackFrame": "frames",  # source stack lookups, turned into frames
    "StackFrameFileLocation": "frames",
    "StackFrameFileName": "frames",
    "StackFrameFunctionName": "frames",
    "KernelInstructions": "frames",  # NKI source lookups, turned into frames
    "KernelStackFrames": "frames",
}
UNKNOWN_TABLE_ROWS_KEPT = 1000


@dataclass
class Profile:
    """What the small tables say about the profile as a whole."""

    metadata: dict[str, Any] = field(default_factory=dict)
    schema_version: str | None = None
    major: int | None = None
    device: str = "neuron:nc0"
    device_source: str = "assumed nc0 (no Metadata.neuroncore_idx)"
    multi_pcore: bool = False
    host: str | None = None
    synthetic: bool = False
    facts: dict[str, Any] = field(default_factory=dict)


def read_profile(tables: dict[str, SourceTable], acct: ParseAccounting, source: str) -> Profile:
    prof = Profile()
    meta_rows = _rows(tables, "Metadata", acct)
    if meta_rows:
        prof.metadata = meta_rows[0]
        prof.facts["neuron.metadata"] = meta_rows if len(meta_rows) > 1 else meta_rows[0]
    elif any(t in tables for t in ("Instruction", "DmaPacketAggregated", "DmaPacket", "CcOp")):
        warn(acct, f"{source}: the directory has device tables but no Metadata table: the schema version "
             "is unknown (columns were mapped by name) and device times could not be anchored to wall-clock "
             "time; copy Metadata.parquet along with the other tables", NeuronProfileWarning)
    _schema_version(prof, acct, source)
    md = prof.metadata
    if md.get("neuroncore_idx") is not None:
        prof.device, prof.device_source = f"neuron:nc{int(md['neuroncore_idx'])}", "Metadata.neuroncore_idx"
    prof.multi_pcore = bool(md.get("vnc_enabled")) or int(md.get("num_physical_cores") or 1) > 1
    for name in LOOKUP_TABLES:
        rows = _rows(tables, name, acct)
        if rows:
            prof.facts[f"neuron.{_snake(name)}"] = rows
    devices = prof.facts.get("neuron.device_profile_list") or []
    if "neuroncore_idx" not in md and len(devices) == 1 and devices[0].get("nc_id") is not None:
        prof.device, prof.device_source = f"neuron:nc{int(devices[0]['nc_id'])}", "DeviceProfileList.nc_id"
    if len(devices) == 1:
        prof.host = devices[0].get("instance_id")
    if "ExecutionInfo" in tables:  # also device events (counted there); here for alignment and names
        prof.facts["neuron.execution_info"] = tables["ExecutionInfo"].read().to_pylist()
    _summary(tables, prof, acct)
    _warnings(tables, prof, acct, source)
    prof.synthetic = _synthetic(tables, prof)
    if prof.synthetic:
        prof.facts["synthetic_note"] = SYNTHETIC_NOTE
    return prof


def _rows(tables: dict[str, SourceTable], name: str, acct: ParseAccounting) -> list[dict[str, Any]]:
    if name not in tables:
        return []
    rows: list[dict[str, Any]] = tables[name].read().to_pylist()
    acct.events_read += len(rows)
    acct.keep("metadata", len(rows))
    return rows


def _schema_version(prof: Profile, acct: ParseAccounting, source: str) -> None:
    version = prof.metadata.get("profile_schema_version")
    prof.schema_version = None if version is None else str(version)
    if version is None:
        return
    m = _VERSION.match(str(version))
    if m is None:
        warn(acct, f"{source}: Metadata.profile_schema_version is {version!r}, not a version number; "
             "columns were mapped by name and presence", SchemaVersionWarning)
        return
    prof.major = int(m.group(1))  # an unknown major is warned about after loading (_neuron_schema.check)


def _summary(tables: dict[str, SourceTable], prof: Profile, acct: ParseAccounting) -> None:
    rows = _rows(tables, "Summary", acct)
    summaries = []
    for row in rows:
        metrics, scale = percent_to_fraction({k: v for k, v in row.items() if v is not None})
        summaries.append({"profile_id": None, "kind": "device", "device": prof.device,
                          "percent_scale": scale, "metrics": metrics})
    if summaries:
        prof.facts["neuron.summary"] = summaries if len(summaries) > 1 else summaries[0]


def _warnings(tables: dict[str, SourceTable], prof: Profile, acct: ParseAccounting, source: str) -> None:
    rows = _rows(tables, "Warning", acct)
    if rows:
        prof.facts["neuron.warnings"] = rows
    for r in rows:
        category = r.get("category") or "Warning"
        warn(acct, f"{source}: neuron-explorer warned ({category}): {r.get('message')}", NeuronProfileWarning,
             stacklevel=5)


def _synthetic(tables: dict[str, SourceTable], prof: Profile) -> bool:
    if is_synthetic_text(prof.metadata.get("profile_name")):
        return True
    return any(t.key_value_metadata().get(b"neurontrace.synthetic") == b"true" for t in tables.values())


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
