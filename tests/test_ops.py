"""Per-op FLOPs, bytes and efficiency (analysis/opcost.py, ops.py, peaks.py): exact counts on known shapes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import neurontrace
from neurontrace.analysis.opcost import op_cost
from neurontrace.analysis.ops import op_table
from neurontrace.analysis.peaks import peak_for
from tests.micro import load, x

F32, BF16 = "float", "c10::BFloat16"


def _args(dims: list[Any], types: list[str], concrete: list[str] | None = None) -> dict[str, Any]:
    return {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)}


@pytest.mark.parametrize(("name", "args", "flops", "nbytes"), [
    ("aten::mm", _args([[64, 32], [32, 16]], [F32, F32]), 2 * 64 * 32 * 16, 4 * (64 * 32 + 32 * 16 + 64 * 16)),
    ("aten::addmm", _args([[16], [64, 32], [32, 16], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"]),
     2 * 64 * 32 * 16, 2 * (16 + 64 * 32 + 32 * 16 + 64 * 16)),
    ("aten::bmm", _args([[8, 64, 32], [8, 32, 16]], [F32, F32]), 2 * 8 * 64 * 32 * 16,
     4 * 8 * (64 * 32 + 32 * 16 + 64 * 16)),
    # linear on a 3-D input: rows = 4 * 10
    ("aten::linear", _args([[4, 10, 32], [16, 32], [16]], [F32, F32, F32]), 2 * 40 * 32 * 16,
     4 * (40 * 32 + 16 * 32 + 16 + 40 * 16)),
    # matmul broadcasts batch dims: [2, 1, 5, 3] @ [4, 3, 7] -> [2, 4, 5, 7]
    ("aten::matmul", _args([[2, 1, 5, 3], [4, 3, 7]], [F32, F32]), 2 * 8 * 5 * 3 * 7,
     4 * (2 * 5 * 3 + 4 * 3 * 7 + 8 * 5 * 7)),
    # conv2d: N=2, Cin=3, 32x32, Cout=8, 3x3, stride 2, padding 1 -> 16x16 out
    ("aten::conv2d", _args([[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], []], [F32, F32, F32, "", "", "", ""],
                           ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]),
     2 * 2 * 8 * 16 * 16 * 3 * 9, 4 * (2 * 3 * 32 * 32 + 8 * 27 + 8 + 2 * 8 * 16 * 16)),
    # grouped: groups=3 on Cin=6 -> weight [12, 2, 1, 1]
    ("aten::convolution", _args([[1, 6, 4, 4], [12, 2, 1, 1], [], [], [], [], [], [], []],
                                [F32, F32, "", "", "", "", "", "", ""],
                                ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "3"]),
     2 * 1 * 12 * 16 * 2 * 1, 4 * (6 * 16 + 12 * 2 + 12 * 16)),
    # attention B=2, H=4, L=S=128, E=64: 4·B·H·L·S·E
    ("aten::scaled_dot_product_attention", _args([[2, 4, 128, 64]] * 3 + [[], [], [], []],
                                                 [BF16] * 3 + ["", "Scalar", "Scalar", ""],
                                                 ["", "", "", "", "0.", "False", "", ""]),
     4 * 2 * 4 * 128 * 128 * 64, 2 * 4 * 2 * 4 * 128 * 64),
    # causal: the 128·129/2 unmasked pairs
    ("aten::scaled_dot_product_attention", _args([[2, 4, 128, 64]] * 3 + [[], [], [], []],
                                                 [BF16] * 3 + ["", "Scalar", "Scalar", ""],
                                                 ["", "", "", "", "0.", "True", "", ""]),
     2 * 2 * 4 * (128 * 129 // 2) * 128, 2 * 4 * 2 * 4 * 128 * 64),
    ("aten::add", _args([[64, 32], [32], []], [F32, F32, "Scalar"]), 64 * 32, 4 * (64 * 32 + 32 + 64 * 32)),
    ("aten::copy_", _args([[64, 32], [64, 32], []], [BF16, F32, "Scalar"]), 0, 2 * 2048 + 4 * 2048),
    ("aten::sum", _args([[8, 16, 4], [], [], []], [F32, "", "Scalar", ""], ["", "[1]", "False", ""]),
     8 * 16 * 4, 4 * (8 * 16 * 4 + 8 * 4)),
    ("aten::_softmax", _args([[8, 16], [], []], [F32, "Scalar", "Scalar"], ["", "-1", "False"]), 5 * 128, 8 * 128),
    ("aten::layer_norm", _args([[4, 10, 32], [], [32], [32], [], []], [F32, "", F32, F32, "Scalar", "Scalar"]),
     5 * 1280, 4 * (1280 + 32 + 32 + 1280)),
])
def test_formulas_give_exact_counts(name: str, args: dict[str, Any], flops: int, nbytes: int) -> None:
    cost = op_cost(name, args)
    assert cost is not None
    assert (cost.flops, cost.bytes) == (flops, nbytes)


def test_dtypes_and_unknowns() -> None:
    assert op_cost("aten::mm", _args([[2, 2], [2, 2]], [BF16, BF16])).dtype == "bf16"  # type: ignore[union-attr]
    assert op_cost("aten::mm", _args([[2, 2], [2, 2]], ["c10::Half", "c10::Half"])).bytes == 24  # type: ignore[union-attr]
    assert op_cost("aten::view", _args([[2, 2], []], [F32, ""])) is None  # no formula: unknown, not zero
    assert op_cost("aten::mm", {"Input Dims": [[2, 2]]}) is None  # shapes that do not fit the schema
    assert op_cost("aten::mm", {}) is None  # record_shapes was off


@pytest.mark.parametrize(("name", "mem_gib", "product"), [
    ("NVIDIA H100 80GB HBM3", 80, "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", 80, "NVIDIA H100 PCIe"),
    ("NVIDIA A100-PG509-200", 40, "NVIDIA A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", None, "NVIDIA A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", None, "NVIDIA A100 80GB PCIe"),
    ("NVIDIA GeForce RTX 2080 Ti", 11, "NVIDIA GeForce RTX 2080 Ti"),
    ("AMD Instinct MI300X VF", 192, "AMD Instinct MI300X"),
    ("AMD Instinct MI210", 64, "AMD Instinct MI210"),
    ("NVIDIA H800", 80, "NVIDIA H800 SXM"),
    ("NVIDIA H800 PCIe", 80, "NVIDIA H800 PCIe"),
    ("NVIDIA H20", 95, "NVIDIA H20 96GB"),
    ("NVIDIA H200", 141, "NVIDIA H200 SXM"),
    ("NVIDIA H200 NVL", 141, "NVIDIA H200 NVL"),
    ("NVIDIA GH200 480GB", 95, "NVIDIA GH200 96GB HBM3"),  # 480 GB: the Grace CPU's memory, not the GPU's
    ("NVIDIA GH200 480GB", 142, "NVIDIA GH200 144GB HBM3e"),
    ("NVIDIA GH200 144G HBM3e", None, "NVIDIA GH200 144GB HBM3e"),
    ("NVIDIA L40S", 45, "NVIDIA L40S"),
    ("NVIDIA L40", 45, "NVIDIA L40"),
    ("NVIDIA L4", 22, "NVIDIA L4"),
    ("NVIDIA A10", 23, "NVIDIA A10"),
    ("NVIDIA GeForce RTX 4090", 24, "NVIDIA GeForce RTX 4090"),
    ("NVIDIA GeForce RTX 3090", 24, "NVIDIA GeForce RTX 3090"),
    ("NVIDIA RTX A4000", 16, "NVIDIA RTX A4000"),
    ("NVIDIA RTX A6000", 48, "NVIDIA RTX A6000"),
    ("Tesla T4", 15, "NVIDIA T4"),
    ("Tesla V100-SXM2-32GB", 32, "NVIDIA V100 SXM2"),
    ("Tesla V100-PCIE-16GB", 16, "NVIDIA V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", 32, "NVIDIA V100S PCIe"),
    ("trn2.48xlarge", None, "AWS Trainium2 (one NeuronCore-v3)"),
    ("trn1.32xlarge", None, "AWS Trainium1 (one NeuronCore-v2)"),
])
def test_peak_table_matches_device_names(name: str, mem_gib: int | None, product: str) -> None:
    peak = peak_for(name, mem_gib * 1024**3 if mem_gib else None)
    assert peak is not None and peak.device == product
    assert peak.source.startswith("https://")


@pytest.mark.parametrize("name", ["AMD Radeon Graphics", "ARTEMIS", "Tesla V100-DGXS-32GB", "NVIDIA A100", "",
                                  "NVIDIA A10G", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA GH200 480GB", "NVIDIA H20"])
def test_unknown_devices_are_unknown(name: str) -> None:
    assert peak_for(name) is None  # a bare "NVIDIA A100" could be 40 or 80 GB: no guess


def test_gh200_is_not_an_h200(tmp_path: Path) -> None:
    """deviceProperties names both with "H200" in them; the GH200 96 GB board has 4.0 TB/s, an H200 4.8 TB/s."""
    from neurontrace.analysis.peaks import device_peak

    for name, mem, tbps in (("NVIDIA GH200 480GB", 102_005_473_280, 4.0), ("NVIDIA H200", 150_754_820_096, 4.8)):
        t = load(tmp_path, [x("kernel", "k", 0, 1, pid=0, tid=7, device=0)],
                 deviceProperties=[{"id": 0, "name": name, "totalGlobalMem": mem}])
        peak = device_peak(t, "cuda:0").peak
        assert peak is not None and peak.hbm_tbps == tbps and ("GH200" in peak.device) == ("GH200" in name)


def test_every_peak_cites_its_source_and_stays_dense() -> None:
    from neurontrace.analysis.peaks import ENTRIES

    for e in ENTRIES:
        assert e.peak.source.startswith("https://"), e.peak.device
        assert set(e.peak.tflops) <= {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8"}
        # dense fp8 is twice fp16 (the L40S datasheet's own rounding: 733 vs 362.05); a sparse figure copied by
        # mistake into one column would make it 4x (or 1x)
        t = e.peak.tflops
        if "fp8" in t and "fp16" in t and not e.peak.device.startswith("AWS"):  # Trainium: cFP8 at the FP16 rate
            assert 1.95 <= t["fp8"] / t["fp16"] <= 2.05, e.peak.device


def test_trainium2_is_the_chip_figure_per_core() -> None:
    peak = peak_for("trn2.48xlarge")
    assert peak is not None and peak.tflops["bf16"] * 8 == pytest.approx(667) and peak.hbm_tbps * 8 == pytest.approx(2.9)


def _h100(tmp_path: Path, events: list[dict[str, Any]]) -> neurontrace.Trace:
    return load(tmp_path, events, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132,
                                                      "totalGlobalMem": 85520809984}])


def test_kernels_inherit_the_outermost_ops_flops_split_by_time(tmp_path: Path) -> None:
    """linear > addmm launches a 30 µs GEMM and a 10 µs bias kernel: 3/4 and 1/4 of linear's FLOPs."""
    dims = [[256, 1024], [4096, 1024], [4096]]
    ev = [
        x("cpu_op", "aten::linear", 0, 100, **{"External id": 1, "Input Dims": dims, "Input type": [BF16] * 3}),
        x("cpu_op", "aten::addmm", 5, 90, **{"External id": 2, "Input Dims": [[4096], [256, 1024], [1024, 4096],
                                                                              [], []],
                                              "Input type": [BF16] * 3 + ["Scalar"] * 2}),
        x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=11, **{"External id": 2}),
        x("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=12, **{"External id": 2}),
        x("kernel", "sm90_xmma_gemm_bf16bf16", 30, 30, pid=0, tid=7, device=0, correlation=11),
        x("kernel", "vectorized_elementwise_kernel add", 60, 10, pid=0, tid=7, device=0, correlation=12),
    ]
    rep = op_table(_h100(tmp_path, ev))
    flops = 2 * 256 * 1024 * 4096
    nbytes = 2 * (256 * 1024 + 4096 * 1024 + 4096 + 256 * 4096)
    rows = {r.kernel_class: r for r in rep.rows}
    assert {r.op for r in rep.rows} == {"aten::linear"}  # not addmm: one count, no double counting
    assert rows["gemm"].flops == round(flops * 0.75) and rows["elementwise"].flops == round(flops * 0.25)
    assert rows["gemm"].bytes == round(nbytes * 0.75)
    gemm = rows["gemm"]
    assert gemm.device_ns == 30_000 and gemm.dtype == "bf16"
    assert gemm.tflops_per_s == pytest.approx(flops * 0.75 / 30e-6 / 1e12)
    # intensity 2·256·1024·4096 / bytes ≈ 204 FLOP/B < ridge 989.5/3.35 ≈ 295: memory bound at the roof I·W
    assert gemm.bound == "memory"
    assert gemm.pct_of_peak == pytest.approx(100 * (flops * 0.75 / 30e-6) / (flops / nbytes * 3.35e12))
    assert rep.devices["cuda:0"].peak is not None and rep.devices["cuda:0"].peak.device == "NVIDIA H100 SXM"


