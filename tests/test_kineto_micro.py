"""Kineto parser on micro-traces: each category, generation, link kind and failure mode."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import neurontrace
from neurontrace.errors import MalformedTraceError, TruncatedTraceError, TruncatedTraceWarning
from neurontrace.parsers import _kineto_json
from tests.micro import load, rows, write, x

BASE = 1_790_857_026_000_000_000


def test_host_and_device_categories_are_normalized(tmp_path: Path) -> None:
    t = load(tmp_path, [
        x("cpu_op", "aten::mm", 10, 5, **{"External id": 7}),
        x("user_annotation", "ProfilerStep#3", 0, 100),
        x("user_annotation", "forward", 1, 50),
        x("cuda_runtime", "cudaLaunchKernel", 11, 2, correlation=99, **{"External id": 7}),
        x("cuda_driver", "cuLaunchKernel", 13, 1),
        x("python_function", "train.py(3): step", 0, 90),
        x("privateuse1_runtime", "nrt_execute", 20, 3),
        x("kernel", "volta_sgemm", 12, 4, pid=0, tid=7, device=0, stream=7, correlation=99,
          **{"External id": 7}),
        x("kernel", "ncclDevKernel_AllReduce_RING_LL", 20, 4, pid=0, tid=40, device=0, stream=40),
        x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 30, 2, pid=0, tid=7, device=0, bytes=4096),
        x("gpu_memset", "Memset (Device)", 33, 1, pid=0, tid=7, device=0, bytes=64),
        x("gpu_user_annotation", "forward", 11, 40, pid=0, tid=7, device=0),
        x("cuda_sync", "Stream Sync", 40, 3, pid=0, tid=7, device=0),
    ])
    host = dict(rows(t, "system_events", "name", "category"))
    assert host == {
        "aten::mm": "framework_op", "ProfilerStep#3": "step", "forward": "annotation",
        "cudaLaunchKernel": "runtime", "cuLaunchKernel": "driver", "train.py(3): step": "python",
        "nrt_execute": "runtime",
    }
    # A PrivateUse1 runtime with nothing naming Neuron: the backend is reported as it is.
    assert t.meta("backend") == "privateuse1"
    dev = rows(t, "device_events", "name", "category", "device", "bytes", "direction")
    assert dev == [
        ("volta_sgemm", "compute", "privateuse1:0", None, None),
        ("ncclDevKernel_AllReduce_RING_LL", "collective", "privateuse1:0", None, None),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy", "privateuse1:0", 4096, "h2d"),
        ("Memset (Device)", "memset", "privateuse1:0", 64, None),
        ("forward", "annotation", "privateuse1:0", None, None),
        ("Stream Sync", "sync_wait", "privateuse1:0", None, None),
    ]


def test_cuda_backend_device_names_and_tracks(tmp_path: Path) -> None:
    t = load(tmp_path, [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        x("kernel", "k", 12, 4, pid=0, tid=7, device=0, stream=7),
        x("kernel", "k2", 12, 4, pid=1, tid=13),
        x("cpu_op", "aten::add", 10, 5, pid=100, tid=101),
    ])
    assert t.meta("backend") == "cuda"
    assert rows(t, "device_events", "device", "track") == [("cuda:0", "stream 7"), ("cuda:1", "stream 13")]
    assert rows(t, "system_events", "track") == [("thread 101",)]


def test_rocm_detected_from_versions_and_kind_gives_direction(tmp_path: Path) -> None:
    t = load(tmp_path, [x("gpu_memcpy", "hipMemcpyAsync", 1, 1, pid=2, tid=0, kind="DtoH", bytes=8)],
             roctracer_version=4)
    assert rows(t, "device_events", "device", "direction") == [("rocm:2", "d2h")]


def test_exact_ns_from_relative_float_us(tmp_path: Path) -> None:
    # 5.1e12 µs is past 2**42: a naive float*1000 is off by a nanosecond here.
    t = load(tmp_path, [x("cpu_op", "a", 5128486880152.290, 1256.868)], baseTimeNanoseconds=BASE)
    assert rows(t, "system_events", "ts_ns", "dur_ns") == [(BASE + 5_128_486_880_152_290, 1_256_868)]
    assert t.meta("clock") == "unix_epoch_ns"


def test_exact_ns_from_absolute_float_us_with_ns_fraction(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,'
                    ' "ts": 1712185898123456.789, "dur": 0.001}], "displayTimeUnit": "ns"}')
    t = neurontrace.load(path)
    assert rows(t, "device_events", "ts_ns", "dur_ns") == [(1_712_185_898_123_456_789, 1)]


def test_integer_epoch_us_and_negative_duration_clamped(tmp_path: Path) -> None:
    t = load(tmp_path, [x("Operator", "aten::mm", 1623142623460121, -3)])
    assert rows(t, "system_events", "ts_ns", "dur_ns") == [(1623142623460121000, 0)]


def test_legacy_generation(tmp_path: Path) -> None:
    t = load(tmp_path, [
        x("Operator", "ProfilerStep#1", 100, 50),
        x("Runtime", "cudaLaunchKernel", 110, 5, correlation=5, **{"external id": 3}),
        x("Kernel", "sgemm", 120, 9, pid=0, tid="stream 7", correlation=5, **{"external id": 3}),
        {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 110, "cat": "async", "name": "launch"},
        {"ph": "f", "id": 5, "pid": 0, "tid": "stream 7", "ts": 120, "cat": "async", "name": "launch", "bp": "e"},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 105,
         "args": {"Device Type": 0, "Device Id": -1, "Bytes": 4}},
    ])
    assert rows(t, "system_events", "name", "category") == [("ProfilerStep#1", "step"), ("cudaLaunchKernel", "runtime")]
    assert rows(t, "device_events", "track", "external_id") == [("stream 7", 3)]
    assert rows(t, "flows", "kind", "raw_category", "src_event_id", "dst_event_id") == [("launch", "async", 1, 2)]
    assert rows(t, "counters", "name", "field", "value", "device") == [("[memory]", "Bytes", 4.0, "cpu")]


@pytest.mark.parametrize("cat", ["ac2g", "async_cpu_to_gpu"])
def test_launch_flows_bind_runtime_to_kernel(tmp_path: Path, cat: str) -> None:
    t = load(tmp_path, [
        x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=42),
        {"ph": "s", "id": 42, "pid": 1, "tid": 1, "ts": 10, "cat": cat, "name": cat},
        x("kernel", "k", 20, 4, pid=0, tid=7, correlation=42),
        {"ph": "f", "id": 42, "pid": 0, "tid": 7, "ts": 20, "cat": cat, "name": cat, "bp": "e"},
    ])
    assert rows(t, "flows", "flow_id", "kind", "src_event_id", "dst_event_id") == [("42", "launch", 0, 2)]


def test_launch_flow_falls_back_to_correlation(tmp_path: Path) -> None:
    t = load(tmp_path, [
        x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=42),
        x("kernel", "k", 20, 4, pid=0, tid=7, correlation=42),
        # Markers at times that match no event (a post-processed trace).
        {"ph": "s", "id": 42, "pid": 9, "tid": 9, "ts": 11, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 42, "pid": 9, "tid": 9, "ts": 21, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    ])
    assert rows(t, "flows", "src_event_id", "dst_event_id") == [(0, 1)]


def test_unpaired_flow_markers_are_kept(tmp_path: Path) -> None:
    t = load(tmp_path, [{"ph": "f", "id": 3, "pid": 0, "tid": 7, "ts": 20, "cat": "ac2g", "name": "ac2g"}])
    assert rows(t, "flows", "src_event_id", "dst_ts_ns") == [(None, 20_000)]
    assert t.accounting[0].kept == {"flows": 1}


def test_fwdbwd_flows_pair_nth_start_with_nth_finish(tmp_path: Path) -> None:
    t = load(tmp_path, [
        x("cpu_op", "aten::t", 10, 1),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 10, "cat": "fwdbwd", "name": "fwdbwd"},
        x("cpu_op", "TBackward0", 50, 1),
        {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 50, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},
        x("cpu_op", "aten::t", 60, 1),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 60, "cat": "fwdbwd", "name": "fwdbwd"},
        x("cpu_op", "TBackward0", 90, 1),
        {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 90, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},
    ])
    assert sorted(rows(t, "flows", "kind", "src_event_id", "dst_event_id")) == [("fwdbwd", 0, 2), ("fwdbwd", 4, 6)]


def test_python_stacks_link_ops_to_innermost_user_frame(tmp_path: Path) -> None:
    t = load(tmp_path, [
        x("python_function", "train.py(10): <module>", 0, 100, **{"Python id": 1, "Python parent id": 0}),
        x("python_function", "train.py(3): step", 5, 80, **{"Python id": 2, "Python parent id": 1}),
        x("python_function", "torch/nn/modules/module.py(1751): _call_impl", 10, 30,
          **{"Python id": 3, "Python parent id": 2}),
        x("cpu_op", "aten::mm", 12, 5, **{"External id": 9}),   # inside torch code called from step
        x("cpu_op", "aten::add", 50, 5),                         # directly in step
        x("cpu_op", "aten::zeros", 90, 5),                       # after step returned: in <module>
        x("python_function", "train.py(3): step", 110, 10, **{"Python id": 4, "Python parent id": 0}),
        x("kernel", "k", 20, 1, pid=0, tid=7, **{"External id": 9}),
    ])
    frames = {r[0]: r[1:] for r in rows(t, "frames", "frame_id", "parent_id", "file", "line", "function", "is_user")}
    op_frames = dict(rows(t, "system_events", "name", "frame_id"))
    step = op_frames["aten::add"]
    assert frames[step][1:] == ("train.py", 3, "step", True)
    assert op_frames["aten::mm"] == step  # torch frames skipped: the user line responsible
    assert frames[op_frames["aten::zeros"]][3] == "<module>"
    assert rows(t, "device_events", "frame_id") == [(step,)]  # kernel inherits its op's frame
    # The two calls of step() from different callers are distinct stack nodes.
    assert sorted(f[3] for f in frames.values()).count("step") == 2


def test_memory_and_counter_events(tmp_path: Path) -> None:
    t = load(tmp_path, [
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2048,
                  "Addr": 1}},
        {"ph": "C", "name": "GPU Utilization", "pid": 0, "ts": 6, "args": {"util": 0.5, "label": "x"}},
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 7,
         "args": {"Device Type": 1, "Bytes": 256, "Ev Idx": 3, "Device Id": 0, "Addr": 9}},  # torch 2.x: Ev Idx
    ])
    got = rows(t, "counters", "name", "field", "value", "device")
    assert got == [
        ("[memory]", "Bytes", 512.0, "cuda:0"), ("[memory]", "Bytes", 256.0, "cuda:0"),
        ("[memory]", "Total Allocated", 1024.0, "cuda:0"),
        ("[memory]", "Total Reserved", 2048.0, "cuda:0"), ("GPU Utilization", "util", 0.5, None),
    ]
    # The args a column holds are not copied again (Addr is memory_events.addr); the rest survives: a key
    # without a column keeps its text.
    assert t.counters["args"][0].as_py() is None and t.memory_events["addr"][0].as_py() == 1
    assert json.loads(t.counters["args"][1].as_py()) == {"Ev Idx": 3}
    assert t.accounting[0].kept == {"counters": 3}


def test_unknown_category_and_phase_are_kept_with_raw_values(tmp_path: Path) -> None:
    t = load(tmp_path, [
        x("brand_new_cat", "mystery", 1, 2, foo="bar"),
        {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 9},
    ])
    got = rows(t, "system_events", "name", "category", "raw_category", "phase", "args")
    assert got[0][:4] == ("mystery", "other", "brand_new_cat", "X") and json.loads(got[0][4]) == {"foo": "bar"}
    assert got[1][:4] == ("begin", "other", None, "B")
    assert got[2][:4] == ("Record Window End", "annotation", None, "i")


def test_events_without_timestamp_are_counted_as_skipped(tmp_path: Path) -> None:
    t = load(tmp_path, [x("cpu_op", "ok", 1, 1), {"ph": "X", "name": "no ts", "pid": 1, "tid": 1}])
    acct = t.accounting[0]
    assert (acct.events_read, acct.kept, acct.skipped) == (2, {"system_events": 1}, {"no timestamp": 1})


def test_string_pids_and_metadata_events(tmp_path: Path) -> None:
    t = load(tmp_path, [
        {"ph": "M", "name": "process_name", "pid": "Spans", "tid": 0, "args": {"name": "spans"}},
        x("Trace", "PyTorch Profiler (0)", 0, 10, pid="Spans", tid="PyTorch Profiler"),
    ])
    assert rows(t, "system_events", "pid", "category") == [("Spans", "annotation")]
    assert t.meta("kineto.names") == {"Spans": "spans"}
    assert t.accounting[0].kept == {"metadata": 1, "system_events": 1}


def test_rank_from_distributed_info_then_file_name_then_unknown(tmp_path: Path) -> None:
    ev = [x("cpu_op", "a", 1, 1)]
    t = load(tmp_path, ev, distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8})
    assert (rows(t, "system_events", "rank"), t.meta("rank_source")) == ([(3,)], "distributedInfo")
    t = neurontrace.load(write(tmp_path, ev, name="rank-5.Jul_1.pt.trace.json"))
    assert (rows(t, "system_events", "rank"), t.meta("rank_source")) == ([(5,)], "file name")
    t = neurontrace.load(write(tmp_path, ev, name="worker.json", distributedInfo={"backend": "nccl"}))
    assert (rows(t, "system_events", "rank"), t.meta("rank_source")) == ([(None,)], "unknown")


def test_big_integers_survive_in_args(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 0,'
                    ' "tid": 1, "ts": 200, "dur": 100, "args": {"Comms Id": 10159970886766084423123,'
                    ' "correlation": 99999999999999999999}}]}')
    t = neurontrace.load(path)
    assert "10159970886766084423123" in t.system_events["args"][0].as_py()
    assert rows(t, "system_events", "correlation") == [(None,)]  # out of int64: kept only in args


def test_gzip_minified_and_array_forms(tmp_path: Path) -> None:
    ev = [x("cpu_op", "a", 1, 1), x("cpu_op", "b", 2, 1)]
    for name, indent in (("t.json.gz", 1), ("min.json", None)):
        t = neurontrace.load(write(tmp_path, ev, name=name, indent=indent))
        assert rows(t, "system_events", "name") == [("a",), ("b",)]
    arr = tmp_path / "arr.json"
    arr.write_text(json.dumps(ev))
    assert rows(neurontrace.load(arr), "system_events", "name") == [("a",), ("b",)]


def test_many_chunks_decode_like_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ev = [x("cpu_op", f"op{i}", i, 1, **{"External id": i}) for i in range(500)]
    path = write(tmp_path, ev, indent=2)
    whole = neurontrace.load(path)
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 1000)
    chunked = neurontrace.load(path)
    assert chunked.equals(whole)
    assert chunked.system_events["event_id"].to_pylist() == list(range(500))


def test_truncated_file_keeps_complete_events_and_warns(tmp_path: Path) -> None:
    ev = [x("cpu_op", f"op{i}", i, 1, **{"External id": i}) for i in range(50)]
    full = write(tmp_path, ev).read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(full[: full.index(b'"op40"') + 3])  # inside event 40
    with pytest.warns(TruncatedTraceWarning, match=r"cut off at byte \d+; kept the 40 complete events"):
        t = neurontrace.load(cut)
    acct = t.accounting[0]
    assert (acct.events_read, acct.kept, acct.skipped) == (41, {"system_events": 40}, {"cut in half by truncation": 1})


def test_truncated_gzip_is_salvaged(tmp_path: Path) -> None:
    ev = [x("cpu_op", f"op{i}", i, 1, **{"External id": i, "Input Dims": [[i] * 40]}) for i in range(2000)]
    data = write(tmp_path, ev, name="t.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.warns(TruncatedTraceWarning):
        t = neurontrace.load(cut)
    assert 0 < t.system_events.num_rows < 2000
    assert t.system_events["name"].to_pylist() == [f"op{i}" for i in range(t.system_events.num_rows)]


def test_truncated_before_any_event_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [ {"ph": "X", "na')
    with pytest.raises(TruncatedTraceError, match="before its first complete event"):
        neurontrace.load(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"traceEvents": {"a": 1}}', "'traceEvents' is not a list"),
        ('{"traceEvents": [{"ph": "X", "ts": [1]}]}', "unexpected field type"),
        ('{"traceEvents": [{"ph": "X"}, 2}', "not valid JSON.*corrupt"),
        ('{"traceEvents": [1, 2]}', "unexpected field type"),
    ],
)
def test_malformed_inputs_raise_named_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(MalformedTraceError, match=message):
        neurontrace.load(path, format="kineto")


def test_corrupt_gzip_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}')[:10] + b"garbage" * 10)
    with pytest.raises(MalformedTraceError, match="corrupt gzip"):
        neurontrace.load(path, format="kineto")


def test_legacy_call_stack_args_become_frames(tmp_path: Path) -> None:
    lib = "/env/lib/python3.7/site-packages/torch/nn/modules/module.py(889): _call_impl"
    t = load(tmp_path, [
        x("Operator", "aten::conv2d", 10, 5, **{"Call stack": f"{lib};train.py(44): <module>"}),
        x("Operator", "aten::relu", 20, 5, **{"Call stack": f"{lib};model.py(12): forward;train.py(44): <module>"}),
        x("Operator", "aten::add", 30, 5, **{"Call stack": lib}),
    ])
    frames = {r[0]: r[1:] for r in rows(t, "frames", "frame_id", "parent_id", "file", "line", "function", "kind")}
    charged = {name: frames[f][1:4] for name, f in rows(t, "system_events", "name", "frame_id")}
    assert charged == {
        "aten::conv2d": ("train.py", 44, "<module>"),     # innermost user frame, at its call-site line
        "aten::relu": ("model.py", 12, "forward"),
        "aten::add": (lib.split("(", maxsplit=1)[0], 889, "_call_impl"),  # no user code: the innermost frame
    }
    assert {f[-1] for f in frames.values()} == {"call_stack"}
    # <module> is shared by the first two stacks; module.py appears under three different callers.
    assert [f[1] for f in frames.values()].count("train.py") == 1 and len(frames) == 5


def test_library_frames_are_not_user_code() -> None:
    from neurontrace.parsers._stacks import is_user_file

    # torch's tracer shortens paths relative to sys.path: the first component names the package.
    for lib in ("distributed/utils.py", "dask/array/core.py", "torch/nn/modules/module.py", "threading.py",
                "/usr/lib/python3.11/threading.py", "/venv/lib/python3.11/site-packages/x/y.py", "<string>"):
        assert not is_user_file(lib), lib
    for user in ("train.py", "models/attention.py", "/home/me/proj/train.py"):
        assert is_user_file(user), user
