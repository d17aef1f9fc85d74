"""Issue #30: the Neuron formats as real files from six more public projects showed them (neuron.md addendum 2).

No real Neuron file can be shipped (no licence): the Neuron files here are SYNTHETIC, written by
``neurontrace.testing.synthetic_neuron_observed`` in the shapes the addendum records; each test cites
the fact its rule rests on. The Kineto rules run on real files: a real torch.profiler run on this CPU
(made once, in a subprocess) and the real MTIA trace of the corpus (tests/test_corpus.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace import errors
from neurontrace.analysis.diagnose import diagnose
from neurontrace.cli import main
from neurontrace.load import detect
from neurontrace.parsers import _neuron_ntff
from neurontrace.schema import DEVICE_ACTIVITY
from neurontrace.testing import synthetic_neuron_observed as obs
from tests.micro import rows


def load_quietly(path: Path, **kw: Any) -> neurontrace.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", errors.TraceWarning)
        return neurontrace.load(path, **kw)


# -- item 1: legacy JSON recognised by content ---------------------------------------------------------


@pytest.mark.parametrize("first", obs.OBSERVED_ORDER_HEADS)
def test_device_json_is_recognised_whatever_its_section_order(tmp_path: Path, first: str) -> None:
    """Real device JSON files write their 21 sections in a different order every time; 3 of 4 began with a
    section the old first-key rule did not know (pending_dma, nc_mem_usage, warnings; addendum 2)."""
    p = obs.write_device_json(tmp_path / "synthetic_profile_full.json", first=first)
    assert next(iter(json.loads(p.read_text()))) == first
    assert detect(p).name == "neuron-json"
    t = load_quietly(p)
    assert t.meta("neuron_json.kind") == "device" and len(t.meta("neuron_json.sections")) == 22  # 21 + synthetic
    assert t.meta("neuron.neff_header")[0]["uuid"] == obs.UUID.hex()
    assert t.meta("neuron.profile_metadata")[0]["ticks_per_nanosec"] == 1000
    for kept in ("pending_dma", "nc_mem_usage", "dma_throughput", "instruction_usage", "summary_groups"):
        assert t.meta(f"neuron_json.{kept}") is not None, kept  # sections without a reader are kept
    # The addendum's unit fact, checked on the file itself: last_hw_timestamp (ns) = total_time (s).
    assert t.meta("neuron_json.time_unit_check")["ns"] is True
    assert t.accounting[0].skipped == {} and len(t.meta("neuron_json.active_time")) == 12  # kept as written


def test_a_head_cut_inside_a_large_generic_first_section_is_recognised_by_its_documented_name(tmp_path: Path) -> None:
    """The sniffer sees the first 64 KiB only: a file whose first section is a large ``warnings`` list shows no
    other key there. Under a documented output name (neuron.md §5.1; ``<stem>_profile_full.json``) it still loads."""
    doc = obs.device_json(first="warnings")
    doc["warnings"] = [{"message": f"synthetic warning {i}"} for i in range(5000)]
    for name, claimed in (("synthetic_profile_full.json", True), ("synthetic_other.json", False)):
        p = tmp_path / name
        p.write_text(json.dumps(doc))
        if claimed:
            assert detect(p).name == "neuron-json"
        else:  # an arbitrary name with only a generic key in view: not claimed (exit 4)
            with pytest.raises(errors.UnknownFormatError):
                detect(p)


def test_json_that_is_not_a_neuron_profile_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "config.json"
    other.write_text(json.dumps({"name": "x", "metadata": {"a": 1}}))
    with pytest.raises(errors.UnknownFormatError):
        detect(other)
    # Neuron section names without a section a profile must have: a named error, exit 4.
    partial = tmp_path / "synthetic_partial.json"
    partial.write_text(json.dumps({"pending_dma": [], "nc_mem_usage": []}))
    with pytest.raises(errors.UnknownFormatError, match="device: instruction or summary") as info:
        neurontrace.load(partial)
    assert info.value.exit_code == errors.EXIT_UNKNOWN_FORMAT


# -- item 2: semaphore waits, one rule for both paths, checked against active_time ----------------------


def test_semaphore_waits_are_waits_and_compute_matches_the_files_active_time(tmp_path: Path) -> None:
    """Two EVENT_SEMAPHORE instructions of 1.86 ms made a real profile "compute 100%" where its own
    active_time (engine-busy union, semaphore waits excluded: neuron.md §3.7 ActiveTime) said 4.8 us."""
    t = load_quietly(obs.write_device_json(tmp_path / "synthetic_device.json"))
    dev = rows(t, "device_events", "name", "category", "phase")
    assert dev.count(("EVENT_SEMAPHORE", "sync_wait", "X")) == 2
    assert dev.count(("semaphore wait", "sync_wait", "derived")) == 2  # evt_wait_time (JSON spelling, no _ns)
    assert t.meta("neuron.derived_rows") == {"sync_wait from instruction.evt_wait_time": 2}
    check = t.meta("neuron.active_time_check")
    assert check["file_active_ns"] == 12 * obs.COMPUTE_NS and check["within_5_percent"] is True
    (d,) = diagnose(t).devices
    assert abs(d.causes_ns["compute"] - check["file_active_ns"]) <= 0.05 * check["file_active_ns"]
    assert d.causes_ns["compute"] < 0.01 * sum(d.causes_ns.values())  # no longer "compute 100%"
    # summary_groups lists dma_transfer_count, which summary lacks (addendum 2): read as absent, not as 0.
    (core,) = diagnose(t).as_dict()["neuron_summary"]
    assert "dma_transfer_count" not in core["metrics"] and core["derived"]["dma"]["transfers"] is None


def test_the_active_time_check_fails_loudly_when_waits_are_read_as_compute(tmp_path: Path) -> None:
    """The check can fail: the same file with the semaphore opcodes renamed (so no rule knows them as
    waits) reads 1.86 ms of compute against 4.8 us of engine-active time, and says so with both figures."""
    doc = obs.device_json()
    for r in doc["instruction"]:
        r["opcode"] = r["opcode"].replace("EVENT_SEMAPHORE", "SYNTHETIC_WAIT")
    p = tmp_path / "synthetic_device.json"
    p.write_text(json.dumps(doc))
    with pytest.warns(errors.NeuronProfileWarning, match=r"cover 1864800 ns but the file's own active_time .* "
                                                         r"says 4800 ns"):
        t = neurontrace.load(p)
    assert t.meta("neuron.active_time_check")["within_5_percent"] is False
    assert any("active_time" in w for w in t.accounting[0].warnings)


def test_the_parquet_path_checks_activetime_with_the_same_rule(tmp_path: Path) -> None:
    """Parquet's ActiveTime ("excluding semaphore waits ... merging the intervals of all instructions on the
    engine", neuron.md §3.7) is checked against the Instruction rows read as compute, as the JSON path is."""
    from neurontrace.testing import synthetic_neuron as syn

    meta = {"profile_schema_version": "7.4.0", "neuroncore_idx": 0, "first_ts": "1970-01-01 00:00:00+00:00"}

    def instr(i: int, start: int, dur: int, engine: str, opcode: str) -> dict[str, Any]:
        return {"start_ts": start, "end_ts": start + dur, "duration_ns": dur, "engine": engine, "opcode": opcode,
                "operands": "x", "id": i, "pc": i, "bir_id": f"sg0000:{i}"}

    instructions = [instr(0, 100, 1_860_000, "tensor", "EVENT_SEMAPHORE"), instr(1, 1_860_100, 400, "tensor", "MATMUL"),
                    instr(2, 1_860_500, 400, "vector", "TENSOR_TENSOR")]
    active: list[dict[str, Any]] = [{"start_ts": 1_860_100, "end_ts": 1_860_500, "duration_ns": 400, "engine": "tensor", "pcore_idx": 0},
              {"start_ts": 1_860_500, "end_ts": 1_860_900, "duration_ns": 400, "engine": "vector", "pcore_idx": 0}]
    d = syn.write_tables(tmp_path / "ok", {"Metadata": [meta], "Instruction": instructions, "ActiveTime": active},
                         label=False)
    check = load_quietly(d).meta("neuron.active_time_check")
    assert (check["section"], check["file_active_ns"], check["compute_ns"], check["within_5_percent"]) == \
        ("ActiveTime", 800, 800, True)
    wrong = [{**a, "end_ts": a["start_ts"] + 100, "duration_ns": 100} for a in active]  # says 200 ns
    d2 = syn.write_tables(tmp_path / "bad", {"Metadata": [meta], "Instruction": instructions, "ActiveTime": wrong},
                          label=False)
    with pytest.warns(errors.NeuronProfileWarning, match="cover 800 ns but the file's own ActiveTime"):
        neurontrace.load(d2)