def test_kernels_without_a_launching_op_are_counted_not_guessed(tmp_path: Path) -> None:
    ev = [x("kernel", "sm90_gemm", 30, 30, pid=0, tid=7, device=0, correlation=99)]
    (row,) = op_table(_h100(tmp_path, ev)).rows
    assert row.op == "(no launching op)" and row.flops is None and row.pct_of_peak is None and row.kernels == 1


def test_window_and_device_select_kernels(tmp_path: Path) -> None:
    ev = [x("kernel", "gemm_a", 10, 5, pid=0, tid=7, device=0), x("kernel", "gemm_b", 100, 5, pid=0, tid=7, device=0),
          x("kernel", "gemm_c", 10, 5, pid=1, tid=7, device=1)]
    t = _h100(tmp_path, ev)
    assert sum(r.kernels for r in op_table(t, window=(0, 50_000)).rows) == 2
    assert sum(r.kernels for r in op_table(t, device="cuda:1").rows) == 1


@pytest.mark.torch
def test_real_cpu_trace_gemm_flops_are_exact(tmp_path: Path) -> None:
    """A torch.profiler trace made here: mm, linear and conv2d of known shapes, on the CPU."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    a, b = torch.randn(128, 64), torch.randn(64, 32)
    xin, w, bias = torch.randn(4, 10, 64), torch.randn(48, 64), torch.randn(48)
    img, k = torch.randn(2, 3, 16, 16), torch.randn(8, 3, 3, 3)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            torch.mm(a, b)
            torch.nn.functional.linear(xin, w, bias)
            torch.nn.functional.conv2d(img, k, stride=1, padding=1)
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    rows = {r.op: r for r in op_table(neurontrace.load(path)).rows}
    assert rows["aten::mm"].flops == 3 * 2 * 128 * 64 * 32 and rows["aten::mm"].ops == 3
    assert rows["aten::linear"].flops == 3 * 2 * 40 * 64 * 48
    assert rows["aten::conv2d"].flops == 3 * 2 * 2 * 8 * 16 * 16 * 3 * 9
    assert "aten::addmm" not in rows  # inside linear: counted once, as linear
    assert rows["aten::mm"].dtype == "fp32" and rows["aten::mm"].device == "cpu"
    assert rows["aten::mm"].device_ns > 0 and rows["aten::mm"].pct_of_peak is None  # CPU peaks are not tabled


def _raw_linear_flops(path: Path) -> int:
    """Independently of neurontrace: kernel -> launch call (correlation) -> op (External id) -> the enclosing
    aten::linear on that thread, whose FLOPs are 2·rows·k·n from its Input Dims."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime" and "args" in e}
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    linears = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::linear"]
    launched = set()
    for k in kernels:
        call = calls.get(k["args"].get("correlation"))
        op = ops.get(call["args"].get("External id")) if call else None
        if op is None:
            continue
        for lin in linears:
            if lin["tid"] == op["tid"] and lin["ts"] <= op["ts"] and op["ts"] + op["dur"] <= lin["ts"] + lin["dur"]:
                launched.add(id(lin))
    total = 0
    for lin in linears:
        if id(lin) in launched:
            (*rows, kdim), (n, _) = lin["args"]["Input Dims"][0], lin["args"]["Input Dims"][1]
            prod = 1
            for r in rows:
                prod *= r
            total += 2 * prod * kdim * n
    return total


