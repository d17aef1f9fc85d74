"""The normalized facts of every input (schema.NORMALIZED_KEYS), derived once, here, from what its format said.

Each format writes its own keys into ``metadata`` as found (Kineto's ``deviceProperties``, ``distributedInfo``,
``*_version``; Neuron's Metadata / Summary rows; a capture's ``run.json``). :func:`with_normalized` reads those and adds,
per input (the rows of one ``source`` and ``rank``), the keys analyses read instead:

- ``devices``: per id of the tables' ``device`` column (``{backend}:{id}``, as the Kineto parser names device
  events), the device's name, memory, compute capability. ROCm traces number their device events apart from
  ``deviceProperties`` (the three real MI300X traces of the corpus: events on ``rocm:2``, one device listed with id
  0; the profiler lists the devices visible to the process, renumbered from 0): when an input lists exactly one
  device and its events name exactly one other id, the two are the same device and both ids get its record;
- ``tool_versions``: the versions the profile states (the rule the run catalog used: a top-level Kineto key whose
  name holds ``version``; ``distributedInfo.nccl_version``; Neuron rows' ``*_version`` fields as ``neuron_*``).
  A capture's run.json is neurontrace's own record, kept whole under ``run`` and read as it is;
- ``distributed``: rank, world size, backend and process groups (Kineto ``distributedInfo``);
- ``instance_type``: a Neuron ``instance_type`` field, else the first ``trn*.<size>`` the facts mention.

Every parser's result passes through :func:`with_normalized`, and so does a stored output (``neurontrace convert``,
a dataset) read back: an input written before these keys existed gets them on read, and one that has them is
left as it is (:func:`with_normalized` never rewrites).
"""

from __future__ import annotations

import copy
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema
from neurontrace._numbers import int_of as _int
from neurontrace.trace import Trace, conform, metadata_table

_INSTANCE = re.compile(r"\b(trn[123][a-z]*\.[0-9a-z]+)")
# Neuron keys holding large row tables: no versions or instance type in them (the run catalog skipped them too).
_NEURON_BULK = ("neuron.table.", "neuron.execution_info", "neuron.derived_rows", "neuron.opcode_summary",
                "neuron.tensor_info")
_MAX_SCANNED_CHARS = 1 << 20  # a Neuron fact larger than this is not decoded to look for versions
_Group = tuple[str | None, int | None]  # (source, rank): one input's rows


def with_normalized(trace: Trace) -> Trace:
    """``trace`` with the normalized keys added for every input lacking them (an input: the metadata rows of one
    source and rank that hold a ``format``)."""
    meta = trace.metadata
    if not meta.num_rows:
        return trace
    keys = meta["key"].to_pylist()
    groups: dict[_Group, list[int]] = defaultdict(list)
    for i, (source, rank) in enumerate(zip(meta["source"].to_pylist(), meta["rank"].to_pylist(), strict=True)):
        groups[(source, rank)].append(i)
    todo = [(g, rows) for g, rows in groups.items()
            if any(keys[i] == "format" for i in rows) and not any(keys[i] == schema.DEVICES.key for i in rows)]
    if not todo:
        return trace
    values = meta["value"].to_pylist()
    ids = _event_devices(trace)
    ranks = {r for _, r in groups}
    added = []
    for (source, rank), rows in todo:
        raw = {keys[i]: values[i] for i in rows if keys[i] not in _SEVERAL}
        several = [(keys[i], values[i]) for i in rows if keys[i] in _SEVERAL]
        event_ids = ids.get(rank, []) if len(ranks) > 1 else [d for v in ids.values() for d in v]
        added.append(metadata_table(derive(raw, several, event_ids), source=source, rank=rank))
    out = copy.copy(trace)  # the event tables are shared as they are, not conformed again
    out.metadata = conform(pa.concat_tables([meta, *added]), schema.METADATA)
    return out


_SEVERAL = ("neuron.summary",)  # keys a parser writes once per profile of one input


def derive(raw: Mapping[str, str], several: Iterable[tuple[str, str]] = (),
           event_ids: Iterable[str] = ()) -> dict[str, Any]:
    """The normalized keys of one input from its metadata (``raw``: key -> JSON text; ``several``: the keys it
    holds more than once) and the device ids its events name."""
    facts = {k: _loads(v) for k, v in raw.items() if _wanted(k, v)}
    for key, value in several:
        if len(value) <= _MAX_SCANNED_CHARS:
            facts.setdefault(key, []).extend(_rows(_loads(value)))
    backend = str(facts.get("backend") or "")
    out: dict[str, Any] = {
        schema.DEVICES.key: _devices(facts, backend, sorted(set(event_ids))),
        schema.TOOL_VERSIONS.key: _versions(facts),
    }
    dist = _distributed(facts.get("kineto.distributedInfo"))
    if dist is not None:
        out[schema.DISTRIBUTED.key] = dist
    instance = _instance_type(facts) or _mentioned_instance([*raw.values(), *(v for _, v in several)])
    if instance:
        out[schema.INSTANCE_TYPE.key] = instance
    return out


