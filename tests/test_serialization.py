"""Results survive their JSON: ``from_dict(as_dict())`` gives back every field, for diagnoses and diffs.

The inputs are chosen so that every field of every result dataclass holds something in at least one of
them (checked below), so a field the serializer drops cannot hide behind an empty default.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import neurontrace
from neurontrace.analysis import engine_waits
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.analysis.diff import Diff, diff
from tests.conftest import SAMPLES, corpus_root
from tests.diff_pairs import write_pair

# Fields that are not part of the document, on purpose.
_REDUCE_INPUT = "a rank's reduce input, handed to the job's combine in memory (on Dask as a Python object), never written"
NOT_SERIALIZED = {("FallbackOp", "event_ids"): "row ids of one loaded trace; meaningless once it is closed",
                  ("CriticalPath", "segments"): _REDUCE_INPUT, ("CriticalPath", "collectives"): _REDUCE_INPUT,
                  ("CriticalPath", "rank"): _REDUCE_INPUT,
                  ("DeviceAttribution", "slice_stalls"): "a time slice's edge runs, merged away (analysis/stall_merge.py)",
                  ("FallbackOp", "sources"): "calls per source line, for merging time slices; ``source`` is kept",
                  ("Phases", "pieces"): "a time slice's spans and step rows, merged away (analysis/phases.merge)",
                  **dict.fromkeys([("CriticalPath", f) for f in ("owned", "window", "pieces", "crossing")],
                                  "a time slice's value, for the merge of one rank's slices only (not in the document)")}
EMPTY: tuple[Any, ...] = (None, "", 0, (), [], {}, False)


def _load(path: Path) -> neurontrace.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return neurontrace.load(path)


def _same(a: Any, b: Any, where: str, filled: set[tuple[str, str]]) -> None:
    """``b`` equals ``a`` field by field (recursively); records which fields held a value."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            key = (type(a).__name__, f.name)
            va, vb = getattr(a, f.name), getattr(b, f.name)
            if va not in EMPTY if not isinstance(va, pa.Table) else va.num_rows:
                filled.add(key)
            if key not in NOT_SERIALIZED:
                _same(va, vb, f"{where}.{f.name}", filled)
    elif isinstance(a, pa.Table):
        assert isinstance(b, pa.Table) and _rounded(a) == _rounded(b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]", filled)
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]", filled)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _rounded(t: pa.Table) -> list[dict[str, Any]]:
    """Op rows as the document keeps them (percentages to three decimals)."""
    rows: list[dict[str, Any]] = t.to_pylist()
    for r in rows:
        pct = r["delta_pct"]
        r["delta_pct"] = None if pct is None or math.isnan(pct) else round(pct, 3)
    return rows


def _fields(*classes: type) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for cls in classes:
        out |= {(cls.__name__, f.name) for f in dataclasses.fields(cls)}
    return out


def _neuron_memory_profile(out: Path) -> Path:
    """SYNTHETIC: a generated Explorer profile with HbmUsageSummaryByType, SbufAllocation and spill keys."""
    from neurontrace.testing import synthetic_neuron as syn
    from neurontrace.testing.neuron_memory_files import add_memory_tables

    return add_memory_tables(syn.write_explorer(syn.Scenario(), out / "p"))


