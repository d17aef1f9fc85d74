"""The device sections computed slice by slice (``Options.owned``) and merged equal the whole rank's values.

On real traces of the corpus (H100 Qwen, V100 resnet50 with 6 steps, MI300X bert, MI250 ROCm, an MI300X sglang
decode that replays a HIP graph), a real CPU training run made here with PyTorch, and the SYNTHETIC Neuron
samples (no real Neuron profile is public; sample_traces/synthetic_neuron/SYNTHETIC.md). Each rank is cut at its
ProfilerStep starts (where it has 4+ steps) and at arbitrary instants; each slice's value goes through the
section's JSON and back before ``merge``, and the merged value must equal ``compute`` on the whole rank as JSON.
The device a slice's section runs for is the whole rank's attribution (its window): the in-memory reference
``diagnose_sliced`` hands the slices the same.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurontrace
from neurontrace.analysis import engine_waits, graph_replay, launch, registry, slices, value_counts
from neurontrace.analysis.attribution import DeviceAttribution, attribute
from neurontrace.analysis.contract import Context, DeviceSection, Options
from neurontrace.analysis.diagnose import diagnose_rank
from neurontrace.analysis.malformed import sanitize
from neurontrace.analysis.slice_reach import StreamedReach, halo_ns
from neurontrace.analysis.sliced import diagnose_sliced
from neurontrace.columns import select
from neurontrace.errors import NeuronProfileWarning
from neurontrace.trace import Trace
from tests.conftest import ROOT, corpus_root

QWEN = "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET = "kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
MI300 = "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"
MI250 = "HolisticTraceAnalysis/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
GRAPHS = "TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"  # one hipGraphLaunch
GPU = (QWEN, RESNET, MI300, MI250, GRAPHS)
NEURON = ("synthetic_mlp_parquet", "synthetic_capture")  # SYNTHETIC (sample_traces/synthetic_neuron)
# Exact at any cut of a plain slice (its instants' events only); launch and ops link across time (slice_reach.py).
PLAIN = ("dominant", "overlap", "graph_launches", "engine_waits")
SECTIONS = {s.key: s for s in registry.DEVICE_SECTIONS}


@cache
def _loaded(path: str) -> tuple[Trace, list[DeviceAttribution]]:
    trace, _ = sanitize(neurontrace.load(path))  # what diagnose_rank analyses
    return trace, attribute(trace)


def _corpus(name: str) -> tuple[Trace, list[DeviceAttribution]]:
    root = corpus_root()
    if root is None:
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    return _loaded(str(root / name))


def _neuron(name: str) -> tuple[Trace, list[DeviceAttribution]]:
    with warnings.catch_warnings():  # the synthetic samples carry a neuron-explorer warning of their own
        warnings.simplefilter("ignore", NeuronProfileWarning)
        return _loaded(str(ROOT / "sample_traces" / "synthetic_neuron" / name))


def _bounds(trace: Trace) -> tuple[int, int]:
    """[first start, last end] of the rank: the slices together own every instant of it."""
    starts = [t["ts_ns"].to_numpy() for t in (trace.system_events, trace.device_events) if t.num_rows]
    ends = [t["ts_ns"].to_numpy() + t["dur_ns"].to_numpy() for t in (trace.system_events, trace.device_events)
            if t.num_rows]
    return int(min(s.min() for s in starts)), int(max(e.max() for e in ends)) + 1


def step_cuts(trace: Trace) -> list[int]:
    """The ProfilerStep starts after the first (where the planner of ``diagnose DATASET`` cuts)."""
    return sorted(select(trace.system_events, "category", "step")["ts_ns"].to_pylist())[1:]


def odd_cuts(devices: list[DeviceAttribution], n: int = 4) -> list[int]:
    """``n`` instants spread over the devices' windows, at no round offset (inside ops, waits and steps)."""
    lo, hi = min(d.window[0] for d in devices), max(d.window[1] for d in devices)
    return sorted({int(x) + 7919 * (i + 1) for i, x in enumerate(np.linspace(lo, hi, n + 2)[1:-1])})


