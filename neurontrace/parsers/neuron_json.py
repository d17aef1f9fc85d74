"""Legacy Neuron JSON (``neuron-profile``/``neuron-explorer view --output-format json``) → `Trace`.

Spec: shared/formats/neuron.md §5 (deprecated output; 2.33 is the last release with it) and its
addendum 2. The top level maps snake_case section names to lists of row objects, **in no fixed
order** (real device files write their 21 sections in a different order each time), so a file is
recognised by its content: the top-level keys visible in its head must include a Neuron section
(:data:`KNOWN_SECTIONS`), and the whole document one of the required sections
(:data:`REQUIRED_SECTIONS`: ``instruction`` or ``summary`` for a device profile, ``trace_event``
for a system profile).

- device files (``ntff.json``, ``device_profile_model_<id>.json``, ``<stem>_profile_full.json``):
  the timeline sections by :mod:`._neuron_json_device` (instructions, waits, DMA, collectives,
  layers, semaphore updates; ``active_time`` checked against the instructions); ``summary`` →
  metadata ``neuron.summary`` (``*_percent`` as fractions 0..1); ``neff_header`` →
  ``neuron.neff_header`` (its ``uuid`` pairs the JSON with its NTFF/NEFF); ``metadata`` →
  ``neuron.profile_metadata``;
- system files (``system_profile.json``, ``profile.json``): ``trace_event`` → ``system_events`` (runtime
  and framework; track = ``group``) and ``device_events`` (hardware events such as
  ``nc_exec_running``); ``mem_usage``, ``cpu_util``, ``device_mem_usage`` → ``counters`` (0-100
  values as fractions); ``warnings`` (both kinds) → load warnings;
- every other section (``pending_dma``, ``nc_mem_usage``, ``dma_throughput``, ``neff_node``, ...) →
  ``metadata`` (``neuron_json.<section>``), and every field without a column → ``args``.

Device timestamps are ns from the profile start on the device clock (addendum 2; the file's own
``metadata.last_hw_timestamp`` against ``summary.total_time`` is recorded as
``neuron_json.time_unit_check``). System timestamps are Unix-epoch nanoseconds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema
from neurontrace._io import read_all
from neurontrace.errors import MalformedTraceError, NeuronProfileWarning, UnknownFormatError
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, conform, metadata_table

from . import _neuron_common as common
from ._neuron_arrow import constant, json_objects, map_dict
from ._neuron_events import Context, add_events, device_table, system_table, times
from ._neuron_frames import FrameBuilder
from ._neuron_json_device import load_device_sections, number, rows_table, time_unit_check
from ._neuron_json_device import rows as _rows
from ._normalized_meta import with_normalized
from .neuron_summary import summary_fact

FORMAT = "neuron-json"
DEVICE_SECTIONS = ("summary", "instruction", "cc_ops", "dma", "layer_summary", "neff_node", "annotation",
                   "profile_info", "summary_groups")
SYSTEM_SECTIONS = ("trace_event", "mem_usage", "cpu_util", "device_mem_usage", "system_profile_metadata",
                   "device_profile_list", "warnings")
# Sections seen in real device files of neuron-profile 2.25-2.28 beyond the documented ones (addendum 2).
OBSERVED_SECTIONS = ("pending_dma", "ham", "instruction_usage", "terminology", "neff_header", "semaphore_update",
                     "active_time", "dma_queues_info", "metadata", "dma_throughput", "summary_group_order",
                     "model_info", "nc_mem_usage")
KNOWN_SECTIONS = frozenset((*DEVICE_SECTIONS, *SYSTEM_SECTIONS, *OBSERVED_SECTIONS))
# Words other JSON uses too: alone they do not make a file a Neuron profile.
_GENERIC = frozenset({"summary", "warnings", "metadata", "terminology", "model_info", "annotation"})
REQUIRED_SECTIONS = {"device": ("instruction", "summary"), "system": ("trace_event",)}
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
# File names neuron-profile / neuron-explorer give JSON output (neuron.md §5.1, §5.2; addendum 2's reports).
_DOCUMENTED_NAME = re.compile(r"^(ntff|system_profile|profile)\.json$|^device_profile_model_.+\.json$|"
                              r"_profile_full\.json$|_nc_\d+_session_\d+\.json$")
_SPACE = b" \t\r\n"
_DEVICE_TIME_NOTE = ("legacy device JSON timestamps are ns from the profile start on the device clock "
                     "(neuron.md addendum 2: metadata.last_hw_timestamp equals summary.total_time in ns)")


def top_level_keys(head: bytes) -> list[str]:
    """The keys of the top-level object that the head of a JSON document shows, in order."""
    text = head.lstrip(_SPACE)
    if not text.startswith(b"{"):
        return []
    keys: list[str] = []
    depth = 0
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                break
        elif depth == 1:
            rest = text[m.end():m.end() + 8].lstrip(_SPACE)
            if rest.startswith(b":"):
                keys.append(tok[1:-1].decode("utf-8", "replace"))
    return keys


def sniff(probe: Probe) -> bool:
    if probe.is_dir:
        return False
    keys = top_level_keys(probe.head)
    if not keys or not all(_KEY.match(k) for k in keys):
        return False
    known = KNOWN_SECTIONS.intersection(keys)
    # A head that shows only a generic first section (cut inside a large one) still counts under a
    # documented Neuron file name.
    return bool(known - _GENERIC) or len(known) >= 2 or bool(known and _DOCUMENTED_NAME.search(probe.path.name))


def parse(path: Path, *, progress: Progress = no_progress) -> Trace:
    data, complete = read_all(Path(path), progress)
    try:
        doc = msgspec.json.decode(data)
    except RecursionError as exc:  # msgspec's own nesting limit
        raise MalformedTraceError(f"{path}: JSON nested deeper than the parser's limit ({exc}); no Neuron "
                                  "profile nests this deep: the file is damaged or hostile") from exc
    except msgspec.DecodeError as exc:
        cut = "" if complete else " (the gzip stream ends early)"
        raise MalformedTraceError(f"{path}: not valid JSON{cut} ({exc}); export the profile again") from exc
    if not isinstance(doc, dict):
        raise MalformedTraceError(f"{path}: expected a JSON object of sections, found {type(doc).__name__}")
    kind = next((k for k, need in REQUIRED_SECTIONS.items() if any(s in doc for s in need)), None)
    if kind is None:
        found = ", ".join(sorted(doc)[:12]) or "no sections"
        raise UnknownFormatError(
            f"{path}: a JSON object of snake_case sections ({found}) but none that a Neuron profile must have "
            "(device: instruction or summary; system: trace_event); export it again with "
            "`neuron-explorer view ... --output-format json`")
    system = "trace_event" in doc
    source = str(path)
    acct = ParseAccounting(source=source, format=FORMAT)
    ctx = Context(source=source, acct=acct, frames=FrameBuilder({}), device="neuron:nc0", detail="full")
    facts: dict[str, Any] = {"format": FORMAT, "backend": "neuron", "neuron_json.kind": "system" if system else "device",
                             "neuron_json.sections": list(doc)}
    sections = dict(doc)
    nc = _device_nc(sections)
    if nc is not None:
        ctx.device = f"neuron:nc{nc}"
    summaries = _rows(sections.pop("summary", []), acct, "metadata")
    if summaries:
        facts["neuron.summary"] = [summary_fact(None, {k: v for k, v in s.items() if v is not None})
                                   for s in summaries]
    unit = time_unit_check(sections, summaries)
    if unit is not None:
        facts["neuron_json.time_unit_check"] = unit
    for key, fact in (("neff_header", "neuron.neff_header"), ("metadata", "neuron.profile_metadata")):
        if key in sections:
            facts[fact] = _rows(sections.pop(key), acct, "metadata")
    try:
        load_device_sections(ctx, sections, facts)
        _system_sections(ctx, sections, facts)
    except MalformedTraceError as exc:
        raise MalformedTraceError(f"{path}: {exc}; export the profile again") from exc
    for key, value in sections.items():  # everything else is kept as it is
        n = len(value) if isinstance(value, list) else 1
        acct.events_read += n
        acct.keep("metadata", n)
        facts[f"neuron_json.{key}"] = value
    if ctx.derived:
        facts["neuron.derived_rows"] = ctx.derived
    synthetic = common.is_synthetic_text(sections.get("synthetic")) or any(
        common.is_synthetic_text(r.get("ntff_filename")) for r in sections.get("profile_info", [])
        if isinstance(r, dict))
    facts.update(synthetic=synthetic, clock="unix_epoch_ns" if system else "neuron_device_relative_ns",
                 alignment={"method": "none", "note": "system times are Unix-epoch ns" if system
                            else _DEVICE_TIME_NOTE})
    facts[ACCOUNTING_KEY] = acct.as_dict()
    flows = [conform(f, schema.FLOWS) for f in ctx.flows]
    counters = [conform(c, schema.COUNTERS) for c in ctx.counters]
    return with_normalized(Trace(
        system_events=system_table(ctx), device_events=device_table(ctx),
        flows=pa.concat_tables(flows) if flows else None, counters=pa.concat_tables(counters) if counters else None,
        frames=ctx.frames.table(), metadata=metadata_table(facts, source=source),
    ))


def _device_nc(sections: dict[str, Any]) -> int | None:
    summary = sections.get("summary")
    for s in summary if isinstance(summary, list) else []:
        if isinstance(s, dict) and isinstance(s.get("nc_idx"), int):
            return int(s["nc_idx"])
    return None


def _system_sections(ctx: Context, sections: dict[str, Any], facts: dict[str, Any]) -> None:
    if "trace_event" in sections:
        _trace_events(ctx, rows_table(_rows(sections.pop("trace_event"), ctx.acct, None)))
    for key, unit_rules, name in (("mem_usage", {"usage": "bytes", "percent_usage": "percent100"}, "HostMemUsage"),
                                  ("cpu_util", {"util": "percent100"}, "CpuUsage"),
                                  ("device_mem_usage", None, "SystemProfileHbmUsage")):
        if key in sections:
            _counters(ctx, rows_table(_rows(sections.pop(key), ctx.acct, None)), unit_rules, name)
    for key in ("system_profile_metadata", "device_profile_list"):
        if key in sections:
            facts[f"neuron.{key}"] = _rows(sections.pop(key), ctx.acct, "metadata")
    if "warnings" in sections:
        rows = _rows(sections.pop("warnings"), ctx.acct, "metadata")
        facts["neuron.warnings"] = rows
        for r in rows:
            said = r.get("message") if isinstance(r.get("message"), str) else json.dumps(r, sort_keys=True)
            common.warn(ctx.acct, f"{ctx.source}: the profiler warned: {said}", NeuronProfileWarning,
                        stacklevel=5)


def _trace_events(ctx: Context, t: pa.Table) -> None:
    n = t.num_rows
    if n == 0 or "timestamp" not in t.column_names or "name" not in t.column_names:
        ctx.acct.skip("trace_event: no timestamp/name", n)
        return
    valid = pc.is_valid(t["timestamp"])
    ctx.acct.skip("trace_event: no timestamp", n - int(pc.sum(pc.cast(valid, pa.int64())).as_py() or 0))
    t = t.filter(valid)
    t = t.set_column(t.schema.get_field_index("timestamp"), "timestamp", number(t, "timestamp"))
    if "duration" in t.column_names:
        t = t.set_column(t.schema.get_field_index("duration"), "duration", number(t, "duration"))
    hw = map_dict(t["name"], common.is_hw_event, pa.bool_())
    group = pc.fill_null(t["group"].cast(pa.string()), "") if "group" in t.column_names else \
        constant("", pa.string(), t.num_rows)
    framework = pc.starts_with(group, "framework")
    if "type" in t.column_names:
        framework = pc.or_(framework, pc.fill_null(pc.equal(t["type"].cast(pa.string()), "99999"), False))
    mapped = {"name", "timestamp", "duration", "group", "instance_id", "process_id", "thread_id", "nc_idx"}
    for device_rows in (False, True):
        mask = hw if device_rows else pc.invert(hw)
        part, fw = t.filter(mask), pc.filter(framework, mask)
        if part.num_rows == 0:
            continue
        ts, dur = times(part, start="timestamp", end=None,
                        duration="duration" if "duration" in part.column_names else None, offset_ns=0)
        if device_rows:
            category: Any = map_dict(part["name"], lambda v: common.HW_EVENT_CATEGORIES.get(v or "", "other"))
        else:
            category = pc.if_else(fw, map_dict(part["name"], lambda v: common.framework_category(v, None))
                                  .cast(pa.string()),
                                  map_dict(part["name"], common.runtime_category).cast(pa.string()))
        nc = part["nc_idx"].cast(pa.string()) if "nc_idx" in part.column_names else None
        where = {c: part[c].cast(pa.string()) for c in ("instance_id", "process_id", "thread_id")
                 if c in part.column_names}
        track: Any = part["group"].cast(pa.string()) if "group" in part.column_names else "neuron_rt"
        add_events(
            ctx, device_table=device_rows, n=part.num_rows, ts_ns=ts, dur_ns=dur, name=part["name"].cast(pa.string()),
            category=category, raw_category=part["group"] if "group" in part.column_names else "trace_event",
            phase="X", host=where.get("instance_id"), pid=where.get("process_id"), tid=where.get("thread_id"),
            track="neuron_hw" if device_rows else track,
            device=(pc.fill_null(pc.binary_join_element_wise("neuron:nc", nc, ""), ctx.device) if nc is not None
                    else ctx.device) if device_rows else (pc.binary_join_element_wise("neuron:nc", nc, "")
                                                          if nc is not None else None),
            correlation=number(part, "exec_id") if "exec_id" in part.column_names else None,
            args=json_objects(part, [c for c in part.column_names if c not in mapped]),
        )
        ctx.acct.keep("device_events" if device_rows else "system_events", part.num_rows)


def _counters(ctx: Context, t: pa.Table, units: dict[str, str] | None, name: str) -> None:
    n = t.num_rows
    if n == 0 or "timestamp" not in t.column_names:
        ctx.acct.skip(f"{name}: no timestamp", n)
        return
    if units is None:
        units = {c: "bytes" for c in t.column_names if c.endswith("_bytes")}
    units = {c: u for c, u in units.items() if c in t.column_names}
    other = [c for c in t.column_names if c not in units and c not in ("timestamp", "instance_id", "cpu_id")]
    device: Any = map_dict(t["cpu_id"], lambda c: "cpu" if c in (None, "average") else f"cpu:{c}") \
        if "cpu_id" in t.column_names else "cpu" if name != "SystemProfileHbmUsage" else ctx.device
    for i, (col, rule_unit) in enumerate(units.items()):
        v = number(t, col, pa.float64())
        unit = "fraction" if rule_unit == "percent100" else rule_unit
        if rule_unit == "percent100":
            v = pc.divide(v, 100.0)
        ctx.counters.append(pa.table({
            "ts_ns": number(t, "timestamp"), "name": constant(name, schema.DICT_STRING, n),
            "field": constant(col, schema.DICT_STRING, n), "value": pc.fill_null(v, float("nan")),
            "unit": constant(unit, schema.DICT_STRING, n),
            "host": t["instance_id"].cast(pa.string()) if "instance_id" in t.column_names else
            constant(None, pa.string(), n),
            "device": device if not isinstance(device, str) else constant(device, schema.DICT_STRING, n),
            "args": json_objects(t, other) if i == 0 else constant(None, pa.string(), n),
        }))
    ctx.acct.keep("counters", n)
