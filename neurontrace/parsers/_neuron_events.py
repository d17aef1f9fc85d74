"""Assembling ``system_events``/``device_events`` chunks from Neuron tables, with one id counter.

Every Neuron parser path appends chunks here in the order it assigns event ids, so the position of
a device row in the final table is ``event_id - first device id``; flows use that to find the
times of their ends without a join.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neurontrace import schema
from neurontrace.schema import DICT_STRING
from neurontrace.trace import ParseAccounting

from ._neuron_arrow import constant, dict_strings, one_dictionary
from ._neuron_frames import FrameBuilder

FULL_ARGS_MAX_ROWS = 1_000_000
DETAILS = ("auto", "full", "lean")


@dataclass
class Context:
    """Shared state of one parse: accounting, the id counter, the chunks built so far."""

    source: str
    acct: ParseAccounting
    frames: FrameBuilder
    device: str
    offset_ns: int = 0
    detail: str = "auto"
    host: str | None = None
    rank: int | None = None
    multi_pcore: bool = False
    next_id: int = 0
    system: list[pa.Table] = field(default_factory=list)
    device_chunks: list[pa.Table] = field(default_factory=list)
    counters: list[pa.Table] = field(default_factory=list)
    flows: list[pa.Table] = field(default_factory=list)
    flow_parts: list[tuple[pa.Table, pa.Array]] = field(default_factory=list)  # rows with flow_id lists
    first_device_id: int | None = None
    want_ids: set[str] = field(default_factory=set)
    id_maps: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    args_detail: dict[str, str] = field(default_factory=dict)
    columns_read: dict[str, list[str]] = field(default_factory=dict)
    derived: dict[str, int] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)  # metadata key -> a check's result

    def full_args(self, table: str, rows: int) -> bool:
        full = self.detail == "full" or (self.detail == "auto" and rows <= FULL_ARGS_MAX_ROWS)
        self.args_detail[table] = "full" if full else "lean"
        return full

    def remember_ids(self, table: str, source_ids: pa.Array | pa.ChunkedArray, event_ids: pa.Array) -> None:
        """Keep (source id → event id) for tables the Flow table points into."""
        if table in self.want_ids:
            src = pc.fill_null(source_ids, -1)
            self.id_maps.setdefault(table, []).append(
                (np.asarray(src.to_numpy(), np.int64), np.asarray(event_ids.to_numpy(), np.int64)))


def _column(value: Any, typ: pa.DataType, n: int) -> pa.Array | pa.ChunkedArray:
    if isinstance(value, pa.Array | pa.ChunkedArray):
        if typ == DICT_STRING:
            return dict_strings(value)
        return value if value.type == typ else value.cast(typ)
    return constant(value, typ, n)


def add_events(ctx: Context, *, device_table: bool, n: int, **cols: Any) -> pa.Array:
    """Append ``n`` events; ``cols`` maps column names to arrays or constants. Returns their ids."""
    if device_table and ctx.first_device_id is None:
        ctx.first_device_id = ctx.next_id
    ids = pa.array(np.arange(ctx.next_id, ctx.next_id + n, dtype=np.int64))
    ctx.next_id += n
    spec = schema.DEVICE_EVENTS if device_table else schema.SYSTEM_EVENTS
    defaults: dict[str, Any] = {"host": ctx.host, "rank": ctx.rank}
    arrays = []
    for col in spec.columns:
        if col.name == "event_id":
            arrays.append(ids)
            continue
        arrays.append(_column(cols.get(col.name, defaults.get(col.name)), col.type, n))
    (ctx.device_chunks if device_table else ctx.system).append(pa.Table.from_arrays(arrays, schema=spec.schema))
    return ids


def times(batch: pa.Table, *, start: str, end: str | None, duration: str | None,
          offset_ns: int) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """(aligned start, duration >= 0) from a start column and an end or a duration column."""
    ts = batch[start]
    if duration is not None:
        dur = batch[duration]
        if end is not None and dur.null_count:
            dur = pc.coalesce(dur, pc.subtract(batch[end], ts))
    elif end is not None:
        dur = pc.subtract(batch[end], ts)
    else:
        dur = constant(0, pa.int64(), batch.num_rows)
    dur = pc.max_element_wise(pc.fill_null(dur.cast(pa.int64()), 0), 0) if dur.null_count or _any_negative(dur) \
        else dur.cast(pa.int64())
    ts = ts.cast(pa.int64())
    if offset_ns:
        ts = pc.add(ts, offset_ns)
    return _chunked(ts), _chunked(dur)


def _any_negative(col: pa.ChunkedArray | pa.Array) -> bool:
    low = pc.min(col).as_py()
    return low is not None and low < 0


def _chunked(a: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return a if isinstance(a, pa.ChunkedArray) else pa.chunked_array([a])


def device_table(ctx: Context) -> pa.Table:
    return one_dictionary(pa.concat_tables(ctx.device_chunks)) if ctx.device_chunks else schema.DEVICE_EVENTS.empty()


def system_table(ctx: Context) -> pa.Table:
    return one_dictionary(pa.concat_tables(ctx.system)) if ctx.system else schema.SYSTEM_EVENTS.empty()
