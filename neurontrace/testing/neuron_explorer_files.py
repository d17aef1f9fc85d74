"""Synthetic Neuron Explorer output (:mod:`neurontrace.testing.synthetic_neuron`): the Parquet directory of
a scenario (schema 7.4.0 or an assumed 12.x), its summary metrics, and the large Instruction table of the
benchmark. Every file is labelled synthetic (``neurontrace.synthetic = true``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neurontrace.testing.neuron_scenario import PARQUET_LABEL, Scenario

# -- Explorer Parquet ---------------------------------------------------------------------------


@dataclass
class _Tables:
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, table: str, **row: Any) -> None:
        self.rows.setdefault(table, []).append(row)


def explorer_tables(sc: Scenario) -> dict[str, list[dict[str, Any]]]:
    """The scenario as Explorer tables: ``{table: [row dicts]}`` with schema 7.4.0 column names."""
    t = _Tables()
    starts = sc.exec_starts()
    end_all = starts[-1] + sc.exec_len_ns if starts else 0
    frame_ids = _stack_tables(sc, t)
    kernel_names = _kernel_tables(sc, t)
    ids = {"instr": 0, "dma": 0, "packet": 0, "cc": 0}
    first_instr: dict[int, list[dict[str, Any]]] = {}
    for e, x0 in enumerate(starts):
        t.add("ExecutionInfo", execution_index=e, neff_name=sc.neff_name, execution_start_ts=x0,
              execution_end_ts=x0 + sc.exec_len_ns, num_subgraphs=1, row_count=None)
        for w in sc.engines:
            clock = x0
            for i in range(w.count):
                waited = bool(w.wait_every) and i % w.wait_every == w.wait_every - 1
                clock += w.wait_ns if waited else 0
                row = {
                    "start_ts": clock, "end_ts": clock + w.dur_ns, "duration_ns": w.dur_ns, "engine": w.engine,
                    "timeline_track": w.engine.capitalize() + ("Matrix" if w.engine == "tensor" else ""),
                    "pcore_idx": 0, "opcode": w.opcodes[i % len(w.opcodes)], "operands": f"synthetic op {i}",
                    "compiler_opcode": w.opcodes[i % len(w.opcodes)], "id": ids["instr"], "pc": i,
                    "bir_id": f"sg0000:{i}", "hlo_name": w.hlo_name, "layer": w.layer,
                    "stack_frame_ids": f"[{frame_ids[w.engine]}]" if w.engine in frame_ids else None,
                    "nki_source_location": w.nki_source,
                    "kernel_instruction_name": kernel_names.get(w.engine),
                    "evt_wait_time_ns": w.wait_ns if waited else 0, "raw_flops": w.flops or None,
                    "hbm_read_bytes": 1024,
                }
                t.add("Instruction", **row)
                if waited:
                    t.add("SemaphoreUpdate", timestamp=clock, id=f"S[{3 + i % 4}] (q{w.engine}IO0)", value=1,
                          update_source="Sync", update_operation_type="sem_inc",
                          update_trigger_timing="complete", pcore_idx=0)
                first_instr.setdefault(e, []).append(row)
                ids["instr"] += 1
                clock += w.dur_ns + w.gap_ns
        for q in sc.dma:
            for j in range(q.transfers):
                s = x0 + j * (q.dur_ns + q.gap_ns)
                agg = ids["dma"]
                t.add("DmaPacketAggregated", start_ts=s, end_ts=s + q.dur_ns, duration_ns=q.dur_ns, id=agg,
                      pcore_idx=0, block_id=j, queue_idx=0, queue_name=q.name, queue_type=q.queue_type, op="read",
                      variable=f"tensor_{j % 3}", read_bytes=q.bytes, write_bytes=q.bytes, transfer_bytes=q.bytes,
                      throughput=q.bytes / (q.dur_ns / 1e9), source=q.source, dest=q.dest,
                      semaphore_id=f"S[10] ({q.name})")
                for p in range(q.packets):
                    d = q.dur_ns // q.packets
                    t.add("DmaPacket", start_ts=s + p * d, end_ts=s + (p + 1) * d, duration_ns=d, pcore_idx=0,
                          id=ids["packet"], packet_idx=p, packet_aggregation_id=agg, engine_idx=0,
                          read_bytes=q.bytes // q.packets, write_bytes=q.bytes // q.packets,
                          transfer_bytes=q.bytes // q.packets, throughput=q.bytes / (q.dur_ns / 1e9),
                          queue_type=q.queue_type, variable=f"tensor_{j % 3}", queue_name=q.name, queue_idx=0,
                          crc=12345)
                    ids["packet"] += 1
                trig = first_instr.get(e, [])
                if trig:
                    src = trig[j % len(trig)]
                    t.add("Flow", in_id=src["id"], out_id=agg, in_table="instruction", out_table="dma_block",
                          dependency_type="FLOW_DEPENDENCE", gap_time=s - src["end_ts"])
                ids["dma"] += 1
        for c in sc.collectives:
            s = x0 + c.at_ns
            t.add("CcOp", start_ts=s, end_ts=s + c.dur_ns, duration_ns=c.dur_ns, operation=c.operation,
                  algorithm=c.algorithm, num_elements=c.bytes // 2, dtype="bf16", op_id=ids["cc"],
                  stream_id=c.stream_id, stream_index=c.stream_id, trigger_engine="Pool", input_size=c.bytes,
                  output_size=c.bytes, algorithm_bandwidth=c.bytes / (c.dur_ns / 1e9), trigger_start_ts=s - 200,
                  cc_trigger_start_delay=200, replica_group="[[0, 1]]")
            for k in range(2):
                half = c.dur_ns // 2
                t.add("CcInstruction", start_ts=s + k * half, end_ts=s + (k + 1) * half, duration_ns=half,
                      core_idx=c.cc_core, description="DMA_ADVANCE" if k else "SEND", trigger_engine="Pool",
                      trigger_start_ts=s - 200)
            ids["cc"] += 1
    for stream in sorted({c.stream_id for c in sc.collectives}):
        t.add("CcStream", stream_id=stream, stream_index=stream, cc_core_ids="[8,9,10,11]")
    for window in sc.throttles:
        t.add("Throttle", duration=window.dur_ns, k=window.k, n=window.n, timestamp=window.at_ns, type=window.type,
              pcore_idx=0)
    _profile_tables(sc, t, end_all)
    if sc.system:
        _system_tables(sc, t, starts)
    for msg in sc.warnings:
        t.add("Warning", message=msg, category="Missing Data")
    return t.rows


def _stack_tables(sc: Scenario, t: _Tables) -> dict[str, int]:
    """StackFrame* lookup tables; returns the leaf frame id of each engine's stack."""
    files: dict[str, int] = {}
    funcs: dict[str, int] = {}
    nodes: dict[tuple[int, str, int, str], int] = {}
    leaf: dict[str, int] = {}
    for w in sc.engines:
        parent = 0
        for f in w.stack:
            key = (parent, f.file, f.line, f.function)
            if key not in nodes:
                fi = files.setdefault(f.file, len(files) + 1)
                fn = funcs.setdefault(f.function, len(funcs) + 1)
                loc = len(nodes) + 1
                t.add("StackFrameFileLocation", id=str(loc), file_name_id=fi, function_name_id=fn, line_number=f.line)
                nodes[key] = loc
                t.add("StackFrame", id=str(loc), file_location_id=loc, parent_frame_id=str(parent))
            parent = nodes[key]
        if w.stack:
            leaf[w.engine] = parent
    for name, i in files.items():
        t.add("StackFrameFileName", id=str(i), name=name)
    for name, i in funcs.items():
        t.add("StackFrameFunctionName", id=str(i), name=name)
    return leaf


