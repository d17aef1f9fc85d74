"""The boundary: every Neuron Explorer table checked against its declared column types as it is read.

Each batch :class:`~neurontrace.parsers._neuron_read.SourceTable` hands out passes :func:`conform`
once; the parsers behind it may then trust a column's kind. A column is declared (neuron.md §3.3,
§3.7: every number column int64 or float64, every name, engine, queue or file column a string):

- **number** (times and durations in ns, sizes, bytes, counts, indexes, percentages, line numbers,
  the event tables' int64 ``id``): text is read as numbers (int64 when every value is an integer,
  else float64; text that is no number is a named error), a null-typed column as int64 nulls, a
  Parquet timestamp or duration as its int64 ns, unsigned integers as int64. NaN and ±inf, and values
  beyond the column's range (|time| ≥ 2^62 ns, other counts beyond 2^53 where a double stops being
  exact, a line number beyond 2^31 - 1 or negative) become nulls, counted per column in the load's
  warnings. A float column of integer kind (a time, a size) is rounded to int64. Any other type
  (bool, a list) is a named error naming table, column, expected and found type.
- **text** (:data:`TEXT_COLUMN`, and the string ``id`` columns of the stack-frame and semaphore
  tables; a list in ``stack_frame_ids``, which neuron.md allows, is read as its JSON text): ints, floats and bools are read as their text (int ↔ string ids), a null-typed column as
  string nulls, binary as text; invalid UTF-8 is replaced (U+FFFD) and the rows counted; a column
  asked for as a dictionary comes back dictionary encoded whatever it was stored as.
- the counts in ``repairs`` are values per read: a column read twice (a minimum, then the rows)
  is counted twice.
- duplicate column names are a named error when the table is opened (:func:`check_names`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from neurontrace.errors import MalformedTraceError

NUMERIC_COLUMN = re.compile(r"(_ts|_ns|_size|_bytes|_idx|_count|_percent|_throughput|^timestamp|^value|^duration\w*"
                            r"|^line_number)$")
# Number columns that hold integers (a float stored there is rounded) and their bounds.
_TIME = re.compile(r"(_ts|_ns|^timestamp|^duration\w*|^gap_time)$")
_LINE = re.compile(r"^line_number$")
_INTEGRAL = re.compile(r"(_ts|_ns|^gap_time|_size|_bytes|_idx|_count|^timestamp|^duration\w*|^line_number)$")
TIME_LIMIT = 1 << 62
EXACT_LIMIT = 1 << 53
LINE_LIMIT = (1 << 31) - 1
NUMERIC_TABLES = frozenset({
    "Instruction", "DmaPacket", "DmaPacketAggregated", "SemaphoreUpdate", "Throttle", "CcOp", "CcInstruction",
    "ActiveTime", "CoreBarriers", "SystemProfileEvents", "SbufAllocation", "DmaUsage", "HbmUsage", "PsumUsage",
    "SbufUsage", "PendingDma", "CpuUsage", "HostMemUsage", "SystemProfileHbmUsage", "Flow", "ExecutionInfo",
    "KernelInstructions", "KernelStackFrames", "StackFrameFileLocation",
})
INT64_IDS = frozenset({"Instruction", "DmaPacket", "DmaPacketAggregated", "CcOp", "CcInstruction"})
# The string columns of neuron.md §3.7 the parsers read (names, engines, queues, files, joins).
TEXT_COLUMN = re.compile(
    r"^(name|engine|timeline_track|opcode|operands|compiler_opcode|compiler_operands|bir_id|hlo_name|layer"
    r"|stack_frame_ids|nki_source_location|kernel_instruction_name|queue_type|queue_name|variable|op|source|dest"
    r"|semaphore_id|operation|algorithm|dtype|trigger_engine|replica_group|description|cc_core_ids|cpu_id"
    r"|instance_id|device_profile_name|trace_event_source|extra_attributes_json|in_table|out_table"
    r"|dependency_type|update_source|update_operation_type|update_trigger_timing|type|message|category|file_path"
    r"|fully_qualified_function_name|table_name|field_name|field_type|profile_schema_version|network_name|uuid"
    r"|hash|neff_name|parent_frame_id|first_ts|last_ts|first_ts_ns|last_ts_ns|instance_type|profile_name)$")
# The one-row description tables: numbers the parsers read as ints or floats (neuron.md §3.7).
META_TABLES = frozenset({"Metadata", "NeffHeader", "DeviceProfileList", "SystemProfileMetadata", "Summary",
                         "OpcodeSummary", "CcStream", "ExecutionInfo"})
META_NUMBER = re.compile(r"^(num_\w+|ntff_version|\w+_freq|\w+_bandwidth|ticks_per_nanosec|\w+_idx|\w+_count"
                         r"|\w+_size|\w+_hw_timestamp|tensor_engine_num_\w+|\w+_num_channels|major_version"
                         r"|minor_version|process_id|nc_id|session_id|stream_id|stream_index|\w+_bytes|\w+_time"
                         r"|\w+_percent|\w+_flops|\w+_ts|\w+_ns|num_subgraphs|execution_index)$")
TEXT_IDS = frozenset({"StackFrame", "StackFrameFileLocation", "StackFrameFileName", "StackFrameFunctionName",
                      "SemaphoreUpdate"})


def kind(table: str, column: str) -> str | None:
    """"number", "text" or None (a column this boundary does not declare: read as stored)."""
    if table == "Flow" and column in ("in_id", "out_id", "gap_time"):
        return "number"
    if column == "id":
        return "number" if table in INT64_IDS else "text" if table in TEXT_IDS else None
    if TEXT_COLUMN.match(column):
        return "text"
    if (table in NUMERIC_TABLES and NUMERIC_COLUMN.search(column)) or (table in META_TABLES and META_NUMBER.match(column)):
        return "number"
    return None


def check_names(table: str, where: str, names: Sequence[str]) -> None:
    """A column name given twice is a named error (which of the two the writer meant is unknown)."""
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise MalformedTraceError(f"{where}: table {table} has column(s) {', '.join(map(repr, dup))} more than once; "
                                  "neuron-explorer writes each column once. The file was edited or is not an "
                                  "Explorer export")


def stored_ok(table: str, field: pa.Field) -> str | None:
    """Why a stored column cannot be read as its declared kind (None: it can, with coercions)."""
    k, t = kind(table, field.name), field.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if k == "number" and not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)
                              or pa.types.is_string(t) or pa.types.is_large_string(t)
                              or pa.types.is_timestamp(t) or pa.types.is_duration(t)):
        return "numbers (int64 or float64)"
    return None


def conform(t: pa.Table, table: str, dictionary: Sequence[str], repairs: Counter[str]) -> pa.Table:
    """``t`` with every declared column of its declared kind (module docstring); repairs counted."""
    for i, name in enumerate(t.column_names):
        k = kind(table, name)
        col = t.column(i)
        if k == "number":
            new = _number(col, table, name, repairs)
        elif name == "stack_frame_ids" and pa.types.is_nested(col.type):
            new = _list_text(col, table, name)
        elif k == "text" or name in dictionary:
            new = _text(col, table, name, repairs)
        else:
            continue
        if name in dictionary and not pa.types.is_dictionary(new.type):
            new = pc.dictionary_encode(new)
        if new is not col:
            t = t.set_column(i, name, new)
    try:  # one full validation (Parquet readers check neither UTF-8 nor dictionary indices)
        t.validate(full=True)
        return t
    except pa.ArrowInvalid:
        pass
    for i, f in enumerate(t.schema):  # invalid UTF-8 is repaired, in any string column; then validated again
        typ = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            t = t.set_column(i, f.name, _valid_utf8(t.column(i), f.name, repairs))
    try:  # a flipped byte in a page can give dictionary indices past the dictionary
        t.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise MalformedTraceError(f"table {table}: a page of the file does not decode to valid data ({exc}); the "
                                  "file is damaged or was cut off while copying. Run `neuron-explorer view ... "
                                  "--output-format parquet` again to regenerate the directory") from exc
    return t


def _list_text(col: pa.ChunkedArray, table: str, name: str) -> pa.ChunkedArray:
    """A list column where neuron.md allows a list or its text: the list's JSON text, as a string."""
    if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
        raise MalformedTraceError(f"table {table}: column {name!r} holds {col.type}, where neuron-explorer writes "
                                  "a list of ids or its text; the file was edited or is not an Explorer export")
    values = [None if v is None else json.dumps(v, default=str) for v in col.to_pylist()]
    return pa.chunked_array([pa.array(values, pa.string())])


