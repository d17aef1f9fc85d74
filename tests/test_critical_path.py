"""The critical path and what-if (issue #26), proven on real inputs.

- a real 4-process gloo job made once per session (tests/critpath_runs.py, in a subprocess): rank 2 sleeps before
  backward, every rank overlaps an async all-reduce with independent compute (two branches);
- HTA's own expected critical-path output for its simple_add trace (tests/data/hta_critical_path/, MIT), against
  the same input in the corpus;
- corpus traces with CUDA-graph launches, stream syncs and a synthetic Neuron profile for the conservation law.
"""

from __future__ import annotations

import collections
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurontrace
from neurontrace.analysis import critical_path as cp
from neurontrace.analysis import names
from neurontrace.analysis.critical_path import CriticalPath, Walker
from neurontrace.analysis.depgraph import EDGE_TYPES, DepGraph, E, build
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.analysis.whatif import default_window, job_graph, what_if
from neurontrace.cli import main
from neurontrace.columns import matches
from neurontrace.trace import Trace
from tests import critpath_runs as runs

from .conftest import ROOT, SAMPLES, run_workload

HTA_INPUT = "HolisticTraceAnalysis/tests/data/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
HTA_OUTPUT = Path(__file__).parent / "data" / "hta_critical_path" / "overlaid_critical_path_trace.json.gz"
SGLANG = "TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"


@pytest.fixture(scope="session")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("critpath_job")
    run_workload("critpath_runs.py", out)
    return out


@pytest.fixture(scope="session")
def job_diagnosis(job: Path) -> Diagnosis:
    return diagnose(neurontrace.load(job))


def _on_path(g: DepGraph, node: int, lo: int) -> np.ndarray:
    """ns on the path per event, walking back from ``node`` to ``lo``."""
    g.solve() if not len(g.binding) else None
    edges, ns, _, _ = Walker(g).walk(node, lo)
    per = np.zeros(g.n_events, np.int64)
    real = g.event[edges] >= 0
    np.add.at(per, g.event[edges][real], ns[real])
    return per


def _named(g: DepGraph, name: str) -> list[int]:
    return [i for i, n in enumerate(g.host["name"].cast("string").to_pylist()) if n == name]


def _inside(g: DepGraph, mark: int) -> np.ndarray:
    nh = g.n_host
    return np.flatnonzero((g.ev_chain[:nh] == g.ev_chain[mark]) & (g.ev_ts[:nh] >= g.ev_ts[mark])
                          & (g.ev_end[:nh] <= g.ev_end[mark]))


# -- the gloo job -----------------------------------------------------------------------------------------

def test_job_path_runs_through_the_straggler_sleep(job_diagnosis: Diagnosis) -> None:
    value: CriticalPath = job_diagnosis.sections[cp.SECTION.key]
    value.check()
    assert value.cross_rank and value.ranks == [0, 1, 2, 3]
    sleeps = [e for e in value.path.events if e["name"] == "sleep_before_backward"]
    assert len(sleeps) == 2  # both profiled steps
    for e in sleeps:
        assert e["rank"] == runs.SLOW_RANK
        assert e["on_path_ns"] >= 0.99 * e["dur_ns"] and e["dur_ns"] >= runs.SLEEP_S * 1e9
    # nothing the waiting ranks did is on the job's path, except what released the straggler's collectives
    others = [e for e in value.path.events if e["rank"] not in (None, runs.SLOW_RANK)]
    assert sum(e["on_path_ns"] for e in others) < 0.05 * value.path.length_ns
    found = {f.id: f for f in job_diagnosis.findings}
    assert "job_waits_on" in found and f"rank {runs.SLOW_RANK}" in found["job_waits_on"].title
    assert "sleep_before_backward" in found["job_waits_on"].evidence


def test_every_step_path_adds_up(job_diagnosis: Diagnosis) -> None:
    value: CriticalPath = job_diagnosis.sections[cp.SECTION.key]
    assert {s["rank"] for s in value.steps} == {0, 1, 2, 3} and len(value.steps) == 8
    for s in value.steps:
        assert sum(s["breakdown_ns"].values()) == s["length_ns"] == s["end_ns"] - s["start_ns"]


def _on_path_after(g: DepGraph, edges: np.ndarray, events: np.ndarray, after: int) -> int:
    """ns of the path spent in ``events`` after time ``after``."""
    t = g.node_t()
    mine = np.isin(g.event[edges], events) & (g.etype[edges] == E["chain"])
    a, b = t[g.src[edges[mine]]], t[g.dst[edges[mine]]]
    return int(np.clip(b - np.maximum(a, after), 0, None).sum())