def _json(s: DeviceSection, v: Any) -> Any:
    return None if v is None else json.loads(json.dumps(s.to_json(v)))


def whole_and_merged(trace: Trace, devices: list[DeviceAttribution], cuts: list[int], halo: int = 0,
                     keys: tuple[str, ...] = tuple(SECTIONS)) -> list[tuple[str, str, Any, Any]]:
    """(device, section, whole rank's JSON, merged slices' JSON) per device and section in ``keys``.

    Slice i owns [cuts[i-1], cuts[i]); its trace holds the events overlapping its instants widened by ``halo``.
    Each slice value is sent through the section's JSON and back, as it would travel between processes."""
    whole = Context(trace, devices, [], {})
    lo, hi = _bounds(trace)
    edges = [lo, *(c for c in cuts if lo < c < hi), hi]
    per: dict[tuple[str, str], list[Any]] = {}
    for a, b in pairwise(edges):
        part = Context(slices.slice_of(trace, (a - halo, b + halo)), devices, [], {}, Options(owned=(a, b)))
        for d in devices:
            mine = replace(d, sections={})
            for key in keys:
                s = SECTIONS[key]
                v = s.compute(part, mine)
                per.setdefault((d.device, key), []).append(None if v is None else s.from_json(_json(s, v)))
    out = []
    for d in devices:
        for key in keys:
            s = SECTIONS[key]
            assert s.merge is not None, key
            out.append((d.device, key, _json(s, s.compute(whole, d)), _json(s, s.merge(per[(d.device, key)]))))
    return out


def _assert_same(rows: list[tuple[str, str, Any, Any]]) -> None:
    for device, key, whole, merged in rows:
        assert merged == whole, f"{device} {key}"


@pytest.mark.parametrize("name", GPU)
def test_gpu_traces_plain_slices_at_arbitrary_instants(name: str) -> None:
    trace, devices = _corpus(name)
    rows = whole_and_merged(trace, devices, odd_cuts(devices), keys=PLAIN)
    _assert_same(rows)
    found = {key for _, key, whole, _ in rows if whole is not None}
    assert {"dominant", "overlap"} <= found  # real values were compared, not two absences
    if name == GRAPHS:
        assert next(w for _, k, w, _ in rows if k == "graph_launches") == 1


@pytest.mark.parametrize("name", GPU)
def test_gpu_traces_every_section_with_the_reach_at_arbitrary_instants(name: str) -> None:
    trace, devices = _corpus(name)
    halo = halo_ns(trace, [(d.device, d.rank) for d in devices])
    assert halo > 0
    rows = whole_and_merged(trace, devices, odd_cuts(devices), halo)
    _assert_same(rows)
    found = {key for _, key, whole, _ in rows if whole is not None}
    assert {"dominant", "overlap", "ops", "launch"} <= found


def test_resnet50_cut_at_its_steps() -> None:
    """Five cuts at ProfilerStep starts: the plain slices' sections, and every section with the reach."""
    trace, devices = _corpus(RESNET)
    cuts = step_cuts(trace)
    assert len(cuts) >= 3
    _assert_same(whole_and_merged(trace, devices, cuts, keys=PLAIN))
    _assert_same(whole_and_merged(trace, devices, cuts, halo_ns(trace, [(d.device, d.rank) for d in devices]), keys=("ops", "launch")))


def test_a_plain_slice_misses_the_launch_calls_made_before_it() -> None:
    """Why launch needs the reach: resnet50's GPU runs ~12 ms behind its host, so a step's first kernels were
    launched in the step before; a plain slice does not hold their calls (slice_reach.py)."""
    trace, devices = _corpus(RESNET)
    ((_, _, whole, merged),) = whole_and_merged(trace, devices, step_cuts(trace), keys=("launch",))
    assert whole["unmatched"] == 0 and merged["unmatched"] > 0
    assert merged["kernels"] + merged["unmatched"] == whole["kernels"]  # each op still counted once


