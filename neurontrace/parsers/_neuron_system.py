"""Explorer system tables → events, flows and counters (neuron.md §3.7, §6.2, §12).

``SystemProfileEvents`` rows by ``trace_event_source``:
- ``neuron_rt`` (runtime API calls) → ``system_events``: ``nrt_load``/``model_load`` are ``load``,
  ``nrt_tensor_read``/``write`` and ``dmem_buf_copyin``/``out`` ``transfer``, ``kbl_exec_wait`` (the host
  blocked on the device) ``sync_wait``, allocations ``memory``, everything else ``runtime``; track
  ``neuron_rt/NC:<nc>``;
- ``neuron_hw`` (hardware events) → ``device_events``: ``nc_exec_running`` is ``execution``,
  ``cc_running`` ``collective``, ``cc_exec_barrier`` ``sync_wait``; track ``neuron_hw``;
- ``framework`` → ``system_events`` (category from the Kineto ``cat`` Explorer keeps in
  ``extra_attributes_json``); left out when the caller loads the same ``trace.json`` itself.

Events sharing a ``flow_id`` are linked in time order (``flows`` kind ``launch``: framework dispatch →
runtime call → hardware execution). ``host`` is the ``instance_id``, ``pid``/``tid`` the process and
thread; ``exec_id`` from the extra attributes becomes ``correlation``.

Usage tables become ``counters`` (name = table, field = column): ``*_percent`` values are stored
as fractions 0..1 (unit ``fraction``), converting the 0-100 columns (neuron.md §3.5).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema

from . import _neuron_common as common
from ._arrow import flat
from ._neuron_arrow import constant, count_true, dict_strings, json_objects, map_dict
from ._neuron_events import Context, add_events, times
from ._neuron_read import SourceTable

_MAPPED = {"name", "start_ts", "end_ts", "duration_ns", "trace_event_source", "instance_id", "process_id",
           "thread_id", "nc_idx"}
_LEAN = ("id", "flow_id", "extra_attributes_json")


def load_system_events(ctx: Context, table: SourceTable, *,
                       skip_framework: bool) -> tuple[pa.Table, list[str]] | None:
    """Runtime and framework events to ``system_events``; returns the hardware rows (and the args
    columns) for :func:`load_hw_events`, which adds them to ``device_events`` after the system rows."""
    n_total = table.num_rows
    ctx.acct.events_read += n_total
    if not table.has("start_ts") or not table.has("name"):
        ctx.acct.skip("SystemProfileEvents: no start_ts/name column", n_total)
        return None
    full = ctx.full_args("SystemProfileEvents", n_total)
    args_cols = [c for c in table.columns if c not in _MAPPED] if full else table.present(_LEAN)
    t = table.read(table.present([*_MAPPED, *args_cols]),
                   dictionary=("name", "trace_event_source", "instance_id"))
    valid = pc.is_valid(t["start_ts"])
    ctx.acct.skip("SystemProfileEvents: no start timestamp", n_total - count_true(valid))
    t = t.filter(valid)
    source = pc.fill_null(t["trace_event_source"].cast(pa.string()), "") if "trace_event_source" in \
        t.column_names else constant("", pa.string(), t.num_rows)
    hw = pc.or_(pc.equal(source, "neuron_hw"),
                pc.and_(pc.equal(source, ""), map_dict(t["name"], common.is_hw_event, pa.bool_())))
    framework = pc.equal(source, "framework")
    if skip_framework:
        dup = count_true(framework)
        ctx.acct.skip("SystemProfileEvents: framework events (the same trace.json is loaded by the Kineto "
                      "parser)", dup)
        t, source, hw = (x.filter(pc.invert(framework)) for x in (t, source, hw))
        framework = pc.equal(source, "framework")
    _system_rows(ctx, t.filter(pc.invert(hw)), pc.filter(framework, pc.invert(hw)), args_cols)
    return t.filter(hw), args_cols


def _system_rows(ctx: Context, t: pa.Table, framework: Any, args_cols: list[str]) -> None:
    n = t.num_rows
    if n == 0:
        return
    ts, dur = times(t, start="start_ts", end="end_ts" if "end_ts" in t.column_names else None,
                    duration="duration_ns" if "duration_ns" in t.column_names else None, offset_ns=0)
    rt_cat = map_dict(t["name"], common.runtime_category)
    fw_cat = _framework_categories(t)
    category = pc.if_else(framework, fw_cat.cast(pa.string()), rt_cat.cast(pa.string()))
    nc = _nc(t)
    tid = _text(t, "thread_id")
    tid_text = tid if tid is not None else pa.nulls(n, pa.string())  # an export without thread_id
    track = pc.if_else(framework, pc.binary_join_element_wise("framework/TID:", pc.fill_null(tid_text, "?"), ""),
                       pc.binary_join_element_wise("neuron_rt/NC:", pc.fill_null(nc, "?"), ""))
    device = pc.binary_join_element_wise("neuron:nc", nc, "")
    ids = add_events(
        ctx, device_table=False, n=n, ts_ns=ts, dur_ns=dur, name=dict_strings(t["name"]), category=category,
        raw_category=_raw_source(t), phase="X", host=_host(ctx, t), pid=_text(t, "process_id"), tid=tid,
        track=track, device=device, correlation=_exec_id(t), args=json_objects(t, args_cols),
    )
    ctx.acct.keep("system_events", n)
    if "flow_id" in t.column_names:
        ctx.flow_parts.append((t, ids))


def load_hw_events(ctx: Context, hw: tuple[pa.Table, list[str]] | None) -> None:
    """Hardware rows of SystemProfileEvents → ``device_events`` (already on the epoch clock)."""
    if hw is None or hw[0].num_rows == 0:
        return
    t, cols = hw
    n = t.num_rows
    ts, dur = times(t, start="start_ts", end="end_ts" if "end_ts" in t.column_names else None,
                    duration="duration_ns" if "duration_ns" in t.column_names else None, offset_ns=0)
    nc = _nc(t)
    ids = add_events(
        ctx, device_table=True, n=n, ts_ns=ts, dur_ns=dur, name=dict_strings(t["name"]),
        category=map_dict(t["name"], lambda v: common.HW_EVENT_CATEGORIES.get(v or "", "other")),
        raw_category=_raw_source(t), phase="X", host=_host(ctx, t), pid=_text(t, "process_id"),
        tid=_text(t, "thread_id"), device=pc.fill_null(pc.binary_join_element_wise("neuron:nc", nc, ""),
                                                          ctx.device),
        track="neuron_hw", correlation=_exec_id(t), args=json_objects(t, cols),
    )
    ctx.acct.keep("device_events", n)
    if "flow_id" in t.column_names:
        ctx.flow_parts.append((t, ids))


def system_flows(ctx: Context) -> None:
    """Link events that share a ``flow_id`` value, consecutive in time (framework → rt → hw)."""
    if not ctx.flow_parts:
        return
    fid, ev, ts, end = [], [], [], []
    for t, ids in ctx.flow_parts:
        lists = flat(t["flow_id"])
        if not pa.types.is_list(lists.type) and not pa.types.is_large_list(lists.type):
            lists = _split_text_lists(lists)
        parent = np.asarray(pc.list_parent_indices(lists).to_numpy(), np.int64)
        fid.append(pc.list_flatten(lists).cast(pa.string()))
        ev.append(np.asarray(ids.to_numpy(), np.int64)[parent])
        starts = np.asarray(flat(t["start_ts"]).cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
        dur = (np.asarray(pc.fill_null(flat(t["duration_ns"]), 0).to_numpy(), np.int64)
               if "duration_ns" in t.column_names else np.zeros(t.num_rows, np.int64))
        ts.append(starts[parent])
        end.append((starts + dur)[parent])
    flow_ids = pa.concat_arrays(fid)
    if len(flow_ids) == 0:
        return
    codes = np.asarray(pc.index_in(flow_ids, pc.unique(flow_ids)).to_numpy(), np.int64)
    evs, tss, ends = np.concatenate(ev), np.concatenate(ts), np.concatenate(end)
    order = np.lexsort((evs, tss, codes))
    same = codes[order][1:] == codes[order][:-1]
    src, dst = order[:-1][same], order[1:][same]
    k = len(src)
    ctx.flows.append(pa.table({
        "flow_id": flow_ids.take(pa.array(src)),
        "kind": constant("launch", schema.DICT_STRING, k),
        "raw_category": constant("SystemProfileEvents.flow_id", schema.DICT_STRING, k),
        "src_event_id": pa.array(evs[src]), "dst_event_id": pa.array(evs[dst]),
        "src_ts_ns": pa.array(ends[src]), "dst_ts_ns": pa.array(tss[dst]),
        "rank": constant(ctx.rank, pa.int32(), k),
    }))


def _split_text_lists(col: pa.Array) -> pa.Array:
    text = pc.utf8_trim(pc.fill_null(col.cast(pa.string()), ""), '[] "')
    return pc.split_pattern(pc.replace_substring(text, '"', ""), ",")


def host_exec_starts(hw: tuple[pa.Table, list[str]] | None, nc_index: int | None) -> list[int]:
    """Epoch start times of ``nc_exec_running`` on one NeuronCore (all cores when it is unknown
    and only one core appears)."""
    if hw is None or hw[0].num_rows == 0:
        return []
    t = hw[0]
    t = t.filter(pc.equal(t["name"].cast(pa.string()), "nc_exec_running"))
    if "nc_idx" in t.column_names:
        cores = [c for c in pc.unique(t["nc_idx"]).to_pylist() if c is not None]
        if nc_index is not None:
            t = t.filter(pc.fill_null(pc.equal(t["nc_idx"], nc_index), False))
        elif len(cores) > 1:
            return []
    return [int(v) for v in t["start_ts"].to_pylist() if v is not None]


# -- helpers -------------------------------------------------------------------------------------


def _text(t: pa.Table, col: str) -> Any:
    return flat(t[col]).cast(pa.string()) if col in t.column_names else None


def _nc(t: pa.Table) -> Any:
    return flat(t["nc_idx"]).cast(pa.string()) if "nc_idx" in t.column_names else \
        pa.nulls(t.num_rows, pa.string())


def _host(ctx: Context, t: pa.Table) -> Any:
    if ctx.host is not None or "instance_id" not in t.column_names:
        return ctx.host
    return t["instance_id"]


def _raw_source(t: pa.Table) -> Any:
    return t["trace_event_source"] if "trace_event_source" in t.column_names else "SystemProfileEvents"


def _framework_categories(t: pa.Table) -> pa.ChunkedArray:
    if "extra_attributes_json" in t.column_names:
        found = pc.extract_regex(pc.fill_null(flat(t["extra_attributes_json"]).cast(pa.string()), ""),
                                 r'"(?:cat|category)"\s*:\s*"(?P<cat>[^"]*)"')
        cat = pc.if_else(pc.is_valid(found), pc.struct_field(found, "cat"), pa.scalar(None, pa.string()))
    else:
        cat = pa.nulls(t.num_rows, pa.string())
    key = pc.binary_join_element_wise(pc.fill_null(cat, ""), pc.fill_null(flat(t["name"]).cast(pa.string()), ""),
                                      "\x1f")
    return map_dict(key, lambda k: common.framework_category(*(_split_key(k))))


def _split_key(k: str | None) -> tuple[str | None, str | None]:
    cat, _, name = (k or "").partition("\x1f")
    return name or None, cat or None


def _exec_id(t: pa.Table) -> Any:
    if "extra_attributes_json" not in t.column_names:
        return None
    found = pc.extract_regex(pc.fill_null(flat(t["extra_attributes_json"]).cast(pa.string()), ""),
                             r'"exec_id"\s*:\s*"?(?P<id>-?\d{1,18})')
    ids = pc.if_else(pc.is_valid(found), pc.struct_field(found, "id"), pa.scalar(None, pa.string()))
    return ids.cast(pa.int64())


# -- counters ------------------------------------------------------------------------------------

# table → (value columns with their unit; percent scale: 100 when documented 0-100).
COUNTER_TABLES: dict[str, dict[str, Any]] = {
    "HbmUsage": {"device": True, "values": {"current_throughput": "bytes/s", "total_transfer_bytes": "bytes"}},
    "DmaUsage": {"device": True, "values": {"current_throughput": "bytes/s", "total_transfer_bytes": "bytes"}},
    "PendingDma": {"device": True, "values": {"value": "count"}},
    "PsumUsage": {"device": True, "values": "percent"},
    "SbufUsage": {"device": True, "values": "percent"},
    "CpuUsage": {"device": False, "values": {"util_percent": "percent100"}},
    "HostMemUsage": {"device": False, "values": {"used_bytes": "bytes", "used_percent": "percent100"}},
    "SystemProfileHbmUsage": {"device": False, "values": "bytes"},
}
_ID_COLUMNS = {"timestamp", "pcore_idx", "instance_id", "cpu_id", "device_idx", "hbm_idx"}


def load_counters(ctx: Context, tables: dict[str, SourceTable]) -> dict[str, str]:
    """Usage tables → ``counters``; returns how each percent column was scaled (for metadata)."""
    scales: dict[str, str] = {}
    for name, rule in COUNTER_TABLES.items():
        if name not in tables:
            continue
        src = tables[name]
        ctx.acct.events_read += src.num_rows
        if not src.has("timestamp"):
            ctx.acct.skip(f"{name}: no timestamp column", src.num_rows)
            continue
        t = src.read()
        values = rule["values"]
        if isinstance(values, str):
            suffix = "_percent" if values == "percent" else "_bytes"
            values = {c: values for c in t.column_names if c.endswith(suffix)}
        values = {c: u for c, u in values.items() if c in t.column_names}
        other = [c for c in t.column_names if c not in values and c not in _ID_COLUMNS]
        ts = t["timestamp"].cast(pa.int64())
        if rule["device"] and ctx.offset_ns:
            ts = pc.add(ts, ctx.offset_ns)
        device, series = _counter_where(ctx, name, t, rule["device"])
        first = True
        for col, rule_unit in values.items():
            v = t[col].cast(pa.float64())
            unit = rule_unit
            if rule_unit.startswith("percent"):
                v, scales[f"{name}.{col}"] = _fraction(v, documented_100=rule_unit == "percent100")
                unit = "fraction"
            n = t.num_rows
            ctx.counters.append(pa.table({
                "ts_ns": ts, "name": series, "field": constant(col, schema.DICT_STRING, n),
                "value": pc.fill_null(v, float("nan")), "unit": constant(unit, schema.DICT_STRING, n),
                "host": _host(ctx, t) if ctx.host is None and "instance_id" in t.column_names else
                constant(ctx.host, schema.DICT_STRING, n),
                "rank": constant(ctx.rank, pa.int32(), n), "pid": constant(None, schema.DICT_STRING, n),
                "tid": constant(None, schema.DICT_STRING, n), "device": device,
                "args": json_objects(t, other) if first else constant(None, pa.string(), n),
            }))
            first = False
        ctx.acct.keep("counters", t.num_rows)
    return scales


def _counter_where(ctx: Context, name: str, t: pa.Table, on_device: bool) -> tuple[Any, Any]:
    n = t.num_rows
    series: Any = constant(name, schema.DICT_STRING, n)
    if on_device:
        if ctx.multi_pcore and "pcore_idx" in t.column_names:
            series = pc.binary_join_element_wise(f"{name} (pcore ",
                                                 pc.fill_null(t["pcore_idx"].cast(pa.string()), "?"), ")", "")
        return constant(ctx.device, schema.DICT_STRING, n), series
    if name == "CpuUsage" and "cpu_id" in t.column_names:
        return map_dict(t["cpu_id"], lambda c: "cpu" if c in (None, "average") else f"cpu:{c}"), series
    if "hbm_idx" in t.column_names:
        dev = pc.fill_null(t["device_idx"].cast(pa.string()), "?") if "device_idx" in t.column_names else "?"
        return pc.binary_join_element_wise("neuron:dev", dev, ".hbm", pc.fill_null(
            t["hbm_idx"].cast(pa.string()), "?"), ""), series
    return constant("cpu" if name == "HostMemUsage" else None, schema.DICT_STRING, n), series


def _fraction(v: pa.ChunkedArray, *, documented_100: bool) -> tuple[Any, str]:
    top = pc.max(v).as_py()
    if documented_100 or (top is not None and top > 1.0 + 1e-9):
        how = "0-100 (documented), divided by 100" if documented_100 else "0-100 (values above 1), divided by 100"
        return pc.divide(v, 100.0), how
    return v, "fraction 0..1 (kept)"