def test_two_branches_the_longer_one_sets_the_step(job: Path) -> None:
    """Each step runs an async all-reduce (branch 1) beside overlap_compute (branch 2). The waiting ranks' all-reduce
    lasts until the sleeping rank arrives (longer than the compute): their path runs through it. On the sleeping
    rank the all-reduce is a short transfer: its path runs through the compute.

    Once the shorter branch has ended only the longer one runs: the path follows it for 90% of that time at least
    (Python runs unrecorded between the compute's ops). While both run, a loaded host can starve the compute's
    thread (in the c10d call that queued the all-reduce, or between two of its ops) until just after the
    all-reduce ended: the trace then shows that thread idle until the comm's end, a wake (depgraph's rule), and the
    path takes the comm up to there. So the shorter branch is on the path for 10% of its time at most, unless a
    wake from its end is on the path."""
    outcomes: dict[bool, set[bool]] = {False: set(), True: set()}
    for rank in range(runs.WORLD):
        g = build(neurontrace.load(job / f"rank-{rank}.pt.trace.json.gz"))
        g.solve()
        for step in [i for i in range(g.n_host) if g.host["category"][i].as_py() == "step"]:
            per = _on_path(g, 2 * step + 1, int(g.ev_ts[step]))
            edges = Walker(g).walk(2 * step + 1, int(g.ev_ts[step]))[0]
            inside = (g.ev_ts >= g.ev_ts[step]) & (g.ev_end <= g.ev_end[step])
            comm = [i for i in _named(g, "gloo:all_reduce") if g.ev_ts[step] <= g.ev_ts[i] <= g.ev_end[step]]
            marks = [i for i in _named(g, "overlap_compute") if inside[i]]
            assert len(comm) == 1 and len(marks) == 1
            c, m = comm[0], marks[0]
            compute, comm_ev = _inside(g, m), np.array([c])
            compute_ns, comm_ns = int(g.ev_end[m] - g.ev_ts[m]), int(g.ev_end[c] - g.ev_ts[c])
            (longer, long_end), (shorter, short_end, short_ns) = \
                ((compute, int(g.ev_end[m])), (comm_ev, int(g.ev_end[c]), comm_ns)) if compute_ns > comm_ns else \
                ((comm_ev, int(g.ev_end[c])), (compute, int(g.ev_end[m]), compute_ns))
            tail = long_end - short_end
            assert tail > 0 and _on_path_after(g, edges, longer, short_end) >= 0.9 * tail
            woken = bool(((g.etype[edges] == E["wake"]) & np.isin(g.src[edges], 2 * shorter + 1)).any())
            assert int(per[shorter].sum()) <= 0.1 * short_ns or woken
            outcomes[rank == runs.SLOW_RANK].add(compute_ns > comm_ns)
    assert outcomes == {False: {False}, True: {True}}  # the waiting ranks' comm is longer, the straggler's compute


def test_whatif_off_the_path_changes_nothing_and_on_it_the_step_keeps_the_gain(job: Path) -> None:
    waiting = job_graph(neurontrace.load(job / "rank-0.pt.trace.json.gz"))
    off = what_if(waiting, "overlap_compute", 2.0, default_window(waiting))
    assert off.saved_ns > 0.02 * off.old_ns  # a real saving of the op itself ...
    assert abs(off.gain_ns) <= 0.001 * off.old_ns  # ... that the step does not keep
    slow = job_graph(neurontrace.load(job / f"rank-{runs.SLOW_RANK}.pt.trace.json.gz"))
    on = what_if(slow, "overlap_compute", 2.0, default_window(slow))
    assert on.gain_ns >= 0.9 * on.saved_ns > 0
    assert all(s["new_ns"] < s["old_ns"] for s in on.steps)
    whole = job_graph(neurontrace.load(job))  # the job: ranks joined at their all-reduces
    sleep = what_if(whole, "sleep_before_backward", 2.0, default_window(whole))
    assert sleep.gain_ns >= 0.95 * sleep.saved_ns and sleep.saved_ns >= 2 * runs.SLEEP_S / 2 * 1e9 * 0.99
    compute = what_if(whole, "overlap_compute", 2.0, default_window(whole))  # only the sleeping rank's counts
    assert compute.gain_ns <= 0.5 * compute.saved_ns