def test_two_subgraphs_are_attributed_per_subgraph(tmp_path: Path) -> None:
    """neuron-profile 2.28 with vnc_enabled writes ``subgraph`` on rows, two subgraphs (addendum 2)."""
    t = load_quietly(obs.write_device_json(tmp_path / "synthetic_device.json", subgraphs=("sg00", "sg01")))
    tracks = {r[0] for r in rows(t, "device_events", "track")}
    assert {"tensor (sg00)", "tensor (sg01)", "scalar (sg00)", "scalar (sg01)"} <= tracks
    assert t.meta("neuron.active_time_check")["within_5_percent"] is True


# -- item 3: throttling only on a non-zero throttle time ---------------------------------------------------


@pytest.mark.parametrize("throttle_ns", [0, 7_000])
def test_throttling_needs_a_non_zero_throttle_time(tmp_path: Path, throttle_ns: int) -> None:
    """A 2.32 trn3 summary-json with throttle_active_nc4_time_ns 0 and limit 1 got "throttled 47.6%"
    from a per-type share; throttle keys name physical cores (addendum 2)."""
    p = tmp_path / "synthetic_summary.json"
    p.write_text(json.dumps(obs.summary_json(throttle_ns=throttle_ns)))
    doc = diagnose(load_quietly(p)).as_dict()
    found = [f for f in doc["findings"] if f["id"] == "throttling"]
    (core,) = doc["neuron_summary"]
    assert core["throttling_by_physical_core"]["nc4"]["active_time_ns"] == throttle_ns
    assert core["metrics"]["ultraserver_size"] == 4 and core["metrics"]["weight_size_bytes"] == 1 << 20
    if throttle_ns:
        assert len(found) == 1 and "physical nc4: 7.00 µs (31.8% of total_time)" in found[0]["evidence"]
    else:
        assert found == []