def _kernel_tables(sc: Scenario, t: _Tables) -> dict[str, str]:
    names = {}
    next_id = 1
    for w in sc.engines:
        if not w.kernel:
            continue
        parent = None
        for f in w.kernel:
            t.add("KernelStackFrames", stack_frame_id=next_id, fully_qualified_function_name=f.function,
                  parent_stack_frame_id=parent, pcore_idx=0, file_path=f.file, line_number=f.line)
            parent, next_id = next_id, next_id + 1
        name = f"inst.{w.engine}:0"
        last = w.kernel[-1]
        t.add("KernelInstructions", kernel_instruction_name=name, stack_frame_id=parent,
              stack_frame_depth=len(w.kernel), iteration_variables_id=None, iteration_variable_depth=0, pcore_idx=0,
              file_path=last.file, line_number=last.line + 3)
        names[w.engine] = name
    return names


def _iso(epoch_ns: int) -> str:
    dt = datetime.fromtimestamp(epoch_ns // 1_000_000_000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M:%S") + f".{epoch_ns % 1_000_000_000:09d} +0000 UTC"


def _profile_tables(sc: Scenario, t: _Tables, end_all: int) -> None:
    t.add("Metadata", profile_schema_version=sc.schema, ntff_version=5, num_physical_cores=1, vnc_enabled=False,
          first_hw_timestamp=10_261_883_214, last_hw_timestamp=10_261_883_214 + end_all,
          first_ts=_iso(sc.host_epoch_ns), last_ts=_iso(sc.host_epoch_ns + end_all), dma_ddr_bandwidth=1.9e11,
          num_dma_engines_per_neuroncore=16, hbm_ddr_bandwidth=7.2e11, tensor_engine_num_rows=128,
          tensor_engine_num_cols=128, tensor_engine_clock_freq=2.8, vector_engine_clock_freq=1.12,
          vector_engine_num_channels=128, scalar_engine_clock_freq=1.4, scalar_engine_num_channels=128,
          gpsimd_engine_clock_freq=1.4, gpsimd_engine_num_channels=8, neuroncore_clock_freq=2.8,
          ticks_per_nanosec=1, instance_type=sc.instance_type, runtime_version="2.27.23 (synthetic)",
          collectives_version="2.27.34", driver_version="2.23.0", explorer_version="synthetic",
          compiler_version="synthetic", neuroncore_idx=sc.nc_idx, neuron_device_idx=0,
          profile_name=f"synthetic_{sc.name}", is_simulation=False)
    t.add("NeffHeader", network_name=sc.neff_name, uuid=hashlib.md5(sc.name.encode()).hexdigest(),
          hash=sc.numeric_hash, enabled_features="synthetic", header_size=1024, data_size=0, major_version=2,
          minor_version=0, neuroncore_count=1, logical_neuroncore_count=1, pcore_count_per_lnc=1)
    t.add("DeviceProfileList", device_profile_name=f"synthetic_{sc.name}_nc{sc.nc_idx}", instance_id=sc.instance_id,
          process_id=sc.pid, nc_id=sc.nc_idx, session_id=0, model_id=None)
    t.add("Summary", **summary_metrics(sc))
    counts: dict[tuple[str, str], int] = {}
    for w in sc.engines:
        for i in range(w.count):
            key = (w.engine, w.opcodes[i % len(w.opcodes)])
            counts[key] = counts.get(key, 0) + sc.executions
    for (eng, op), n in sorted(counts.items()):
        t.add("OpcodeSummary", engine=eng, opcode=op, instruction_count=n, instruction_time_ns=n * 300,
              active_time_ns=n * 300, active_time_percent=min(1.0, n * 300 / max(end_all, 1)))
    for k in range(3):
        t.add("HbmUsage", timestamp=sc.exec_start_ns + k * 5000, current_throughput=1e11 * (k + 1),
              total_transfer_bytes=65536 * (k + 1), pcore_idx=0)
        t.add("PendingDma", timestamp=sc.exec_start_ns + k * 5000, value=k, pcore_idx=0)


# Real summaries: total_time includes about 2.08 ms of idle start-up at every buffer size, so shares
# use total_active_time (formats/neuron.md addendum, from pantheonneuron docs/neuron_counters.md).
STARTUP_S = 2.08e-3


def summary_metrics(sc: Scenario) -> dict[str, Any]:
    """Summary metrics consistent with the scenario (times in s, ``*_percent`` as fractions 0..1).

    ``total_time`` = the executions plus :data:`STARTUP_S`; ``total_active_time`` = the union of engine,
    DMA and collective activity, approximated by the executions' span; every ``*_percent`` is of
    ``total_time``, as in real files.
    """
    exec_s = sc.executions * sc.exec_len_ns / 1e9
    total = exec_s + STARTUP_S
    active = exec_s
    out: dict[str, Any] = {"total_time": total, "total_exec_time": exec_s, "total_active_time": active,
                           "total_active_time_percent": active / total}
    for w in sc.engines:
        busy = sc.executions * w.count * w.dur_ns / 1e9
        out[f"{w.engine}_engine_active_time"] = busy
        out[f"{w.engine}_engine_active_time_percent"] = busy / total
        out[f"{w.engine}_engine_instruction_count"] = sc.executions * w.count
    dma = min(active, sum(q.transfers * q.dur_ns for q in sc.dma) * sc.executions / 1e9)
    cc = min(active, sum(c.dur_ns for c in sc.collectives) * sc.executions / 1e9)
    flops = sum(w.flops * w.count for w in sc.engines) * sc.executions
    tensor = out.get("tensor_engine_active_time_percent", 0.0)
    out.update(dma_active_time=dma, dma_active_time_percent=dma / total,
               dma_transfer_count=sc.executions * sum(q.transfers for q in sc.dma),
               dma_transfer_total_bytes=sc.executions * sum(q.transfers * q.bytes for q in sc.dma),
               cc_op_count=sc.executions * len(sc.collectives), cc_op_active_time=cc,
               cc_op_active_time_percent=cc / total, hardware_flops=flops, model_flops=flops,
               # model FLOPs at 80% of the tensor engine's active time: no "low model FLOPs" finding
               mfu_estimated_percent=0.8 * tensor, hfu_estimated_percent=0.85 * tensor, mbu_estimated_percent=0.12 * active / total)
    return out


def _system_tables(sc: Scenario, t: _Tables, starts: list[int]) -> None:
    h0 = sc.host_epoch_ns
    eid = 1
    base = {"instance_id": sc.instance_id, "process_id": sc.pid, "thread_id": sc.tid, "worker_gid": sc.nc_idx}

    def ev(name: str, src: str, start: int, dur: int, **kw: Any) -> None:
        nonlocal eid
        t.add("SystemProfileEvents", id=eid, name=name, start_ts=start, end_ts=start + dur, duration_ns=dur,
              trace_event_source=src, **{**base, **kw})
        eid += 1

    ev("nrt_load", "neuron_rt", h0 - 2_000_000, 1_500_000, nc_idx=sc.nc_idx, flow_id=None,
       extra_attributes_json=json.dumps({"model_name": sc.neff_name}))
    for e, x0 in enumerate(starts):
        flow = [str(1000 + e)]
        host_start = h0 + x0 - sc.launch_ns
        jitter = sc.jitter_ns if e % 2 == 0 else -sc.jitter_ns
        if sc.framework_events:
            ev("aten::linear", "framework", host_start - 5_000, 4_000, nc_idx=None, flow_id=flow,
               extra_attributes_json=json.dumps({"cat": "cpu_op"}))
        ev("nrt_execute", "neuron_rt", host_start, sc.launch_ns + sc.exec_len_ns + 3_000, nc_idx=sc.nc_idx,
           flow_id=flow, extra_attributes_json=json.dumps({"exec_id": e, "model_name": sc.neff_name}))
        ev("kbl_exec_wait", "neuron_rt", h0 + x0, sc.exec_len_ns, nc_idx=sc.nc_idx, flow_id=None,
           extra_attributes_json=None)
        ev("nc_exec_running", "neuron_hw", h0 + x0 + jitter, sc.exec_len_ns, nc_idx=sc.nc_idx, pcore_idx=0,
           flow_id=flow, extra_attributes_json=json.dumps({"exec_id": e}))
    t.add("SystemProfileMetadata", first_ts=_iso(h0 - 2_000_000), last_ts=_iso(h0 + starts[-1] + sc.exec_len_ns),
          first_ts_ns=str(h0 - 2_000_000), last_ts_ns=str(h0 + starts[-1] + sc.exec_len_ns), ntff_version=5,
          hbm_capacity_bytes=24 << 30)
    for k in range(3):
        ts = h0 + k * 1_000_000
        for cpu, util in (("0", 35.0 + k), ("1", 12.5), ("average", 23.75 + k / 2)):
            t.add("CpuUsage", timestamp=ts, util_percent=util, cpu_id=cpu, instance_id=sc.instance_id)
        t.add("HostMemUsage", timestamp=ts, used_bytes=(8 << 30) + k, used_percent=25.0, instance_id=sc.instance_id)
        t.add("SystemProfileHbmUsage", timestamp=ts, total_bytes=(3 << 30), tensors_bytes=(2 << 30),
              weights_bytes=(1 << 30), io_bytes=0, device_idx=0, hbm_idx=0, instance_id=sc.instance_id)


_V12_DROP = {"duration_ns", "timeline_track", "compiler_opcode"}


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    return pa.table({n: pa.array([r.get(n) for r in rows]) for n in names})


def write_explorer(sc: Scenario, out: str | Path, *, split_rows: int | None = None) -> Path:
    """Write the scenario as a Neuron Explorer Parquet directory (``<Table>.parquet`` files).

    ``split_rows``: tables with more rows are split into ``<Table>_0.parquet``, ``<Table>_1.parquet``,
    as Explorer does for large tables.
    """
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tables = {name: _arrow(rows) for name, rows in explorer_tables(sc).items()}
    if sc.schema.split(".")[0] != "7":
        tables = {name: t.drop_columns([c for c in t.column_names if c in _V12_DROP]) for name, t in tables.items()}
        if "Instruction" in tables:
            tables["Instruction"] = tables["Instruction"].append_column(
                "synthetic_v12_field", pa.array(["new in 12.x (assumed)"] * tables["Instruction"].num_rows))
        tables["SyntheticNewTable"] = pa.table({"note": ["a table the reader does not know"]})
    tables["SchemaFields"] = _schema_fields(tables)
    for name, table in tables.items():
        write_table(table, d, name, split_rows=split_rows)
    return d


def write_tables(directory: str | Path, tables: dict[str, list[dict[str, Any]] | pa.Table], *,
                 label: bool = True) -> Path:
    """Hand-written Explorer tables (a few rows each, for micro tests) as ``<Table>.parquet`` files."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        write_table(rows if isinstance(rows, pa.Table) else _arrow(rows), d, name, label=label)
    return d


def write_table(table: pa.Table, directory: Path, name: str, *, split_rows: int | None = None,
                row_group_size: int | None = None, label: bool = True) -> None:
    if label:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **PARQUET_LABEL})
    # Small tables skip column statistics: they would be most of the file (samples stay small).
    opts: dict[str, Any] = {"row_group_size": row_group_size, "compression": "zstd",
                            "write_statistics": table.num_rows > 10_000}
    if split_rows is None or table.num_rows <= split_rows:
        pq.write_table(table, directory / f"{name}.parquet", **opts)
        return
    for part, start in enumerate(range(0, table.num_rows, split_rows)):
        pq.write_table(table.slice(start, split_rows), directory / f"{name}_{part}.parquet", **opts)


def _schema_fields(tables: dict[str, pa.Table]) -> pa.Table:
    rows = [{"table_name": name, "table_description": "synthetic", "field_name": f.name,
             "field_description": "synthetic", "field_example": None, "field_type": str(f.type),
             "field_required": False} for name, t in tables.items() for f in t.schema]
    return _arrow(rows)


# -- the 10M-row Instruction table of the benchmark -------------------------------------------------


def instruction_table(rows: int, *, distinct: int = 5000, seed: int = 0) -> pa.Table:
    """A big synthetic ``Instruction`` table (vectorized): ``distinct`` static instructions replayed.

    String columns are dictionary arrays over the static instructions, as a compiled program
    repeats; the Parquet writer stores them dictionary-encoded, and they read back as strings.
    """
    rng = np.random.default_rng(seed)
    k = np.arange(rows, dtype=np.int64) % distinct
    dur = rng.integers(50, 2000, rows, dtype=np.int64)
    start = np.cumsum(dur // 4 + 10)
    engines = np.array(["tensor", "vector", "scalar", "gpsimd", "sync"])
    opcodes = np.array(["MATMUL", "TRANSPOSE", "TENSOR_TENSOR", "ACTIVATE", "TENSOR_SCALAR_PTR", "IOTA",
                        "DMA_TRIGGER", "EVENT_SEMAPHORE", "NOP", "TENSOR_REDUCE"])
    static = np.arange(distinct)

    def pool(values: list[str]) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(k.astype(np.int32)), pa.array(values))

    wait = np.where(rng.random(rows) < 0.05, rng.integers(100, 5000, rows), 0).astype(np.int64)
    return pa.table({
        "start_ts": start, "end_ts": start + dur, "duration_ns": dur,
        "engine": pool([str(engines[s % 5]) for s in static]),
        "timeline_track": pool([str(engines[s % 5]).capitalize() for s in static]),
        "pcore_idx": np.zeros(rows, np.int64),
        "opcode": pool([str(opcodes[s % 10]) for s in static]),
        "operands": pool([f"data=0x{s:x} size=4,4 dst=0xffff0{s:05x}" for s in static]),
        "id": np.arange(rows, dtype=np.int64), "pc": k,
        "bir_id": pool([f"sg0000:{s}" for s in static]),
        "hlo_name": pool([f"%dot.{s % 400} = dot(%p{s % 7}, %p{s % 11})" for s in static]),
        "nki_source_location": pool([f"kernels/attention.py:{10 + s % 300}" for s in static]),
        "stack_frame_ids": pool([f"[{1 + s % 50}]" for s in static]),
        "evt_wait_time_ns": wait, "hbm_read_bytes": (k % 64) * 512, "raw_flops": (k % 3) * 2 * 128**3,
    })