@pytest.mark.corpus
def test_corpus_h100_gemm_flops_match_an_independent_count(corpus: Path) -> None:
    path = corpus / "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    rep = op_table(neurontrace.load(path))
    ours = sum(r.flops or 0 for r in rep.rows if r.op == "aten::linear")
    assert ours == pytest.approx(_raw_linear_flops(path), rel=1e-9)
    gemm = next(r for r in rep.rows if r.op == "aten::linear" and r.kernel_class == "gemm")
    assert gemm.bound == "compute" and 50 < gemm.pct_of_peak < 80  # type: ignore[operator]
    assert rep.devices["cuda:0"].peak is not None and rep.devices["cuda:0"].peak.device == "NVIDIA H100 SXM"


@pytest.mark.corpus
def test_corpus_rocm_single_visible_device_gets_its_properties(corpus: Path) -> None:
    """The MI300X trace runs on rocm:2 and lists one deviceProperties entry (id 0): the visible device."""
    t = neurontrace.load(corpus / "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz")
    rep = op_table(t)
    assert rep.devices["rocm:2"].peak is not None and rep.devices["rocm:2"].peak.device == "AMD Instinct MI300X"


def test_roofline_plot_draws_the_rows_under_the_roofs(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    from neurontrace.render.plots import roofline

    ev = [
        x("cpu_op", "aten::mm", 0, 100, **{"External id": 1, "Input Dims": [[512, 512], [512, 512]],
                                          "Input type": [BF16] * 2}),
        x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=11, **{"External id": 1}),
        x("kernel", "sm90_gemm", 30, 30, pid=0, tid=7, device=0, correlation=11),
    ]
    rep = op_table(_h100(tmp_path, ev))
    fig = roofline(rep.as_dict())
    bf16 = next(d for d in fig.data if d.name.startswith("bf16/fp16 roof"))
    assert list(bf16.y) == [989.5, 989.5] and bf16.x[0] == pytest.approx(989.5 / 3.35)  # from its ridge point
    (memory,) = [d for d in fig.data if d.name.startswith("HBM 3.35 TB/s")]
    assert memory.y[0] == pytest.approx(memory.x[0] * 3.35) and memory.y[1] == pytest.approx(1979)  # up to fp8's ridge
    (ridges,) = [d for d in fig.data if d.name == "ridge points"]
    assert dict(zip(ridges.y, ridges.x, strict=True))[989.5] == pytest.approx(989.5 / 3.35)
    (points,) = [d for d in fig.data if d.name == "gemm"]
    assert list(points.customdata) == [0] and "% of its roofline bound" in points.text[0]
    assert points.x[0] == pytest.approx(rep.rows[0].intensity, rel=1e-3)
    assert points.y[0] == pytest.approx(rep.rows[0].tflops_per_s, rel=1e-3)


