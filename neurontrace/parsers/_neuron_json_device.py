"""Legacy Neuron JSON device sections → ``device_events`` (neuron.md §5.1 and its addendum 2).

- ``instruction`` → one row per instruction on the engine named by ``subgroup``/``label``; an
  ``EVENT_SEMAPHORE*`` opcode is a ``sync_wait``, everything else ``compute`` (the rule the Parquet path
  uses, :func:`._neuron_common.instruction_category`); the wait before an instruction
  (``evt_wait_time``, as real JSON spells it, or ``evt_wait_time_ns``) becomes a derived ``sync_wait``
  row ending where the instruction starts;
- ``dma`` → dma (bytes = ``transfer_size``), ``cc_ops`` → collective, ``layer_summary`` → annotation
  ranges, ``semaphore_update`` → instant ``sync_wait`` marks (as the Parquet ``SemaphoreUpdate``);
- rows carrying ``subgraph`` (neuron-profile 2.28 with ``vnc_enabled``: one subgraph per physical
  core) are attributed per subgraph: the track gets `` (sg01)`` when a section holds more than one;
- ``active_time`` (engine-busy intervals, semaphore waits excluded) is not loaded as events beside the
  instructions it merges, but kept as metadata ``neuron_json.active_time`` and checked against them
  (:mod:`._neuron_active`); without instructions it is the compute timeline (``<engine> active``).

Times are ns from the profile start (addendum 2: ``metadata.last_hw_timestamp`` equals
``summary.total_time`` in ns, ``ticks_per_nanosec`` is 1000); :func:`time_unit_check` records the check.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.errors import MalformedTraceError
from neurontrace.trace import ParseAccounting

from . import _neuron_active as active
from . import _neuron_common as common
from ._arrow import flat
from ._neuron_arrow import json_objects, json_values, map_dict
from ._neuron_events import Context, add_events, times

WAIT_FIELDS = ("evt_wait_time_ns", "evt_wait_time")  # Parquet's spelling, then the JSON one (addendum 2)
_SPECS = (  # section, category, name field, bytes field, start field
    ("instruction", "compute", "opcode", None, "timestamp"),
    ("dma", "dma", "variable", "transfer_size", "timestamp"),
    ("cc_ops", "collective", "operation", "input_size", "timestamp"),
    ("layer_summary", "annotation", "name", None, "start"),
    ("semaphore_update", "sync_wait", "id", None, "timestamp"),
)
_START = ("start_ts", "timestamp", "start")
_END = ("end_ts", "end")
_DURATION = ("duration_ns", "duration")


def rows(value: Any, acct: ParseAccounting, kept_as: str | None) -> list[dict[str, Any]]:
    """A section's row objects (a single object counts as one row); other entries are counted skipped."""
    items = value if isinstance(value, list) else [value]
    good = [r for r in items if isinstance(r, dict)]
    acct.events_read += len(items)
    acct.skip("section entry that is not an object", len(items) - len(good))
    if kept_as:
        acct.keep(kept_as, len(good))
    return good


def rows_table(items: list[dict[str, Any]]) -> pa.Table:
    """Row objects as columns; a field whose values mix types is kept as JSON text."""
    keys = dict.fromkeys(k for r in items for k in r)
    cols = {}
    for k in keys:
        values = [r.get(k) for r in items]
        try:
            cols[k] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            cols[k] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in values], pa.string())
    return pa.table(cols) if cols else pa.table({"_": pa.nulls(len(items))}).drop_columns(["_"])


def number(t: pa.Table, col: str, typ: pa.DataType | None = None) -> Any:
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


def load_device_sections(ctx: Context, sections: dict[str, Any], facts: dict[str, Any]) -> None:
    """Every device section this module reads, popped from ``sections``; facts gain the checks."""
    active_rows = rows(sections.pop("active_time"), ctx.acct, None) if "active_time" in sections else None
    has_instructions = "instruction" in sections
    for key, category, name_col, bytes_col, start in _SPECS:
        if key in sections:
            _section(ctx, key, rows_table(rows(sections.pop(key), ctx.acct, None)), category, name_col, bytes_col,
                     start)
    if active_rows is None:
        return
    t = rows_table(active_rows)
    if not has_instructions:
        _section(ctx, "active_time", t, "compute", None, None, _first(t, _START) or "start_ts")
        return
    span = _intervals(t)
    # Kept as the file wrote it (metadata neuron_json.active_time), not as events: they merge the instructions.
    facts["neuron_json.active_time"] = active_rows
    ctx.acct.keep("metadata", t.num_rows)
    if span is not None:
        facts["neuron.active_time_check"] = active.check(ctx, span, section="active_time",
                                                         instructions="instruction")


