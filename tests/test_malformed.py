"""Malformed events (analysis/malformed.py): each kind is found, gets its one rule, and is counted in the
diagnosis (``event_checks``) and in its warnings. Times in µs in, ns out."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import neurontrace
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.launch import launch_calls
from neurontrace.analysis.malformed import MAX_EVENT_NS, sanitize
from tests.conftest import corpus_root
from tests.micro import load, x

US = 1000


def kernel(name: str, ts: float, dur: float, tid: int = 7, **args: object) -> dict[str, Any]:
    return x("kernel", name, ts, dur, pid=0, tid=tid, device=0, **args)


def test_each_kind_has_its_rule(tmp_path: Path) -> None:
    trace = load(tmp_path, [
        x("user_annotation", "ProfilerStep#1", 0, 100),
        x("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        kernel("k_ok", 10, 20, correlation=1),
        kernel("k_overflows", 40, 20),  # ends at 60, the next one on stream 7 starts at 50
        kernel("k_next", 50, 10),
        kernel("k_zero", 70, 0),
        kernel("k_days", 80, MAX_EVENT_NS / US * 2),  # a CUPTI end far in the future
        kernel("k_other_stream", 45, 30, tid=8),  # another stream may overlap
    ])
    clean, checks = sanitize(trace)
    assert checks.counts == {"days_long": 1, "zero_duration_device": 1, "overflows_next": 1}
    kept = dict(zip(clean.device_events["name"].to_pylist(), clean.device_events["dur_ns"].to_pylist(),
                    strict=True))
    assert kept == {"k_ok": 20 * US, "k_overflows": 10 * US, "k_next": 10 * US, "k_other_stream": 30 * US}
    assert trace.device_events.num_rows == 6  # the loaded trace is left as it was
    diag = diagnose(trace).as_dict()
    assert diag["event_checks"]["counts"] == checks.counts
    assert diag["event_checks"]["rules"]["days_long"] == "dropped"
    messages = [w["message"] for w in diag["warnings"]]
    assert any("1 event(s) days long: dropped" in m for m in messages)
    (dev,) = diag["devices"]
    assert sum(dev["causes_ns"].values()) == dev["window"]["end_ns"] - dev["window"]["start_ns"]


def test_a_clean_trace_is_not_copied(tmp_path: Path) -> None:
    trace = load(tmp_path, [x("user_annotation", "ProfilerStep#1", 0, 100), kernel("k", 10, 20)])
    clean, checks = sanitize(trace)
    assert clean is trace and checks.counts == {}


def test_longer_than_the_trace_is_clipped(tmp_path: Path) -> None:
    trace = load(tmp_path, [
        x("cpu_op", "aten::mm", 0, 10),
        x("cpu_op", "aten::add", 50, 10),
        x("user_annotation", "ProfilerStep#1", 20, 100_000, pid=2),  # another process, 100 ms in a 60 µs trace
    ])
    clean, checks = sanitize(trace)
    assert checks.counts == {"longer_than_trace": 1}
    durations = dict(zip(clean.system_events["name"].to_pylist(), clean.system_events["dur_ns"].to_pylist(),
                         strict=True))
    assert durations["ProfilerStep#1"] == 40 * US  # to the end of everything else (60 µs)


def test_correlation_collisions_are_counted(tmp_path: Path) -> None:
    _, checks = sanitize(load(tmp_path, [
        x("cuda_runtime", "cudaLaunchKernel", 0, 2, pid=1, correlation=5),
        x("cuda_runtime", "cudaLaunchKernel", 3, 2, pid=2, correlation=5),  # another process, same id
        kernel("k", 10, 5, correlation=5),
    ]))
    assert checks.counts == {"correlation_collisions": 1}


@pytest.mark.corpus
def test_triton_example_step_of_another_process(corpus: Path) -> None:
    # ProfilerStep#1 of pid 3100453 lasts 13.34 s in a 0.36 s trace: clipped to the trace end, and since that
    # process drives no device, cuda:0's window is its own activity (1.52 ms), not the 1.76 µs kernel.
    trace = neurontrace.load(corpus / "HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz")
    diag = diagnose(trace)
    assert diag.sections["event_checks"].counts == {"longer_than_trace": 1}
    (dev,) = diag.devices
    assert dev.window_rule == "activity" and dev.window_ns == 1_520_795
    assert corpus_root() is not None


def test_host_slices_that_overflow_their_parent_are_clipped(tmp_path: Path) -> None:
    # CUDA runtime calls without device events: a host-only CUDA trace, whose fact the parser records
    # (_kineto_host_only.py) and whose one warning analysis/device_activity.py makes, at diagnose
    trace = load(tmp_path, [
        x("cpu_op", "A", 0, 10),
        x("cpu_op", "B", 1, 4),
        x("cpu_op", "B1", 2, 1),
        x("cpu_op", "C", 4, 3),  # ends at 7, inside A, after its parent B (ends at 5)
        x("cpu_op", "D", 8, 5),  # ends at 13, after its parent A
        x("cpu_op", "E", 20, 5), x("cpu_op", "F", 20, 5), x("cpu_op", "G", 25, 2),  # equal and touching slices nest
        x("cpu_op", "H", 0, 30, tid=2),  # another thread is another stack
        x("cpu_op", "I", 3, 20, pid=2),  # so is another process
        x("python_function", "enter", 30, 2), x("user_annotation", "range", 31, 5),  # crosses a Python frame
        x("cuda_runtime", "cudaMemcpyAsync", 40, 4), x("cuda_runtime", "cudaMemcpyAsync", 42, 4),  # not a stack
    ])
    clean, checks = sanitize(trace)
    assert checks.counts == {"overflows_parent": 2}
    assert checks.ns_removed == (7 - 5 + 13 - 10) * US
    ends = {n: (t + d) // US for n, t, d in zip(clean.system_events["name"].to_pylist(),
                                                clean.system_events["ts_ns"].to_pylist(),
                                                clean.system_events["dur_ns"].to_pylist(), strict=True)}
    assert ends["C"] == 5 and ends["D"] == 10  # clipped to the parent's end
    assert (ends["B1"], ends["E"], ends["F"], ends["G"], ends["H"], ends["I"], ends["range"]) == (3, 25, 25, 27, 30,
                                                                                                  23, 36)
    assert trace.system_events.num_rows == clean.system_events.num_rows  # clipped, never dropped
    diag = diagnose(trace).as_dict()
    assert diag["event_checks"]["counts"] == {"overflows_parent": 2}
    assert any("2 event(s) overflows parent: clipped to its parent's end" in w["message"] for w in diag["warnings"])
    assert trace.meta("device_activity")["recorded"] is False
    assert sum("no device activity was recorded" in w["message"] for w in diag["warnings"]) == 1


def test_a_clip_is_seen_by_the_slices_after_it(tmp_path: Path) -> None:
    # B overflows A and is clipped to 10; C started inside B and ends at 12: after B's clipped end, so C is clipped too
    trace = load(tmp_path, [x("cpu_op", "A", 0, 10), x("cpu_op", "B", 5, 10), x("cpu_op", "C", 6, 6)])
    clean, checks = sanitize(trace)
    assert checks.counts == {"overflows_parent": 2}
    assert clean.system_events["dur_ns"].to_pylist() == [10 * US, 5 * US, 4 * US]


def test_host_overflows_agree_with_a_plain_stack_walk(tmp_path: Path) -> None:
    # seeded random slices on 3 threads (integer µs, many ties and touching ends) against the textbook walk
    rng = random.Random(13)
    events = [x("cpu_op", f"s{i}", rng.randrange(100), rng.randrange(1, 30), tid=rng.randrange(3)) for i in range(300)]
    want: dict[str, int] = {}
    for tid in range(3):
        stack: list[int] = []
        for ev in sorted((e for e in events if e["tid"] == tid), key=lambda e: (e["ts"], -(e["ts"] + e["dur"]))):
            while stack and stack[-1] <= ev["ts"]:
                stack.pop()
            end = min(ev["ts"] + ev["dur"], stack[-1]) if stack else ev["ts"] + ev["dur"]
            want[ev["name"]] = end
            stack.append(end)
    clean, checks = sanitize(load(tmp_path, events))
    got = {n: (t + d) // US for n, t, d in zip(clean.system_events["name"].to_pylist(),
                                               clean.system_events["ts_ns"].to_pylist(),
                                               clean.system_events["dur_ns"].to_pylist(), strict=True)}
    assert got == want
    assert checks.counts["overflows_parent"] == sum(e["ts"] + e["dur"] != want[e["name"]] for e in events) > 50


def _flow(fid: int, ts: float, pid: int, tid: int, end: bool) -> dict[str, Any]:
    ev = {"ph": "f" if end else "s", "id": fid, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"}
    return {**ev, "bp": "e"} if end else ev


def test_colliding_correlation_ids_link_within_the_launching_process(tmp_path: Path) -> None:
    # Two processes merged into one file without ranks, reusing correlation ids 1-3: process 1 drives cuda:0,
    # process 2 drives cuda:1. Only each device's first kernel keeps its launch flow (the others lost theirs).
    events = []
    for proc, dev_pid, t0 in ((1, 0, 0), (2, 1, 100)):
        for c in (1, 2, 3):
            events.append(x("cuda_runtime", f"launch p{proc} c{c}", t0 + 10 * c, 2, pid=proc, correlation=c))
            events.append(x("kernel", f"k p{proc} c{c}", t0 + 10 * c + 5, 3, pid=dev_pid, tid=7, device=dev_pid,
                            correlation=c))
        events += [_flow(proc * 10, t0 + 10, proc, 1, False), _flow(proc * 10, t0 + 15, dev_pid, 7, True)]
    trace = load(tmp_path, events)
    host, dev = trace.system_events, trace.device_events
    assert sanitize(trace)[1].counts == {"correlation_collisions": 3}
    calls = launch_calls(host, trace.flows, dev)
    launched = dict(zip(dev["name"].to_pylist(), host["name"].take(pa.array(calls)).to_pylist(), strict=True))
    assert launched == {f"k p{p} c{c}": f"launch p{p} c{c}" for p in (1, 2) for c in (1, 2, 3)}
    # Without any flow the device cannot be tied to a process: (rank, correlation), first call wins (counted).
    no_flows = launch_calls(host, trace.flows.slice(0, 0), dev)
    assert host["name"].take(pa.array(no_flows)).to_pylist().count("launch p1 c2") == 2
