"""Attribution on hand-built timelines whose exact answer is known (times in µs in, ns out).

Every test checks the conservation law (DeviceAttribution.check runs inside attribute()) and pins
the numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neurontrace.analysis.attribution import attribute
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.fallback import find_fallback, ops_from_log
from neurontrace.analysis.intervals import sweep, union
from neurontrace.analysis.phases import phases
from neurontrace.causes import CAUSES
from tests.micro import load, x

US = 1000


def step(ts: float, dur: float, n: int = 1) -> dict[str, Any]:
    return x("user_annotation", f"ProfilerStep#{n}", ts, dur)


def kernel(name: str, ts: float, dur: float, **args: object) -> dict[str, Any]:
    return x("kernel", name, ts, dur, pid=0, tid=7, device=0, **args)


def copy(direction: str, ts: float, dur: float) -> dict[str, Any]:
    return x("gpu_memcpy", f"Memcpy {direction} (Pageable -> Device)", ts, dur, pid=0, tid=7, device=0, bytes=64)


def causes(tmp_path: Path, events: list[dict[str, Any]], **kw: object) -> tuple[dict[str, Any], dict[str, Any]]:
    (dev,) = attribute(load(tmp_path, events), **kw)  # type: ignore[arg-type]
    return {k: v // US for k, v in dev.causes_ns.items()}, {k: v // US for k, v in dev.detail_ns.items()}


def test_priority_rules_on_a_known_timeline(tmp_path: Path) -> None:
    #   0    5  8 10        20        30        40        50   55   60   65                  100
    #   launch dispatch
    #              [kernel==========]                     [nccl======]
    #                        [h2d copy==========]               [h2d=====]
    got, detail = causes(tmp_path, [
        step(0, 100),
        x("cpu_op", "aten::mm", 0, 8),
        x("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
        kernel("volta_sgemm_128x64", 10, 20, correlation=1),
        copy("HtoD", 20, 20),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 10),
        copy("HtoD", 55, 10),
    ])
    assert got == {"compute": 20, "collectives": 10, "data_movement": 15, "host_fallback": 0,
                   "host_overhead": 8, "idle": 47}
    assert detail == {"compute.gemm": 20, "collectives.all_reduce": 10, "data_movement.h2d": 15,
                      "host_overhead.launch": 5, "host_overhead.dispatch": 3, "idle.unexplained": 47}


def test_annotations_are_not_work_but_data_loading_is(tmp_path: Path) -> None:
    got, detail = causes(tmp_path, [
        step(0, 100),
        x("user_annotation", "forward", 0, 50),
        x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 60, 20),
        kernel("k", 90, 10),
    ])
    assert got["idle"] == 70 and got["compute"] == 10
    assert detail["host_overhead.input_pipeline"] == 20


def test_python_frames_are_host_work_and_compile_frames_are_compile(tmp_path: Path) -> None:
    got, detail = causes(tmp_path, [
        step(0, 100),
        x("python_function", "train.py(3): step", 0, 60, **{"Python id": 1, "Python parent id": 0}),
        x("python_function", "torch/_dynamo/convert_frame.py(100): _compile", 10, 30,
          **{"Python id": 2, "Python parent id": 1}),
        x("cuda_runtime", "cudaStreamSynchronize", 45, 10),
        kernel("k", 80, 20),
    ])
    assert detail == {"compute.other": 20, "host_overhead.compile": 30, "host_overhead.sync": 10,
                      "host_overhead.python": 20, "idle.unexplained": 20}
    assert got["host_overhead"] == 60


def test_explicit_fallback_beats_other_host_work(tmp_path: Path) -> None:
    trace = load(tmp_path, [
        step(0, 100),
        x("cpu_op", "aten::nonzero", 40, 30, **{"External id": 5}),
        x("cpu_op", "aten::index", 45, 5, **{"External id": 6}),   # a child: part of the fallback time
        x("cpu_op", "aten::add", 75, 5),
        kernel("k", 0, 40),
    ])
    (op,) = find_fallback(trace, ["nonzero"])
    assert (op.name, op.calls, op.host_ns, op.device_idle_ns, op.found_by) == ("aten::nonzero", 1, 30 * US,
                                                                               30 * US, "explicit")
    (dev,) = attribute(trace, fallback_event_ids=np.array(op.event_ids))
    assert dev.causes_ns["host_fallback"] == 30 * US
    assert dev.causes_ns["host_overhead"] == 5 * US


def test_fallback_signature_d2h_cpu_op_h2d(tmp_path: Path) -> None:
    trace = load(tmp_path, [
        step(0, 100),
        kernel("k", 0, 10, **{"External id": 1}),
        copy("DtoH", 10, 2),
        x("cpu_op", "aten::item", 12, 1),                      # the copy's own host side: never a suspect
        x("cpu_op", "aten::unique", 15, 10, **{"External id": 7}),
        x("cpu_op", "aten::sort", 16, 4, **{"External id": 8}),  # nested: owned by aten::unique
        copy("HtoD", 30, 2),
        x("cpu_op", "aten::mul", 40, 5, **{"External id": 9}),   # after the round trip: not a suspect
        kernel("k2", 50, 10, **{"External id": 9}),
    ])
    (op,) = find_fallback(trace)
    assert (op.name, op.calls, op.host_ns, op.device_idle_ns, op.found_by) == ("aten::unique", 1, 10 * US,
                                                                               10 * US, "signature")


def test_fallback_log_lines() -> None:
    log = Path(__file__).parent / "data" / "torchneuron_fallback.log"
    assert ops_from_log(log) == ["aten::nonzero", "aten::unique"]


def test_window_override_and_default_without_steps(tmp_path: Path) -> None:
    events = [kernel("k", 10, 10), kernel("k", 50, 10)]
    (dev,) = attribute(load(tmp_path, events))
    assert (dev.window, dev.window_source) == ((10 * US, 60 * US), "first to last activity")
    assert dev.causes_ns["compute"] == 20 * US and dev.causes_ns["idle"] == 30 * US
    (dev,) = attribute(load(tmp_path, events), window=(0, 100 * US))
    assert dev.causes_ns == dict(dict.fromkeys(CAUSES, 0), compute=20 * US, idle=80 * US)


def test_top_stalls_name_their_events_and_source(tmp_path: Path) -> None:
    (dev,) = attribute(load(tmp_path, [
        step(0, 100),
        x("python_function", "train.py(3): step", 0, 100, **{"Python id": 1, "Python parent id": 0}),
        x("cpu_op", "aten::nonzero", 20, 30, **{"External id": 3}),
        kernel("k", 0, 20),
        kernel("k", 50, 50),
    ]))
    top = dev.top_stalls[0]
    assert (top.cause, top.detail, top.start_ns, top.dur_ns) == ("host_overhead", "dispatch", 20 * US, 30 * US)
    assert top.evidence[0].startswith("aten::nonzero") and top.source == "train.py:3 step"


def test_cpu_only_trace_treats_ops_as_compute(tmp_path: Path) -> None:
    (dev,) = attribute(load(tmp_path, [
        step(0, 100),
        x("python_function", "train.py(3): step", 0, 100, **{"Python id": 1, "Python parent id": 0}),
        x("cpu_op", "aten::mm", 10, 30),
        x("cpu_op", "aten::add", 20, 5),
    ]))
    assert dev.device == "cpu"
    assert (dev.causes_ns["compute"], dev.causes_ns["host_overhead"]) == (30 * US, 70 * US)


def test_sweep_and_union_agree_with_brute_force() -> None:
    rng = np.random.default_rng(0)
    labelled = []
    for _ in range(4):
        s = rng.integers(0, 1000, 50)
        labelled.append((s, s + rng.integers(1, 80, 50)))
    result = sweep((100, 900), labelled)
    owner = np.full(800, -1)
    for k in reversed(range(4)):  # brute force: paint lower priority first, higher on top
        for s, e in zip(*labelled[k], strict=True):
            owner[max(s, 100) - 100:max(min(e, 900) - 100, 0)] = k
    per = result.time_per_label(4)
    assert list(per) == [int((owner == k).sum()) for k in range(4)] + [int((owner == -1).sum())]
    us, ue = union(*labelled[0])
    painted = np.zeros(1100, bool)
    for s, e in zip(*labelled[0], strict=True):
        painted[s:e] = True
    assert int((ue - us).sum()) == int(painted.sum())


def test_phases_steps_and_compile(tmp_path: Path) -> None:
    p = phases(load(tmp_path, [
        step(0, 80, 1), step(80, 10, 2), step(90, 12, 3), step(102, 10, 4),
        x("python_function", "torch/_dynamo/convert_frame.py(1012): _compile", 1, 60),
        # Running already-compiled code is not compiling (nor is asking whether one is compiling).
        x("cpu_op", "Torch-Compiled Region: 0/0", 70, 5),
        x("python_function", "transformers/utils/import_utils.py(707): is_torchdynamo_compiling", 76, 2),
        x("overhead", "Runtime Triggered Module Loading", 62, 5),
    ]))
    assert [s["step"] for s in p.steps] == [1, 2, 3, 4]
    assert (p.first_step_ns, p.steady_median_ns, p.compile_ns, p.load_ns) == (80 * US, 10 * US, 60 * US, 5 * US)
    assert p.time_to_first_step_ns == 80 * US


def test_diagnose_json_document(tmp_path: Path) -> None:
    trace = load(tmp_path, [
        step(0, 100),
        kernel("k", 0, 10),
        x("cpu_op", "aten::nonzero", 20, 60),
    ])
    doc = diagnose(trace, fallback_ops=["aten::nonzero"]).as_dict()
    assert doc["schema"] == "neurontrace.diagnose/1"
    (d,) = doc["devices"]
    assert set(d["causes_ns"]) == set(CAUSES)
    assert sum(d["causes_ns"].values()) == d["window"]["end_ns"] - d["window"]["start_ns"]
    assert all(isinstance(v, int) for v in d["causes_ns"].values())
    assert {"cause", "start_ns", "dur_ns", "evidence", "source"} <= set(d["top_stalls"][0])
    assert doc["fallback_ops"][0]["name"] == "aten::nonzero" and doc["fallback_ops"][0]["found_by"] == "explicit"
    assert {f["id"] for f in doc["findings"]} >= {"host_fallback"}
    assert {"id", "severity", "title", "evidence", "advice"} <= set(doc["findings"][0])


@pytest.mark.parametrize(("fallback_us", "severity"), [(0.5, None), (5, "warning"), (60, "error")])
def test_fallback_finding_thresholds(tmp_path: Path, fallback_us: float, severity: str | None) -> None:
    trace = load(tmp_path, [step(0, 100), kernel("k", 0, 10), x("cpu_op", "aten::nonzero", 20, fallback_us)])
    found = [f for f in diagnose(trace, fallback_ops=["aten::nonzero"]).findings if f.id == "host_fallback"]
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_no_nanosecond_stalls_on_a_busy_device(tmp_path: Path) -> None:
    # Back-to-back kernels with 1 ns seams (Kineto's ns fractions): no "top stall" is a seam.
    events = [step(0, 10)] + [kernel(f"k{i}", i * 1.001, 1.0) for i in range(9)]
    (dev,) = attribute(load(tmp_path, events))
    assert dev.causes_ns["idle"] > 0 and all(s.dur_ns >= 1_000 for s in dev.top_stalls)


def test_host_bound_advice_knows_graph_replay_and_step_outliers(tmp_path: Path) -> None:
    def trace(launch: str) -> list[dict[str, Any]]:
        ev = []
        for i in range(6):
            t, d = i * 100, (300 if i == 4 else 100)  # step 5 takes 3x the others
            t = t if i < 5 else 700
            ev += [step(t, d, i + 1), x("cpu_op", "aten::add", t, d - 10),
                   x("cuda_runtime", launch, t + 1, d - 20, correlation=i + 1), kernel("k", t + d - 5, 2, correlation=i + 1)]
        return ev
    from neurontrace.analysis.diagnose import diagnose

    (tmp_path / "eager").mkdir()
    (tmp_path / "graphs").mkdir()
    eager = {f.id: f for f in diagnose(load(tmp_path / "eager", trace("cudaLaunchKernel"))).findings}
    graphs = {f.id: f for f in diagnose(load(tmp_path / "graphs", trace("cudaGraphLaunch"))).findings}
    assert "CUDA graphs" in eager["host_bound"].advice
    assert "CUDA graphs" not in graphs["host_bound"].advice and "already replays" in graphs["host_bound"].advice
    assert "step 5" in eager["step_outliers"].evidence