def test_job_path_stitched_per_rank_equals_the_joint_graph(job: Path, job_diagnosis: Diagnosis) -> None:
    """The section computes each rank alone and stitches (what a cluster does); the joint graph walks all ranks
    at once through release nodes: the same path."""
    value: CriticalPath = job_diagnosis.sections[cp.SECTION.key]
    g = job_graph(neurontrace.load(job))
    lo, hi = value.path.start_ns, value.path.end_ns
    joint = cp.window_path(Walker(g), lo, hi)
    joint.check()
    big = {(e["rank"], e["name"], e["start_ns"]) for e in joint.events if e["on_path_ns"] > 1_000_000}
    assert big == {(e["rank"], e["name"], e["start_ns"]) for e in value.path.events if e["on_path_ns"] > 1_000_000}
    for kind, ns in value.path.breakdown_ns.items():
        assert abs(joint.breakdown_ns[kind] - ns) <= 0.01 * value.path.length_ns, kind


def test_section_round_trips_and_prints(job_diagnosis: Diagnosis) -> None:
    doc = json.loads(json.dumps(job_diagnosis.as_dict()))
    again = Diagnosis.from_dict(doc).as_dict()
    assert again[cp.SECTION.key] == doc[cp.SECTION.key]
    top = doc[cp.SECTION.key]
    assert set(top) >= {"length_ns", "breakdown_ns", "events"}
    assert set(top["events"][0]) >= {"name", "rank", "device", "start_ns", "dur_ns", "on_path_ns", "source"}
    lines = cp.SECTION.text(job_diagnosis.sections[cp.SECTION.key])
    assert lines[0].startswith("the job's path across ranks") and "sleep_before_backward" in "\n".join(lines)


