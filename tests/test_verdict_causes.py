"""Issue 24's causes, each proven on a real input with a cause whose size is known independently.

Real runs (tests/verdict_runs.py, one session fixture): a training loop whose data loader sleeps in
``__getitem__`` and a 2-rank DDP/gloo job (two bucket all-reduces per step) whose rank 1 sleeps before every
forward pass, each timing its own sleeps and phases with ``time.perf_counter_ns``. Real files transformed here,
said where: a corpus CUDA trace with its device events removed (what a profile with CUPTI activity off holds),
and the corpus NCCL trace with the sizes removed from its kernels (what older traces carry).
"""

from __future__ import annotations

import gzip
import io
import json
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

import neurontrace
from neurontrace.analysis import cross_rank as xr
from neurontrace.analysis import dominant, load_warnings, names
from neurontrace.analysis.attribution import attribute
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.analysis.phase_split import PHASES
from neurontrace.analysis.sources import backward_frames
from neurontrace.analysis.startup import startup_calls
from neurontrace.analysis.work import device_categories
from neurontrace.render.report import render
from tests.micro import load, x

HTA = "HolisticTraceAnalysis/tests/data"
MS = 1_000_000


def _facts(runs: Path) -> dict[str, Any]:
    facts: dict[str, Any] = json.loads((runs / "facts.json").read_text())
    return facts


def _diagnose(path: Path) -> Diagnosis:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return diagnose(neurontrace.load(path))


