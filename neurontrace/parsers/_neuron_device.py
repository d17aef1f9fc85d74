"""Explorer device timeline tables → ``device_events`` (neuron.md §3.7, §12).

| table | category | name | track |
|---|---|---|---|
| Instruction | compute (``EVENT_SEMAPHORE*`` opcodes: sync_wait) | opcode | engine (tensor, vector, scalar, gpsimd, sync) |
| (derived) Instruction.evt_wait_time_ns > 0 | sync_wait | ``semaphore wait`` | engine |
| DmaPacketAggregated | dma (bytes = transfer_bytes) | variable | ``dma <queue_name>`` |
| DmaPacket | dma (bytes = transfer_bytes) | variable | ``dma packets <queue_name>`` |
| CcOp | collective (bytes = max(input, output)) | operation | ``cc stream <stream_id>`` |
| CcInstruction | collective | description | ``cc core <core_idx>`` |
| CoreBarriers | sync_wait | compiler_opcode | ``<engine> barriers`` |
| SemaphoreUpdate | sync_wait (instant) | semaphore id | ``semaphores`` |
| Throttle | throttle | type | ``throttle`` |
| Error | other (instant) | description | ``errors`` |
| ExecutionInfo | execution | neff_name | ``executions`` |
| ActiveTime (only without Instruction) | compute | ``active`` | ``<engine> active`` |

With more than one physical core per logical core, tracks get `` (pcore N)``. ``raw_category`` is
the table name. Columns without a place of their own go to ``args``: all of them ("full"), or for
tables above 1M rows only a few identifying ones ("lean": see ``Spec.lean``; none for Instruction,
whose rows keep their source order so the other columns can be read back from the source files
by position). Both DMA tables describe the same transfers at two levels of
detail: sum bytes over one ``raw_category``, not both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.schema import DEVICE_EVENTS, DICT_STRING

from . import _neuron_active as active
from . import _neuron_common as common
from ._arrow import flat
from ._neuron_arrow import ColumnSink, count_true, dict_strings, json_objects, map_dict
from ._neuron_events import FULL_ARGS_MAX_ROWS, Context, add_events, times
from ._neuron_frames import LINK_COLUMNS
from ._neuron_read import SourceTable

BATCH_ROWS = 1 << 18  # rows decoded at a time

@dataclass(frozen=True)
class Spec:
    table: str
    category: str
    name: tuple[str, ...]
    name_default: str
    track_column: str | None
    track: Callable[[Any], str]
    start: tuple[str, ...] = ("start_ts",)
    end: tuple[str, ...] = ("end_ts",)
    duration: tuple[str, ...] = ("duration_ns",)
    instant: bool = False
    lean: tuple[str, ...] = ("id",)
    dictionary: tuple[str, ...] = ()
    source_id: str | None = "id"


def _engine_track(suffix: str = "") -> Callable[[Any], str]:
    return lambda v: (common.engine(None if v is None else str(v)) or "unknown engine") + suffix


SPECS = (
    Spec("Instruction", "compute", ("opcode",), "instruction", "engine", _engine_track(), lean=(),
         dictionary=("engine", "opcode", "timeline_track", "compiler_opcode", "performance_mode",
                     "tensor_instruction_type", "scalar_activation_fn", "hlo_attrs", *LINK_COLUMNS)),
    Spec("DmaPacketAggregated", "dma", ("variable", "op"), "dma", "queue_name", lambda v: f"dma {v}",
         lean=("id", "queue_type", "source", "dest"),
         dictionary=("queue_name", "queue_type", "op", "variable", "source", "dest", "semaphore_id")),
    Spec("DmaPacket", "dma", ("variable",), "dma packet", "queue_name", lambda v: f"dma packets {v}",
         lean=("id", "packet_aggregation_id"), dictionary=("queue_name", "queue_type", "variable")),
    Spec("CcOp", "collective", ("operation",), "collective", "stream_id", lambda v: f"cc stream {v}",
         lean=("op_id", "algorithm", "trigger_start_ts"), dictionary=("operation", "algorithm", "dtype"),
         source_id="op_id"),
    Spec("CcInstruction", "collective", ("description",), "cc instruction", "core_idx",
         lambda v: f"cc core {v}", lean=("trigger_engine", "trigger_start_ts"), dictionary=("description",),
         source_id=None),
    Spec("CoreBarriers", "sync_wait", ("compiler_opcode",), "core barrier", "engine_name",
         _engine_track(" barriers"), lean=("id", "semaphore")),
    Spec("SemaphoreUpdate", "sync_wait", ("id",), "semaphore", None, lambda v: "semaphores",
         start=("timestamp",), end=(), duration=(), instant=True, lean=("value", "update_operation_type"),
         dictionary=("id", "update_source", "update_operation_type", "update_trigger_timing"), source_id=None),
    Spec("Throttle", "throttle", ("type",), "throttle", None, lambda v: "throttle",
         start=("timestamp",), end=(), duration=("duration",), lean=("k", "n"), source_id=None),
    Spec("Error", "other", ("description",), "error", None, lambda v: "errors",
         start=("timestamp",), end=(), duration=(), instant=True, lean=("type", "metadata"), source_id=None),
    Spec("ExecutionInfo", "execution", ("neff_name",), "execution", None, lambda v: "executions",
         start=("execution_start_ts",), end=("execution_end_ts",), duration=(), lean=("execution_index",),
         source_id="execution_index"),
    Spec("ActiveTime", "compute", (), "active", "engine", _engine_track(" active"), lean=(), source_id=None),
)


def load_device_tables(ctx: Context, tables: dict[str, SourceTable]) -> None:
    for spec in SPECS:
        if spec.table not in tables:
            continue
        if spec.table == "ActiveTime" and "Instruction" in tables:
            n = tables["ActiveTime"].num_rows
            ctx.acct.events_read += n
            ctx.acct.skip("ActiveTime: merged Instruction intervals (checked against them, not loaded)", n)
            _check_active_time(ctx, tables["ActiveTime"])
            continue
        _load(ctx, tables[spec.table], spec)


def _check_active_time(ctx: Context, table: SourceTable) -> None:
    """The union of ActiveTime against the union of the Instruction rows read as compute."""
    start, end, duration = (first_present(table, c) for c in (("start_ts",), ("end_ts",), ("duration_ns",)))
    if start is None or (end is None and duration is None):
        return
    t = table.read(table.present([start, end, duration]))
    t = t.filter(pc.is_valid(t[start]))
    s = np.asarray(pc.fill_null(t[start].cast(pa.int64()), 0).to_numpy(), np.int64)
    if end is not None:
        e = np.asarray(pc.fill_null(t[end].cast(pa.int64()), 0).to_numpy(), np.int64)
    else:
        e = s + np.asarray(pc.fill_null(t[duration or ""].cast(pa.int64()), 0).to_numpy(), np.int64)
    ctx.checks["neuron.active_time_check"] = active.check(ctx, (s, np.maximum(e, s)), section="ActiveTime",
                                                          instructions="Instruction")


def first_present(table: SourceTable, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` the table has (schema versions spell some columns differently)."""
    return next((c for c in names if table.has(c)), None)