# -- item 4: NTFF and NEFF ------------------------------------------------------------------------------------


def test_v6_and_inf2_headers(tmp_path: Path) -> None:
    """NTFF v6 exists (first byte 0x06); the inf2 v5 header differs from trn2's; field 1 may be a full path;
    field 2 starts with the NEFF UUID; field 17 is the instance id in v6 (addendum 2)."""
    v6 = tmp_path / "synthetic_a.ntff"
    v6.write_bytes(obs.ntff_bytes(version=6))
    h = _neuron_ntff.read_header(v6)
    assert (h.version, h.neff_uuid, h.instance_id) == (6, obs.UUID.hex(), obs.INSTANCE_ID)
    assert h.neff_name == obs.WORKDIR_NEFF and h.neff_file == obs.NEFF_NAME and h.synthetic
    inf2 = tmp_path / "synthetic_b.ntff"
    inf2.write_bytes(obs.ntff_bytes(version=5, inf2=True))
    h2 = _neuron_ntff.read_header(inf2)
    assert (h2.version, h2.instance_type, h2.neff_uuid, h2.note) == (5, "synthetic_inf2", obs.UUID.hex(), None)


def test_the_neff_is_paired_by_uuid_before_any_name(tmp_path: Path) -> None:
    """In every real pair the NTFF's field-2 prefix equals the NEFF header's bytes 204-219 (addendum 2)."""
    p = tmp_path / "profile.ntff"
    p.write_bytes(obs.ntff_bytes())
    (tmp_path / "a.neff").write_bytes(obs.neff_bytes(uuid=obs.OTHER_UUID))
    (tmp_path / "b.neff").write_bytes(obs.neff_bytes())
    assert _neuron_ntff.neff_uuid(tmp_path / "b.neff") == obs.UUID.hex()
    neff, rule = _neuron_ntff.find_neff(p, _neuron_ntff.read_header(p), None)
    assert neff.name == "b.neff" and rule.startswith("same UUID")