def test_ops_command_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from neurontrace.cli import main
    from tests.micro import write

    path = write(tmp_path, [x("kernel", "sm90_gemm", 30, 30, pid=0, tid=7, device=0)])
    assert main(["ops", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "neurontrace.ops/1" and doc["rows"][0]["kernels"] == 1
    assert doc["devices"]["cuda:0"]["peak"] is None  # no deviceProperties: unknown, not guessed
    assert main(["ops", str(path), "--device", "cuda:3"]) == 2
    assert "no device 'cuda:3'" in capsys.readouterr().err
    assert main(["ops", str(path)]) == 0
    assert "does not name this device" in capsys.readouterr().out


def test_low_efficiency_names_the_slow_class(tmp_path: Path) -> None:
    """A 1024³ bf16 GEMM taking 1 ms on an H100 runs at 2.1 TFLOP/s: 0.2% of its bound, all the kernel time."""
    from neurontrace.analysis.diagnose import diagnose

    ev = [
        x("user_annotation", "ProfilerStep#1", 0, 2000),
        x("cpu_op", "aten::mm", 0, 100, **{"External id": 1, "Input Dims": [[1024, 1024], [1024, 1024]],
                                          "Input type": [BF16] * 2}),
        x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=11, **{"External id": 1}),
        x("kernel", "sm90_gemm", 30, 1000, pid=0, tid=7, device=0, correlation=11),
    ]
    diag = diagnose(_h100(tmp_path, ev))
    (f,) = [f for f in diag.findings if f.id == "low_efficiency"]
    assert f.evidence.startswith("on cuda:0 (NVIDIA H100 SXM): gemm (100.0% of kernel time at 0.2%")
    ops_block = diag.as_dict()["devices"][0]["ops"]
    assert ops_block["classes"][0]["op_class"] == "gemm" and ops_block["top"][0]["flops"] == 2 * 1024**3


def test_low_efficiency_stays_quiet_without_a_peak(tmp_path: Path) -> None:
    from neurontrace.analysis.diagnose import diagnose

    ev = [x("cpu_op", "aten::mm", 0, 100, **{"External id": 1, "Input Dims": [[1024, 1024], [1024, 1024]],
                                            "Input type": [BF16] * 2}),
          x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=11, **{"External id": 1}),
          x("kernel", "sm90_gemm", 30, 1000, pid=0, tid=7, device=0, correlation=11)]
    diag = diagnose(load(tmp_path, ev))  # no deviceProperties: unknown device, no % of peak
    assert "low_efficiency" not in [f.id for f in diag.findings]
    assert diag.as_dict()["devices"][0]["ops"]["peak"] is None