def _load(ctx: Context, table: SourceTable, spec: Spec) -> None:
    start = first_present(table, spec.start)
    n_total = table.num_rows
    ctx.acct.events_read += n_total
    if start is None:
        ctx.acct.skip(f"{spec.table}: no start-time column", n_total)
        return
    end, duration = first_present(table, spec.end), first_present(table, spec.duration)
    name_col = first_present(table, spec.name)
    # The track column stays in args too: tracks hold a normalized spelling (Tensor -> tensor).
    mapped = {start, end, duration, name_col} - {None}
    if duration is not None and table.null_count(duration) == 0:
        end = None  # a complete duration column makes end_ts redundant (= ts + dur): not read
    pcore = "pcore_idx" if ctx.multi_pcore and table.has("pcore_idx") else None
    track_col = spec.track_column if table.has(spec.track_column) else None
    full = ctx.full_args(spec.table, n_total)
    args_cols = [c for c in table.columns if c not in mapped] if full else table.present(spec.lean)
    source_id = spec.source_id if spec.table in ctx.want_ids or spec.source_id in args_cols else None
    wanted = table.present([start, end, duration, name_col, track_col, pcore, source_id,
                            "evt_wait_time_ns", *args_cols,
                            *(LINK_COLUMNS if spec.table == "Instruction" else ()),
                            *(("transfer_bytes", "source", "dest", "input_size", "output_size")
                              if spec.category in ("dma", "collective") else ())])
    ctx.columns_read[spec.table] = wanted
    # The table's rows go to one set of columns (and its derived waits to another), each filled
    # batch by batch: nothing of a batch outlives it but what the columns keep.
    types = {c.name: c.type for c in DEVICE_EVENTS.columns}
    rows = ColumnSink(types, n_total, negative_null=("frame_id",))
    waits = ColumnSink(types, n_total, negative_null=("frame_id",)) \
        if spec.table == "Instruction" and table.has("evt_wait_time_ns") else None
    first_id = ctx.next_id
    big = n_total > FULL_ARGS_MAX_ROWS
    for part in table.stream(wanted, dictionary=spec.dictionary, batch_rows=BATCH_ROWS, read_ahead=big):
        batch = part
        if part[start].null_count:
            valid = pc.is_valid(part[start])
            ctx.acct.skip(f"{spec.table}: no start timestamp", part.num_rows - count_true(valid))
            batch = part.filter(valid)
        _batch(ctx, spec, batch, rows, waits, first_id, start=start, end=end, duration=duration,
               name_col=name_col, track_col=track_col, pcore=pcore, args_cols=args_cols)
        del part, batch  # free this batch before the next one is read (its memory serves the next)
    if big:
        pa.default_memory_pool().release_unused()  # hand the batches' memory back before the ids are made
    if rows.n:
        add_events(ctx, device_table=True, n=rows.n, raw_category=spec.table, phase="i" if spec.instant else "X",
                   device=ctx.device, **{"category": spec.category, **rows.columns()})
    # Derived rows after all source rows: a table's rows stay contiguous and in source order.
    if waits is not None and waits.n:
        k = waits.n
        add_events(ctx, device_table=True, n=k, name="semaphore wait", category="sync_wait",
                   raw_category="Instruction.evt_wait_time_ns", phase="derived", device=ctx.device,
                   **waits.columns())
        key = "sync_wait from Instruction.evt_wait_time_ns"
        ctx.derived[key] = ctx.derived.get(key, 0) + k


