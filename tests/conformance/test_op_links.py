"""Kernels tied to the CPU op that launched them, precision from the kernel, and no % of peak above 100.

Real traces renumber the CPU ops' External ids, or give kernels their correlation id as External id; a link by
External id alone then credits kernels to the wrong ops. The rule under test (analysis/driving.launching_ops):
kernel -> launch call by correlation within the process, call -> innermost CPU op enclosing it on its thread by
time, External id only where it agrees. Each case is a TRANSFORMATION OF A REAL CORPUS FILE (the H100 Qwen
inference trace), rewritten here field by field, and said so in the test.
"""

from __future__ import annotations

import gzip
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace.analysis.ops import OpsIndex, OpsReport, op_table
from neurontrace.app import roofline
from neurontrace.render.plots import roofline_hover
from tests.conftest import corpus_files
from tests.micro import load, x

QWEN = "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 85520809984}]


HTA = "HolisticTraceAnalysis/tests/data"
# Real corpus traces: the share of kernel time left without a launching op, the kernels linked by time, and why.
# Public facts the rule rests on: CUPTI gives each activity record the correlation id of the runtime API call that
# launched it (CUPTI Activity API, "correlationId"); libkineto pushes an external correlation id per recorded op
# (cuptiActivityPushExternalCorrelationId), which torch.profiler exports as "External id"; torch.profiler
# records ops as nested ranges on the thread that runs them, and the launch call on that same thread.
LINKS: tuple[tuple[str, float, int, str], ...] = (
    (f"{HTA}/critical_path/cuda_event_sync/event_sync_trace.json.gz", 73.5, 3,
     ("kernels and calls carry their correlation as External id (real); 3 of 4 launches sit in an aten op, the "
     "fourth (torch.cuda._sleep's spin_kernel, 73.5% of kernel time) in none: unlinked, not guessed")),
    (f"{HTA}/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz", 0.0, 79,
     "the calls' External ids name no op (External-id-only links left 99.3% unlinked); time links all 79"),
    (f"{HTA}/with_gpu_user_annotation/step_based_trace_2543932.json.gz", 0.0, 130,
     "no External id on the calls at all (External-id-only: 100% unlinked); time links every kernel"),
    ("param/et_replay/tests/inputs/linear_kineto.json.gz", 5.4, 8638,
     ("renumbered ids in a real trace: every External id that names an op names another one than time finds "
     "(3171 disagree, 0 agree), so none is believed; 78 launches outside any op stay unlinked")),
    (QWEN, 30.1, 1029, "436 kernels have no launch call in the trace; every linked one agrees with its External id"),
    ("TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", 99.1, 8,
     "CUDA-graph replays: hipGraphLaunch runs outside any CPU op, so its kernels have no launching op"),
)


@pytest.mark.corpus
@pytest.mark.parametrize(("path", "unlinked_pct", "by_time", "why"), LINKS, ids=[Path(p).name for p, *_ in LINKS])
def test_real_traces_link_kernels_to_their_ops(corpus: Path, path: str, unlinked_pct: float, by_time: int,
                                               why: str) -> None:
    rep = op_table(neurontrace.load(corpus / path))
    total = sum(r.device_ns for r in rep.rows)
    unlinked = sum(r.device_ns for r in rep.rows if r.op == "(no launching op)")
    assert abs(100 * unlinked / total - unlinked_pct) <= 0.5, why
    assert rep.links["time"] == by_time, why


@pytest.mark.corpus
def test_no_corpus_trace_has_a_figure_above_the_peak(corpus: Path) -> None:
    for path in corpus_files():
        with warnings.catch_warnings():  # some corpus files warn as they load (edited files, profiler logs)
            warnings.simplefilter("ignore")
            trace = neurontrace.load(path)
        rep = op_table(trace)
        assert not rep.warnings(), (path.name, rep.warnings())
        assert all(r.pct_of_peak is None or 0 <= r.pct_of_peak <= 100 for r in rep.rows), path.name