def _raw(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    doc: dict[str, Any] = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    return doc


# -- item 8: one wait, not two; advice that follows the evidence ----------------------------------------------

@pytest.mark.torch
def test_overlapping_bucket_all_reduces_count_the_straggler_once(verdict_runs: Path) -> None:
    facts = _facts(verdict_runs)["ddp"]
    # The job really has two bucket all-reduces per profiled step on each rank (3 profiled steps).
    for r in (0, 1):
        raw = _raw(verdict_runs / "ddp" / f"rank-{r}.pt.trace.json.gz")["traceEvents"]
        assert sum(e.get("name") == "gloo:all_reduce" for e in raw) == 2 * 3
    diag = _diagnose(verdict_runs / "ddp")
    cr = diag.sections[xr.SECTION.key]
    assert cr.straggler_rank == 1 and cr.most_waiting_rank == 0
    slept = sum(facts["rank_sleep_ns"][facts["profiled_from"]:])  # the sleeps of the 3 profiled steps
    late = next(p for p in cr.per_rank if p["rank"] == 1)["late_ns"]
    # Independently from the raw JSON: the k-th gloo range of one name and shape on each rank is one collective
    # (the all-reduces, and DDP's bucket-rebuild broadcasts of the first profiled step); rank 1's lateness is the
    # union of [first arrival, last arrival) over those it arrived last at, overlapping stretches counted once.
    arrivals: list[dict[tuple[str, str], list[int]]] = []
    for r in (0, 1):
        doc = _raw(verdict_runs / "ddp" / f"rank-{r}.pt.trace.json.gz")
        base = int(doc.get("baseTimeNanoseconds", 0))
        mine: dict[tuple[str, str], list[int]] = {}
        for e in doc["traceEvents"]:
            if str(e.get("name")).startswith("gloo:"):
                key = (e["name"], json.dumps(e["args"].get("Input Dims")))
                mine.setdefault(key, []).append(int(Decimal(str(e["ts"])) * 1000) + base)
        arrivals.append({k: sorted(v) for k, v in mine.items()})
    stretches = sorted((a0, a1) for key, times in arrivals[0].items()
                       for a0, a1 in zip(times, arrivals[1][key], strict=True) if a1 > a0)
    merged, reach = 0, 0
    for lo, hi in stretches:
        if hi > max(lo, reach):
            merged, reach = merged + hi - max(lo, reach), hi
    assert late == merged
    # Summing them instead would count each step's sleep twice (its two bucket all-reduces wait for it together).
    assert sum(hi - lo for lo, hi in stretches) > 1.4 * late
    # The lateness is the sleep, give or take what each rank computed before arriving: not twice the sleep (the
    # double count gave >= 2x). The margin above 1x is the ranks' own compute, which a loaded 2-core machine
    # stretches: 1.47x was seen there once in four full runs, so the bound is 1.75x, still clear of 2x.
    assert 0.85 * slept <= late <= 1.75 * slept, (late, slept)
    waited = next(p for p in cr.per_rank if p["rank"] == 0)
    assert waited["wait_ns"] <= waited["collective_ns"]
    (cpu0,) = [d for d in diag.devices if d.rank == 0]
    assert waited["wait_ns"] <= cpu0.window_ns
    # record_shapes gives gloo's ranges their tensors: every all-reduce has a size and a bus bandwidth.
    assert all(c["bytes"] and c["busbw_gbps"] for c in cr.collectives)


@pytest.mark.torch
def test_a_sleeping_straggler_is_host_side_work_not_load_imbalance_nor_host_bound(verdict_runs: Path) -> None:
    diag = _diagnose(verdict_runs / "ddp")
    (straggler,) = [f for f in diag.findings if f.id == "straggler"]
    assert "computes more than its peers" not in straggler.advice and "host-side work" in straggler.advice
    assert "sleep" in straggler.advice
    ids = {f.id for f in diag.findings}
    assert "host_bound" not in ids and "host_wait" in ids
    (cpu1,) = [d for d in diag.devices if d.rank == 1]
    facts = _facts(verdict_runs)["ddp"]
    slept = sum(facts["rank_sleep_ns"][facts["profiled_from"]:])
    assert abs(cpu1.detail_ns["host_overhead.wait"] - slept) < 0.05 * slept  # the sleep, as host_overhead.wait


def test_nccl_kernels_without_sizes_take_them_from_the_launching_range(corpus: Path, tmp_path: Path) -> None:
    src = corpus / HTA / "nccl_parser_config" / "nccl_data.json.gz"
    want = xr.rank_collectives(neurontrace.load(src))
    # A transformation of the real file: its NCCL kernels lose their size args, as on traces before torch 2.1.
    doc = _raw(src)
    stripped = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "nccl" in str(e.get("name")):
            for key in ("In msg nelems", "Out msg nelems", "dtype", "Group size"):
                stripped += e["args"].pop(key, None) is not None
    assert stripped >= 21 * 3
    path = tmp_path / "nccl_no_sizes.json"
    path.write_text(json.dumps(doc))
    got = xr.rank_collectives(neurontrace.load(path))
    assert got.num_rows == want.num_rows == 21
    assert got["bytes"].to_pylist() == want["bytes"].to_pylist()
    assert got["op"].to_pylist() == want["op"].to_pylist()


# -- item 10: the line responsible -------------------------------------------------------------------------

@pytest.mark.torch
def test_a_data_loader_stall_points_at_getitem_not_the_profiler_step_line(verdict_runs: Path) -> None:
    facts = _facts(verdict_runs)["train"]
    g = facts["getitem"]
    diag = _diagnose(verdict_runs / "train.pt.trace.json.gz")
    (cpu,) = diag.devices
    pipeline = [s for s in cpu.top_stalls if s.detail == "input_pipeline"]
    assert pipeline and all(s.source == f"{g['file']}:{g['line']} __getitem__" for s in pipeline)
    for s in cpu.top_stalls:  # never the profiler, never a frame at the line it was on when profiling began
        assert s.source is None or not names.OWN_FRAME.search(s.source)
        assert s.source is None or "_train" not in s.source or "running when profiling began" in s.source


@pytest.mark.torch
def test_backward_ops_map_to_their_forward_source(verdict_runs: Path) -> None:
    trace = neurontrace.load(verdict_runs / "train.pt.trace.json.gz")
    fwd = _facts(verdict_runs)["train"]["forward"]
    ops = trace.to_pandas("system_events").set_index("event_id")
    frames = trace.to_pandas("frames").set_index("frame_id")
    addmm = list(ops.index[ops["name"] == "AddmmBackward0"])
    # The ops nested in a backward op (its aten::mm) map to the same forward source; Python frames do not.
    nested = list(ops.index[(ops["name"] == "aten::mm")])
    mapped = backward_frames(trace, addmm + nested)
    assert addmm and all(e in mapped for e in addmm) and nested and all(e in mapped for e in nested)
    for e in addmm:  # their own frame is the training loop; the forward op's is Net.forward
        frame = frames.loc[mapped[e]]
        assert (frame["file"], frame["line"], frame["function"]) == (fwd["file"], fwd["line"], "forward")
        assert frames.loc[ops.loc[e, "frame_id"], "function"] != "forward"


# -- item 9: what the time was spent on; the training phases ------------------------------------------------

@pytest.mark.torch
def test_phase_split_matches_the_run_s_own_clock(verdict_runs: Path) -> None:
    train = _facts(verdict_runs)["train"]
    facts, first = train["steps"], train["profiled_from"]
    diag = _diagnose(verdict_runs / "train.pt.trace.json.gz")
    split = diag.phases.split
    assert split is not None and [s["step"] for s in split.steps] == [first, first + 1, first + 2]
    steps = {s["step"]: s for s in diag.phases.steps}
    close = []
    for row in split.steps:
        assert sum(row[p] for p in PHASES) == steps[row["step"]]["dur_ns"]  # the four add up to the step
        want = facts[row["step"]]
        close.append(all(abs(row[phase] - want[phase]) <= 0.1 * want[phase] + 0.5 * MS
                         for phase in ("forward_ns", "backward_ns", "optimizer_ns")))
    # a loaded host can preempt the run between two marks of a phase (after Optimizer.step, before zero_grad):
    # its clock counts that gap, the split gives it to "other"; a wrong rule would miss in every step
    assert sum(close) >= 2, (split.steps, facts)
    assert split.total == {p: sum(s[p] for s in split.steps) for p in PHASES}
    doc = diag.as_dict()["phases"]["split"]
    assert set(doc["total"]) == set(PHASES) and len(doc["steps"]) == 3


@pytest.mark.torch
def test_diagnose_text_names_the_dominant_work_and_the_phases(verdict_runs: Path) -> None:
    out = io.StringIO()
    render(_diagnose(verdict_runs / "train.pt.trace.json.gz"), Console(file=out, width=200, color_system=None))
    text = " ".join(out.getvalue().split())
    assert "training phases over 3 steps: forward" in text and "optimizer" in text
    assert "dominant:" in text and "of the window" in text


def test_headline_and_findings_name_the_dominant_ops_of_a_real_trace(corpus: Path) -> None:
    diag = _diagnose(corpus / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    (dev,) = diag.devices
    value = dev.sections[dominant.SECTION.key]
    top = value.top("op")
    assert top is not None and top["name"] == "aten::linear" and 0 < top["share"] <= 1
    assert "dominant: aten::linear" in dominant.headline(dev, value)
    (bound,) = [f for f in diag.findings if f.id == "host_bound"]
    assert "what ran most: aten::linear" in bound.evidence
    # Independent check of the share: the union of the outermost aten::linear spans inside the window.
    ops = neurontrace.load(corpus / "TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    ev = ops.to_pandas("system_events")
    lin = ev[(ev["name"] == "aten::linear")]
    lo, hi = dev.window
    s, e = np.clip(lin["ts_ns"].to_numpy(), lo, hi), np.clip((lin["ts_ns"] + lin["dur_ns"]).to_numpy(), lo, hi)
    total, reach = 0, lo
    for a, b in sorted(zip(s.tolist(), e.tolist(), strict=True)):
        if b > max(a, reach):
            total, reach = total + b - max(a, reach), b
    assert top["ns"] == total


# -- item 3: launched, not recorded -------------------------------------------------------------------------

def test_a_trace_without_device_activity_warns_and_makes_no_device_verdict(corpus: Path, tmp_path: Path) -> None:
    src = corpus / HTA / "critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
    doc = _raw(src)
    # A transformation of the real file: drop what CUPTI activity records (device events and the flows' device
    # ends); the launches, the flow starts and deviceProperties stay, as in a profile with activity off.
    device_cats = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in device_cats and e.get("ph") != "f"]
    launches = sum(str(e.get("name")) in ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync")
                   for e in doc["traceEvents"])
    path = tmp_path / "cupti_off.json"
    path.write_text(json.dumps(doc))
    diag = _diagnose(path)
    assert diag.devices == [] and diag.findings == []  # no device verdict made up from host events
    said = [w.message for w in diag.sections[load_warnings.SECTION.key].items]
    first = said[0]
    assert first.startswith(f"{launches} launches on cuda:0") and "no device activity was recorded" in first
    assert sum("no device activity" in m for m in said) == 1  # one rule, one warning (the parser only records it)
    assert "ProfilerActivity.CUDA" in first
    # The untouched file keeps its device verdict.
    assert [d.device for d in _diagnose(src).devices] == ["cuda:0"]


# -- item 4: collectives named by the range they ran in ----------------------------------------------------

def kernel(name: str, ts: float, dur: float) -> dict[str, Any]:
    return x("kernel", name, ts, dur, pid=0, tid=7, device=0, stream=7)


def test_kernels_inside_a_dispatch_range_are_collectives_but_gemms_stay_compute(tmp_path: Path) -> None:
    # SYNTHETIC micro-trace (no corpus trace has an expert-parallel job): a "dispatch" gpu_user_annotation, as
    # DeepEP / Megatron token dispatchers name theirs, around a generic copy kernel and a GEMM on its stream.
    trace = load(tmp_path, [
        x("gpu_user_annotation", "dispatch", 0, 100, pid=0, tid=7),
        kernel("void copy_tokens_kernel<256>(...)", 10, 30),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 50, 30),
        kernel("void copy_tokens_kernel<256>(...)", 150, 30),  # outside the range: compute
    ])
    dev = trace.device_events
    keys = zip(dev["name"].to_pylist(), dev["ts_ns"].to_pylist(), strict=True)
    cats = dict(zip(keys, device_categories(dev), strict=True))
    by_start = {ts // 1000: c for (name, ts), c in cats.items() if name != "dispatch"}
    assert by_start == {10: "collective", 50: "compute", 150: "compute"}
    (dev_attr,) = attribute(trace)  # the range's name says which collective: an all-to-all
    assert dev_attr.detail_ns.get("collectives.all_to_all") == 30_000


# -- item 5: start-up is a first use far above the median launch ----------------------------------------------

def test_a_first_launch_far_above_the_median_is_startup(corpus: Path) -> None:
    trace = neurontrace.load(corpus / HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    host = trace.system_events
    marked = startup_calls(host, trace.flows, trace.device_events)
    ev = host.to_pandas()
    launches = ev[ev["name"].isin(["hipLaunchKernel", "hipExtModuleLaunchKernel"])]
    (row,) = np.flatnonzero(marked)
    assert ev.loc[row, "name"] == "hipLaunchKernel" and ev.loc[row, "dur_ns"] == launches["dur_ns"].max()
    assert ev.loc[row, "dur_ns"] > 1000 * launches["dur_ns"].median()
    # It launched its kernel's first run: no earlier run of that kernel on the device.
    dev = trace.to_pandas("device_events")
    (k,) = dev.index[dev["correlation"] == ev.loc[row, "correlation"]]
    assert not ((dev["name"] == dev.loc[k, "name"]) & (dev["ts_ns"] < dev.loc[k, "ts_ns"])).any()
