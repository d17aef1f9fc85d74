"""Preparation on real torch.compile runs made here (CPU, tests/compile_scenarios.py), checked against Dynamo's
own counters and compile_times(): recompiles with their guard, graph breaks with line and reason, a warm cache's
hits, a failing backend, the recompile limit; compile is compile (never compute), steady statistics leave compile
steps out, and a steady trace that compiles nothing has no compile at all."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurontrace
from neurontrace.analysis.compile import kineto_rows, report
from neurontrace.analysis.diagnose import diagnose
from neurontrace.analysis.phases import phases
from neurontrace.errors import MixedRunsError
from neurontrace.parsers import compile_logs
from neurontrace.parsers._compile_rows import CompileLog
from tests.conftest import ROOT

pytestmark = pytest.mark.torch
SCRIPT = ROOT / "tests" / "compile_scenarios.py"


@pytest.fixture(scope="session")
def run(compile_run: Path) -> Path:
    """tests/conftest.py's compile_run: every scenario, once per session."""
    return compile_run


def _dynamo(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "dynamo.json").read_text()))


def _log(run: Path) -> CompileLog:
    return compile_logs.read([run / "compile"])


def _line_of(text: str) -> int:
    """The line of the scenario script holding ``text`` (so no line number is written down twice)."""
    return next(i for i, ln in enumerate(SCRIPT.read_text().splitlines(), 1) if text in ln)


def test_recompiles_counted_with_the_guard_that_failed(run: Path) -> None:
    rep = report(_log(run).rows)
    assert rep is not None
    mlp = next(f for f in rep.frames if f.function == "mlp")
    ids = [c["compile_id"] for c in mlp.compiles]
    assert ids == ["0/0", "0/1", "0/2"]  # the three shapes of SHAPES: one compile and two recompiles
    reasons = [c["recompile_reason"] for c in mlp.compiles]
    assert reasons[0] is None
    assert "tensor 'x' size mismatch at index 0. expected 8, actual 16" in reasons[1]
    assert "expected 16, actual 32" in reasons[2]
    assert mlp.source == f"{SCRIPT}:{_line_of('def mlp(')}"
    # Dynamo's own count of compiles: one _compile.compile_inner per compile that ran to its end
    inner = _dynamo(run)["before_reset"]["compile_times"]["_compile.compile_inner"]
    done = [c for f in rep.frames for c in f.compiles if c["status"] in ("ok", "failed")]
    assert len(done) == len(inner) + 1  # + the compile after torch._dynamo.reset() (its times were reset)


def test_compile_time_within_5_percent_of_dynamo(run: Path) -> None:
    dyn = _dynamo(run)
    expected = sum(dyn["before_reset"]["compile_times"]["_compile.compile_inner"]) * 1e9
    expected += sum(dyn["after_reset"]["compile_times"]["_compile.compile_inner"]) * 1e9
    rep = report(_log(run).rows)
    assert rep is not None
    assert abs(rep.compile_ns - expected) / expected < 0.05
    # the trace alone: its compile ranges against the compiles made while it recorded (the first three)
    trace = neurontrace.load(run / "recompile.pt.trace.json")
    traced = sum(dyn["before_reset"]["compile_times"]["_compile.compile_inner"][:3]) * 1e9
    assert abs(phases(trace).compile_ns - traced) / traced < 0.05
    assert [r["compile_id"] for r in kineto_rows(trace)] == ["0/0", "0/1", "0/2"]


def test_graph_breaks_with_line_and_reason(run: Path) -> None:
    rep = report(_log(run).rows)
    assert rep is not None
    breaks = [g for f in rep.frames for g in f.graph_breaks]
    dyn = _dynamo(run)["before_reset"]["counters"]
    assert len(breaks) == rep.graph_breaks == sum(dyn["graph_break"].values()) == 2
    assert [g["source"] for g in breaks] == [f"{SCRIPT}:{_line_of('.item() > 0')}", f"{SCRIPT}:{_line_of('print(')}"]
    assert "Tensor.item()" in breaks[0]["reason"] and "print" in breaks[1]["reason"]
    # the text log alone says the same
    text = compile_logs.read([run / "compile" / "torch_logs.txt"])
    assert [r["source"] for r in text.rows if r["event"] == "graph_break"] == [g["source"] for g in breaks]


def test_warm_cache_hits_and_failure_and_recompile_limit(run: Path) -> None:
    rep = report(_log(run).rows)
    assert rep is not None
    ind = _dynamo(run)["after_reset"]["counters"]["inductor"]
    # every Inductor compile (the runtime scenario's pointwise chain hits a cache kept between sessions)
    assert (rep.cache_hits, rep.cache_misses) == (ind["fxgraph_cache_hit"], ind["fxgraph_cache_miss"])
    cached = [c for f in rep.frames if f.function == "cached" for c in f.compiles]
    assert [c["cache"] for c in cached] == ["miss", "hit"]
    frames = _dynamo(run)["before_reset"]["counters"]["frames"]
    # Dynamo's failed frames: the raising backend, and the attempt past the recompile limit
    assert rep.failed == 2 == frames["total"] - frames["ok"]
    failed = [(f.function, c) for f in rep.frames for c in f.compiles if c["status"] == "failed"]
    assert [fn for fn, _c in failed] == ["fails", "limited"]
    assert failed[0][1]["fail_type"] == "BackendCompilerFailed"
    assert "this backend always fails" in failed[0][1]["fail_reason"]
    assert [lim["function"] for lim in rep.recompile_limits] == ["limited"]
    assert "recompile_limit (2)" in rep.recompile_limits[0]["reason"]  # the warning torch printed
    alone = report(compile_logs.read([run / "compile" / "torch_trace"]).rows)
    assert alone is not None and [lim["function"] for lim in alone.recompile_limits] == ["limited"]