def _number(col: pa.ChunkedArray, table: str, name: str, repairs: Counter[str]) -> pa.ChunkedArray:
    typ = col.type
    if pa.types.is_dictionary(typ):
        col, typ = col.cast(typ.value_type), typ.value_type
    if pa.types.is_timestamp(typ) or pa.types.is_duration(typ):
        unit = typ.unit
        col = col.cast(pa.timestamp("ns") if pa.types.is_timestamp(typ) else pa.duration("ns")).cast(pa.int64())
        repairs[f"column {name}: Parquet {'timestamps' if pa.types.is_timestamp(typ) else 'durations'} "
                f"({unit}) read as int64 ns"] += len(col)
    elif pa.types.is_null(typ):
        return col.cast(pa.int64())
    elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
        col = _parse_numbers(col, table, name)
    elif pa.types.is_unsigned_integer(typ) and typ.bit_width == 64:
        big = pc.greater(col, pa.scalar(EXACT_LIMIT if not _TIME.search(name) else TIME_LIMIT, pa.uint64()))
        col = pc.if_else(big, pa.scalar(None, pa.uint64()), col).cast(pa.int64())
    elif not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        raise MalformedTraceError(f"table {table}: column {name!r} holds {typ}, where neuron-explorer writes numbers "
                                  "(int64 or float64); the file was edited or is not an Explorer export")
    return _bounded(col, name, repairs)