def test_a_neff_whose_uuid_differs_is_a_mismatch(tmp_path: Path) -> None:
    p = tmp_path / "synthetic_mlp.ntff"
    p.write_bytes(obs.ntff_bytes())
    (tmp_path / "synthetic_mlp.neff").write_bytes(obs.neff_bytes(uuid=obs.OTHER_UUID))  # same stem, other UUID
    with pytest.raises(errors.NeffMismatchError, match=f"UUID {obs.UUID.hex()} but .* has UUID {obs.OTHER_UUID.hex()}"):
        _neuron_ntff.find_neff(p, _neuron_ntff.read_header(p), None)


@pytest.mark.usefixtures("no_tool")
def test_an_ntff_without_its_neff_names_the_neff_and_how_to_pass_it(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """It exited 3 ("input path not found") although the path given exists."""
    p = tmp_path / "synthetic_mlp_exec_3.ntff"
    p.write_bytes(obs.ntff_bytes())
    assert main(["info", str(p)]) == errors.EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert f"it needs {obs.NEFF_NAME} (UUID {obs.UUID.hex()})" in err and "--neff" in err
    assert "also needs AWS's neuron-explorer" in err  # both missing pieces named at once
    assert main(["info", str(p), "--neff", str(tmp_path / "nowhere.neff")]) == errors.EXIT_NOT_FOUND


# -- item 5: the JSON report beside an NTFF -------------------------------------------------------------------


@pytest.mark.usefixtures("no_tool")
def test_the_json_report_beside_an_ntff_is_read_instead_of_asking_for_the_tool(tmp_path: Path) -> None:
    """Real capture folders: <instance>_pid_<pid>/<stem>_exec_N.ntff and json_reports/<stem>_exec_N_profile_full.json."""
    leaf = obs.write_capture(tmp_path, neff=False, pb=False)
    t = load_quietly(leaf / "synthetic_mlp_exec_1.ntff")
    assert t.meta("format") == "ntff" and "json_reports" in t.meta("ntff.decoded_by")["report"]
    assert t.device_events.num_rows > 0 and t.meta("neuron.active_time_check")["within_5_percent"]
    # A report of another NEFF (its neff_header.uuid differs) is not used.
    (leaf / "synthetic_mlp_exec_2.ntff").write_bytes(obs.ntff_bytes(uuid=obs.OTHER_UUID))
    with pytest.raises(errors.NeffNotFoundError):
        neurontrace.load(leaf / "synthetic_mlp_exec_2.ntff")


@pytest.mark.usefixtures("no_tool")
def test_a_capture_folder_reads_its_reports_and_describes_its_system_profile(tmp_path: Path) -> None:
    leaf = obs.write_capture(tmp_path)
    with pytest.warns(errors.NeuronProfileWarning, match="2 NTFFs were read from their JSON reports.*overlap"), \
            pytest.warns(errors.NeuronToolMissingWarning, match="the system profile was not decoded"):
        t = neurontrace.load(leaf)
    assert {r[0] for r in rows(t, "device_events", "device")} == {"neuron:nc0"}
    assert t.accounting[0].kept["NTFFs read from the JSON report beside them"] == 2
    described = {f["file"]: f for f in t.meta("neuron.system_pb")}
    assert described["trace_info.pb"]["instance_id"] == obs.INSTANCE_ID


# -- item 6: system profile .pb files ----------------------------------------------------------------------------


def test_system_pb_framing_and_trace_info(tmp_path: Path) -> None:
    """ntrace.pb / cpu_util.pb / host_mem.pb: protobuf messages each preceded by a u32 LE length, the file
    consumed exactly; trace_info.pb: one message with instance id, CPU model, paths, event types (addendum 2).
    Nothing is decoded beyond that, and the warning says which command decodes the rest."""
    d = obs.system_pb(tmp_path / "cap", absolute_paths=True)
    assert detect(d / "ntrace.pb").name == "neuron-system-pb"
    with pytest.warns(errors.NeuronToolMissingWarning, match=r"neuron-explorer view -d .*cap --output-format parquet"):
        t = neurontrace.load(d / "ntrace.pb")
    files = {f["file"]: f for f in t.meta("neuron.system_pb")}
    assert [(files[n]["messages"], files[n]["consumed_exactly"]) for n in ("ntrace.pb", "cpu_util.pb", "host_mem.pb")] \
        == [(6, True), (4, True), (3, True)]
    assert all(f["decoded"] is False and "neuron-explorer view -d" in f["not_decoded"] for n, f in files.items()
               if n != "trace_info.pb")
    info = files["trace_info.pb"]
    assert info["instance_id"] == obs.INSTANCE_ID and info["cpu_model"].startswith("Intel(R) Xeon(R)")
    assert info["files"] == ["/home/ubuntu/profile/ntrace.pb", "/home/ubuntu/profile/cpu_util.pb",
                             "/home/ubuntu/profile/host_mem.pb"]
    assert info["event_types"] == ["nrt_load", "nrt_execute", "nc_exec_running", "kbl_exec_post"]
    assert t.device_events.num_rows == t.system_events.num_rows == 0
    # A stream cut mid-message: the messages before the cut, and where it stops.
    raw = (d / "cpu_util.pb").read_bytes()
    (d / "cpu_util.pb").write_bytes(raw[:-3])
    cut = {f["file"]: f for f in load_quietly(d / "cpu_util.pb").meta("neuron.system_pb")}["cpu_util.pb"]
    assert (cut["messages"], cut["consumed_exactly"], cut["stops_at_byte"]) == (3, False, 3 * len(raw) // 4)


# -- item 7: a TorchNeuron Kineto trace with no device events -----------------------------------------------------

_TORCH_RUN = """
import sys, torch
from torch.profiler import ProfilerActivity, profile
x = torch.randn(256, 256)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
    y = x.to("meta")            # Tensor.to(device): aten::to.dtype_layout, 8 inputs, copies
    z = x.to(torch.float16)     # a cast: aten::to.dtype, 5 inputs
    w = x @ x
p.export_chrome_trace(sys.argv[1])
"""


@pytest.fixture(scope="session")
def real_to_device_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch.profiler trace made on this CPU, once per session, in a subprocess."""
    out = tmp_path_factory.mktemp("torch_run") / "to_device.pt.trace.json"
    subprocess.run([sys.executable, "-c", _TORCH_RUN, str(out)], check=True, timeout=300, capture_output=True)
    return out


def test_a_host_only_neuron_trace_says_so_and_its_device_copy_is_a_transfer(tmp_path: Path,
                                                                             real_to_device_trace: Path) -> None:
    """A real TorchNeuron eager trace had no device events and a top-level ERROR list ("gpuGetDeviceCount
    failed with code 35"); its 757 ms aten::to moving the input to the device is a transfer (addendum 2).
    The host events are real (torch 2.13 on this CPU, x.to("meta") standing in for the device); the ERROR
    list and one privateuse1_runtime event (neuron.md §8.2) are added, labelled synthetic."""
    doc = json.loads(real_to_device_trace.read_text())
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    first = min(e["ts"] for e in ops)
    doc["traceEvents"].append({"ph": "X", "cat": "privateuse1_runtime", "name": "neuron::dispatch", "pid": ops[0]["pid"],
                               "tid": ops[0]["tid"], "ts": first - 50, "dur": 1})
    doc["ERROR"] = ["ERROR:2026-12-01 10:00:00 1:1 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35"]
    doc["synthetic_note"] = "SYNTHETIC additions (ERROR list, one runtime event) to a real torch.profiler trace"
    p = tmp_path / "synthetic_neuron_eager.pt.trace.json"
    p.write_text(json.dumps(doc))
    t = load_quietly(p)
    assert t.meta("backend") == "privateuse1" and t.device_events.num_rows == 0
    said = " ".join(t.accounting[0].warnings)
    assert "gpuGetDeviceCount failed with code 35" in said
    # The parser records the fact (and files the move as a transfer); the one rule (analysis/device_activity.py)
    # makes the one warning.
    assert "no device activity" not in said
    assert t.meta(DEVICE_ACTIVITY.key) == {"recorded": False, "backend": "privateuse1", "transfers": 1, "shapes": True}
    tos = [r for r in t.system_events.to_pylist() if r["name"] == "aten::to"]
    assert sorted(r["category"] for r in tos) == ["framework_op", "transfer"]  # the cast stays CPU compute
    moved = next(r for r in tos if r["category"] == "transfer")
    inside = [r for r in t.system_events.to_pylist() if r["ts_ns"] >= moved["ts_ns"]
              and r["ts_ns"] + r["dur_ns"] <= moved["ts_ns"] + moved["dur_ns"] and r["category"] != "python"]
    assert {r["category"] for r in inside} == {"transfer"} and any(r["name"] == "aten::copy_" for r in inside)
    report = diagnose(t).as_dict()
    assert any("gpuGetDeviceCount" in w["message"] for w in report["warnings"])
    (unrecorded,) = [w["message"] for w in report["warnings"] if "no device activity" in w["message"]]
    assert "1 aten::to op(s) that move tensors to the device" in unrecorded and "NEURON_RT_INSPECT_ENABLE" in unrecorded
    (d,) = report["devices"]
    assert d["detail_ns"].get("host_overhead.transfer", 0) >= moved["dur_ns"] * 0.5


_WITH_COPIES = ("TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
                "HolisticTraceAnalysis/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")


def test_the_device_copy_rule_holds_on_real_gpu_traces(corpus: Path) -> None:
    """The rule's evidence, on the real CUDA/ROCm traces of the corpus that record runtime calls and shapes:
    every aten::to the rule picks (8 inputs, an aten::copy_ nested) holds a cudaMemcpy*/hipMemcpy* call, and
    no aten::to it leaves does."""
    import bisect
    import gzip

    from neurontrace.parsers._kineto_host_only import TO_DEVICE_INPUTS

    picked = copies = 0
    for rel in _WITH_COPIES:
        path = corpus / rel
        if not path.is_file():
            pytest.skip(f"{rel} is not in this copy of the corpus")
        ev = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
        by_tid: dict[Any, list[dict[str, Any]]] = {}
        for e in sorted(ev, key=lambda e: e["ts"]):
            by_tid.setdefault(e.get("tid"), []).append(e)
        starts = {tid: [e["ts"] for e in es] for tid, es in by_tid.items()}

        def inside(op: dict[str, Any], pred: Any, by_tid: dict[Any, list[dict[str, Any]]] = by_tid,
                   starts: dict[Any, list[Any]] = starts) -> bool:
            es, ts = by_tid[op.get("tid")], starts[op.get("tid")]
            lo, hi = bisect.bisect_left(ts, op["ts"]), bisect.bisect_right(ts, op["ts"] + op["dur"])
            return any(pred(e) and e["ts"] + e.get("dur", 0) <= op["ts"] + op["dur"] for e in es[lo:hi] if e is not op)

        for op in ev:
            types = op.get("args", {}).get("Input type")
            if op.get("name") != "aten::to" or not isinstance(types, list):
                continue
            rule = len(types) == TO_DEVICE_INPUTS and inside(op, lambda e: e.get("name") == "aten::copy_")
            memcpy = inside(op, lambda e: e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime")
                            and "emcpy" in str(e.get("name")))
            assert rule == memcpy, (rel, op["ts"], len(types))
            picked += rule
            copies += memcpy
    assert picked == copies == 15


# -- item 8: --traceback keeps the documented exit code --------------------------------------------------------------


def test_traceback_keeps_the_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.json"
    assert main(["--traceback", "info", str(missing)]) == errors.EXIT_NOT_FOUND
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "InputNotFoundError" in err and "error:" in err
    bad = tmp_path / "synthetic_partial.json"
    bad.write_text(json.dumps({"pending_dma": []}))
    assert main(["--traceback", "info", str(bad)]) == errors.EXIT_UNKNOWN_FORMAT
    assert "UnknownFormatError" in capsys.readouterr().err