def _batch(ctx: Context, spec: Spec, batch: pa.Table, rows: ColumnSink, waits: ColumnSink | None,
           first_id: int, *, start: str, end: str | None, duration: str | None, name_col: str | None,
           track_col: str | None, pcore: str | None, args_cols: list[str]) -> None:
    n = batch.num_rows
    if n == 0:
        return
    at = rows.n
    # Start times are aligned straight into the output column; durations need no offset.
    ts = rows.view("ts_ns", n)
    pos = 0
    for chunk in batch[start].cast(pa.int64()).chunks:
        np.add(chunk.to_numpy(), ctx.offset_ns, out=ts[pos:pos + len(chunk)])
        pos += len(chunk)
    _, dur = times(batch, start=start, end=None if spec.instant else end,
                   duration=None if spec.instant else duration, offset_ns=0)
    track = _tracks(batch, track_col, pcore, spec.track)
    cols: dict[str, Any] = {
        "ts_ns": ts, "dur_ns": 0 if spec.instant else dur, "name": _names(batch, name_col, spec.name_default),
        "track": track, "args": json_objects(batch, args_cols) if args_cols else None,
    }
    frame_id: np.ndarray | None = None
    if spec.table == "Instruction":
        if name_col is not None:
            cols["category"] = map_dict(batch[name_col], common.instruction_category)
        frame_id = rows.view("frame_id", n)
        if not ctx.frames.link_into(batch, frame_id):
            frame_id[:] = -1
        cols["frame_id"] = frame_id
    if spec.category == "dma" and "transfer_bytes" in batch.column_names:
        cols["bytes"] = batch["transfer_bytes"]
        cols["direction"] = _dma_direction(batch)
    elif spec.table == "CcOp":
        sizes = [batch[c] for c in ("input_size", "output_size") if c in batch.column_names]
        if sizes:
            cols["bytes"] = pc.max_element_wise(*sizes) if len(sizes) > 1 else sizes[0]
    rows.append(n, cols)
    ctx.acct.keep("device_events", n)
    if spec.source_id is not None and spec.source_id in batch.column_names and spec.table in ctx.want_ids:
        ids = pa.array(np.arange(first_id + at, first_id + at + n, dtype=np.int64))
        ctx.remember_ids(spec.table, batch[spec.source_id], ids)
    if waits is not None:
        _semaphore_waits(batch, ts, track, frame_id, waits)