def _parse_numbers(col: pa.ChunkedArray, table: str, name: str) -> pa.ChunkedArray:
    """Text → int64 when every value is an integer, else float64; other text is a named error."""
    try:
        return col.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    try:
        return col.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise MalformedTraceError(f"table {table}: column {name!r} should hold numbers but holds text that is not "
                                  f"one ({exc}); the file was edited or is not an Explorer export") from exc


def _bounded(col: pa.ChunkedArray, name: str, repairs: Counter[str]) -> pa.ChunkedArray:
    """Values outside the column's range (and NaN, ±inf) as nulls, counted; integral floats rounded."""
    typ = col.type
    limit = TIME_LIMIT if _TIME.search(name) else LINE_LIMIT if _LINE.match(name) else EXACT_LIMIT
    if name in ("id", "in_id", "out_id"):
        return col if pa.types.is_integer(typ) else _bounded_float(col, name, repairs, 1 << 63, integral=True)
    if pa.types.is_floating(typ):
        return _bounded_float(col, name, repairs, limit, integral=bool(_INTEGRAL.search(name)))
    if not pa.types.is_integer(typ) or (typ.bit_width <= 32 and not _LINE.match(name)):
        return col
    low = 0 if _LINE.match(name) else -limit
    bad = pc.or_(pc.less(col, pa.scalar(low, typ)), pc.greater(col, pa.scalar(limit, typ))) \
        if typ.bit_width > 32 or not pa.types.is_unsigned_integer(typ) else pc.greater(col, pa.scalar(limit, typ))
    n = pc.sum(bad).as_py() or 0
    if not n:
        return col
    repairs[f"column {name}: values outside [{low:,}, {limit:,}] left out (null)"] += n
    return pc.if_else(bad, pa.scalar(None, typ), col)


def _bounded_float(col: pa.ChunkedArray, name: str, repairs: Counter[str], limit: int,
                   integral: bool) -> pa.ChunkedArray:
    col = col.cast(pa.float64())
    bad = pc.or_kleene(pc.invert(pc.is_finite(col)), pc.greater_equal(pc.abs(col), float(limit)))
    n = pc.sum(bad).as_py() or 0
    if n:
        repairs[f"column {name}: NaN, infinite or out-of-range values left out (null)"] += n
        col = pc.if_else(bad, pa.scalar(None, pa.float64()), col)
    return pc.round(col).cast(pa.int64()) if integral else col


def _text(col: pa.ChunkedArray, table: str, name: str, repairs: Counter[str]) -> pa.ChunkedArray:
    typ = col.type
    value = typ.value_type if pa.types.is_dictionary(typ) else typ
    if pa.types.is_string(value) or pa.types.is_large_string(value):
        out = col
    elif pa.types.is_null(value):
        return col.cast(pa.string())
    elif (pa.types.is_integer(value) or pa.types.is_floating(value) or pa.types.is_boolean(value)
          or pa.types.is_decimal(value)):
        return col.cast(value).cast(pa.string()) if pa.types.is_dictionary(typ) else col.cast(pa.string())
    elif pa.types.is_binary(value) or pa.types.is_large_binary(value):
        plain = col.cast(value)  # (a view, not a cast: a cast to string would fail on invalid UTF-8, repaired below)
        return pa.chunked_array([c.view(pa.string() if pa.types.is_binary(value) else pa.large_string())
                                 for c in plain.chunks], pa.string() if pa.types.is_binary(value) else pa.large_string())
    else:
        raise MalformedTraceError(f"table {table}: column {name!r} holds {typ}, where neuron-explorer writes text "
                                  "(string); the file was edited or is not an Explorer export")
    return out


def _valid_utf8(col: pa.ChunkedArray, name: str, repairs: Counter[str]) -> pa.ChunkedArray:
    chunks, changed = [], 0
    for chunk in col.chunks:
        arr = chunk.dictionary if isinstance(chunk, pa.DictionaryArray) else chunk
        try:
            arr.validate(full=True)
            chunks.append(chunk)
            continue
        except pa.ArrowInvalid:
            pass
        raw = arr.view(pa.binary() if not pa.types.is_large_string(arr.type) else pa.large_binary()).to_pylist()
        text: list[str | None] = []
        bad: list[int] = []
        for j, b in enumerate(raw):
            s = None if b is None else b.decode("utf-8", "replace")
            if s is not None and s.encode() != b:
                bad.append(j)
            text.append(s)
        fixed = pa.array(text, pa.string())
        # rows, not distinct values: a dictionary entry counts once per row that uses it
        changed += (pc.sum(pc.is_in(chunk.indices, pa.array(bad, chunk.indices.type))).as_py() or 0
                    if isinstance(chunk, pa.DictionaryArray) else len(bad))
        chunks.append(pa.DictionaryArray.from_arrays(chunk.indices, fixed)
                      if isinstance(chunk, pa.DictionaryArray) else fixed)
    if not changed:
        return col
    repairs[f"column {name}: invalid UTF-8 read with U+FFFD"] += changed
    return pa.chunked_array(chunks, chunks[0].type if chunks else pa.string())
