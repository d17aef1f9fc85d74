"""Neuron Explorer Parquet directories: micro tables in, expected rows out; bad input, named errors.

Inputs are hand-written tables (a few rows each) or synthetic profiles from
``neurontrace.testing.synthetic_neuron``; no real Neuron profile is public (DESIGN.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import Trace
from neurontrace.errors import MalformedTraceError, NeuronProfileWarning, SchemaVersionWarning
from neurontrace.parsers import _neuron_arrow, _neuron_device, _neuron_events, neuron_explorer
from neurontrace.schema import DEVICE_EVENTS, DICT_STRING
from neurontrace.testing import synthetic_neuron as syn
from tests.micro import rows

META = {"profile_schema_version": "7.4.0", "neuroncore_idx": 2, "first_ts": "1970-01-01 00:00:00+00:00"}


def explorer(tmp_path: Path, **tables: Any) -> Path:
    return syn.write_tables(tmp_path / "profile", tables, label=False)


def instr(i: int, start: int, dur: int, engine: str = "tensor", opcode: str = "MATMUL", **extra: Any) -> dict[str, Any]:
    return {"start_ts": start, "end_ts": start + dur, "duration_ns": dur, "engine": engine, "opcode": opcode,
            "operands": f"op{i}", "id": i, "pc": i, "bir_id": f"sg0000:{i}", **extra}


def test_instructions_become_compute_events_on_engine_tracks(tmp_path: Path) -> None:
    d = explorer(tmp_path, Metadata=[META], Instruction=[
        instr(0, 100, 50, "Tensor", "MATMUL"),
        instr(1, 160, 10, "Pool", "IOTA", evt_wait_time_ns=20),
    ])
    assert neurontrace.detect(d).name == "neuron-explorer"
    t = neurontrace.load(d)
    assert rows(t, "device_events", "ts_ns", "dur_ns", "name", "category", "track", "device", "phase") == [
        (100, 50, "MATMUL", "compute", "tensor", "neuron:nc2", "X"),
        (160, 10, "IOTA", "compute", "gpsimd", "neuron:nc2", "X"),
        # derived: the 20 ns the instruction waited on its semaphore, ending where it starts
        (140, 20, "semaphore wait", "sync_wait", "gpsimd", "neuron:nc2", "derived"),
    ]
    args = [json.loads(a) for a in t.device_events["args"].to_pylist()]
    assert args[0]["operands"] == "op0" and args[0]["bir_id"] == "sg0000:0" and args[0]["engine"] == "Tensor"
    assert args[2] == {"instruction_id": 1}
    assert t.meta("clock") == "neuron_device_relative_ns" and t.meta("alignment")["method"] == "none"
    assert t.meta("neuron.profile_schema_version") == "7.4.0" and t.meta("synthetic") is False
    (acct,) = t.accounting
    assert acct.kept == {"device_events": 2, "metadata": 1} and acct.events_read == 3
    assert t.meta("neuron.derived_rows") == {"sync_wait from Instruction.evt_wait_time_ns": 1}


def test_event_ids_are_unique_across_system_and_device_events(tmp_path: Path) -> None:
    t = neurontrace.load(syn.write_explorer(syn.Scenario(), tmp_path / "p"))
    ids = t.system_events["event_id"].to_pylist() + t.device_events["event_id"].to_pylist()
    assert len(ids) == len(set(ids)) and t.system_events.num_rows and t.device_events.num_rows


def test_dma_collective_semaphore_throttle_error_and_execution_tables(tmp_path: Path) -> None:
    d = explorer(tmp_path, Metadata=[META], DmaPacketAggregated=[
        {"start_ts": 10, "end_ts": 30, "duration_ns": 20, "id": 5, "queue_name": "qSyncIO0", "queue_type": "data",
         "op": "read", "variable": "w0", "transfer_bytes": 4096, "source": "[HBM]", "dest": "[SB]"},
        {"start_ts": 40, "end_ts": 45, "duration_ns": 5, "id": 6, "queue_name": "qCC", "queue_type": "data",
         "op": "write", "variable": None, "transfer_bytes": 64, "source": "[SB]", "dest": "[REMOTE]"},
    ], CcOp=[{"start_ts": 50, "end_ts": 90, "duration_ns": 40, "operation": "AllGather", "algorithm": "Ring",
              "op_id": 1, "stream_id": 3, "input_size": 100, "output_size": 400}],
        SemaphoreUpdate=[{"timestamp": 12, "id": "S[4] (qSyncIO0)", "value": 1}],
        Throttle=[{"timestamp": 0, "duration": 500, "k": 3, "n": 4, "type": "activity_0"}],
        Error=[{"timestamp": 7, "description": "EMBD OOB", "error_type_id": 1, "type": "Errors"}],
        ExecutionInfo=[{"execution_index": 0, "neff_name": "model.neff", "execution_start_ts": 5,
                        "execution_end_ts": 95}, {"execution_index": 1, "neff_name": "model.neff"}])
    t = neurontrace.load(d)
    got = rows(t, "device_events", "raw_category", "ts_ns", "dur_ns", "name", "category", "track", "bytes",
               "direction", "phase")
    assert got == [
        ("DmaPacketAggregated", 10, 20, "w0", "dma", "dma qSyncIO0", 4096, "d2d", "X"),
        ("DmaPacketAggregated", 40, 5, "dma", "dma", "dma qCC", 64, "p2p", "X"),
        ("CcOp", 50, 40, "AllGather", "collective", "cc stream 3", 400, None, "X"),
        ("SemaphoreUpdate", 12, 0, "S[4] (qSyncIO0)", "sync_wait", "semaphores", None, None, "i"),
        ("Throttle", 0, 500, "activity_0", "throttle", "throttle", None, None, "X"),
        ("Error", 7, 0, "EMBD OOB", "other", "errors", None, None, "i"),
        ("ExecutionInfo", 5, 90, "model.neff", "execution", "executions", None, None, "X"),
    ]
    (acct,) = t.accounting
    assert acct.skipped == {"ExecutionInfo: no start timestamp": 1}  # a pre-v6 execution without a timeline
    assert t.meta("neuron.execution_info")[1] == {"execution_index": 1, "neff_name": "model.neff",
                                                 "execution_start_ts": None, "execution_end_ts": None}


def test_two_physical_cores_get_separate_tracks(tmp_path: Path) -> None:
    d = explorer(tmp_path, Metadata=[{**META, "num_physical_cores": 2, "vnc_enabled": True}], Instruction=[
        instr(0, 0, 5, "vector", pcore_idx=0), instr(1, 0, 5, "vector", pcore_idx=1)])
    assert rows(neurontrace.load(d), "device_events", "track") == [("vector (pcore 0)",), ("vector (pcore 1)",)]


def test_alignment_from_metadata_first_ts(tmp_path: Path) -> None:
    ts = "2025-12-18 15:35:56.592459482 +0000 UTC"
    epoch = 1_766_072_156_592_459_482
    d = explorer(tmp_path, Metadata=[{**META, "first_ts": ts}], Instruction=[instr(0, 100, 5)])
    t = neurontrace.load(d)
    assert rows(t, "device_events", "ts_ns") == [(epoch + 100,)]
    al = t.meta("alignment")
    assert (al["method"], al["offset_ns"], al["residual_ns"], t.meta("clock")) == (
        "metadata_first_ts", epoch, 1, "unix_epoch_ns")
    # Device rows on raw hardware timestamps: first_ts is the wall time of first_hw_timestamp.
    d2 = explorer(tmp_path / "hw", Metadata=[{**META, "first_ts": ts, "first_hw_timestamp": 10_000}],
                  Instruction=[instr(0, 10_100, 5)])
    assert rows(neurontrace.load(d2), "device_events", "ts_ns") == [(epoch + 100,)]


def test_alignment_from_nc_exec_running_reports_the_residual(tmp_path: Path) -> None:
    sc = syn.Scenario(executions=4, jitter_ns=120)
    t = neurontrace.load(syn.write_explorer(sc, tmp_path / "p"))
    al = t.meta("alignment")
    assert (al["method"], al["offset_ns"], al["residual_ns"], al["matched"]) == (
        "nc_exec_running", sc.host_epoch_ns, 120, 4)
    first = min(v for v, c in zip(t.device_events["ts_ns"].to_pylist(),
                                  t.device_events["raw_category"].to_pylist(), strict=True) if c == "Instruction")
    assert first == sc.host_epoch_ns + sc.exec_start_ns


def test_system_profile_events_split_into_host_and_hardware_rows_with_flows(tmp_path: Path) -> None:
    sc = syn.Scenario(executions=1)
    t = neurontrace.load(syn.write_explorer(sc, tmp_path / "p"))
    host = rows(t, "system_events", "name", "category", "track", "host", "correlation")
    assert host == [
        ("nrt_load", "load", "neuron_rt/NC:0", sc.instance_id, None),
        ("aten::linear", "framework_op", f"framework/TID:{sc.tid}", sc.instance_id, None),
        ("nrt_execute", "runtime", "neuron_rt/NC:0", sc.instance_id, 0),
        ("kbl_exec_wait", "sync_wait", "neuron_rt/NC:0", sc.instance_id, None),
    ]
    hw = t.device_events.filter(pa.compute.equal(t.device_events["raw_category"], "neuron_hw"))
    assert hw["name"].to_pylist() == ["nc_exec_running"] and hw["category"].to_pylist() == ["execution"]
    launch = t.flows.filter(pa.compute.equal(t.flows["kind"], "launch"))
    ids = dict(zip(t.system_events["name"].to_pylist(), t.system_events["event_id"].to_pylist(), strict=True))
    exec_id = hw["event_id"][0].as_py()
    # framework dispatch -> runtime call -> hardware execution, in time order
    assert rows(Trace(flows=launch), "flows", "src_event_id", "dst_event_id") == [
        (ids["aten::linear"], ids["nrt_execute"]), (ids["nrt_execute"], exec_id)]


def test_flow_rows_link_instructions_to_dma_and_fill_a_missing_end(tmp_path: Path) -> None:
    d = explorer(tmp_path, Metadata=[META], Instruction=[instr(7, 100, 50)], DmaPacketAggregated=[
        {"start_ts": 170, "end_ts": 200, "duration_ns": 30, "id": 9, "queue_name": "q", "variable": "x",
         "transfer_bytes": 8}], Flow=[
        {"in_id": 7, "out_id": 9, "in_table": "instruction", "out_table": "dma_block",
         "dependency_type": "FLOW_DEPENDENCE", "gap_time": 20},
        {"in_id": 7, "out_id": 99, "in_table": "instruction", "out_table": "dma_block",
         "dependency_type": "FLOW_DEPENDENCE", "gap_time": 5}])
    t = neurontrace.load(d)
    ev = dict(zip(t.device_events["name"].to_pylist(), t.device_events["event_id"].to_pylist(), strict=True))
    assert rows(t, "flows", "flow_id", "kind", "raw_category", "src_event_id", "dst_event_id", "src_ts_ns",
                "dst_ts_ns") == [
        ("instruction:7->dma_block:9", "dependency", "FLOW_DEPENDENCE", ev["MATMUL"], ev["x"], 150, 170),
        ("instruction:7->dma_block:99", "dependency", "FLOW_DEPENDENCE", ev["MATMUL"], None, 150, 155),
    ]


def test_frames_name_the_innermost_user_source_of_each_instruction(tmp_path: Path) -> None:
    d = explorer(
        tmp_path, Metadata=[META],
        StackFrame=[{"id": "1", "file_location_id": 1, "parent_frame_id": "0"},
                    {"id": "2", "file_location_id": 2, "parent_frame_id": "1"}],
        StackFrameFileLocation=[{"id": "1", "file_name_id": 1, "function_name_id": 1, "line_number": 30},
                                {"id": "2", "file_name_id": 2, "function_name_id": 2, "line_number": 12}],
        StackFrameFileName=[{"id": "1", "name": "train.py"}, {"id": "2", "name": "model.py"}],
        StackFrameFunctionName=[{"id": "1", "name": "main"}, {"id": "2", "name": "forward"}],
        Instruction=[
            instr(0, 0, 5, stack_frame_ids="[2]", layer="mlp", hlo_name="dot.1", nki_source_location="kern.py:42"),
            # a library kernel: the innermost *user* frame is the Python line that called it
            instr(1, 10, 5, stack_frame_ids="[2]", nki_source_location="site-packages/neuronxcc/nki/mm.py:7"),
            instr(2, 20, 5, hlo_name="add.3"),
            instr(3, 30, 5),
        ])
    t = neurontrace.load(d)
    frames = {f["frame_id"]: f for f in t.frames.to_pylist()}

    def where(fid: int | None) -> Any:
        return None if fid is None else (frames[fid]["kind"], frames[fid]["file"], frames[fid]["line"],
                                         frames[fid]["function"])

    got = [where(f) for f in t.device_events["frame_id"].to_pylist()]
    assert got == [("nki", "kern.py", 42, None), ("python", "model.py", 12, "forward"),
                   ("hlo", None, None, "add.3"), None]
    leaf = frames[t.device_events["frame_id"][0].as_py()]
    path = []
    node: dict[str, Any] | None = leaf
    while node is not None:
        path.append((node["kind"], node["function"] or node["file"]))
        node = frames.get(node["parent_id"]) if node["parent_id"] is not None else None
    assert path[::-1] == [("python", "main"), ("python", "forward"), ("layer", "mlp"), ("hlo", "dot.1"),
                          ("nki", "kern.py")]


def test_nki_kernel_stack_tables_become_frames(tmp_path: Path) -> None:
    t = neurontrace.load(syn.write_explorer(syn.Scenario(executions=1), tmp_path / "p"))
    scalar = t.device_events.filter(pa.compute.equal(t.device_events["track"], "scalar"))
    frames = {f["frame_id"]: f for f in t.frames.to_pylist()}
    leaf = frames[scalar["frame_id"][0].as_py()]
    assert (leaf["kind"], leaf["file"], leaf["line"], leaf["function"], leaf["is_user"]) == (
        "nki", "kernels/act_kernel.py", 14, "tile_loop", True)


def test_counters_store_percent_as_fractions(tmp_path: Path) -> None:
    d = explorer(tmp_path, Metadata=[META],
                 CpuUsage=[{"timestamp": 5, "util_percent": 40.0, "cpu_id": "average", "instance_id": "i-1"},
                           {"timestamp": 5, "util_percent": 80.0, "cpu_id": "3", "instance_id": "i-1"}],
                 SbufUsage=[{"timestamp": 9, "avg_util_percent": 0.25, "partition_0_util_percent": 0.5}],
                 HostMemUsage=[{"timestamp": 5, "used_bytes": 1024, "used_percent": 12.5, "instance_id": "i-1"}])
    t = neurontrace.load(d)
    assert rows(t, "counters", "name", "field", "value", "unit", "device", "host") == [
        ("SbufUsage", "avg_util_percent", 0.25, "fraction", "neuron:nc2", None),
        ("SbufUsage", "partition_0_util_percent", 0.5, "fraction", "neuron:nc2", None),
        ("CpuUsage", "util_percent", 0.4, "fraction", "cpu", "i-1"),
        ("CpuUsage", "util_percent", 0.8, "fraction", "cpu:3", "i-1"),
        ("HostMemUsage", "used_bytes", 1024.0, "bytes", "cpu", "i-1"),
        ("HostMemUsage", "used_percent", 0.125, "fraction", "cpu", "i-1"),
    ]
    assert t.meta("neuron.percent_scales")["CpuUsage.util_percent"].startswith("0-100")


@pytest.mark.parametrize(("value", "expected", "scale"), [(0.35, 0.35, "fraction"), (35.0, 0.35, "0-100")])
def test_summary_percent_metrics_are_fractions(tmp_path: Path, value: float, expected: float, scale: str) -> None:
    d = explorer(tmp_path, Metadata=[META], Summary=[{"total_time": 2.5e-05, "dma_active_time_percent": value}])
    s = neurontrace.load(d).meta("neuron.summary")
    assert s["metrics"] == {"total_time": 2.5e-05, "dma_active_time_percent": pytest.approx(expected)}
    assert s["percent_scale"].startswith(scale) and s["device"] == "neuron:nc2"


def test_split_tables_read_as_one(tmp_path: Path) -> None:
    sc = syn.Scenario(executions=1)
    whole = neurontrace.load(syn.write_explorer(sc, tmp_path / "whole"))
    split_dir = syn.write_explorer(sc, tmp_path / "split", split_rows=16)
    assert (split_dir / "Instruction_0.parquet").is_file() and not (split_dir / "Instruction.parquet").exists()
    split = neurontrace.load(split_dir)
    for name in ("system_events", "counters", "frames"):
        assert Trace(**{name: split.tables[name]}).equals(Trace(**{name: whole.tables[name]})), name
    # Derived wait rows follow each part, so ids and order differ: compare the rows themselves.
    cols = ("ts_ns", "dur_ns", "name", "category", "track", "bytes", "frame_id", "args")
    assert sorted(rows(split, "device_events", *cols), key=str) == sorted(rows(whole, "device_events", *cols), key=str)
    assert split.flows.num_rows == whole.flows.num_rows


def test_schema_12_column_set_loads_by_presence(tmp_path: Path) -> None:
    sc = syn.Scenario(executions=1)
    t7 = neurontrace.load(syn.write_explorer(sc, tmp_path / "v7"))
    t12 = neurontrace.load(syn.write_explorer(syn.Scenario(executions=1, schema="12.0.1"), tmp_path / "v12"))
    assert t12.meta("neuron.schema_major") == 12
    # no duration_ns column in the 12.x set: durations come from end_ts - start_ts
    assert rows(t12, "device_events", "ts_ns", "dur_ns", "name", "track") == \
        rows(t7, "device_events", "ts_ns", "dur_ns", "name", "track")
    first = json.loads(t12.device_events.filter(pa.compute.equal(t12.device_events["raw_category"],
                                                                 "Instruction"))["args"][0].as_py())
    assert first["synthetic_v12_field"] == "new in 12.x (assumed)"
    assert t12.meta("neuron.unknown_tables") == ["SyntheticNewTable"]
    assert t12.meta("neuron.table.SyntheticNewTable") == [{"note": "a table the reader does not know"}]


def test_unknown_major_schema_version_warns_and_loads(tmp_path: Path) -> None:
    d = explorer(tmp_path, Metadata=[{**META, "profile_schema_version": "13.1.0"}], Instruction=[instr(0, 0, 5)])
    with pytest.warns(SchemaVersionWarning, match=r"profile schema 13\.1\.0 is a major version .* knows 7\.x and 12\.x"):
        t = neurontrace.load(d)
    assert t.device_events.num_rows == 1 and t.accounting[0].warnings
    d2 = explorer(tmp_path / "b", Metadata=[{**META, "profile_schema_version": "TODO"}], Instruction=[instr(0, 0, 5)])
    with pytest.warns(SchemaVersionWarning, match="not a version number"):
        neurontrace.load(d2)


def test_missing_metadata_warns_that_schema_and_clock_are_unknown(tmp_path: Path) -> None:
    d = explorer(tmp_path, Instruction=[instr(0, 0, 5)])
    with pytest.warns(NeuronProfileWarning, match="no Metadata table: the schema version is unknown"):
        t = neurontrace.load(d)
    assert t.meta("clock") == "neuron_device_relative_ns" and t.meta("device_source").startswith("assumed")


def test_warning_table_rows_become_load_warnings(tmp_path: Path) -> None:
    msg = "Current NEFF is missing compiler metrics. Please re-compile using latest version"
    d = explorer(tmp_path, Metadata=[META], Warning=[{"message": msg, "category": "Missing Data"}])
    with pytest.warns(NeuronProfileWarning, match="neuron-explorer warned \\(Missing Data\\): Current NEFF"):
        t = neurontrace.load(d)
    assert t.accounting[0].warnings == [f"{d}: neuron-explorer warned (Missing Data): {msg}"]
    assert t.meta("neuron.warnings") == [{"message": msg, "category": "Missing Data"}]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_parquet_is_a_named_error_naming_the_file(tmp_path: Path, damage: str) -> None:
    d = explorer(tmp_path, Metadata=[META], Instruction=[instr(i, i * 10, 5) for i in range(50)])
    f = d / "Instruction.parquet"
    data = f.read_bytes()
    f.write_bytes(b"not parquet at all" if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(MalformedTraceError, match=r"Instruction\.parquet: not a readable Parquet file"):
        neurontrace.load(d)


def test_lean_and_full_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = explorer(tmp_path, Metadata=[META], Instruction=[instr(0, 0, 5, hlo_name="dot.1"), instr(1, 9, 5)])
    full = neurontrace.load(d)
    assert json.loads(full.device_events["args"][0].as_py())["operands"] == "op0"
    lean = neuron_explorer.parse(d, detail="lean")
    # Lean Instruction rows carry no args: they keep source order, the other columns stay in the file.
    assert lean.device_events["args"].to_pylist() == [None, None]
    assert lean.meta("neuron.args_detail")["tables"] == {"Instruction": "lean"}
    assert lean.meta("neuron.columns_read")["Instruction"] == [
        "start_ts", "end_ts", "duration_ns", "opcode", "engine", "hlo_name"]  # small files: no stats
    assert lean.device_events["frame_id"].to_pylist() == full.device_events["frame_id"].to_pylist()
    # "auto" switches to lean above the row limit
    monkeypatch.setattr(_neuron_events, "FULL_ARGS_MAX_ROWS", 1)
    assert neurontrace.load(d).meta("neuron.args_detail")["tables"] == {"Instruction": "lean"}
    with pytest.raises(ValueError, match="detail must be one of"):
        neuron_explorer.parse(d, detail="everything")


def test_lean_tables_keep_their_columns_in_the_source_files(tmp_path: Path) -> None:
    """Nothing is dropped by a lean load: source_columns reads the rest back, aligned with events."""
    rows = [instr(0, 0, 5, hlo_name="dot.1", evt_wait_time_ns=3), {**instr(1, 9, 5), "start_ts": None},
            instr(2, 20, 5, engine="vector")]
    d = explorer(tmp_path, Metadata=[META], Instruction=rows)
    full = neurontrace.load(d)
    lean = neuron_explorer.parse(d, detail="lean")
    back = neuron_explorer.source_columns(lean)
    assert back.column_names == ["event_id", *pq.read_schema(d / "Instruction.parquet").names]
    assert back["operands"].to_pylist() == ["op0", "op1", "op2"]
    ids = back["event_id"].to_pylist()
    assert ids[1] is None  # no start time: skipped at load, still shown
    # each kept row's columns are what a full load puts in args, on the same event
    by_id = dict(zip(full.device_events["event_id"].to_pylist(), full.device_events["args"].to_pylist(), strict=True))
    for event_id, operands, pc_ in zip(ids, back["operands"].to_pylist(), back["pc"].to_pylist(), strict=True):
        if event_id is not None:
            args = json.loads(by_id[event_id])
            assert (args["operands"], args["pc"]) == (operands, pc_)
    assert neuron_explorer.source_columns(lean, columns=["pc"]).column_names == ["event_id", "pc"]
    # the link survives the normalized Parquet round trip (it goes through metadata), not a moved profile
    again = Trace.from_parquet(lean.to_parquet(tmp_path / "normalized"))
    assert neuron_explorer.source_columns(again).equals(back)
    with pytest.raises(ValueError, match="not a device table"):
        neuron_explorer.source_columns(lean, "Nope")
    (d / "Instruction.parquet").rename(tmp_path / "moved.parquet")
    with pytest.raises(FileNotFoundError, match="moved or deleted"):
        neuron_explorer.source_columns(lean)


def test_synthetic_label_and_round_trip(tmp_path: Path) -> None:
    t = neurontrace.load(syn.write_explorer(syn.Scenario(), tmp_path / "p"))
    assert t.meta("synthetic") is True and t.meta("synthetic_note").startswith("SYNTHETIC")
    out = t.to_parquet(tmp_path / "normalized")
    assert Trace.from_parquet(out).equals(t)


def test_known_but_unmapped_tables_are_counted_as_skipped(tmp_path: Path) -> None:
    d = explorer(tmp_path, Metadata=[META], BirInstruction=[{"id": 1, "bir_name": "x"}],
                 TensorInfo=[{"variable_name": "input0", "type": "IN", "size": 64}])
    t = neurontrace.load(d)
    (acct,) = t.accounting
    assert acct.skipped == {"BirInstruction: IR hierarchy roll-up of Instruction rows (not loaded)": 1}
    assert t.meta("neuron.tensor_info") == [{"variable_name": "input0", "type": "IN", "size": 64}]


def test_json_args_escape_every_kind_of_value() -> None:
    t = pa.table({
        "s": ['plain', 'quote " and \\ slash', "tab\tnew\nline", None, "ünï"],
        "i": [1, None, -3, 4, 5],
        "f": [1.5, float("nan"), float("inf"), 0.1, None],
        "b": [True, False, None, True, False],
        "l": [["a"], None, ["b", "c"], [], ["x"]],
    })
    got = [json.loads(v) if v else None for v in _neuron_arrow.json_objects(t, t.column_names).to_pylist()]
    assert got == [
        {"s": "plain", "i": 1, "f": 1.5, "b": True, "l": ["a"]},
        {"s": 'quote " and \\ slash', "b": False},
        {"s": "tab\tnew\nline", "i": -3, "l": ["b", "c"]},
        {"i": 4, "f": 0.1, "b": True, "l": []},
        {"s": "ünï", "i": 5, "b": False, "l": ["x"]},
    ]
    assert _neuron_arrow.json_objects(pa.table({"x": pa.nulls(2, pa.int64())}), ["x"]).to_pylist() == [None, None]


def test_a_system_only_directory_loads_without_metadata(tmp_path: Path) -> None:
    tables = syn.explorer_tables(syn.Scenario(executions=1))
    d = explorer(tmp_path, SystemProfileEvents=tables["SystemProfileEvents"],
                 SystemProfileMetadata=tables["SystemProfileMetadata"], CpuUsage=tables["CpuUsage"])
    t = neurontrace.load(d)
    assert t.system_events.num_rows == 4 and t.counters.num_rows == 9
    assert pq.read_metadata(d / "CpuUsage.parquet").num_rows == 9


def test_an_explorer_data_path_loads_every_profile_in_it(tmp_path: Path) -> None:
    for nc in (0, 1):
        syn.write_explorer(syn.Scenario(nc_idx=nc, executions=1, system=False),
                           tmp_path / "data" / "profiles" / "global" / f"k{nc}@latest")
    t = neurontrace.load(tmp_path / "data")
    assert neurontrace.detect(tmp_path / "data").name == "neuron-explorer"
    assert {d for (d,) in rows(t, "device_events", "device")} == {"neuron:nc0", "neuron:nc1"}
    assert len(t.accounting) == 2


def test_split_parts_are_read_in_batches_of_row_groups(tmp_path: Path) -> None:
    from neurontrace.parsers._neuron_read import open_tables

    t = pa.table({"start_ts": list(range(100)), "engine": ["tensor", "vector"] * 50})
    d = tmp_path / "p"
    d.mkdir()
    syn.write_table(t, d, "Instruction", split_rows=60, row_group_size=16)
    (table,) = open_tables(d)[0].values()
    batches = list(table.batches(["start_ts", "engine"], dictionary=["engine"], batch_rows=20))
    assert [b.num_rows for b in batches] == [32, 28, 32, 8]
    assert pa.concat_tables(batches).to_pylist() == t.to_pylist()
    part = d / "Instruction_1.parquet"
    part.write_bytes(part.read_bytes()[:200])
    with pytest.raises(MalformedTraceError, match=r"Instruction_1\.parquet"):
        open_tables(d)


def _instructions_in_row_groups(tmp_path: Path) -> Path:
    """Row groups of 4 whose dictionaries list the same strings in different orders, a row without a
    start time, nulls among names, engines and source links, semaphore waits; DMA rows in row groups
    of 2 (bytes with a null, directions); a system profile first (its hardware rows come before the
    instructions in ``device_events``)."""
    system = syn.explorer_tables(syn.Scenario(executions=1))
    d = explorer(tmp_path, Metadata=[META], SystemProfileEvents=system["SystemProfileEvents"])
    t = pa.table({
        "start_ts": pa.array([0, 10, 20, 30, 40, None, 60, 70, 80, 90, 100, 110], pa.int64()),
        "duration_ns": [5] * 12,
        "engine": ["Tensor", "Pool", "Tensor", "Act", "Act", "Pool", "Tensor", "Pool", "Pool", "Tensor", "Act", None],
        "opcode": ["MATMUL", "IOTA", None, "ACTIVATE", "ACTIVATE", "IOTA", "MATMUL", "NOP", "NOP", "MATMUL", "IOTA",
                   "IOTA"],
        "id": list(range(12)),
        "hlo_name": ["dot.1", None, "dot.2", "dot.1", "dot.2", "dot.1", None, "dot.3", "dot.3", "dot.1", None, "dot.2"],
        "nki_source_location": ["k.py:3", None, None, "k.py:3", None, "k.py:5", "k.py:3", None, "k.py:4",
                                "k.py:3", "k.py:5", None],
        "evt_wait_time_ns": [0, 5, 0, 0, 7, 0, 0, 3, 0, 0, 0, 2],
    })
    syn.write_table(t, d, "Instruction", row_group_size=4, label=False)
    syn.write_table(pa.Table.from_pylist(
        [{"start_ts": 7 * i, "duration_ns": 3, "queue_name": f"q{i % 3}", "variable": f"v{i % 2}",
          "transfer_bytes": None if i == 3 else 64 * i, "source": "REMOTE" if i == 1 else "HBM", "dest": "SBUF",
          "id": i} for i in range(9)]), d, "DmaPacketAggregated", row_group_size=2, label=False)
    return d


def test_a_table_read_in_many_batches_loads_as_read_in_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _instructions_in_row_groups(tmp_path)
    whole = neurontrace.load(d)
    monkeypatch.setattr(_neuron_device, "BATCH_ROWS", 3)  # one row group at a time
    monkeypatch.setattr(_neuron_device, "FULL_ARGS_MAX_ROWS", 0)  # the big-table path (memory handed back)
    batched = neurontrace.load(d)
    for name in ("device_events", "system_events", "flows", "frames"):
        assert batched.tables[name].to_pylist() == whole.tables[name].to_pylist(), name
    assert batched.accounting == whole.accounting
    ins = [r for r in batched.device_events.to_pylist() if r["raw_category"] == "Instruction"]
    assert [(r["name"], r["track"]) for r in ins[:4]] == [
        ("MATMUL", "tensor"), ("IOTA", "gpsimd"), ("instruction", "tensor"), ("ACTIVATE", "scalar")]
    assert ins[-1]["track"] == "unknown engine" and len(ins) == 11
    assert [r["frame_id"] is None for r in ins[:3]] == [False, True, False]  # row 1 names no source
    waits = [r for r in batched.device_events.to_pylist() if r["category"] == "sync_wait" and r["phase"] == "derived"]
    assert [(r["ts_ns"] - ins[0]["ts_ns"], r["dur_ns"], json.loads(r["args"])) for r in waits] == [
        (5, 5, {"instruction_id": 1}), (33, 7, {"instruction_id": 4}), (67, 3, {"instruction_id": 7}),
        (108, 2, {"instruction_id": 11})]
    dma = [(r["bytes"], r["direction"], r["track"]) for r in batched.device_events.to_pylist()
           if r["raw_category"] == "DmaPacketAggregated"]
    assert dma[:4] == [(0, "d2d", "dma q0"), (64, "p2p", "dma q1"), (128, "d2d", "dma q2"), (None, "d2d", "dma q0")]
    (acct,) = batched.accounting
    assert acct.skipped["Instruction: no start timestamp"] == 1
    for col in ("name", "track", "category"):  # one dictionary per column: Trace's unify had nothing to move
        chunks = batched.device_events[col].chunks
        assert all(c.dictionary.equals(chunks[0].dictionary) for c in chunks)
    assert Trace.from_parquet(batched.to_parquet(tmp_path / "normalized")).equals(batched)


def test_column_sink_fills_columns_batch_by_batch() -> None:
    sink = _neuron_arrow.ColumnSink({c.name: c.type for c in DEVICE_EVENTS.columns}, 8, negative_null=("frame_id",))
    sink.append(3, {"ts_ns": pa.array([1, 2, 3], pa.int32()), "name": "x", "args": None,
                    "bytes": pa.array([1, None, 3])})
    sink.append(2, {"ts_ns": pa.chunked_array([[4], [5]]), "name": pa.array(["y", None]).dictionary_encode(),
                    "args": pa.array(['{"a":1}', None]), "frame_id": np.array([-1, 7])})
    view = sink.view("frame_id", 2)
    view[:] = [3, -1]
    sink.append(2, {"ts_ns": 6, "name": pa.array(["z", "x"]), "frame_id": view})
    with pytest.raises(ValueError, match="capacity"):
        sink.append(2, {"ts_ns": 7})
    cols = sink.columns()
    assert pa.array(cols["ts_ns"]).to_pylist() == [1, 2, 3, 4, 5, 6, 6]
    assert cols["name"].dictionary.to_pylist() == ["x", "y", "z"]
    assert cols["name"].to_pylist() == ["x", "x", "x", "y", None, "z", "x"]
    assert cols["args"].to_pylist() == [None, None, None, '{"a":1}', None, None, None]
    assert cols["bytes"].to_pylist() == [1, None, 3, None, None, None, None]
    assert cols["frame_id"].to_pylist() == [None, None, None, None, 7, 3, None]
    only_scalars = _neuron_arrow.ColumnSink({"name": DICT_STRING, "bytes": pa.int64()}, 4)
    only_scalars.append(2, {"name": "same"})
    only_scalars.append(2, {"name": "same", "bytes": 8})
    got = only_scalars.columns()
    assert got["name"] == "same"  # a constant stays a constant
    assert got["bytes"].to_pylist() == [None, None, 8, 8]  # a column first seen late: null before


def test_one_dictionary_keeps_the_largest_chunk_and_shares_repeated_blocks() -> None:
    small = pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int32()), pa.array(["b", "a"]))
    big = pa.DictionaryArray.from_arrays(pa.array([2, 0, 1, 0, 2] * 20000, pa.int32()), pa.array(["a", "c", "b"]))
    block = _neuron_arrow.constant("b", DICT_STRING, 3 * 65536 + 5)
    col = pa.chunked_array([small, big, *block.chunks], DICT_STRING)
    t = pa.table({"name": col, "n": pa.array(range(len(col)))})
    out = _neuron_arrow.one_dictionary(t)
    got = out["name"]
    assert got.to_pylist() == col.to_pylist()
    assert all(c.dictionary.to_pylist() == ["a", "c", "b"] for c in got.chunks)
    assert got.chunk(1).indices.buffers()[1].address == big.indices.buffers()[1].address  # not rewritten
    # the constant's repeated block is rewritten once and shared, not once per chunk
    assert len({c.indices.buffers()[1].address for c in got.chunks[2:5]}) == 1
    assert _neuron_arrow.one_dictionary(out) is out


def test_event_semaphore_instructions_are_waits_not_compute(tmp_path: Path) -> None:
    # EVENT_SEMAPHORE* opcodes wait on a semaphore/event (formats/neuron.md §12): sync_wait, charged by
    # analysis.engine_waits to what produced the signal, never counted as compute.
    d = explorer(tmp_path, Metadata=[META], Instruction=[
        instr(0, 100, 50, "Tensor", "MATMUL"),
        instr(1, 150, 40, "Vector", "EVENT_SEMAPHORE"),
        instr(2, 190, 5, "Vector", "EVENT_SEMAPHORE_WAIT"),
        instr(3, 195, 10, "Vector", "TENSOR_TENSOR"),
    ])
    t = neurontrace.load(d)
    assert rows(t, "device_events", "name", "category", "track") == [
        ("MATMUL", "compute", "tensor"), ("EVENT_SEMAPHORE", "sync_wait", "vector"),
        ("EVENT_SEMAPHORE_WAIT", "sync_wait", "vector"), ("TENSOR_TENSOR", "compute", "vector")]


def test_an_execution_in_both_profiles_is_counted_once(tmp_path: Path) -> None:
    # The shipped sample's 2 executions are each an ExecutionInfo row and an nc_exec_running row
    # (SYNTHETIC.md says 2); counting rows gave 4 executions, steps out of order and half the time per step.
    from neurontrace.analysis.diagnose import diagnose

    sc = syn.Scenario(executions=2, jitter_ns=80)
    t = neurontrace.load(syn.write_explorer(sc, tmp_path / "p"))
    assert rows(t, "device_events", "category").count(("execution",)) == 4  # the rows are all kept
    d = diagnose(t)
    assert d.devices[0].window_source == "2 device executions"
    steps = d.phases.steps
    assert [s["step"] for s in steps] == [0, 1] and all(s["dur_ns"] >= sc.exec_len_ns for s in steps)


def test_an_unknown_major_names_the_columns_it_could_not_map(tmp_path: Path) -> None:
    # A renamed column (a MAJOR bump renames or removes fields: the schema page's semver rules) is not guessed:
    # it loads into args and the warning names it, with SchemaFields read beside.
    renamed = {k: v for k, v in instr(0, 10, 5).items() if k != "opcode"} | {"op_code": "MATMUL", "new_col": 1}
    d = explorer(tmp_path, Metadata=[{**META, "profile_schema_version": "14.0.0"}], Instruction=[renamed],
                 SchemaFields=[{"table_name": "Instruction", "field_name": c} for c in renamed])
    with pytest.warns(SchemaVersionWarning, match=r"profile schema 14\.0\.0 .*could not map .*Instruction: "
                                                  r"operands, pc, bir_id, op_code, new_col"):
        t = neurontrace.load(d)
    assert rows(t, "device_events", "name", "dur_ns") == [("instruction", 5)]  # loaded what maps
    assert t.meta("neuron.unmapped_columns") == {"Instruction": ["operands", "pc", "bir_id", "op_code", "new_col"]}
    assert t.meta("neuron.schema_fields") == {"tables": 1, "fields": len(renamed)}
    args = json.loads(t.device_events["args"][0].as_py())
    assert args["op_code"] == "MATMUL" and args["new_col"] == 1


def test_known_majors_say_nothing_and_record_unmapped_columns(tmp_path: Path) -> None:
    t = neurontrace.load(explorer(tmp_path, Metadata=[META], Instruction=[instr(0, 0, 5)]))
    assert t.accounting[0].warnings == [] and t.meta("neuron.unmapped_columns") == {
        "Instruction": ["operands", "pc", "bir_id"]}
