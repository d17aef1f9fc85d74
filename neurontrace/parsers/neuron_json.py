"""Legacy Neuron JSON (``neuron-profile``/``neuron-explorer view --output-format json``) → `Trace`.

Spec: shared/formats/neuron.md §5 (deprecated output; 2.33 is the last release with it). The top
level maps snake_case section names to lists of row objects:

- device files (``ntff.json``, ``device_profile_model_<id>.json``): ``instruction`` → ``device_events``
  compute on the engine named by ``subgroup``/``label``, with ``hlo_name`` frames; ``dma`` → dma
  (bytes = ``transfer_size``); ``cc_ops`` → collective; ``layer_summary`` → annotation ranges;
  ``summary`` → metadata ``neuron.summary`` (``*_percent`` as fractions 0..1);
- system files (``system_profile.json``, ``profile.json``): ``trace_event`` → ``system_events`` (runtime
  and framework; track = ``group``) and ``device_events`` (hardware events such as
  ``nc_exec_running``); ``mem_usage``, ``cpu_util``, ``device_mem_usage`` → ``counters`` (0-100
  values as fractions); ``warnings`` → load warnings;
- every other section (``neff_node``, ``annotation``, ``profile_info``, ...) → ``metadata``
  (``neuron_json.<section>``), and every field without a column → ``args``.

Device timestamps are taken as nanoseconds on the device clock: the unit is not documented and
public readers disagree (neuron.md §5.1, §13.4), so ``metadata`` records the assumption. System
timestamps are Unix-epoch nanoseconds.
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
from neurontrace.errors import MalformedTraceError, NeuronProfileWarning
from neurontrace.load import Probe
from neurontrace.progress import Progress, no_progress
from neurontrace.trace import ACCOUNTING_KEY, ParseAccounting, Trace, conform, metadata_table

from . import _neuron_common as common
from ._arrow import flat
from ._neuron_arrow import constant, json_objects, json_values, map_dict
from ._neuron_events import Context, add_events, device_table, system_table, times
from ._neuron_frames import FrameBuilder
from .neuron_summary import summary_fact

FORMAT = "neuron-json"
DEVICE_SECTIONS = ("summary", "instruction", "cc_ops", "dma", "layer_summary", "neff_node", "annotation",
                   "profile_info", "summary_groups")
SYSTEM_SECTIONS = ("trace_event", "mem_usage", "cpu_util", "device_mem_usage", "system_profile_metadata",
                   "device_profile_list", "warnings")
_FIRST_KEY = re.compile(rb'^\s*\{\s*"(?P<key>[a-z_]+)"\s*:\s*[\[{"0-9tfn-]')
_DEVICE_TIME_NOTE = ("legacy device JSON timestamps taken as ns on the device clock (unit undocumented; "
                     "neuron.md §5.1)")


def sniff(probe: Probe) -> bool:
    if probe.is_dir:
        return False
    m = _FIRST_KEY.match(probe.head)
    return m is not None and m.group("key").decode() in (*DEVICE_SECTIONS, *SYSTEM_SECTIONS)


def parse(path: Path, *, progress: Progress = no_progress) -> Trace:
    data, complete = read_all(Path(path), progress)
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        cut = "" if complete else " (the gzip stream ends early)"
        raise MalformedTraceError(f"{path}: not valid JSON{cut} ({exc}); export the profile again") from exc
    if not isinstance(doc, dict):
        raise MalformedTraceError(f"{path}: expected a JSON object of sections, found {type(doc).__name__}")
    source = str(path)
    acct = ParseAccounting(source=source, format=FORMAT)
    system = "trace_event" in doc or not any(k in doc for k in DEVICE_SECTIONS)
    ctx = Context(source=source, acct=acct, frames=FrameBuilder({}), device="neuron:nc0", detail="full")
    facts: dict[str, Any] = {"format": FORMAT, "backend": "neuron", "neuron_json.kind": "system" if system else "device"}
    sections = dict(doc)
    nc = _device_nc(sections)
    if nc is not None:
        ctx.device = f"neuron:nc{nc}"
    summaries = _rows(sections.pop("summary", []), acct, "metadata")
    if summaries:
        facts["neuron.summary"] = [summary_fact(None, {k: v for k, v in s.items() if v is not None})
                                   for s in summaries]
    try:
        _device_sections(ctx, sections)
        _system_sections(ctx, sections, facts)
    except MalformedTraceError as exc:
        raise MalformedTraceError(f"{path}: {exc}; export the profile again") from exc
    for key, value in sections.items():  # everything else is kept as it is
        n = len(value) if isinstance(value, list) else 1
        acct.events_read += n
        acct.keep("metadata", n)
        facts[f"neuron_json.{key}"] = value
    synthetic = common.is_synthetic_text(sections.get("synthetic")) or any(
        common.is_synthetic_text(r.get("ntff_filename")) for r in sections.get("profile_info", [])
        if isinstance(r, dict))
    facts.update(synthetic=synthetic, clock="unix_epoch_ns" if system else "neuron_device_relative_ns",
                 alignment={"method": "none", "note": "system times are Unix-epoch ns" if system
                            else _DEVICE_TIME_NOTE})
    facts[ACCOUNTING_KEY] = acct.as_dict()
    flows = [conform(f, schema.FLOWS) for f in ctx.flows]
    counters = [conform(c, schema.COUNTERS) for c in ctx.counters]
    return Trace(
        system_events=system_table(ctx), device_events=device_table(ctx),
        flows=pa.concat_tables(flows) if flows else None, counters=pa.concat_tables(counters) if counters else None,
        frames=ctx.frames.table(), metadata=metadata_table(facts, source=source),
    )


def _device_nc(sections: dict[str, Any]) -> int | None:
    summary = sections.get("summary")
    for s in summary if isinstance(summary, list) else []:
        if isinstance(s, dict) and isinstance(s.get("nc_idx"), int):
            return int(s["nc_idx"])
    return None


def _rows(value: Any, acct: ParseAccounting, kept_as: str | None) -> list[dict[str, Any]]:
    rows = value if isinstance(value, list) else [value]
    good = [r for r in rows if isinstance(r, dict)]
    acct.events_read += len(rows)
    acct.skip("section entry that is not an object", len(rows) - len(good))
    if kept_as:
        acct.keep(kept_as, len(good))
    return good


def rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Row objects as columns; a field whose values mix types is kept as JSON text."""
    keys = dict.fromkeys(k for r in rows for k in r)
    cols = {}
    for k in keys:
        values = [r.get(k) for r in rows]
        try:
            cols[k] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            cols[k] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in values], pa.string())
    return pa.table(cols) if cols else pa.table({"_": pa.nulls(len(rows))}).drop_columns(["_"])