def test_compile_is_never_compute_and_compile_steps_leave_the_steady_median(run: Path) -> None:
    trace = neurontrace.load(run / "recompile.pt.trace.json")
    p = phases(trace)
    d = diagnose(trace, window=(p.trace_start_ns, p.trace_end_ns))  # the whole trace, compile steps included
    cpu = d.devices[0]
    p = d.phases
    assert cpu.detail_ns.get("host_overhead.compile", 0) == pytest.approx(p.compile_ns, rel=0.01)
    assert cpu.causes_ns["compute"] < p.compile_ns
    compiling = [s["step"] for s in p.compile_steps]
    assert len(compiling) == 3 and compiling == [s["step"] for s in p.steps[:3]]  # the three new shapes
    steady = [s["dur_ns"] for s in p.steps[3:]]
    assert p.steady_median_ns == int(np.median(steady))
    assert p.first_step_split["compile_ns"] > 0.5 * p.steps[0]["dur_ns"]


def test_a_steady_trace_compiles_nothing(run: Path) -> None:
    trace = neurontrace.load(run / "steady.pt.trace.json")
    names = set(trace.system_events["name"].to_pylist())
    # the runtime wrappers are there (with_stack=True) and are not compile
    assert any(re.search(r"torch/_functorch/.*\.py\(\d+\): (forward|runtime_wrapper)$", n) for n in names)
    d = diagnose(trace)
    assert d.phases.compile_ns == 0 and not d.phases.compile_steps
    assert d.devices[0].detail_ns.get("host_overhead.compile", 0) == 0
    assert d.sections["compile"].compile_ns == 0 and not d.sections["compile"].frames
    # the compiled code did run: once a step, as the one region Dynamo compiled
    assert {k: v["calls"] for k, v in d.sections["compile"].regions.items()} == {"0/0": len(d.phases.steps)}


def test_diagnose_reads_the_logs_beside_the_trace(run: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", str(run / "recompile.pt.trace.json"),
                           "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    comp = doc["compile"]
    assert set(comp) >= {"compile_ns", "recompiles", "graph_breaks", "cache_hits", "cache_misses", "failed",
                         "frames", "neuron"}
    assert comp["recompiles"] == 4 and comp["graph_breaks"] == 2  # mlp's 0/1, 0/2 and limited's two
    ids = {f["id"] for f in doc["findings"]}
    assert {"recompiles", "recompile_limit", "graph_breaks", "compile_failed"} <= ids
    assert doc["phases"]["compile_steps"] == 3


def test_logs_of_another_run_are_refused(run: Path) -> None:
    other = ROOT.parent / "shared" / "corpus" / "compile" / "tlparse" / "simple.log"
    if not other.is_file():
        pytest.skip("the compile-log corpus (../shared/corpus/compile) is not beside this checkout")
    proc = subprocess.run([sys.executable, "-m", "neurontrace", "diagnose", str(run / "steady.pt.trace.json"),
                           "--compile-log", str(other)], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == MixedRunsError.exit_code and "another run" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_diff_and_catalog_carry_preparation(run: Path, tmp_path: Path) -> None:
    from neurontrace.analysis.diff import diff_diagnoses
    from neurontrace.catalog import RunCatalog

    log = _log(run)
    cold = diagnose(neurontrace.load(run / "recompile.pt.trace.json"), compiles=log.table())
    warm = diagnose(neurontrace.load(run / "steady.pt.trace.json"))
    d = diff_diagnoses(cold.as_dict(), warm.as_dict())
    assert d.phases["compile.recompiles"] == {**d.phases["compile.recompiles"], "baseline": cold.sections[
        "compile"].recompiles, "change": 0}
    assert d.phases["compile_steps"]["baseline"] == 3 and d.phases["compile_steps"]["change"] == 0
    steady = [s["dur_ns"] for s in cold.phases.steps[1:] if not s["compile_ns"]]
    assert d.steps["steady_median_ns"]["baseline"] == int(np.median(steady))
    with RunCatalog(tmp_path / "runs", create=True) as cat:
        cat.save(neurontrace.load(run / "recompile.pt.trace.json"), cold, paths=[run / "recompile.pt.trace.json"])
        (rec,) = cat.runs()
        s = rec.summary()
        assert s["time_to_first_step_ns"] == cold.phases.time_to_first_step_ns
        assert s["recompiles"] == cold.sections["compile"].recompiles


def test_the_viewer_draws_compile_spans_in_the_compile_colour(run: Path) -> None:
    from neurontrace.app import tracks
    from neurontrace.app.palette import CATEGORIES

    trace = neurontrace.load(run / "recompile.pt.trace.json")
    cols = tracks._columns(trace.system_events, tracks.SYSTEM_TABLE)
    drawn = {cols["names"][n]: CATEGORIES[c] for n, c in zip(cols["name"], cols["cat"], strict=True)}
    assert drawn["_compile.compile_inner (dynamo_timed)"] == drawn["dynamo"] == "compile"
    assert drawn["Torch-Compiled Region: 0/0"] != "compile"  # running the compiled code is not compiling
