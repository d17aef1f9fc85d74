"""Out of core, the sections critical_path, memory, compile and neuron_summary of one rank are computed slice by
slice (``Options.owned``) and merged (``Section.merge``): the merge must equal ``compute`` on the whole rank, as
``to_json`` documents, on real inputs — the corpus (resnet50 on a V100, Qwen on an H100, two torch.compile traces),
a real CPU run this session makes (tests/sliced_workload.py: steps, recompiles, a leak) — cut at step boundaries
(what diagnose DATASET's planner chooses) and at arbitrary instants. The critical path is exact at step
boundaries only (analysis/critical_path_slices.py says why); memory and compile at any cut."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import neurontrace
from neurontrace.analysis import compile, critical_path, memory, memory_fold, neuron_summary
from neurontrace.analysis.contract import Context, Options
from neurontrace.analysis.stalls import frame_sources
from neurontrace.trace import Trace
from tests.conftest import ROOT, corpus_root, run_workload
from tests.sliced_sections import Sliced, even_cuts, step_cuts

RESNET = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0"
H100 = "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
COMPILED = ("TraceLens/tests/traces/torch_compile_triton/trace.json.gz",
            "HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz")


def _corpus(rel: str) -> Trace:
    root = corpus_root()
    if root is None:
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    path = root / rel
    if path.is_dir():
        path = next(path.glob("*.json.gz"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neurontrace.load(path)


@pytest.fixture(scope="session")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Sliced:
    """tests/sliced_workload.py, once per session in a process of its own, diagnosed whole."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("sliced_run") / "run.pt.trace.json"
    run_workload("sliced_workload.py", out)
    return Sliced(neurontrace.load(out))


@pytest.fixture(scope="module")
def resnet() -> Sliced:
    return Sliced(_corpus(RESNET))


def _conserved(doc: dict[str, Any], want: dict[str, Any]) -> None:
    """The merged path covers the whole window and its parts add up to it (at any cut)."""
    assert (doc["start_ns"], doc["end_ns"], doc["length_ns"]) == (want["start_ns"], want["end_ns"], want["length_ns"])
    assert sum(doc["breakdown_ns"].values()) == doc["length_ns"]
    assert min(doc["breakdown_ns"].values()) >= 0


def test_cpu_run_merges_exactly_at_step_boundaries(cpu_run: Sliced) -> None:
    cuts = step_cuts(cpu_run.trace)
    assert len(cuts) >= 3
    parts, sliced = cpu_run.slices(cuts), cpu_run.sliced(cuts)
    for section in (critical_path.SECTION, memory.SECTION, compile.SECTION):
        assert cpu_run.merged(section, parts) == cpu_run.want(section), section.key
        assert cpu_run.doc(section, sliced) == cpu_run.want(section), section.key  # diagnose_sliced too
    # what the run is made of reaches the merged values: steps, recompiles and compiled code, a leak
    cp = cpu_run.merged(critical_path.SECTION, parts)
    assert len(cp["steps"]) == len(cuts) + 1 and cp["event_count"] > 0
    comp = cpu_run.merged(compile.SECTION, parts)
    assert comp["recompiles"] >= 2 and comp["regions"] and comp["runtime"]["guard_checks"]["calls"] >= len(cuts)
    (dev,) = [d for d in cpu_run.merged(memory.SECTION, parts)["devices"] if d["device"] == "cpu"]
    assert dev["growth_bytes_per_step"] == 8 * 1024 * 1024 and dev["never_freed"] and dev["live_at_peak"]


def test_cpu_run_at_arbitrary_instants(cpu_run: Sliced) -> None:
    """Cuts inside steps, compiles and allocations: memory and compile stay exact; the critical path keeps its
    length and conservation law, and every step (each in the slice it starts in) is still reported."""
    parts = cpu_run.slices(even_cuts(cpu_run.trace, 5))
    for section in (memory.SECTION, compile.SECTION):
        assert cpu_run.merged(section, parts) == cpu_run.want(section), section.key
    cp, want = cpu_run.merged(critical_path.SECTION, parts), cpu_run.want(critical_path.SECTION)
    _conserved(cp, want)
    assert [s["step"] for s in cp["steps"]] == [s["step"] for s in want["steps"]]


def test_resnet50_merges_exactly_at_step_boundaries(resnet: Sliced) -> None:
    cuts = step_cuts(resnet.trace)
    assert len(cuts) >= 3
    parts, sliced = resnet.slices(cuts), resnet.sliced(cuts)
    for section in (critical_path.SECTION, memory.SECTION, compile.SECTION):
        assert resnet.merged(section, parts) == resnet.want(section), section.key
        assert resnet.doc(section, sliced) == resnet.want(section), section.key  # diagnose_sliced too
    assert resnet.want(critical_path.SECTION)["breakdown_ns"]["launch"] > 0  # a GPU run's path: launches
    assert resnet.want(memory.SECTION)["devices"]