def test_neuron_instructions_count_their_own_flops(tmp_path: Path) -> None:
    """SYNTHETIC profile (no real Neuron file is public): the rule under test is the documented Neuron Explorer
    instruction schema, raw_flops / adjusted_flops per instruction (a MAC counts 2), adjusted being
    BF16-equivalent; the instruction's HLO op names the row and its engine is the class."""
    from neurontrace.testing import synthetic_neuron

    trace = neurontrace.load(synthetic_neuron.write_explorer(synthetic_neuron.Scenario(), tmp_path / "prof"))
    rep = op_table(trace)
    dev = trace.device_events.to_pandas()
    tensor = dev[(dev.category == "compute") & (dev.track == "tensor")]
    expected = sum(json.loads(a).get("raw_flops") or 0 for a in tensor.args)
    (row,) = [r for r in rep.rows if r.kernel_class == "tensor"]
    assert row.flops == expected > 0 and row.op == "dot.1" and row.op_class == "tensor"
    assert row.dtype is None and row.pct_of_peak is None  # raw FLOPs have no dtype: no % of peak
    assert rep.devices["neuron:nc0"].peak is not None  # trn2.3xlarge from the profile's instance type
    # with BF16-equivalent counters the same rows are compared with the BF16 peak
    dev2 = trace.device_events
    args = [a.replace('"raw_flops"', '"adjusted_flops"') if a else a for a in dev2["args"].to_pylist()]
    bf16 = neurontrace.Trace(**{**trace.tables, "device_events": dev2.set_column(
        dev2.schema.get_field_index("args"), "args", pa.array(args))})
    (row2,) = [r for r in op_table(bf16).rows if r.kernel_class == "tensor"]
    assert row2.dtype == "bf16" and row2.pct_of_peak is not None and row2.flops == expected


