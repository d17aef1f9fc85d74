"""Communication/compute overlap and launch latency, checked against independent computations on raw JSON."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace.analysis.default_window import default_window
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.analysis.driving import driving_host_events
from neurontrace.analysis.launch import launch_stats
from neurontrace.analysis.overlap import overlap
from neurontrace.columns import select
from tests.micro import load, x

NCCL = "HolisticTraceAnalysis/tests/data/nccl_parser_config/nccl_data.json.gz"


def test_overlap_on_a_micro_timeline(tmp_path: Path) -> None:
    """compute [0,10) [20,30); nccl [5,25) on another stream: 20 total, 10 hidden; memcpy [40,50): 0 hidden."""
    t = load(tmp_path, [
        x("kernel", "gemm", 0, 10, pid=0, tid=7, device=0), x("kernel", "gemm", 20, 10, pid=0, tid=7, device=0),
        x("kernel", "ncclKernel_AllReduce", 5, 20, pid=0, tid=9, device=0),
        x("gpu_memcpy", "Memcpy HtoD", 40, 10, pid=0, tid=8, device=0),
    ])
    o = overlap(t.device_events, (0, 100_000), [("s1", 0, 22_000), ("s2", 22_000, 100_000)])
    assert (o.collectives_total_ns, o.collectives_overlapped_ns) == (20_000, 10_000)
    assert (o.copies_total_ns, o.copies_overlapped_ns) == (10_000, 0)
    assert o.sentence() == "50.0% of communication is hidden by compute"
    assert [(s["collectives_total_ns"], s["collectives_overlapped_ns"]) for s in o.steps] == [(17_000, 7_000),
                                                                                              (3_000, 3_000)]


def test_overlap_counts_collectives_the_parser_filed_as_kernels(tmp_path: Path) -> None:
    """A PyTorch symmetric-memory all-reduce is an ordinary-looking kernel (names.COLLECTIVE_KERNEL): it is
    communication here as in attribution. gemm [0,10); multimem all-reduce [5,25): 20 total, 5 hidden."""
    t = load(tmp_path, [
        x("kernel", "gemm", 0, 10, pid=0, tid=7, device=0),
        x("kernel", "multimem_all_reduce_kernel", 5, 20, pid=0, tid=9, device=0),
    ])
    o = overlap(t.device_events, (0, 100_000))
    assert (o.collectives_total_ns, o.collectives_overlapped_ns) == (20_000, 5_000)


def _raw(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The raw events and the base time their float-µs ``ts`` count from (baseTimeNanoseconds)."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc["traceEvents"], int(doc.get("baseTimeNanoseconds", 0))


def _ns(us: float, base: int = 0) -> int:
    return base + round(us * 1000)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _common(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@pytest.mark.corpus
def test_corpus_nccl_overlap_matches_an_interval_computation(corpus: Path) -> None:
    path = corpus / NCCL
    diag = diagnose(neurontrace.load(path))
    (dev,) = diag.devices
    lo, hi = dev.window
    ov = dev.sections["overlap"]
    # Independently: kernels from the raw JSON, NCCL kernels by name, cut to the same window.
    raw, base = _raw(path)
    kernels = [e for e in raw if e.get("cat") == "kernel" and e.get("ph") == "X"]
    spans = {True: [], False: []}  # type: dict[bool, list[tuple[int, int]]]
    for k in kernels:
        s, e = max(_ns(k["ts"], base), lo), min(_ns(k["ts"], base) + _ns(k["dur"]), hi)
        if e > s:
            spans["nccl" in k["name"].lower()].append((s, e))
    comm, comp = _merge(spans[True]), _merge(spans[False])
    total = sum(e - s for s, e in comm)
    assert total > 0
    assert abs(ov.collectives_total_ns - total) <= len(comm)  # float µs -> ns rounding, at most 1 ns per span
    assert abs(ov.collectives_overlapped_ns - _common(comm, comp)) <= len(comm) + len(comp)
    assert 0.10 < ov.collectives_hidden < 0.25
    assert len(ov.steps) == 3 and sum(s["collectives_total_ns"] for s in ov.steps) <= ov.collectives_total_ns
    doc = diag.as_dict()
    assert doc["devices"][0]["overlap"]["collectives_total_ns"] == ov.collectives_total_ns
    assert Diagnosis.from_dict(json.loads(json.dumps(doc))).as_dict() == doc


@pytest.mark.corpus
def test_corpus_launch_delays_match_the_flows(corpus: Path) -> None:
    """Delay = kernel start - launch call start, computed here from the raw ac2g flow markers alone:
    the 's' marker sits at the call's start, the 'f' marker at the kernel's start."""
    path = corpus / NCCL
    t = neurontrace.load(path)
    dev = select(t.device_events, "device", "cuda:0")
    host = driving_host_events(t, dev)
    win, _ = default_window(host, dev)
    ours = launch_stats(host, t.flows, dev, win)
    raw, base = _raw(path)
    starts = {e["id"]: _ns(e["ts"], base) for e in raw if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"]: _ns(e["ts"], base) for e in raw if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    delays = sorted(ends[i] - starts[i] for i in starts.keys() & ends.keys() if win[0] <= ends[i] < win[1])
    assert ours.kernels == len(delays) and ours.unmatched == 0
    assert abs(ours.delay_ns_median - statistics.median_low(delays)) <= 2  # type: ignore[operator]
    assert abs(ours.delay_ns_max - delays[-1]) <= 2  # type: ignore[operator]
    assert abs(ours.delay_ns_p90 - delays[int(0.9 * (len(delays) - 1))]) <= 2  # type: ignore[operator]


def test_queue_depth_and_short_kernels(tmp_path: Path) -> None:
    """Three launches 1 µs apart, each call 2 µs, kernels of 0.5 µs running at 10, 11, 12 µs: depth 3."""
    ev: list[dict[str, Any]] = []
    for i in range(3):
        ev.append(x("cuda_runtime", "cudaLaunchKernel", i, 2, correlation=i + 1))
        ev.append(x("kernel", "k", 10 + i, 0.5, pid=0, tid=7, device=0, correlation=i + 1))
    t = load(tmp_path, ev)
    v = launch_stats(t.system_events, t.flows, t.device_events, (0, 100_000))
    assert v.kernels == 3 and v.queue_depth_max == 3 and v.short_kernel_share == 1.0
    assert (v.delay_ns_median, v.delay_ns_max) == (10_000, 10_000)
    assert v.queue_depth_median == 2.0  # depths after each launch: 1, 2, 3


def _serial_launches(n: int, kernel_us: float, call_us: float) -> list[dict[str, Any]]:
    """A host that launches one op at a time, each op shorter (or longer) than its launch call."""
    ev: list[dict[str, Any]] = [x("user_annotation", "ProfilerStep#1", 0, n * 10 + 10)]
    for i in range(n):
        ev.append(x("cuda_runtime", "cudaLaunchKernel", i * 10, call_us, correlation=i + 1))
        ev.append(x("kernel", "vectorized_elementwise_kernel", i * 10 + call_us + 1, kernel_us, pid=0, tid=7,
                    device=0, correlation=i + 1))
    return ev


def test_launch_bound_fires_on_short_serial_kernels(tmp_path: Path) -> None:
    doc = diagnose(load(tmp_path, _serial_launches(150, kernel_us=1, call_us=5))).as_dict()
    (f,) = [f for f in doc["findings"] if f["id"] == "launch_bound"]
    assert f["device"] == "cuda:0" and "100.0% of 150 ops" in f["evidence"]
    assert doc["devices"][0]["launch"]["short_kernel_share"] == 1.0


def test_launch_bound_never_advises_graphs_to_a_trace_that_replays_them(tmp_path: Path) -> None:
    ev = [*_serial_launches(150, kernel_us=1, call_us=5), x("cuda_runtime", "cudaGraphLaunch", 1505, 2)]
    (f,) = [f for f in diagnose(load(tmp_path, ev)).as_dict()["findings"] if f["id"] == "launch_bound"]
    assert "already replays" in f["advice"] and "torch.compile mode" not in f["advice"]


@pytest.mark.parametrize(("n", "kernel_us"), [(50, 1), (150, 8)])  # too few launches; ops longer than calls
def test_launch_bound_needs_its_evidence(tmp_path: Path, n: int, kernel_us: float) -> None:
    doc = diagnose(load(tmp_path, _serial_launches(n, kernel_us=kernel_us, call_us=5))).as_dict()
    assert "launch_bound" not in [f["id"] for f in doc["findings"]]


@pytest.mark.corpus
def test_corpus_launch_bound_on_the_nccl_trace_not_on_the_deep_queue(corpus: Path) -> None:
    nccl = diagnose(neurontrace.load(corpus / NCCL)).as_dict()
    assert "launch_bound" in [f["id"] for f in nccl["findings"]]
    deep = diagnose(neurontrace.load(corpus / "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    assert deep.devices[0].sections["launch"].queue_depth_max > 100  # the host runs far ahead
    assert "launch_bound" not in [f.id for f in deep.findings]