def time_unit_check(sections: dict[str, Any], summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``metadata.last_hw_timestamp`` against ``summary.total_time`` (s): equal when times are ns."""
    meta = sections.get("metadata")
    first = meta[0] if isinstance(meta, list) and meta and isinstance(meta[0], dict) else meta
    last = first.get("last_hw_timestamp") if isinstance(first, dict) else None
    total = next((s.get("total_time") for s in summaries if isinstance(s.get("total_time"), int | float)), None)
    if not isinstance(last, int | float) or total is None or not total:
        return None
    ratio = float(last) / (float(total) * 1e9)
    return {"last_hw_timestamp": last, "summary_total_time_s": total, "ratio": ratio,
            "ns": abs(ratio - 1.0) <= 0.01}


def _first(t: pa.Table, names: tuple[str, ...]) -> str | None:
    return next((c for c in names if c in t.column_names), None)


def _intervals(t: pa.Table) -> tuple[np.ndarray, np.ndarray] | None:
    start, end, duration = _first(t, _START), _first(t, _END), _first(t, _DURATION)
    if start is None or (end is None and duration is None):
        return None
    valid = t.filter(pc.is_valid(t[start]))
    s = np.asarray(pc.fill_null(number(valid, start), 0).to_numpy(), np.int64)
    if end is not None:
        e = np.asarray(pc.fill_null(number(valid, end), 0).to_numpy(), np.int64)
    else:
        e = s + np.asarray(pc.fill_null(number(valid, duration or ""), 0).to_numpy(), np.int64)
    return s, np.maximum(e, s)


def _subgraph_suffix(t: pa.Table) -> Any:
    """`` (sg01)`` per row when the rows name more than one subgraph, else None."""
    if "subgraph" not in t.column_names:
        return None
    names = pc.fill_null(t["subgraph"].cast(pa.string()), "")
    if len(pc.unique(names)) < 2:
        return None
    return pc.if_else(pc.equal(names, ""), "", pc.binary_join_element_wise(" (", names, ")", ""))


def _section(ctx: Context, key: str, t: pa.Table, category: str, name_col: str | None, bytes_col: str | None,
             start: str) -> None:
    if t.num_rows == 0 or start not in t.column_names:
        ctx.acct.skip(f"{key}: no {start}", t.num_rows)
        return
    valid = pc.is_valid(t[start])
    ctx.acct.skip(f"{key}: no {start}", t.num_rows - int(pc.sum(pc.cast(valid, pa.int64())).as_py() or 0))
    t = t.filter(valid)
    t = t.set_column(t.schema.get_field_index(start), start, number(t, start))
    mapped: set[str] = {start} | ({name_col} if name_col else set())
    instant = key == "semaphore_update"
    dur_col: str | None = None
    end = _first(t, _END)
    if not instant and end is not None and key in ("layer_summary", "active_time"):
        t = t.append_column("_dur", pc.subtract(number(t, end), t[start]))
        dur_col = "_dur"
        mapped.add(end)
    elif not instant and (d := _first(t, _DURATION)) is not None:
        t = t.set_column(t.schema.get_field_index(d), d, number(t, d))
        dur_col = d
        mapped.add(d)
    ts, dur = times(t, start=start, end=None, duration=dur_col, offset_ns=0)
    name: Any = pc.fill_null(t[name_col].cast(pa.string()), key) if name_col and name_col in t.column_names \
        else key
    extra: dict[str, Any] = {"category": category}
    suffix = _subgraph_suffix(t)
    if key in ("instruction", "active_time"):
        eng_col = _first(t, ("subgroup", "label", "engine"))
        base: Any = map_dict(t[eng_col], lambda v: common.engine(v) or "unknown engine") if eng_col \
            else "unknown engine"
        if key == "active_time":
            base = pc.binary_join_element_wise(base.cast(pa.string()) if not isinstance(base, str) else base,
                                               " active", "")
        extra["track"] = base
        if key == "instruction":
            if name_col and name_col in t.column_names:
                extra["category"] = map_dict(t[name_col], common.instruction_category)
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
        extra["track"] = {"cc_ops": "cc ops", "layer_summary": "layers", "semaphore_update": "semaphores"}[key]
    if suffix is not None:
        track = extra["track"]
        extra["track"] = pc.binary_join_element_wise(
            track.cast(pa.string()) if not isinstance(track, str) else track, suffix, "")
    if bytes_col and bytes_col in t.column_names:
        extra["bytes"] = number(t, bytes_col)
        mapped.add(bytes_col)
    add_events(ctx, device_table=True, n=t.num_rows, ts_ns=ts, dur_ns=0 if instant else dur, name=name,
               raw_category=key, phase="i" if instant else "X", device=ctx.device,
               args=json_objects(t, [c for c in t.column_names if c not in mapped and c != "_dur"]), **extra)
    ctx.acct.keep("device_events", t.num_rows)
    wait_col = _first(t, WAIT_FIELDS) if key == "instruction" else None
    if wait_col is not None:
        _waits(ctx, t, ts, extra["track"], extra.get("frame_id"), wait_col)


def _waits(ctx: Context, t: pa.Table, ts: pa.ChunkedArray, track: Any, frame_id: Any, col: str) -> None:
    """The wait before each instruction (``evt_wait_time`` > 0) as a derived ``sync_wait`` row ending at
    the instruction's start (the Parquet path's rule for ``evt_wait_time_ns``). Derived rows are not
    counted as read: metadata ``neuron.derived_rows`` counts them."""
    wait = np.asarray(pc.fill_null(number(t, col), 0).to_numpy(), np.int64)
    picked = np.flatnonzero(wait > 0)
    if len(picked) == 0:
        return
    at = pa.array(picked)
    start = np.asarray(flat(ts).to_numpy(), np.int64)[picked]
    add_events(ctx, device_table=True, n=len(picked), ts_ns=pa.array(start - wait[picked]),
               dur_ns=pa.array(wait[picked]), name="semaphore wait", category="sync_wait",
               raw_category=f"instruction.{col}", phase="derived", device=ctx.device,
               track=pc.take(track, at) if not isinstance(track, str) else track,
               frame_id=pc.take(frame_id, at) if isinstance(frame_id, pa.Array | pa.ChunkedArray) else None)
    key = f"sync_wait from instruction.{col}"
    ctx.derived[key] = ctx.derived.get(key, 0) + len(picked)