@pytest.fixture(scope="module")
def diagnoses(tmp_path_factory: pytest.TempPathFactory) -> list[Diagnosis]:
    a, b = write_pair(tmp_path_factory.mktemp("pair"))
    # A TorchNeuron-style run record beside a copy of b: fallback names and executed ops from run.json.
    recorded = tmp_path_factory.mktemp("recorded")
    (recorded / b.name).write_bytes(b.read_bytes())
    (recorded / "run.json").write_text(json.dumps({"schema": "neurontrace.run/1", "fallback_ops": ["aten::nonzero"],
                                                   "neuron": {"executed_ops": ["aten::nonzero"]}}))
    return [
        diagnose(_load(recorded / b.name)),  # fallback evidence, named_by, also_executed_on_device
        diagnose(_load(a)), diagnose(_load(b), fallback_ops=["aten::nonzero"]),
        diagnose(_load(SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet")),  # engine waits, synthetic
        diagnose(_load(_neuron_memory_profile(tmp_path_factory.mktemp("neuron_memory")))),  # memory.neuron
        diagnose(_load(SAMPLES / "gloo_8rank")),  # ranks: cross-rank sections
        diagnose(_load(SAMPLES / "cpu_train_loop.pt.trace.json.gz")),
    ]


def test_a_diagnosis_comes_back_whole_from_its_json(diagnoses: list[Diagnosis]) -> None:
    from neurontrace.analysis.attribution import DeviceAttribution
    from neurontrace.analysis.contract import Finding
    from neurontrace.analysis.fallback import FallbackOp
    from neurontrace.analysis.stalls import Stall

    filled: set[tuple[str, str]] = set()
    for diag in diagnoses:
        doc = json.loads(json.dumps(diag.as_dict()))
        again = Diagnosis.from_dict(doc)
        _same(diag, again, "diagnosis", filled)
        assert again.as_dict() == doc
    assert any(d.devices and engine_waits.of_device(d.devices[0]) for d in diagnoses)  # the field it began with
    missing = _fields(Diagnosis, DeviceAttribution, Stall, FallbackOp, Finding) - filled - set(NOT_SERIALIZED)
    assert not missing, f"no input exercises {sorted(missing)}: add one that does"


def _compile_job(run: Path) -> Diagnosis:
    """The real torch.compile run's logs read as two ranks of one job (per_rank, and every other field of the
    compile report: recompiles, graph breaks, the recompile limit, cache hits and misses, failures), plus the
    Neuron compiler lines made from the documentation (tests/test_compile_logs.py) for its Neuron part."""
    from neurontrace.analysis import compile as compile_section
    from neurontrace.parsers import compile_logs
    from tests.test_compile_logs import MADE_FROM_DOCS

    neuron = run / "neuron_made_from_docs.log"
    neuron.write_text(MADE_FROM_DOCS)
    log = compile_logs.read([run / "compile", neuron])
    rows = [dict(r) for r in log.table().to_pylist()]
    trace = _load(run / "recompile.pt.trace.json")
    kineto = compile_section.kineto_rows(trace)
    # the compiled code running (regions, guard checks, graphs, compiled against eager, breaks per step)
    ran = diagnose(_load(run / "runtime.pt.trace.json"), compiles=log.table()).sections[compile_section.SECTION.key]
    parts = [compile_section.report([{**r, "rank": rank} for r in rows], kineto, [f"rank {rank}: a warning"],
                                    ran.regions, ran.runtime) for rank in (0, 1)]
    job = compile_section.combine([p for p in parts if p is not None])
    return Diagnosis([], [], [], [], {compile_section.SECTION.key: job})


def _time_slice(trace: neurontrace.Trace) -> Diagnosis:
    """The device values of one time slice of a real trace (Options.owned: diagnose DATASET out of core), which
    carry what their merge needs (Launch.parts, OpEfficiency.parts, Overlap.spans)."""
    from neurontrace.analysis import registry
    from neurontrace.analysis.attribution import attribute
    from neurontrace.analysis.contract import Context, Options

    devices = attribute(trace)
    lo, hi = devices[0].window
    ctx = Context(trace, devices, [], {}, Options(owned=(lo, (lo + hi) // 2)))
    for d in devices:
        d.sections = {s.key: v for s in registry.DEVICE_SECTIONS if (v := s.compute(ctx, d)) is not None}
    return Diagnosis([], devices, [], [])


def test_every_registered_section_comes_back_whole(diagnoses: list[Diagnosis], compile_run: Path,
                                                   tmp_path: Path) -> None:
    """Every section's value is a dataclass that survives its JSON (``from_json(to_json(v))``), field by field;
    each section, and each field of each section's dataclass, holds something in at least one input."""
    from neurontrace.analysis import registry
    from neurontrace.analysis.contract import DeviceSection, Section
    from tests.conformance.test_op_links import QWEN, _rewrite

    root = corpus_root()
    if root is None:
        pytest.skip("needs the real-trace corpus: its SGLang decode trace replays HIP graphs (graph_launches)")

    def as_l4(doc: dict[str, Any]) -> None:  # TRANSFORMED REAL FILE: an op above the peak (ops' warnings)
        doc["deviceProperties"] = [{**doc["deviceProperties"][0], "name": "NVIDIA L4", "totalGlobalMem": 23580639232}]

    diagnoses = [*diagnoses, _compile_job(compile_run),
                 diagnose(_load(_rewrite(root / QWEN, tmp_path / "l4.json.gz", as_l4)))]
    # Real traces for what the samples lack: a ROCm decode that replays HIP graphs (graph_launches), a
    # CUDA event-sync trace whose ops have FLOP formulas but no recorded shapes (ops.skipped), an HTA example
    # with a step longer than the trace (event_checks: counted and clipped, ns_removed).
    diagnoses = [*diagnoses, *(diagnose(_load(root / p)) for p in (
        "TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
        "HolisticTraceAnalysis/tests/data/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
        "HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz"))]
    diagnoses.append(_time_slice(_load(root / QWEN)))
    seen: dict[str, int] = {}
    value_types: set[type] = set()
    filled: set[tuple[str, str]] = set()
    sections: list[Section | DeviceSection] = [*registry.DEVICE_SECTIONS, *registry.SECTIONS]
    for diag in diagnoses:
        held: list[tuple[Section | DeviceSection, Any]] = [
            (s, v) for s in registry.SECTIONS for v in [diag.sections.get(s.key)] if v is not None]
        held += [(s, v) for d in diag.devices for s in registry.DEVICE_SECTIONS for v in [d.sections.get(s.key)]
                 if v is not None]
        for section, value in held:
            assert dataclasses.is_dataclass(value) and not isinstance(value, type), section.key
            value_types.add(type(value))
            doc = json.loads(json.dumps(section.to_json(value)))
            again = section.from_json(doc)
            _same(value, again, section.key, filled)
            assert json.loads(json.dumps(section.to_json(again))) == doc, section.key
            seen[section.key] = seen.get(section.key, 0) + 1
    assert not {s.key for s in sections} - set(seen), f"no input has {sorted({s.key for s in sections} - set(seen))}"
    missing = _fields(*value_types) - filled - set(NOT_SERIALIZED)
    assert not missing, f"no input exercises {sorted(missing)}: add one that does"


def test_a_diff_comes_back_whole_from_its_json(tmp_path: Path) -> None:
    from neurontrace.analysis.diff import DeviceDelta, Thresholds

    a, b = write_pair(tmp_path)
    ta, tb = _load(a), _load(b)
    result = diff(ta, tb, baseline_diagnosis=diagnose(ta), change_diagnosis=diagnose(tb, fallback_ops=["aten::nonzero"]),
                  thresholds=Thresholds(relative=0.05, absolute_ns=2000), baseline_label="a", change_label="b")
    result.notes.append("a note")
    neuron = _load(SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet")
    across = diff(ta, neuron)  # devices that do not match by name, a synthetic side
    ranks = _load(SAMPLES / "gloo_8rank")
    filled: set[tuple[str, str]] = set()
    for d in (result, across, diff(ranks, ranks)):  # the last: devices of ranks 0-7
        doc = json.loads(json.dumps(d.as_dict()))
        again = Diff.from_dict(doc)
        _same(d, again, "diff", filled)
        assert again.as_dict() == doc
    missing = _fields(Diff, DeviceDelta, Thresholds) - filled
    assert not missing, f"no input exercises {sorted(missing)}: add one that does"