def _rewrite(src: Path, dst: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    edit(doc)
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def _renumber_op_ids(doc: dict[str, Any]) -> None:
    """The CPU ops' External ids become 1..N in time order; calls and kernels keep theirs (as some exporters do)."""
    ops = sorted((e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    for i, e in enumerate(ops, 1):
        e["args"]["External id"] = i


def _correlation_as_external_id(doc: dict[str, Any]) -> None:
    """Kernels and their launch calls carry their correlation id as External id."""
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            e["args"]["External id"] = e["args"]["correlation"]


def _rows(rep: OpsReport) -> list[tuple[Any, ...]]:
    return [(r.op, r.kernel_class, r.kernels, r.flops, r.dtype, None if r.pct_of_peak is None else round(r.pct_of_peak, 6))
            for r in rep.rows]


def _external_id_links_that_hold(doc: dict[str, Any]) -> float:
    """Independently of neurontrace: the share of kernels whose launch call's External id names a CPU op that
    encloses the call on its thread (what an External-id-only link gets right)."""
    ev = doc["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    kernels = [e for e in ev if e.get("cat") == "kernel" and e["args"].get("correlation") in calls]
    good = 0
    for k in kernels:
        c = calls[k["args"]["correlation"]]
        op = ops.get(c["args"].get("External id"))
        good += op is not None and op["tid"] == c["tid"] and op["ts"] <= c["ts"] and c["ts"] + c["dur"] <= op["ts"] + op["dur"]
    return good / len(kernels)


@pytest.mark.corpus
@pytest.mark.parametrize("edit", [_renumber_op_ids, _correlation_as_external_id])
def test_links_survive_rewritten_external_ids_of_a_real_trace(corpus: Path, tmp_path: Path,
                                                              edit: Callable[[dict[str, Any]], None]) -> None:
    """TRANSFORMED REAL FILE: the corpus H100 trace with its External ids rewritten; the op table must not move."""
    src = corpus / QWEN
    original = op_table(neurontrace.load(src))
    changed = _rewrite(src, tmp_path / "rewritten.json.gz", edit)
    doc = json.loads(gzip.decompress(changed.read_bytes()))
    assert _external_id_links_that_hold(json.loads(gzip.decompress(src.read_bytes()))) > 0.99
    assert _external_id_links_that_hold(doc) < 0.2  # the rewrite breaks External-id-only links: not vacuous
    rep = op_table(neurontrace.load(changed))
    assert _rows(rep) == _rows(original)
    assert rep.links["external id"] == 0 and rep.links["time"] == original.links["time"] > 1000
    linear = next(r for r in rep.rows if r.op == "aten::linear" and r.kernel_class == "gemm")
    assert linear.dtype == "bf16" and 50 < linear.pct_of_peak < 80  # type: ignore[operator]
    assert all(r.pct_of_peak is None or r.pct_of_peak <= 100 for r in rep.rows)


@pytest.mark.corpus
def test_autocast_precision_comes_from_the_kernels(corpus: Path, tmp_path: Path) -> None:
    """TRANSFORMED REAL FILE: aten::linear's Input type rewritten to float, as autocast records the outer op (a
    real CPU autocast run, test_op_layers.py, shows aten::linear(float) around the cast and the bf16 math). The
    sm90 bf16 GEMM kernels say their precision: the row stays bf16 at the same % of the bf16 peak."""
    src = corpus / QWEN

    def floats(doc: dict[str, Any]) -> None:
        for e in doc["traceEvents"]:
            if e.get("cat") == "cpu_op" and e["name"] == "aten::linear":
                e["args"]["Input type"] = ["float"] * len(e["args"]["Input type"])

    rep = op_table(neurontrace.load(_rewrite(src, tmp_path / "float.json.gz", floats)))
    before = next(r for r in op_table(neurontrace.load(src)).rows if (r.op, r.kernel_class) == ("aten::linear", "gemm"))
    after = next(r for r in rep.rows if (r.op, r.kernel_class) == ("aten::linear", "gemm"))
    assert after.dtype == "bf16" and after.pct_of_peak == pytest.approx(before.pct_of_peak)


@pytest.mark.corpus
def test_a_figure_above_the_peak_is_a_warning_naming_the_op_not_a_result(corpus: Path, tmp_path: Path) -> None:
    """TRANSFORMED REAL FILE: the H100 trace's deviceProperties renamed to an NVIDIA L4 (121 dense bf16 TFLOP/s,
    0.3 TB/s): the H100's real GEMMs then run at several times the L4's peak, a figure no report may show."""
    from neurontrace.analysis.diagnose import diagnose

    def l4(doc: dict[str, Any]) -> None:
        doc["deviceProperties"] = [{**doc["deviceProperties"][0], "name": "NVIDIA L4", "totalGlobalMem": 23580639232}]

    trace = neurontrace.load(_rewrite(corpus / QWEN, tmp_path / "l4.json.gz", l4))
    rep = op_table(trace)
    assert rep.devices["cuda:0"].peak is not None and rep.devices["cuda:0"].peak.device == "NVIDIA L4"
    linear = next(r for r in rep.rows if (r.op, r.kernel_class) == ("aten::linear", "gemm"))
    assert linear.pct_of_peak is None and linear.over_peak is not None and linear.over_peak > 100
    assert any(w.startswith("aten::linear (gemm kernels on cuda:0)") for w in rep.warnings())
    assert all(r["pct_of_peak"] is None or r["pct_of_peak"] <= 100 for r in rep.as_dict()["rows"])
    assert all(c["pct_of_peak"] is None or c["pct_of_peak"] <= 100 for c in rep.classes("cuda:0"))
    view = OpsIndex(trace, device="cuda:0").view(None)
    assert all(r["pct_of_peak"] is None or r["pct_of_peak"] <= 100 for r in roofline.rows(view))
    hover = roofline_hover(next(r for r in view.report.as_dict()["rows"] if r["op"] == "aten::linear"))
    assert "above the peak" in hover and "% of its roofline bound" not in hover
    figure = roofline.figure(view, "cuda:0")  # the viewer's roofline: no point above the roofs
    drawn = [y for d in figure["data"] if d.get("mode") == "markers" for y in d["y"]]
    assert drawn and max(drawn) <= max(rep.devices["cuda:0"].peak.tflops.values())
    diag = diagnose(trace)
    (f,) = [f for f in diag.findings if f.id == "impossible_efficiency"]
    assert f.severity == "warning" and "aten::linear" in f.evidence and "NVIDIA L4" in f.evidence
    ops = diag.as_dict()["devices"][0]["ops"]
    assert all(r["pct_of_peak"] is None or r["pct_of_peak"] <= 100 for r in ops["top"])


@pytest.mark.parametrize("gemm_kernel", ["ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
                                         "nvjet_tst_128x128_64x4_1x2_h_bz_coopA_TNT"])  # names no type: addmm's
def test_autocast_structure_credits_flops_to_the_gemm_not_the_casts(tmp_path: Path, gemm_kernel: str) -> None:
    """SYNTHETIC micro-trace with the op structure of a real autocast run (test_op_layers.py records it on the
    CPU: aten::linear(float) > aten::to > aten::copy_ casts, then aten::linear(c10::Half) > aten::addmm): the cast
    kernels belong to aten::copy_ (bytes, no FLOPs), all of linear's FLOPs to the fp16 GEMM (torch.autocast runs
    linear/addmm in float16 on CUDA: the autocast op reference in PyTorch's documentation). The GEMM's precision is
    its name's, or, when the name spells none, that of the aten::addmm(c10::Half) that launched it."""
    f32, f16 = "float", "c10::Half"
    dims = [[256, 1024], [4096, 1024], [4096]]
    ev = [
        x("cpu_op", "aten::linear", 0, 200, **{"External id": 1, "Input Dims": dims, "Input type": [f32] * 3}),
        x("cpu_op", "aten::to", 5, 40, **{"External id": 2}),
        x("cpu_op", "aten::copy_", 10, 30, **{"External id": 3, "Input Dims": [[4096, 1024], [4096, 1024], []],
                                              "Input type": [f16, f32, "Scalar"]}),
        x("cuda_runtime", "cudaLaunchKernel", 15, 5, correlation=11, **{"External id": 3}),
        x("cpu_op", "aten::linear", 60, 120, **{"External id": 4, "Input Dims": dims, "Input type": [f16] * 3}),
        x("cpu_op", "aten::addmm", 70, 100, **{"External id": 5, "Input Dims": [[4096], [256, 1024], [1024, 4096], [], []],
                                               "Input type": [f16] * 3 + ["Scalar"] * 2}),
        x("cuda_runtime", "cudaLaunchKernel", 80, 5, correlation=12, **{"External id": 5}),
        x("kernel", "void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda, c10::Half, float>", 30, 40,
          pid=0, tid=7, device=0, correlation=11),
        x("kernel", gemm_kernel, 100, 30, pid=0, tid=7, device=0, correlation=12),
    ]
    rep = op_table(load(tmp_path, ev, deviceProperties=H100))
    rows = {(r.op, r.kernel_class): r for r in rep.rows}
    gemm, cast = rows[("aten::linear", "gemm")], rows[("aten::copy_", "elementwise")]
    assert gemm.flops == 2 * 256 * 1024 * 4096 and gemm.dtype == "fp16"
    assert cast.flops == 0 and cast.bytes == 4096 * 1024 * (2 + 4)
    assert gemm.pct_of_peak == pytest.approx(100 * gemm.flops / 30e-6 / min(989.5e12, gemm.intensity * 3.35e12))  # type: ignore[operator]
    assert rep.links == {"unlinked": 0, "time": 2, "external id": 0}


def test_time_links_the_innermost_op_and_external_id_only_where_it_agrees(tmp_path: Path) -> None:
    """SYNTHETIC: one call whose External id names an op on another thread (renumbered), one kernel without a call
    whose own External id names an op that began after it: neither is believed."""
    ev = [
        x("cpu_op", "aten::mm", 0, 100, tid=1, **{"External id": 7, "Input Dims": [[64, 64], [64, 64]],
                                                 "Input type": ["float"] * 2}),
        x("cpu_op", "aten::add", 500, 50, tid=2, **{"External id": 1}),
        x("cuda_runtime", "cudaLaunchKernel", 10, 5, tid=1, correlation=11, **{"External id": 1}),
        x("kernel", "ampere_sgemm_64x64_nn", 30, 30, pid=0, tid=7, device=0, correlation=11),
        x("kernel", "ampere_sgemm_64x64_nn", 200, 30, pid=0, tid=7, device=0, correlation=99, **{"External id": 1}),
    ]
    rep = op_table(load(tmp_path, ev, deviceProperties=H100))
    assert {r.op: r.kernels for r in rep.rows} == {"aten::mm": 1, "(no launching op)": 1}
    assert rep.links == {"unlinked": 1, "time": 1, "external id": 0}
