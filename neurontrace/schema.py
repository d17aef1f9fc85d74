"""The normalized event model: every table declared once, every column documented.

Each column states its Arrow type, unit, nullability, meaning and (where it has one) the column it
joins to. The declarations are data, so the reference page ``docs/schema.md`` is generated from them
(``python scripts/gen_schema_doc.py``) and a test fails when the page is stale.

Conventions (see DESIGN.md, "The data model"):
- time is int64 nanoseconds on the trace's own clock (recorded in ``metadata`` as ``clock``);
- strings that repeat (names, categories, tracks) are dictionary encoded;
- fields without a dedicated column are kept verbatim in ``args`` (a JSON object text).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

DICT_STRING = pa.dictionary(pa.int32(), pa.string())


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    unit: str = ""
    nullable: bool = True
    references: str = ""

    def field(self) -> pa.Field:
        meta = {"doc": self.doc, "unit": self.unit, "references": self.references}
        return pa.field(self.name, self.type, nullable=self.nullable, metadata=meta)


@dataclass(frozen=True)
class TableSpec:
    name: str
    doc: str
    columns: tuple[Column, ...]
    optional: bool = False  # absent from outputs written before it existed: those read back as an empty table

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([c.field() for c in self.columns], metadata={"table": self.name, "doc": self.doc})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def empty(self) -> pa.Table:
        return self.schema.empty_table()


# What an event *is*, whatever format it came from. Analyses key on these, never on raw strings.
CATEGORIES: dict[str, str] = {
    "compute": "a device kernel or engine instruction doing arithmetic",
    "collective": "a collective-communication op or kernel (all-reduce, all-gather, send/recv ...)",
    "memcpy": "a device memory copy (host<->device, device<->device, peer)",
    "memset": "a device memory fill",
    "dma": "a NeuronCore DMA transfer (queue or packet)",
    "sync_wait": "a wait for another stream, event, semaphore or the host",
    "throttle": "a window in which the device clock or power was throttled",
    "execution": "a whole device execution (Neuron nc_exec_running, a NEFF run)",
    "runtime": "a host call into the accelerator runtime (cudaLaunchKernel, nrt_execute, privateuse1_runtime)",
    "driver": "a host call into the accelerator driver (cuLaunchKernel, privateuse1_driver)",
    "framework_op": "a framework operator on the host (aten::mm, a record_param_comms op)",
    "python": "a Python function frame recorded with with_stack=True",
    "annotation": "a user range (record_function, gpu_user_annotation); marks a region, is not work",
    "step": "a training-step marker (ProfilerStep#N, a Neuron execution step)",
    "compile": "graph capture, compilation or code generation",
    "load": "loading a compiled artifact onto the device (NEFF load, module load)",
    "transfer": "a host-side data transfer call not seen as device activity",
    "memory": "an allocator event ([memory], [OutOfMemory])",
    "overhead": "profiler overhead (CUPTI buffer requests, instrumentation)",
    "other": "anything else; the raw category is kept",
}

_EVENT_ID = Column(
    "event_id", pa.int64(), "unique id of the event within the trace, shared by both event tables",
    nullable=False,
)
_TIME = (
    Column("ts_ns", pa.int64(), "start time on the trace clock", unit="ns", nullable=False),
    Column("dur_ns", pa.int64(), "duration; 0 for instant events", unit="ns", nullable=False),
)
_WHAT = (
    Column("name", DICT_STRING, "event name as recorded (op, kernel, instruction ...)", nullable=False),
    Column("category", DICT_STRING, "normalized category, one of schema.CATEGORIES", nullable=False),
    Column("raw_category", DICT_STRING, "category string exactly as in the input (null when it had none)"),
    Column("phase", DICT_STRING, "input event phase ('X' complete, 'i' instant, or the format's own kind)"),
)
_WHERE = (
    Column("host", DICT_STRING, "host name or instance id the event was recorded on"),
    Column("rank", pa.int32(), "distributed rank (null when the input does not say)"),
    Column("pid", DICT_STRING, "process id as written in the input (ints and strings both occur)"),
    Column("tid", DICT_STRING, "thread id / stream id as written in the input"),
)
_LINKS = (
    Column("correlation", pa.int64(), "runtime<->device correlation id (CUPTI correlation, Neuron exec id)"),
    Column("external_id", pa.int64(), "id linking a framework op to the runtime calls and device ops it caused"),
    Column("frame_id", pa.int64(), "innermost user source frame responsible for the event",
           references="frames.frame_id"),
    Column("args", pa.string(), "every input field without its own column, as a JSON object"),
)

SYSTEM_EVENTS = TableSpec(
    "system_events",
    "What ran on hosts: framework ops, Python frames, runtime and driver calls, annotations, "
    "compilation and load events, allocator events.",
    (
        _EVENT_ID, *_TIME, *_WHAT, *_WHERE,
        Column("track", DICT_STRING, "display track: the thread label"),
        Column("device", DICT_STRING, "device a runtime call targets, when known (cuda:0, neuron:nc0)"),
        *_LINKS,
    ),
)

DEVICE_EVENTS = TableSpec(
    "device_events",
    "What ran on accelerators: kernels, copies, collectives, NeuronCore instructions, DMA, waits, "
    "throttling windows, executions.",
    (
        _EVENT_ID, *_TIME, *_WHAT, *_WHERE,
        Column("device", DICT_STRING, "the accelerator (cuda:0, rocm:1, neuron:nc3)", nullable=False),
        Column("track", DICT_STRING, "stream, engine, DMA queue or collective stream on the device",
               nullable=False),
        Column("bytes", pa.int64(), "bytes moved (copies, memsets, DMA)", unit="bytes"),
        Column("direction", DICT_STRING, "copy direction: h2d, d2h, d2d, p2p, h2h (null when not a copy)"),
        *_LINKS,
    ),
)

FLOWS = TableSpec(
    "flows",
    "Directed links between events: a CPU launch to the device op it enqueued, a forward op to its "
    "backward op, an instruction to the DMA it triggered.",
    (
        Column("flow_id", pa.string(), "the link's id as written in the input"),
        Column("kind", DICT_STRING, "normalized link kind: launch, fwdbwd, dependency, other", nullable=False),
        Column("raw_category", DICT_STRING, "link category exactly as in the input"),
        Column("src_event_id", pa.int64(), "where the link starts (null when that end was not found)",
               references="system_events.event_id | device_events.event_id"),
        Column("dst_event_id", pa.int64(), "where the link ends (null when that end was not found)",
               references="system_events.event_id | device_events.event_id"),
        Column("src_ts_ns", pa.int64(), "time of the start marker", unit="ns"),
        Column("dst_ts_ns", pa.int64(), "time of the end marker", unit="ns"),
        Column("rank", pa.int32(), "distributed rank"),
    ),
)

COUNTERS = TableSpec(
    "counters",
    "Time series samples: allocator totals, HBM/SBUF usage, CPU utilization, hardware counters.",
    (
        Column("ts_ns", pa.int64(), "sample time on the trace clock", unit="ns", nullable=False),
        Column("name", DICT_STRING, "series name ([memory], HBM usage, a counter event's name)", nullable=False),
        Column("field", DICT_STRING, "which value of the series (Total Allocated, Bytes, ...)", nullable=False),
        Column("value", pa.float64(), "the sample value, in `unit`", nullable=False),
        Column("unit", DICT_STRING, "unit of `value` (bytes, percent, count) when known"),
        Column("host", DICT_STRING, "host name or instance id"),
        Column("rank", pa.int32(), "distributed rank"),
        Column("pid", DICT_STRING, "process id as written in the input"),
        Column("tid", DICT_STRING, "thread id as written in the input"),
        Column("device", DICT_STRING, "device the sample describes (cpu, cuda:0, neuron:nc0)"),
        Column("args", pa.string(), "the input event's other fields as JSON (on the first row of an event; of a "
               "[memory] instant, only those no column of counters or memory_events holds)"),
    ),
)

FRAMES = TableSpec(
    "frames",
    "Source locations as a calling-context tree: each row is one frame under its caller, so a "
    "frame_id names a whole stack.",
    (
        Column("frame_id", pa.int64(), "id of this stack node", nullable=False),
        Column("parent_id", pa.int64(), "the calling frame (null at the root)", references="frames.frame_id"),
        Column("file", DICT_STRING, "source file as recorded"),
        Column("line", pa.int32(), "line number (1-based)"),
        Column("function", DICT_STRING, "function, kernel, HLO op or layer name"),
        Column("kind", DICT_STRING, "python, nki, hlo, layer, call_stack", nullable=False),
        Column("is_user", pa.bool_(), "true when the file is user code (not the framework, stdlib or site-packages)",
               nullable=False),
    ),
)

METADATA = TableSpec(
    "metadata",
    "Key/value facts about the trace: source format and version, clock, devices, ranks, tool versions, "
    "parse accounting.",
    (
        Column("key", pa.string(), "fact name (format, clock, devices, tool_versions, a format's own kineto.* ...)",
               nullable=False),
        Column("value", pa.string(), "the fact as JSON text", nullable=False),
        Column("source", pa.string(), "input file the fact came from (null for trace-wide facts)"),
        Column("rank", pa.int32(), "rank of that input"),
    ),
)

MEMORY_ACTIONS: dict[str, str] = {
    "alloc": "a block was allocated (`bytes` > 0)",
    "free": "a block was freed (`bytes` < 0); a snapshot's `free_completed`",
    "free_requested": "a snapshot's free request, before the stream's work using the block finished",
    "segment_alloc": "the caching allocator reserved a segment from the device (`cudaMalloc`)",
    "segment_free": "the caching allocator returned a segment to the device",
    "segment_map": "an expandable segment mapped more memory",
    "segment_unmap": "an expandable segment unmapped memory",
    "snapshot": "the allocator state was captured (a snapshot's own event)",
    "oom": "an allocation failed: out of memory (`bytes`: what was asked for)",
    "usage": "a usage sample without a block (Neuron HBM usage by category)",
}

MEMORY_EVENTS = TableSpec(
    "memory_events",
    "Allocator events, one row per allocation, free, segment change, out-of-memory or usage sample: Kineto "
    "`[memory]`/`[OutOfMemory]` instants, PyTorch memory snapshots' device traces, Neuron memory tables.",
    (
        Column("ts_ns", pa.int64(), "time of the event on the trace clock", unit="ns", nullable=False),
        Column("device", DICT_STRING, "the memory's device (cpu, cuda:0, neuron:nc0)", nullable=False),
        Column("rank", pa.int32(), "distributed rank"),
        Column("pid", DICT_STRING, "process id as written in the input"),
        Column("tid", DICT_STRING, "thread id as written in the input"),
        Column("action", DICT_STRING, "what happened, one of schema.MEMORY_ACTIONS", nullable=False),
        Column("addr", pa.int64(), "address of the block or segment (null when not recorded)"),
        Column("bytes", pa.int64(), "size of the change: + allocated, - freed (an oom: bytes asked for)",
               unit="bytes"),
        Column("total_allocated_bytes", pa.int64(), "allocated total after the event, as recorded", unit="bytes"),
        Column("total_reserved_bytes", pa.int64(), "reserved (cached) total after the event, as recorded",
               unit="bytes"),
        Column("stream", pa.int64(), "the stream the block belongs to (snapshots)"),
        Column("op_event_id", pa.int64(), "the framework op running on that thread at the time",
               references="system_events.event_id"),
        Column("op", DICT_STRING, "that op's name"),
        Column("frame_id", pa.int64(), "innermost user source frame at the time", references="frames.frame_id"),
        Column("category", DICT_STRING, "what the memory holds, where the input says (Neuron: tensors, "
               "weights, ...)"),
    ),
    optional=True,
)

# Compile evidence (analysis/compile.py): not one of the Trace's event tables, but read from compile logs
# (neurontrace.parsers.torch_trace, torch_logs, neuron_compile) and from a trace's own compile ranges.
COMPILE_EVENTS: dict[str, str] = {
    "compile": "one compile attempt of one frame (torch.compile) or one graph (Neuron)",
    "graph_break": "a graph break: Dynamo stopped tracing here and resumed in a new frame",
    "recompile_limit": "a frame hit the recompile limit and runs eagerly from then on",
    "parallel_summary": "a neuron_parallel_compile total: `count` graphs in all (status null), compiled (ok) or "
                        "failed",
    "compiler_pass": "a pass neuronx-cc timed in its log: `function` the pass, `dur_ns` its time summed over "
                     "`count` runs, `compile_id` the graph",
}
COMPILE_CACHE = ("hit", "miss", "bypass", "failed_hit")  # failed_hit: Neuron's cached failed NEFF
COMPILE_STATUS = ("ok", "failed", "restarted", "running")

COMPILES = TableSpec(
    "compiles",
    "One row per compile attempt (torch.compile frame compile, Neuron graph compile), graph break or recompile "
    "limit, from compile logs (TORCH_TRACE, TORCH_LOGS, Neuron compiler lines) or a trace's compile ranges. "
    "Not part of a Trace: `neurontrace.parsers.compile_logs.read` and `analysis.compile` build it.",
    (
        Column("event", DICT_STRING, "what the row is, one of schema.COMPILE_EVENTS", nullable=False),
        Column("evidence", DICT_STRING, "where it was read: kineto, torch_trace, torch_logs, neuron_log (the compiler-cache "
               "wrapper's lines), neuron_cc_log (neuronx-cc's own log-neuron-cc.txt, compiler_args.txt), neuron_cache",
               nullable=False),
        Column("path", pa.string(), "the log file (null for a trace's own ranges)"),
        Column("line", pa.int64(), "the line of the log the row starts at (1-based)"),
        Column("rank", pa.int32(), "distributed rank (the log's `rank` field or file name; null when unknown)"),
        Column("pid", pa.string(), "the process that compiled (the glog prefix's thread id, the trace's pid)"),
        Column("frame_id", pa.int32(), "Dynamo's frame id (the F of compile id F/N)"),
        Column("frame_compile_id", pa.int32(), "which compile of that frame (the N of F/N); 0 first, then recompiles"),
        Column("attempt", pa.int32(), "attempt after restarts (F/N_A); 0 for the first"),
        Column("compile_id", pa.string(), "the compile id as torch writes it: `F/N`, `F/N_A` after a restart, "
                                          "`!C/F/N` under compiled autograd; the NEFF module name on Neuron"),
        Column("function", pa.string(), "the compiled function (co_name) or graph"),
        Column("source", pa.string(), "file:line of the compiled function, or of the graph break"),
        Column("start_ns", pa.int64(), "when the compile started: Unix epoch ns for logs, trace clock for a trace",
               unit="ns"),
        Column("dur_ns", pa.int64(), "the whole compile attempt (Dynamo's entire_frame_compile_time_s)", unit="ns"),
        Column("backend_ns", pa.int64(), "of which the backend compiler (backend_compile_time_s)", unit="ns"),
        Column("inductor_ns", pa.int64(), "of which Inductor (inductor_compile_time_s)", unit="ns"),
        Column("codegen_ns", pa.int64(), "of which code generation (code_gen_time_s)", unit="ns"),
        Column("cache", DICT_STRING, "compiled-artifact cache outcome: one of schema.COMPILE_CACHE (FX graph cache; "
                                     "the NEFF cache on Neuron); null when unknown"),
        Column("aot_cache", DICT_STRING, "AOTAutograd cache outcome: hit, miss, bypass"),
        Column("status", DICT_STRING, "one of schema.COMPILE_STATUS (null for graph breaks)"),
        Column("fail_type", pa.string(), "the failure's type (BackendCompilerFailed, a compiler status)"),
        Column("fail_reason", pa.string(), "the failure's message, or the restart reason"),
        Column("recompile_reason", pa.string(), "the guard that failed and made this a recompile"),
        Column("graph_breaks", pa.int32(), "graph breaks Dynamo counted for this compile"),
        Column("reason", pa.string(), "graph break or recompile-limit reason (graph_break, recompile_limit rows)"),
        Column("count", pa.int64(), "how many graphs a parallel_summary row counts, how many runs a compiler_pass "
               "row sums (null on other rows)"),
        Column("compiler_version", pa.string(), "the compiler's version where the log or the cache names it "
               "(neuronx-cc)"),
        Column("flags", pa.string(), "the compiler options the work directory recorded (compiler_args.txt)"),
    ),
)

DERIVED_TABLES: dict[str, TableSpec] = {COMPILES.name: COMPILES}


@dataclass(frozen=True)
class MetaKey:
    """One key of the ``metadata`` table: what parsers write and analyses, the catalog and the viewer read.

    ``key`` ending in ``.*`` declares a family: its members are named by the input (``kineto.*`` holds the
    Kineto file's own top-level keys as found). ``types`` are the JSON types a value may have.
    """

    key: str
    types: tuple[str, ...]
    meaning: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.key[:-1]) if self.key.endswith(".*") else key == self.key


_S, _I, _B, _O, _A = ("string",), ("integer",), ("boolean",), ("object",), ("array",)

# The normalized facts: written for every input by neurontrace.parsers._normalized_meta from whatever the format
# said (and derived again for stored outputs written before they existed). Analyses, the catalog and the viewer
# read these (through neurontrace.trace_facts), never the format's own keys (kineto.*, neuron.*), which stay as
# found for `neurontrace info`.
DEVICES = MetaKey("devices", _O, (
    "the input's devices, keyed by the id of the tables' `device` column (`cuda:0`, `rocm:2`, `mtia:17`, "
    "`neuron:nc0`); each an object with `kind` (the backend: cuda, rocm, mtia, xpu, neuron ...) and, where the "
    "input says, `name`, `index` (the profiler's own number of the device), `memory_bytes` and `memory_source`, "
    "`compute_capability` (`major.minor`), `multiprocessors`, and `evidence`: what identified it "
    "(`deviceProperties[0]`; `events` when only events name it; a device whose events are numbered apart from "
    "its listing, as ROCm's `rocm:2` listed as 0, is matched when the input lists one device and its events "
    "name one)"))
TOOL_VERSIONS = MetaKey("tool_versions", _O, (
    "name -> version of the tools that wrote the profile: `kineto_schema`, `cupti`, `cuda_runtime`, `cuda_driver`, "
    "`roctracer`, `hip_runtime`, `hip_driver`, `nccl`, Neuron's `neuron_runtime`, `neuron_compiler`, "
    "`neuron_profiler` ...; several values of one name are joined by `, ` (a capture's own versions, torch "
    "among them, are in `run`)"))
DISTRIBUTED = MetaKey("distributed", _O, (
    "what the input says of its job (torch.distributed, in Kineto's `distributedInfo`): `rank`, `world_size`, "
    "`backend` where written, and `groups`: [{`name`, `size`, `desc`}] of its process groups; absent when the "
    "input says nothing"))
INSTANCE_TYPE = MetaKey("instance_type", _S, (
    "the cloud instance the input names (Neuron: `trn2.48xlarge`): an `instance_type` field of its Neuron "
    "facts, else the first `trn1/trn2/trn3.<size>` its facts mention; absent when none"))
DEVICE_ACTIVITY = MetaKey("device_activity", _O, (
    "written by a parser that read an accelerator trace without device events: `recorded` (false), `backend`, "
    "`transfers` (host ops re-labelled as moves to the device) and `shapes` (whether op inputs were recorded, "
    "which telling moves from casts needs); analysis/device_activity.py decides what it means and warns once"))
NORMALIZED_KEYS: tuple[MetaKey, ...] = (DEVICES, TOOL_VERSIONS, DISTRIBUTED, INSTANCE_TYPE)

METADATA_KEYS: tuple[MetaKey, ...] = (
    *NORMALIZED_KEYS, DEVICE_ACTIVITY,
    MetaKey("format", _S, "the registered format that read this input (`neurontrace info` lists them)"),
    MetaKey("clock", _S, "what the times count from: `unix_epoch_ns`, `trace_relative_ns`, a Neuron device clock, ..."),
    MetaKey("backend", _S, "what the trace ran on: `cuda`, `rocm`, `cpu`, `neuron`, `mtia`, a PrivateUse1 name"),
    MetaKey("decoder", _S, "the Kineto JSON decoder used: the compiled scanner or the pure-Python reference"),
    MetaKey("rank_source", ("string", "array"), "where the rank came from (`distributedInfo`, the file name, ...)"),
    MetaKey("device", _S, "the device a Neuron profile belongs to (`neuron:nc0`)"),
    MetaKey("device_source", _S, "how that device was identified"),
    MetaKey("alignment", ("object", "array"), "how device clocks were aligned to the host clock, per profile"),
    MetaKey("synthetic", _B, "true for generated test data (never a measurement); reports say SYNTHETIC"),
    MetaKey("synthetic_note", _S, "what generated a synthetic input"),
    MetaKey("run", _O, "the capture's run.json (`neurontrace.run/1`, docs/capture.md)"),
    MetaKey("neurontrace.accounting", _O, "what one parse did with every event it read (`ParseAccounting`)"),
    MetaKey("undecoded", _A, "device profiles of a capture leaf left undecoded (and why)"),
    MetaKey("undecoded_profiles", _A, "device profiles of a capture directory left undecoded (and why)"),
    MetaKey("kineto.names", _O, "lookup tables of the Kineto decoder (names by code)"),
    MetaKey("kineto.synthetic", _S, "the synthetic label a Kineto file carries"),
    MetaKey("kineto.*", ("string", "integer", "number", "boolean", "object", "array"),
            "a top-level key of the Kineto file, as found: `schemaVersion`, `deviceProperties`, `distributedInfo`, "
            "`baseTimeNanoseconds`, `cupti_version`, ..."),
    MetaKey("neuron.metadata", _O, "Neuron Explorer's Metadata table: instance type, runtime and compiler versions"),
    MetaKey("neuron.summary", ("object", "array"), "Neuron summary metrics, per profile"),
    MetaKey("neuron.summary_format", _S, "which summary form was read (summary-json or summary-text)"),
    MetaKey("neuron.warnings", _A, "rows of Neuron Explorer's Warning table"),
    MetaKey("neuron.percent_scales", _O, "how each `*_percent` metric was scaled to a fraction"),
    MetaKey("neuron.profile_schema_version", _S, "the Explorer schema version of the profile"),
    MetaKey("neuron.schema_major", _I, "its major version, which selects the column mapping"),
    MetaKey("neuron.columns_read", _O, "which column each field was read from, per table"),
    MetaKey("neuron.args_detail", _O, "which extra columns went into `args`"),
    MetaKey("neuron.derived_rows", _O, "counts of rows derived rather than read (e.g. DMA queue depth)"),
    MetaKey("neuron.execution_info", _A, "rows of the ExecutionInfo table (one per NEFF execution)"),
    MetaKey("neuron.unknown_tables", _A, "tables of the directory this neurontrace does not read"),
    MetaKey("neuron.non_table_files", _A, "files of the directory that are not Parquet tables"),
    MetaKey("neuron.active_time_check", _O, ("the profile's own engine-active time (ActiveTime / `active_time`) "
                                              "against the union of the instructions read as compute")),
    MetaKey("neuron.neff_header", _A, "the NEFF header rows of a legacy JSON profile (`uuid` pairs it with its NTFF)"),
    MetaKey("neuron.profile_metadata", _A, "the `metadata` section of a legacy JSON profile (`last_hw_timestamp`, ...)"),
    MetaKey("neuron.system_pb", _A, ("what a system profile's .pb files show without neuron-explorer: framing, "
                                     "trace_info's instance, CPU model, files and event types")),
    MetaKey("neuron.*", ("object", "array"), ("a small Explorer table kept as rows (`device_profile_list`, "
                                              "`neff_header`, `opcode_summary`, `cc_stream`, `system_profile_metadata`, "
                                              "`table.<Name>` ...)")),
    MetaKey("neuron_json.kind", _S, "`system` or `device`: which legacy Neuron JSON this is"),
    MetaKey("neuron_json.sections", _A, "the top-level sections of the legacy Neuron JSON, in the file's order"),
    MetaKey("neuron_json.time_unit_check", _O, "`metadata.last_hw_timestamp` against `summary.total_time`: ns or not"),
    MetaKey("neuron_json.*", ("string", "integer", "number", "boolean", "object", "array"),
            "a section of the legacy Neuron JSON without a table of its own, as found"),
    MetaKey("ntff.header", _O, "the NTFF header's facts (version, NEFF hash, NeuronCore)"),
    MetaKey("ntff.neff", _O, "the NEFF the NTFF was decoded with, and the rule that found it"),
    MetaKey("ntff.decoded_by", _O, "the tool and command that decoded the NTFF, or the JSON report read instead"),
    MetaKey("ntff.synthetic", _B, "true for a generated NTFF"),
    MetaKey("memory_snapshot", _A, ("a memory snapshot's segments per device when it was taken: segments, "
                                    "reserved, allocated, free blocks, the largest free block")),
    MetaKey("torchneuron.framework_mapping", _O, "how the framework trace was matched to the device profiles"),
)


def metadata_key(key: str) -> MetaKey | None:
    """The declaration of ``key`` (an exact key before a family), or None when it is not declared."""
    exact = [m for m in METADATA_KEYS if m.key == key]
    return exact[0] if exact else next((m for m in METADATA_KEYS if m.matches(key)), None)


TABLES: dict[str, TableSpec] = {
    t.name: t for t in (SYSTEM_EVENTS, DEVICE_EVENTS, FLOWS, COUNTERS, FRAMES, METADATA, MEMORY_EVENTS)
}


def to_markdown() -> str:
    """The reference page for docs/schema.md, generated from the declarations above."""
    out = [
        "# neurontrace data model",
        "",
        "Generated from `neurontrace/schema.py` by `python scripts/gen_schema_doc.py`; do not edit by hand.",
        "Times are int64 nanoseconds on the trace clock named in `metadata` (`clock`).",
        "",
    ]
    for spec in (*TABLES.values(), *DERIVED_TABLES.values()):
        out += [f"## `{spec.name}`", "", spec.doc, "", "| column | type | unit | null | meaning |",
                "|---|---|---|---|---|"]
        for c in spec.columns:
            meaning = c.doc + (f" (→ `{c.references}`)" if c.references else "")
            null = "yes" if c.nullable else "no"
            typ = "string (dictionary)" if c.type == DICT_STRING else str(c.type)
            out.append(f"| `{c.name}` | `{typ}` | {c.unit} | {null} | {meaning} |")
        out.append("")
    out += ["## Categories", "", "| category | meaning |", "|---|---|"]
    out += [f"| `{k}` | {v} |" for k, v in CATEGORIES.items()]
    out += ["", "## Compile events", "", "The `event` values of `compiles`.", "", "| event | meaning |", "|---|---|"]
    out += [f"| `{k}` | {v} |" for k, v in COMPILE_EVENTS.items()]
    intro = ("The keys of the `metadata` table (values are JSON text). A key ending in `.*` is a family whose "
             "members the input names.")
    out += ["", "## Memory actions", "", "| action | meaning |", "|---|---|"]
    out += [f"| `{k}` | {v} |" for k, v in MEMORY_ACTIONS.items()]
    out += ["", "## Metadata keys", "", intro, "", "| key | JSON type | meaning |", "|---|---|---|"]
    out += [f"| `{m.key}` | {' or '.join(m.types)} | {m.meaning} |" for m in METADATA_KEYS]
    return "\n".join(out) + "\n"