def _live_blocks(trace: Trace, before: int) -> int:
    """The blocks allocated before ``before`` and not freed or reused by then, over the rank's allocators (from
    the whole rank's rows, by memory.py's own rules)."""
    t = trace.memory_events
    keys = [f"{r}|{d}|{p}" for r, d, p in zip(t["rank"].to_pylist(), t["device"].cast(pa.string()).to_pylist(),
                                              t["pid"].cast(pa.string()).to_pylist(), strict=True)]
    live = 0
    for key in set(keys):
        dev = t.filter(pa.array([k == key for k in keys]))
        dev = dev.take(pa.array(np.argsort(dev["ts_ns"].to_numpy(), kind="stable")))
        rows = memory._rows(dev, {})
        upto = int(np.searchsorted(rows.ts, before, "left"))
        live += int((rows.tracked[:upto] & (rows.freed_at[:upto] >= upto)).sum())
    return live


def _holds_tables(obj: Any) -> bool:
    stack, seen = [obj], set()
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, (pa.Table, pa.Array, pa.ChunkedArray, np.ndarray)):
            return True
        stack += list(o.values()) if isinstance(o, dict) else list(o) if isinstance(o, (list, tuple)) else \
            list(vars(o).values()) if hasattr(o, "__dict__") else []
    return False


def test_memory_folds_slice_by_slice_holding_the_live_blocks_only(cpu_run: Sliced) -> None:
    """diagnose DATASET folds each slice into memory's state and drops it (analysis/memory_fold.py): after every
    slice (cuts at arbitrary instants, inside steps and allocations) the state holds no row table or array and
    exactly the blocks live at the slice's end in the whole rank (a leak's among them), and it finishes to the
    whole rank's value."""
    slices = cpu_run.slices(even_cuts(cpu_run.trace, 9))
    state = None
    held = []
    for s in slices:
        part = s.get(memory.SECTION.key)
        state = memory_fold.fold(state, part)
        assert state is not None and state.owned is not None and not _holds_tables(state)
        held.append((sum(len(d.live) for d in state.devices.values()), _live_blocks(cpu_run.trace, state.owned[1])))
    assert all(got == want for got, want in held), held
    assert max(got for got, _ in held) > 0  # the run allocates and frees across the cuts
    assert memory.SECTION.finish is not None
    assert memory.SECTION.to_json(memory.SECTION.finish(state)) == cpu_run.want(memory.SECTION)


def test_resnet50_memory_at_arbitrary_instants(resnet: Sliced) -> None:
    parts = resnet.slices(even_cuts(resnet.trace, 7))
    assert resnet.merged(memory.SECTION, parts) == resnet.want(memory.SECTION)
    _conserved(resnet.merged(critical_path.SECTION, parts), resnet.want(critical_path.SECTION))


def test_h100_qwen_at_arbitrary_instants() -> None:
    """One profiled step (no step boundary to cut at): memory and compile exact; the path conserved."""
    run = Sliced(_corpus(H100))
    parts = run.slices(even_cuts(run.trace, 4))
    assert run.want(memory.SECTION)["devices"]  # 2,450 allocator events on cuda:0
    for section in (memory.SECTION, compile.SECTION):
        assert run.merged(section, parts) == run.want(section), section.key
    _conserved(run.merged(critical_path.SECTION, parts), run.want(critical_path.SECTION))


@pytest.mark.parametrize("rel", COMPILED)
def test_compiled_corpus_traces_at_arbitrary_instants(rel: str) -> None:
    run = Sliced(_corpus(rel))
    want = run.want(compile.SECTION)
    assert want["regions"] or want["frames"]  # real compile evidence in the trace
    assert run.merged(compile.SECTION, run.slices(even_cuts(run.trace, 5))) == want


def test_neuron_summary_is_the_first_slices() -> None:
    """SYNTHETIC (sample_traces/synthetic_neuron, SYNTHETIC.md): a Neuron Explorer profile with its Summary.
    Neuron's per-NeuronCore figures are whole-run summaries (formats/neuron.md §3.7 ``Summary``), read from the
    metadata every slice carries whole: each slice holds them all, the merge is the first."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = Sliced(neurontrace.load(ROOT / "sample_traces" / "synthetic_neuron" / "synthetic_mlp_parquet"))
    parts = run.slices(even_cuts(run.trace, 3))
    values = [neuron_summary.SECTION.to_json(p[neuron_summary.SECTION.key]) for p in parts]
    want = run.want(neuron_summary.SECTION)
    assert want and all(v == want for v in values)
    assert run.merged(neuron_summary.SECTION, parts) == want


def test_merge_refuses_values_computed_without_a_slice(resnet: Sliced) -> None:
    ctx = Context(resnet.trace, resnet.whole.devices, [], frame_sources(resnet.trace), Options())
    for section in (memory.SECTION, compile.SECTION, critical_path.SECTION):
        assert section.merge is not None
        with pytest.raises(ValueError, match=r"Options\.owned"):
            section.merge([section.compute(ctx)])