def test_each_rank_keeps_its_own_rows(tmp_path: Path) -> None:
    """Two ranks' traces read as one: both have a cuda:0, and their rows stay apart."""
    from tests.micro import write

    paths = []
    for rank in (0, 1):
        ev = [x("kernel", "sm90_gemm", 30, 10 * (rank + 1), pid=0, tid=7, device=0)]
        paths.append(write(tmp_path, ev, name=f"r{rank}.json",
                           distributedInfo={"backend": "nccl", "rank": rank, "world_size": 2}))
    trace = neurontrace.Trace.concat([neurontrace.load(p) for p in paths])
    rows = op_table(trace).rows
    assert [(r.rank, r.device, r.device_ns) for r in rows] == [(0, "cuda:0", 10_000), (1, "cuda:0", 20_000)]


@pytest.mark.parametrize(("kernel", "dtype"), [
    # names as they occur in the corpus traces (../shared/corpus/kineto)
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "bf16"),
    (("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_"
     "nt_align4::Params)"), "tf32"),
    (("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
     "tensor16x8x8_alignc4_execute_kernel"), "tf32"),
    ("volta_sgemm_64x64_nn", "fp32"),
    ("void cutlass::Kernel<cutlass_70_wmma_tensorop_f16_s161616gemm_f16_32x32_64x2_tn_align8>", "fp16"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>", "bf16"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1", "bf16"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0", "fp32"),
    (("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t"), "bf16"),
    ("igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt256x64x8_wt64x16x4", "bf16"),
    ("void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>", "fp32"),
    ("void gemmSN_TN_kernel_64addr<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const>", None),
    ("triton_poi_fused_add_cos_sin_0", None),
])
def test_kernel_names_spell_their_precision(kernel: str, dtype: str | None) -> None:
    from neurontrace.analysis.names import kernel_precision

    assert kernel_precision(kernel) == dtype
