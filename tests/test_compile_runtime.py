"""The compiled code running, on the real run of tests/compile_scenarios.py (runtime.pt.trace.json, profiled with
stacks): Kineto's compile runtime ranges read as what they are (guard checks: host overhead; the compiled
region and graph: execution), a compiled call slower than eager where compile genuinely loses (a tiny function)
and no finding where it wins (Inductor fusing a pointwise chain), and the graph breaks each step crosses."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace.analysis.compile import SECTION, CompileReport
from neurontrace.analysis.compile_findings import SLOWER_RATIO
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.parsers import compile_logs
from tests.conftest import ROOT

pytestmark = pytest.mark.torch
SCRIPT = ROOT / "tests" / "compile_scenarios.py"


def _constant(name: str) -> int:
    """A constant of the scenario script (so no count is written down twice)."""
    m = re.search(rf"^{name} = (\d+)", SCRIPT.read_text(), flags=re.M)
    assert m is not None
    return int(m.group(1))


def _line_of(text: str) -> int:
    return next(i for i, ln in enumerate(SCRIPT.read_text().splitlines(), 1) if text in ln)


@pytest.fixture(scope="module")
def raw(compile_run: Path) -> list[dict[str, Any]]:
    path = compile_run / "runtime.pt.trace.json"
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


@pytest.fixture(scope="module")
def with_logs(compile_run: Path) -> Diagnosis:
    trace = neurontrace.load(compile_run / "runtime.pt.trace.json")
    return diagnose(trace, compiles=compile_logs.read([compile_run / "compile"]).table())


@pytest.fixture(scope="module")
def alone(compile_run: Path) -> Diagnosis:
    return diagnose(neurontrace.load(compile_run / "runtime.pt.trace.json"))


def _report(d: Diagnosis) -> CompileReport:
    rep = d.sections[SECTION.key]
    assert isinstance(rep, CompileReport)
    return rep


def _region(rep: CompileReport, function: str) -> tuple[str, dict[str, Any]]:
    return next((k, v) for k, v in rep.regions.items() if str(v["function"]).endswith(f": {function}"))


def test_guard_checks_regions_graphs_and_backward_are_read_as_what_they_are(
        with_logs: Diagnosis, raw: list[dict[str, Any]]) -> None:
    rep = _report(with_logs)
    steps, calls = _constant("RUNTIME_STEPS"), _constant("TINY_CALLS")
    lookups = [e for e in raw if e["name"] == "TorchDynamo Cache Lookup"]
    g = rep.runtime["guard_checks"]
    assert g["calls"] == len(lookups) and g["without_region"] == 0
    assert g["ns"] == pytest.approx(sum(e["dur"] for e in lookups) * 1000, abs=len(lookups))
    # every region's calls had their guard check first; tiny's region ran once per compiled call
    key, tiny = _region(rep, "tiny")
    assert tiny["calls"] == steps * calls == tiny["guard_calls"]
    assert tiny["source"] == f"compile_scenarios.py:{_line_of('def tiny(')}"
    assert tiny["calls"] == sum(e["name"] == f"Torch-Compiled Region: {key}" for e in raw)
    assert sum(v["guard_calls"] for v in rep.regions.values()) == g["calls"]
    # Inductor's graph: which compiled graph ran, in which region, once a step
    pkey, _ = _region(rep, "pointwise")
    (graph,) = rep.runtime["graphs"]
    assert graph["region"] == pkey and graph["calls"] == steps
    assert f"## Call CompiledFxGraph {graph['hash']} ##" in {e["name"] for e in raw}
    # AOTAutograd's forward inside the trained function's region, and its backward
    _, trained = _region(rep, "trained")
    assert trained["forward_ns"] > 0 and rep.runtime["backward"]["calls"] == steps
    # guard checks are host overhead of the compiled code, never compute and never compile
    # (a resume function's guards run inside the outer call's region, an op: by the attribution's priority
    # that time stays the op's compute, so the top-level guard checks are what it adds up)
    regions = [(e["ts"], e["ts"] + e["dur"]) for e in raw if e["name"].startswith("Torch-Compiled Region")]
    top = [e["dur"] for e in lookups if not any(s < e["ts"] < t for s, t in regions)]
    assert len(top) < len(lookups)  # the resume functions' guard checks are nested
    cpu = with_logs.devices[0]
    assert cpu.detail_ns["host_overhead.guards"] == pytest.approx(sum(top) * 1000, rel=0.02)
    assert cpu.detail_ns.get("host_overhead.compile", 0) == 0 and with_logs.phases.compile_ns == 0


def test_a_compiled_call_slower_than_eager_is_found_and_a_faster_one_is_not(
        with_logs: Diagnosis, alone: Diagnosis, raw: list[dict[str, Any]]) -> None:
    steps, calls = _constant("RUNTIME_STEPS"), _constant("TINY_CALLS")
    for d in (with_logs, alone):  # the comparison needs only the trace
        vs = {v["function"].split(": ")[-1]: v for v in _report(d).runtime["versus_eager"]}
        tiny, point = vs["tiny"], vs["pointwise"]
        assert tiny["compiled_calls"] == tiny["eager_calls"] == steps * calls
        assert point["compiled_calls"] == point["eager_calls"] == steps
        # the eager calls are the tiny frames outside Dynamo's wrapper, straight from the raw trace
        wrappers = [(e["ts"], e["ts"] + e["dur"]) for e in raw
                    if re.search(r"torch/_dynamo/eval_frame\.py\(\d+\): compile_wrapper$", e["name"])]
        eager = [e["dur"] for e in raw if e["name"] == tiny["function"]
                 and not any(s <= e["ts"] < t for s, t in wrappers)]
        assert tiny["eager_median_ns"] == pytest.approx(statistics.median(eager) * 1000, abs=1)
        assert tiny["compiled_median_ns"] > SLOWER_RATIO * tiny["eager_median_ns"]  # compile loses
        assert point["compiled_median_ns"] < point["eager_median_ns"]  # Inductor's fused loop wins
        slower = [f for f in d.findings if f.id == "compiled_slower"]
        assert [f.title.split(" is ")[0] for f in slower] == ["tiny"]
        assert f"compile_scenarios.py:{_line_of('def tiny(')}" in slower[0].evidence
        assert "torch.compiler.disable" in slower[0].advice


def test_the_graph_breaks_each_step_crosses_with_line_and_reason(with_logs: Diagnosis, alone: Diagnosis,
                                                                compile_run: Path) -> None:
    counters = json.loads((compile_run / "dynamo.json").read_text())["before_reset"]["counters"]
    lines = [_line_of(".item() > 0"), _line_of('print("inside')]
    steps = [s["step"] for s in with_logs.phases.steps]
    per_step = _report(with_logs).runtime["breaks_per_step"]
    assert [s["step"] for s in per_step] == steps and len(steps) == _constant("RUNTIME_STEPS")
    for s in per_step:  # broken() runs once a step: it crosses each break Dynamo counted once
        assert s["breaks"] == sum(counters["graph_break"].values()) == 2
        assert [a["source"] for a in s["at"]] == [f"{SCRIPT}:{n}" for n in lines]
        assert "Tensor.item()" in s["at"][0]["reason"] and "print" in s["at"][1]["reason"]
    (f,) = [f for f in with_logs.findings if f.id == "graph_breaks"]
    assert f.title == "Each step crosses 2 graph break(s)" and f"{SCRIPT}:{lines[0]}" in f.evidence
    assert "capture_scalar_outputs" in f.advice
    # the trace alone: the resume functions Dynamo made after each break name the line, not the reason
    bare = _report(alone).runtime["breaks_per_step"]
    assert [[(a["source"], a["reason"]) for a in s["at"]] for s in bare] == \
        [[(f"compile_scenarios.py:{n}", None) for n in lines]] * len(steps)
    assert any(f.id == "graph_breaks" and "reason" in f.evidence for f in alone.findings)


def test_a_real_gpu_trace_of_compiled_code(corpus: Path) -> None:
    """TraceLens's torch.compile + Triton trace of a ROCm GPU (the corpus): its guard check is host overhead of
    the GPU's host, its region and Inductor graph are read as they ran."""
    path = corpus / "TraceLens" / "tests" / "traces" / "torch_compile_triton" / "trace.json.gz"
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    d = diagnose(neurontrace.load(path))
    rep = _report(d)
    lookups = [e for e in events if e["name"] == "TorchDynamo Cache Lookup"]
    assert rep.runtime["guard_checks"]["calls"] == len(lookups) > 0
    assert rep.runtime["guard_checks"]["ns"] == pytest.approx(sum(e["dur"] for e in lookups) * 1000, abs=len(lookups))
    regions = [e for e in events if e["name"].startswith("Torch-Compiled Region: ")]
    assert {k: v["calls"] for k, v in rep.regions.items()} == {
        n: sum(e["name"] == f"Torch-Compiled Region: {n}" for e in regions)
        for n in {e["name"].split(": ", 1)[1] for e in regions}}
    graphs = {e["name"].split()[3] for e in events if e["name"].startswith("## Call CompiledFxGraph ")}
    assert {g["hash"] for g in rep.runtime["graphs"]} == graphs
    assert d.phases.compile_ns == 0 and rep.compile_ns == 0  # running compiled code is not compiling
    (gpu,) = d.devices
    assert gpu.device.startswith("rocm")
    assert 0 < gpu.detail_ns.get("host_overhead.guards", 0) <= rep.runtime["guard_checks"]["ns"]