@pytest.mark.parametrize("where", ["steps", "arbitrary"])
def test_a_real_cpu_run_merges_every_section_without_a_reach(outofcore_run: Path, where: str) -> None:
    """A CPU trace launches nothing: its ops are counted where they start, by their own time, at any cut."""
    trace, devices = _loaded(str(outofcore_run))  # tests/outofcore_workload.py's real CPU training run
    cuts = step_cuts(trace) if where == "steps" else odd_cuts(devices)
    assert len(cuts) >= 3 and halo_ns(trace, [(d.device, d.rank) for d in devices]) == 0
    rows = whole_and_merged(trace, devices, cuts)
    _assert_same(rows)
    assert {"dominant", "ops"} <= {key for _, key, whole, _ in rows if whole is not None}


@pytest.mark.parametrize("name", NEURON)
def test_synthetic_neuron_every_section_at_arbitrary_instants(name: str) -> None:
    """SYNTHETIC samples: engine waits (20 waits on two engines, throttling) and the other sections."""
    trace, devices = _neuron(name)
    rows = whole_and_merged(trace, devices, odd_cuts(devices, 6))
    _assert_same(rows)
    waits = [w for _, k, w, _ in rows if k == "engine_waits"]
    assert waits and all(w["wait_count"] == 20 and w["wait_wall_ns"] > 0 for w in waits)