def _names(batch: pa.Table, col: str | None, default: str) -> pa.ChunkedArray | str:
    if col is None:
        return default
    values = dict_strings(batch[col])
    if values.null_count == 0:
        return values
    return dict_strings(pc.fill_null(values.cast(pa.string()), default))


def _tracks(batch: pa.Table, col: str | None, pcore: str | None, fmt: Callable[[Any], str]) -> Any:
    if col is None:
        return fmt(None)
    base = map_dict(batch[col], fmt)
    if pcore is None:
        return base
    return _with_pcore(base, batch[pcore])


def _with_pcore(base: pa.ChunkedArray, pcore: pa.ChunkedArray) -> pa.ChunkedArray:
    """``<track> (pcore N)``: the pair coded as one integer, names built once per distinct pair."""
    out = []
    offset = 0
    for chunk in base.chunks:
        p = pcore.slice(offset, len(chunk)).combine_chunks() if isinstance(pcore, pa.ChunkedArray) else pcore
        offset += len(chunk)
        idx = np.asarray(pc.fill_null(chunk.indices, 0).to_numpy(zero_copy_only=False), np.int64)
        pv = np.asarray(pc.fill_null(p.cast(pa.int64()), -1).to_numpy(zero_copy_only=False), np.int64)
        code = idx * 4096 + (pv + 1)
        uniq, pos = np.unique(code, return_inverse=True)
        names = chunk.dictionary.to_pylist()
        labels = [f"{names[u // 4096]}" + ("" if u % 4096 == 0 else f" (pcore {u % 4096 - 1})")
                  for u in uniq.tolist()]
        out.append(pa.DictionaryArray.from_arrays(pa.array(pos.astype(np.int32)), pa.array(labels)))
    return pa.chunked_array(out, DICT_STRING)


def _dma_direction(batch: pa.Table) -> Any:
    """On-device DMA is ``d2d``; a REMOTE endpoint (another device) makes it ``p2p``."""
    ends = [c for c in ("source", "dest") if c in batch.column_names]
    if not ends:
        return "d2d"
    remote = None
    for c in ends:
        hit = map_dict(batch[c], lambda v: v is not None and "REMOTE" in str(v).upper(), pa.bool_())
        remote = hit if remote is None else pc.or_(remote, hit)
    return pc.if_else(remote, "p2p", "d2d")


def _semaphore_waits(batch: pa.Table, ts: np.ndarray, track: Any, frame_id: np.ndarray | None,
                     waits: ColumnSink) -> None:
    """The wait before each instruction (``evt_wait_time_ns`` > 0), as a ``sync_wait`` row.

    The instruction waited for its semaphore/event condition that long before it could start, so
    the wait ends at the instruction's start. These rows are derived, not read: the accounting does
    not count them; metadata ``neuron.derived_rows`` does.
    """
    wait = batch["evt_wait_time_ns"].cast(pa.int64())
    wait_ns = np.asarray(flat(pc.fill_null(wait, 0) if wait.null_count else wait).to_numpy())
    picked = np.flatnonzero(wait_ns > 0)
    k = len(picked)
    if k == 0:
        return
    w = wait_ns[picked]
    at = pa.array(picked)
    cols: dict[str, Any] = {"ts_ns": ts[picked] - w, "dur_ns": w,
                            "track": pc.take(track, at) if not isinstance(track, str) else track}
    if frame_id is not None:
        cols["frame_id"] = frame_id[picked]
    if "id" in batch.column_names:
        cols["args"] = pc.binary_join_element_wise(
            '{"instruction_id":', pc.take(batch["id"], at).cast(pa.string()), "}", "")
    waits.append(k, cols)