def _wanted(key: str, value: str) -> bool:
    if key in ("backend", "device", "device_source", "kineto.deviceProperties", "kineto.distributedInfo"):
        return True
    if key.startswith("kineto."):
        return "version" in key.lower() and len(value) <= _MAX_SCANNED_CHARS
    return key.startswith("neuron.") and not key.startswith(_NEURON_BULK) and len(value) <= _MAX_SCANNED_CHARS


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _rows(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _event_devices(trace: Trace) -> dict[int | None, list[str]]:
    """The device ids the device events name, per rank."""
    dev = trace.device_events
    if not dev.num_rows:
        return {}
    ranks = pc.unique(dev["rank"]).to_pylist()
    if len(ranks) == 1:  # one input's events (what a parser returns): the column's distinct values, no strings made
        return {ranks[0]: [str(d) for d in pc.unique(dev["device"]).to_pylist() if d is not None]}
    pairs = pa.table({"device": dev["device"].cast(pa.string()), "rank": dev["rank"]})
    pairs = pairs.filter(pc.is_valid(pairs["device"])).group_by(["device", "rank"]).aggregate([])
    out: dict[int | None, list[str]] = defaultdict(list)
    for d, r in zip(pairs["device"].to_pylist(), pairs["rank"].to_pylist(), strict=True):
        out[r].append(str(d))
    return out


# -- devices ---------------------------------------------------------------------------------------------------


def _devices(facts: Mapping[str, Any], backend: str, event_ids: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    props = facts.get("kineto.deviceProperties")
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and _int(p.get("id")) is not None:
            out.setdefault(f"{backend}:{p['id']}", _listed(p, backend))
    own = [d for d in event_ids if d.split(":", 1)[0] == backend]
    unlisted = [d for d in own if d not in out]
    if len(out) == 1 and len(own) == 1 and unlisted:
        (listed,) = out.values()
        out[unlisted[0]] = {**listed, "evidence": f"{listed['evidence']} (the only device listed, and the only "
                                                  "device the events name)"}
    device = facts.get("device")
    if backend == "neuron" and isinstance(device, str) and device.startswith("neuron"):
        out.setdefault(device, {"kind": "neuron", "evidence": str(facts.get("device_source") or "the profile")})
    for d in own:
        out.setdefault(d, {"kind": backend, "evidence": "events"})
    return out


def _listed(p: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """One ``deviceProperties`` entry as a device record."""
    index = _int(p.get("id"))
    where = f"deviceProperties[{index}]"
    rec: dict[str, Any] = {"kind": backend, "index": index, "evidence": where}
    if p.get("name"):
        rec["name"] = str(p["name"])
    mem = _int(p.get("totalGlobalMem"))
    if mem is not None and mem > 0:
        rec["memory_bytes"], rec["memory_source"] = mem, f"{where}.totalGlobalMem"
    major, minor = _int(p.get("computeMajor")), _int(p.get("computeMinor"))
    if major is not None and minor is not None:
        rec["compute_capability"] = f"{major}.{minor}"
    sms = _int(p.get("numSms"))
    if sms is not None:
        rec["multiprocessors"] = sms
    return rec


# -- versions, job, instance -----------------------------------------------------------------------------------


def _versions(facts: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, set[str]] = defaultdict(set)
    for key, value in facts.items():
        if key.startswith("kineto.") and "version" in key.lower() and value is not None \
                and not isinstance(value, dict | list):
            name = key.removeprefix("kineto.")
            found["kineto_schema" if name == "schemaVersion" else name.removesuffix("_version")].add(str(value))
        elif key.startswith("neuron."):
            for fields in _neuron_fields(value):
                for k, v in fields.items():
                    if k.endswith("_version") and v is not None and not isinstance(v, dict | list):
                        found["neuron_" + k.removesuffix("_version")].add(str(v))
    info = facts.get("kineto.distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("nccl_version"), str | int):
        found["nccl"].add(str(info["nccl_version"]))
    return {k: ", ".join(sorted(v)) for k, v in sorted(found.items())}


def _neuron_fields(value: Any) -> Iterable[dict[str, Any]]:
    """The field dicts of a Neuron fact's rows (a summary row's ``metrics``, else the row itself)."""
    for row in _rows(value):
        fields = row.get("metrics", row) if isinstance(row, dict) else None
        if isinstance(fields, dict):
            yield fields


def _distributed(info: Any) -> dict[str, Any] | None:
    if not isinstance(info, dict):
        return None
    out: dict[str, Any] = {}
    for key in ("rank", "world_size"):
        if _int(info.get(key)) is not None:
            out[key] = _int(info[key])
    if isinstance(info.get("backend"), str):
        out["backend"] = info["backend"]
    pgs = info.get("pg_config")
    groups = []
    for pg in pgs if isinstance(pgs, list) else []:
        if isinstance(pg, dict) and "pg_name" in pg:
            group: dict[str, Any] = {"name": str(pg["pg_name"]), "size": _int(pg.get("pg_size"))}
            if isinstance(pg.get("pg_desc"), str):
                group["desc"] = pg["pg_desc"]
            groups.append(group)
    out["groups"] = groups
    return out


def _instance_type(facts: Mapping[str, Any]) -> str | None:
    for key, value in facts.items():
        if key.startswith("neuron."):
            for fields in _neuron_fields(value):
                if fields.get("instance_type") and not isinstance(fields["instance_type"], dict | list):
                    return str(fields["instance_type"])
    return None


def _mentioned_instance(texts: Iterable[str]) -> str | None:
    for text in texts:
        m = _INSTANCE.search(text)
        if m:
            return m.group(1)
    return None