def test_engine_waits_cut_inside_waits() -> None:
    """SYNTHETIC sample, every cut in the middle of a wait: the wait is counted once, and the count, the wall
    time, throttling and each engine's total are exact whatever producer each side finds (module doc); with the
    halo, everything is."""
    trace, devices = _neuron("synthetic_mlp_parquet")
    w = select(select(trace.device_events, "category", "sync_wait"), "device", devices[0].device)
    mid = (w["ts_ns"].to_numpy() + w["dur_ns"].to_numpy() // 2)[::4]
    assert len(mid) >= 3
    ((_, _, whole, merged),) = whole_and_merged(trace, devices[:1], sorted(mid.tolist()), keys=("engine_waits",))
    for key in ("wait_count", "wait_wall_ns", "throttled_ns", "summary"):
        assert merged[key] == whole[key], key
    assert {e: sum(v.values()) for e, v in merged["waits_by_engine_ns"].items()} == \
        {e: sum(v.values()) for e, v in whole["waits_by_engine_ns"].items()}
    assert sum(merged["waits_ns"].values()) == sum(whole["waits_ns"].values()) > 0
    # with the slice_reach halo (the longest wait + the tolerance) the split by producer is exact too
    halo = halo_ns(trace, [(devices[0].device, devices[0].rank)])
    assert halo > 0
    ((_, _, whole, merged),) = whole_and_merged(trace, devices[:1], sorted(mid.tolist()), halo,
                                                keys=("engine_waits",))
    assert merged == whole


def test_merges_of_absent_values() -> None:
    """A device with nothing in any slice stays absent; a slice with no graph launch adds nothing."""
    assert graph_replay.merge([None, graph_replay.GraphLaunches(0)]) is None
    assert graph_replay.merge([graph_replay.GraphLaunches(2), None, graph_replay.GraphLaunches(1)]) == \
        graph_replay.GraphLaunches(3)
    assert launch.merge([None, None]) is None and engine_waits.merge([None]) is None


@pytest.mark.parametrize("n", [1, 2, 7, 10, 1001])
def test_value_counts_read_like_numpy(n: int) -> None:
    """Percentiles (method="lower"), medians and maxima off merged value counts equal numpy's on the values."""
    rng = np.random.default_rng(n)
    values = rng.integers(-50, 400, size=n) * rng.integers(1, 4, size=n)
    cut = sorted(rng.integers(0, n + 1, size=3).tolist())
    counts = value_counts.merge(value_counts.of(p) for p in np.split(values, cut))
    for q in (0, 10, 50, 90, 99, 100):
        assert value_counts.lower(counts, q) == int(np.percentile(values, q, method="lower")), q
    assert value_counts.median(counts) == float(np.median(values))
    assert value_counts.largest(counts) == int(values.max())
    assert value_counts.size(counts) == n and value_counts.lower(value_counts.Counts(), 50) is None
    assert value_counts.Counts.from_list(json.loads(json.dumps(counts.as_list()))) == counts


@pytest.mark.parametrize("name", [QWEN, RESNET])
def test_a_slice_without_device_work(name: str) -> None:
    """A slice of host work only (before the device's first event): its values add nothing and lose nothing
    (the steps it sees still reach overlap's per-step list)."""
    trace, devices = _corpus(name)
    first_host = int(trace.system_events["ts_ns"].to_numpy().min())
    first_dev = int(trace.device_events["ts_ns"].to_numpy().min())
    assert first_dev - first_host > 2000
    cuts = [first_host + 1000, first_dev - 1, *odd_cuts(devices, 2)]
    quiet = slices.slice_of(trace, (first_host + 1000, first_dev - 1))
    assert quiet.device_events.num_rows == 0 and quiet.system_events.num_rows > 0
    _assert_same(whole_and_merged(trace, devices, cuts, halo_ns(trace, [(d.device, d.rank) for d in devices])))
    _assert_same(whole_and_merged(trace, devices, cuts, keys=PLAIN))


@pytest.mark.parametrize("name", [RESNET, GRAPHS])
def test_diagnose_sliced_gives_the_device_sections_of_the_whole_rank(name: str) -> None:
    """Through ooc's in-memory reference (analysis/sliced.py: the slice plan, each slice with the halo):
    resnet50 cut at its 5 step starts, the sglang decode (a HIP graph replay) at 4 arbitrary instants."""
    trace, devices = _corpus(name)
    cuts = step_cuts(trace) if name == RESNET else odd_cuts(devices)
    whole, parts = diagnose_rank(trace), diagnose_sliced(trace, cuts)
    for a, b in zip(whole.devices, parts.devices, strict=True):
        for key, s in SECTIONS.items():
            assert _json(s, b.sections.get(key)) == _json(s, a.sections.get(key)), (a.device, key)
    assert {"dominant", "ops", "launch", "overlap"} <= set(whole.devices[0].sections)


@pytest.mark.parametrize("name", GPU)
def test_the_reach_found_slice_by_slice_is_never_short(name: str) -> None:
    """StreamedReach (what diagnose DATASET can compute over plain slices) is at least the whole rank's
    halo, and cutting with it gives every device section of the whole rank (resnet50: at its steps)."""
    trace, devices = _corpus(name)
    cuts = step_cuts(trace) if name == RESNET else odd_cuts(devices, 8)
    lo, hi = _bounds(trace)
    found = StreamedReach()
    edges = [lo, *(c for c in cuts if lo < c < hi), hi]
    for owned in pairwise(edges):
        found.add(slices.slice_of(trace, owned), owned)
    exact = halo_ns(trace, [(d.device, d.rank) for d in devices])
    assert exact <= found.halo_ns <= 2 * exact
    # What is carried is bounded by the last slices' launches: a launch of a kernel the trace does not hold
    # (sanitize dropped it: zero length) is forgotten a slice after its flow's end
    launch = select(trace.flows, "kind", "launch")
    absent = ~np.isin(launch["dst_event_id"].fill_null(-1).to_numpy(), trace.device_events["event_id"].to_numpy())
    recent = launch["dst_ts_ns"].fill_null(hi).to_numpy() >= edges[max(len(edges) - 3, 0)]
    carried = np.isin(launch["dst_event_id"].fill_null(-1).to_numpy(), list(found._carried))
    assert not (carried & ~recent).any()  # nothing older than the last two slices
    if name == RESNET:
        assert int((absent & ~recent).sum()) > 400  # carried to the end before (422 of them)
    if name in (RESNET, QWEN):
        _assert_same(whole_and_merged(trace, devices, cuts, found.halo_ns, keys=("ops", "launch")))
