"""Typed access to the normalized metadata facts (schema.NORMALIZED_KEYS): devices, tool versions, the job.

The parsers write these keys for every input (neurontrace.parsers._normalized_meta); analyses, the catalog and
the viewer read them here, and never a format's own keys (``kineto.*``, ``neuron.*``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from neurontrace import schema
from neurontrace.trace import Trace


@dataclass(frozen=True)
class Device:
    """One device as its input described it (schema.DEVICES)."""

    id: str  # as in the tables' device column: cuda:0, rocm:2, neuron:nc0
    kind: str  # the backend: cuda, rocm, mtia, neuron ...
    name: str | None = None
    index: int | None = None  # the profiler's own number of the device (deviceProperties id)
    memory_bytes: int | None = None
    memory_source: str | None = None  # where memory_bytes was read (deviceProperties[0].totalGlobalMem)
    compute_capability: str | None = None
    multiprocessors: int | None = None
    evidence: str = ""  # what identified the device

    @property
    def listed(self) -> bool:
        """The input lists this device under this id (not only events, nor matched to another id)."""
        return self.index is not None and self.id == f"{self.kind}:{self.index}"

    @classmethod
    def from_dict(cls, device: str, d: dict[str, Any]) -> Device:
        def opt_int(v: Any) -> int | None:
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        def opt_str(v: Any) -> str | None:
            return str(v) if v is not None else None

        return cls(device, str(d.get("kind") or device.split(":", 1)[0]), opt_str(d.get("name")),
                   opt_int(d.get("index")), opt_int(d.get("memory_bytes")), opt_str(d.get("memory_source")),
                   opt_str(d.get("compute_capability")), opt_int(d.get("multiprocessors")),
                   str(d.get("evidence") or ""))


def _values(trace: Trace, key: str, rank: int | None = None) -> list[Any]:
    """The values of ``key`` (of the inputs of ``rank`` when it is given)."""
    meta = trace.metadata
    rows = pc.equal(meta["key"], key)
    if rank is not None:
        rows = pc.and_(rows, pc.fill_null(pc.equal(meta["rank"], rank), False))
    return [json.loads(v) for v in meta.filter(rows)["value"].to_pylist()]


def devices(trace: Trace, rank: int | None = None) -> dict[str, Device]:
    """Every device the inputs describe (those of ``rank`` when it is given), by device id; the first input's
    record of an id wins."""
    out: dict[str, Device] = {}
    for value in _values(trace, schema.DEVICES.key, rank):
        for device, d in (value.items() if isinstance(value, dict) else ()):
            if isinstance(d, dict):
                out.setdefault(str(device), Device.from_dict(str(device), d))
    return out


def tool_versions(trace: Trace) -> dict[str, set[str]]:
    """name -> every version the inputs state (schema.TOOL_VERSIONS)."""
    out: dict[str, set[str]] = {}
    for value in _values(trace, schema.TOOL_VERSIONS.key):
        for name, v in (value.items() if isinstance(value, dict) else ()):
            out.setdefault(str(name), set()).update(s.strip() for s in str(v).split(", "))
    return out


@dataclass(frozen=True)
class Group:
    name: str
    size: int | None
    desc: str | None = None


@dataclass(frozen=True)
class Distributed:
    """What one input says of its job (schema.DISTRIBUTED)."""

    rank: int | None
    world_size: int | None
    backend: str | None
    groups: tuple[Group, ...]


def distributed(trace: Trace, rank: int | None = None) -> list[Distributed]:
    """The job facts of every input (of the inputs of ``rank`` when it is given), in metadata order."""
    out = []
    for d in _values(trace, schema.DISTRIBUTED.key, rank):
        if not isinstance(d, dict):
            continue
        groups = tuple(Group(str(g["name"]), g.get("size") if isinstance(g.get("size"), int) else None,
                             g.get("desc")) for g in d.get("groups") or [] if isinstance(g, dict) and "name" in g)
        out.append(Distributed(d.get("rank"), d.get("world_size"), d.get("backend"), groups))
    return out


def instance_types(trace: Trace) -> list[str]:
    """The cloud instance types the inputs name (schema.INSTANCE_TYPE), in metadata order, each once."""
    return list(dict.fromkeys(str(v) for v in _values(trace, schema.INSTANCE_TYPE.key) if v))