def _number(t: pa.Table, col: str, typ: pa.DataType | None = None) -> Any:
    """A column the parser computes with (times, sizes, values) as numbers; a value that is not one
    (text, a list, an integer beyond int64) is a named error."""
    if col not in t.column_names:
        return None
    typ = typ or pa.int64()
    try:
        return pc.cast(t[col], typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise MalformedTraceError(f"field {col!r} must hold numbers ({typ}) but holds {t[col].type} values that "
                                  f"do not convert ({exc})") from exc


def _device_sections(ctx: Context, sections: dict[str, Any]) -> None:
    specs = (
        ("instruction", "compute", "opcode", None),
        ("dma", "dma", "variable", "transfer_size"),
        ("cc_ops", "collective", "operation", "input_size"),
        ("layer_summary", "annotation", "name", None),
    )
    for key, category, name_col, bytes_col in specs:
        if key not in sections:
            continue
        rows = _rows(sections.pop(key), ctx.acct, None)
        t = rows_table(rows)
        start = "start" if key == "layer_summary" else "timestamp"
        if t.num_rows == 0 or start not in t.column_names:
            ctx.acct.skip(f"{key}: no {start}", t.num_rows)
            continue
        valid = pc.is_valid(t[start])
        ctx.acct.skip(f"{key}: no {start}", t.num_rows - int(pc.sum(pc.cast(valid, pa.int64())).as_py() or 0))
        t = t.filter(valid)
        t = t.set_column(t.schema.get_field_index(start), start, _number(t, start))
        mapped: set[str] = {start, name_col}
        dur_col: str | None = None
        if key == "layer_summary" and "end" in t.column_names:
            t = t.append_column("_dur", pc.subtract(_number(t, "end"), t[start]))
            dur_col = "_dur"
            mapped.add("end")
        elif "duration" in t.column_names:
            t = t.set_column(t.schema.get_field_index("duration"), "duration", _number(t, "duration"))
            dur_col = "duration"
            mapped.add("duration")
        ts, dur = times(t, start=start, end=None, duration=dur_col, offset_ns=0)
        name = pc.fill_null(t[name_col].cast(pa.string()), key) if name_col in t.column_names else key
        extra: dict[str, Any] = {}
        if key == "instruction":
            eng = t["subgroup"] if "subgroup" in t.column_names else t["label"] if "label" in t.column_names else None
            extra["track"] = map_dict(eng, lambda v: common.engine(v) or "unknown engine") if eng is not None \
                else "unknown engine"
            extra["frame_id"] = ctx.frames.link(t.select([c for c in ("hlo_name", "layer") if c in t.column_names]))
        elif key == "dma":
            extra["track"] = map_dict(t["queue_type"], lambda v: f"dma {v}") if "queue_type" in t.column_names \
                else "dma"
            # Endpoints are nested lists ([["WEIGHT"]]): test their JSON spelling.
            remote = [pc.fill_null(pc.match_substring(json_values(flat(t[c])), "REMOTE", ignore_case=True), False)
                      for c in ("source", "dest") if c in t.column_names]
            extra["direction"] = pc.if_else(pc.or_(*remote) if len(remote) == 2 else remote[0], "p2p", "d2d") \
                if remote else "d2d"
        else:
            extra["track"] = "cc ops" if key == "cc_ops" else "layers"
        if bytes_col and bytes_col in t.column_names:
            extra["bytes"] = _number(t, bytes_col)
            mapped.add(bytes_col)
        add_events(ctx, device_table=True, n=t.num_rows, ts_ns=ts, dur_ns=dur, name=name, category=category,
                   raw_category=key, phase="X", device=ctx.device,
                   args=json_objects(t, [c for c in t.column_names if c not in mapped and c != "_dur"]), **extra)
        ctx.acct.keep("device_events", t.num_rows)


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
            common.warn(ctx.acct, f"{ctx.source}: the profiler warned: {r.get('message')}", NeuronProfileWarning,
                        stacklevel=5)


def _trace_events(ctx: Context, t: pa.Table) -> None:
    n = t.num_rows
    if n == 0 or "timestamp" not in t.column_names or "name" not in t.column_names:
        ctx.acct.skip("trace_event: no timestamp/name", n)
        return
    valid = pc.is_valid(t["timestamp"])
    ctx.acct.skip("trace_event: no timestamp", n - int(pc.sum(pc.cast(valid, pa.int64())).as_py() or 0))
    t = t.filter(valid)
    t = t.set_column(t.schema.get_field_index("timestamp"), "timestamp", _number(t, "timestamp"))
    if "duration" in t.column_names:
        t = t.set_column(t.schema.get_field_index("duration"), "duration", _number(t, "duration"))
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
            correlation=_number(part, "exec_id") if "exec_id" in part.column_names else None,
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
        v = _number(t, col, pa.float64())
        unit = "fraction" if rule_unit == "percent100" else rule_unit
        if rule_unit == "percent100":
            v = pc.divide(v, 100.0)
        ctx.counters.append(pa.table({
            "ts_ns": _number(t, "timestamp"), "name": constant(name, schema.DICT_STRING, n),
            "field": constant(col, schema.DICT_STRING, n), "value": pc.fill_null(v, float("nan")),
            "unit": constant(unit, schema.DICT_STRING, n),
            "host": t["instance_id"].cast(pa.string()) if "instance_id" in t.column_names else
            constant(None, pa.string(), n),
            "device": device if not isinstance(device, str) else constant(device, schema.DICT_STRING, n),
            "args": json_objects(t, other) if i == 0 else constant(None, pa.string(), n),
        }))
    ctx.acct.keep("counters", n)