def test_cli_whatif(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "neurontrace", "whatif", str(job), "--speedup",
                           "sleep_before_backward=2x", "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "neurontrace.whatif/1" and doc["kept"] >= 0.95 and doc["new_ns"] < doc["old_ns"]
    rank0 = str(job / "rank-0.pt.trace.json.gz")
    assert main(["whatif", rank0, "--speedup", "overlap_compute=2"]) == 0
    assert "window keeps" in capsys.readouterr().out
    for bad in ("overlap_compute", "overlap_compute=0x", "no_such_op=2x"):
        assert main(["whatif", rank0, "--speedup", bad]) == 2
        err = capsys.readouterr().err
        assert "--speedup" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


# -- HTA's own output -----------------------------------------------------------------------------------------

def test_agrees_with_hta_simple_add(corpus: Path) -> None:
    """HTA's whole-trace path (its end-to-end expected output) against ours on the same input: every HTA critical
    event but the six device ops at the very end is on our path (docs/critical_path.md explains those six, and
    the annotations ours adds, which HTA leaves out of its graph)."""
    trace = neurontrace.load(corpus / HTA_INPUT)
    g = build(trace)
    g.solve()
    per = _on_path(g, cp.last_node(g, int(g.ev_end.max())), int(g.ev_ts.min()))
    mine = {(g.name(i), round(int(g.ev_ts[i]) / 1000)) for i in np.flatnonzero(per > 0).tolist()}
    raw = json.loads(gzip.decompress(HTA_OUTPUT.read_bytes()))["traceEvents"]
    x = [e for e in raw if e.get("ph") == "X"]
    hta = {(e["name"], round(e["ts"])) for e in x if e.get("args", {}).get("critical")}
    cat = {(e["name"], round(e["ts"])): e.get("cat") for e in x}
    assert len(hta) == 624
    hta_only, mine_only = hta - mine, mine - hta
    assert len(hta & mine) >= 618
    assert collections.Counter(cat[k] for k in hta_only) == {"kernel": 5, "gpu_memset": 1}
    # those six ran after the host's last launches and ended before its final cudaDeviceSynchronize was called
    ends = {(e["name"], round(e["ts"])): e["ts"] + e["dur"] for e in x}
    sync = min(e["ts"] for e in x if e["name"] == "cudaDeviceSynchronize" and e["ts"] > max(k[1] for k in hta_only))
    assert all(sync - 1000 < k[1] and ends[k] < sync for k in hta_only)
    assert collections.Counter(cat[k] for k in mine_only)["user_annotation"] == 8
    assert all(cat[k] in ("user_annotation", "cpu_op", "cuda_runtime") for k in mine_only)
    final = max(e["ts"] for e in x if e["name"] == "cudaDeviceSynchronize")  # the trace's last one: HTA ends before
    assert all(sync - 1000 < k[1] < sync or k == ("cudaDeviceSynchronize", round(final))
               for k in mine_only if cat[k] != "user_annotation")


# -- the graph on other real inputs ------------------------------------------------------------------------

def test_cuda_graph_launch_links_every_kernel_of_its_graph(corpus: Path) -> None:
    g = build(neurontrace.load(corpus / SGLANG))
    graph = np.flatnonzero(matches(g.host["name"], names.GRAPH_LAUNCH))
    corr = g.host["correlation"].to_numpy(zero_copy_only=False)[graph]
    replayed = np.isin(g.dev["correlation"].to_numpy(zero_copy_only=False), corr)
    launch = g.etype == E["launch"]
    assert replayed.sum() > 500  # HTA#290: these are the kernels HTA's path drops
    assert np.isin(g.src[launch] // 2, graph).sum() == replayed.sum()


@pytest.mark.parametrize("rel", [
    "HolisticTraceAnalysis/tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "HolisticTraceAnalysis/tests/data/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    SGLANG,
])
def test_paths_add_up_on_corpus_traces(corpus: Path, rel: str) -> None:
    path = corpus / rel
    d = diagnose(neurontrace.load(path))
    value: CriticalPath = d.sections[cp.SECTION.key]
    value.check()
    kinds = {k for k, v in value.path.breakdown_ns.items() if v}
    assert kinds & {"kernel", "launch", "sync"}  # the path reaches the device, not only the host
    g = build(neurontrace.load(path))
    assert {EDGE_TYPES[t] for t in np.unique(g.etype)} >= {"chain", "launch"}


def test_cpu_sample_and_synthetic_neuron(recwarn: Any) -> None:
    cpu = diagnose(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz")).sections[cp.SECTION.key]
    cpu.check()
    assert cpu.path.breakdown_ns["cpu_op"] > 0.9 * cpu.path.length_ns  # one thread: the path is its ops
    # SYNTHETIC Neuron profile (formats/neuron.md schema; no real profile is public): executions on the path
    neuron = diagnose(neurontrace.load(SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet"))
    value = neuron.sections[cp.SECTION.key]
    value.check()
    assert value.path.breakdown_ns["kernel"] > 0
    # every Flow-table dependency (DMA -> semaphore wait -> instruction) is an edge, the waits on their engines
    trace = neurontrace.load(SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet")
    g = build(trace)
    kinds = trace.flows["kind"].cast("string").to_pylist()
    assert int((g.etype == E["flow"]).sum()) == kinds.count("dependency") > 0


def test_empty_trace_has_no_section() -> None:
    assert cp.analyse(Trace()) is None


# -- the viewer -----------------------------------------------------------------------------------------------

def test_viewer_toggle_outlines_the_path_and_shows_the_breakdown(job: Path) -> None:
    pytest.importorskip("dash")
    from neurontrace.app import callbacks
    from neurontrace.app import critical_path as app_cp
    from neurontrace.app.model import ViewModel

    model = ViewModel.build(neurontrace.load(job))
    model.analyse()
    highlight, text = app_cp.on_toggle(model, ["on"], None)
    assert app_cp.is_pick(highlight) and "idle" in text and "events:" in text
    marked = callbacks.marked(model, highlight)
    ix = model.index
    names_on_path = {str(ix.names[ix.name[p]]) for p in marked}
    assert "sleep_before_backward" in names_on_path  # the straggler's sleep is outlined
    assert model.analysis is not None
    value: CriticalPath = model.analysis.diagnosis.sections[cp.SECTION.key]
    assert len(marked) >= len(value.path.events)  # every event on the path, not only the 50 in the document
    fig, _view, _status = callbacks.on_timeline(model, "nt-highlight", None, None, {"t0": 0, "t1": ix.span_ns,
                                                                                   "auto": False}, highlight=highlight)
    assert [t for t in fig["data"] if t["name"] == "marked"]
    cleared, text = app_cp.on_toggle(model, [], highlight)
    assert cleared is None and text == "" and callbacks.marked(model, cleared) == ()


def test_stream_wait_event_holds_the_waiting_streams_next_op(corpus: Path) -> None:
    """HTA's multi-stream trace: cudaEventRecord on stream 20 then cudaStreamWaitEvent on stream 24 (Kineto's
    cuda_sync record names both): the first op on stream 24 after the wait depends on stream 20's last kernel."""
    g = build(neurontrace.load(corpus / "HolisticTraceAnalysis/tests/data/critical_path/"
                                        "cuda_event_sync_multi_stream/event_sync_trace.json.gz"))
    nh = g.n_host
    tid = g.dev["tid"].cast("string").to_pylist()
    cross = [(tid[g.src[e] // 2 - nh], tid[g.dst[e] // 2 - nh]) for e in np.flatnonzero(g.etype == E["sync"])
             if g.src[e] // 2 >= nh and g.dst[e] // 2 >= nh]
    assert cross == [("20", "24")]
