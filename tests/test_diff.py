"""Run comparison on pairs whose differences are known: a micro-trace pair, the shipped CPU pair, the
corpus's trace_compare pair, and a CUDA run against the synthetic Neuron sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import neurontrace
from neurontrace.analysis.diff import SCHEMA, Diff, Thresholds, compare_ops, diff, diff_diagnoses, op_table
from neurontrace.analysis.diff import match_devices as match
from tests.conftest import SAMPLES, corpus_root
from tests.diff_pairs import US, write_pair
from tests.micro import load, x

COMPARE = SAMPLES / "compare"
NEURON_SAMPLE = SAMPLES / "synthetic_neuron" / "synthetic_mlp_parquet"


@pytest.fixture(scope="module")
def micro(tmp_path_factory: pytest.TempPathFactory) -> Diff:
    a, b = write_pair(tmp_path_factory.mktemp("pair"))
    return diff(neurontrace.load(a), neurontrace.load(b), fallback_ops=["aten::nonzero"])


def _row(d: Diff, kind: str, name: str, source: str | None = None) -> dict[str, Any]:
    assert d.ops is not None
    hits = [r for r in d.ops.to_pylist() if r["kind"] == kind and r["name"] == name
            and (source is None or r["source"] == source)]
    assert len(hits) == 1, hits
    hit: dict[str, Any] = hits[0]
    return hit


def test_micro_pair_ops_are_classified_and_matched_by_source(micro: Diff) -> None:
    add_g = _row(micro, "op", "aten::add", "b.py:2 g")
    assert (add_g["status"], add_g["baseline_ns"], add_g["change_ns"], add_g["matched_by"]) == \
        ("slower", 10 * US, 100 * US, "name+source")
    # The same op name at another line is another row, and that one did not change.
    assert _row(micro, "op", "aten::add", "a.py:1 f")["status"] == "unchanged"
    nonzero = _row(micro, "op", "aten::nonzero")
    assert (nonzero["status"], nonzero["baseline_count"], nonzero["change_count"], nonzero["source"]) == \
        ("added", 0, 2, "model.py:30 mask")
    relu = _row(micro, "op", "aten::relu")
    assert (relu["status"], relu["change_count"], relu["delta_ns"]) == ("removed", 0, -10 * US)
    assert _row(micro, "kernel", "relu_kernel")["status"] == "removed"
    # The kernel inherits its op's source; both moved from line 12 to 14 and are matched by name.
    sgemm = _row(micro, "kernel", "volta_sgemm_128x64")
    assert (sgemm["status"], sgemm["matched_by"], sgemm["source"], sgemm["change_source"]) == \
        ("slower", "name", "model.py:12 forward", "model.py:14 forward")
    assert (sgemm["baseline_ns"], sgemm["change_ns"], sgemm["delta_pct"]) == (40 * US, 80 * US, 100.0)
    mm = _row(micro, "op", "aten::mm")
    assert (mm["status"], mm["matched_by"]) == ("unchanged", "name")
    # A count change within the time thresholds stays unchanged (the counts are in the row).
    launch = _row(micro, "runtime", "cudaLaunchKernel")
    assert (launch["status"], launch["baseline_count"], launch["change_count"]) == ("unchanged", 4, 2)
    assert micro.ops_summary() == {"added": 1, "removed": 2, "slower": 2, "faster": 0, "unchanged": 3}
    # Largest absolute time change first.
    deltas = [abs(r["delta_ns"]) for r in micro.ops.to_pylist()]  # type: ignore[union-attr]
    assert deltas == sorted(deltas, reverse=True)


def test_micro_pair_devices_causes_steps_fallback_findings(micro: Diff) -> None:
    (dev,) = micro.devices
    assert (dev.label, dev.matched_by, dev.steps, dev.window_ns) == ("cuda:0 rank 0", "name+rank", (2, 2),
                                                                     (200 * US, 300 * US))
    assert dev.time_per_step_ns == (100.0 * US, 150.0 * US) and dev.regression_pct == pytest.approx(50.0)
    for side in (0, 1):  # conservation carries over: both sides' causes sum to their windows
        assert sum(v[side] for v in dev.causes_ns.values()) == dev.window_ns[side]
    assert dev.causes_ns["compute"] == (60 * US, 80 * US)
    assert dev.causes_ns["host_fallback"] == (0, 40 * US)
    assert dev.detail_ns["compute.gemm"] == (40 * US, 80 * US)
    assert [d.label for d in micro.regressions(40)] == ["cuda:0 rank 0"] and micro.regressions(50) == []
    assert [op["name"] for op in micro.fallback["appeared"]] == ["aten::nonzero"]
    assert micro.fallback["disappeared"] == [] and micro.fallback["persisted"] == []
    assert "host_fallback" in {f["id"] for f in micro.findings["appeared"]}
    steps = micro.steps
    assert (steps["median_ns"]["baseline"], steps["median_ns"]["change"], steps["p90_ns"]["pct"]) == \
        (100 * US, 150 * US, 50.0)
    assert steps["durations_ns"] == {"baseline": [100 * US] * 2, "change": [150 * US] * 2}
    assert micro.phases["compile_ns"] == {"baseline": 0, "change": 0, "delta": 0, "pct": None}


def test_json_document_is_versioned_and_serializable(micro: Diff) -> None:
    doc = json.loads(json.dumps(micro.as_dict()))
    assert doc["schema"] == SCHEMA == "neurontrace.diff/1"
    assert set(doc) >= {"synthetic", "baseline", "change", "thresholds", "notes", "devices", "unmatched_devices",
                        "regression", "ops_summary", "ops", "fallback", "phases", "steps", "findings"}
    assert doc["thresholds"] == {"relative": 0.1, "absolute_ns": 10_000}
    assert doc["regression"] == {"metric": "time_per_step_ns", "worst_device": "cuda:0 rank 0", "worst_pct": 50.0}
    op = doc["ops"][0]
    assert op["total_ns"] == {"baseline": 10 * US, "change": 100 * US, "delta": 90 * US, "pct": 900.0}
    assert op["count"]["delta"] == 0
    dev = doc["devices"][0]
    assert dev["causes_ns"]["host_fallback"]["change_share"] == pytest.approx(40 / 300, abs=1e-6)
    assert len(micro.as_dict(top_ops=2)["ops"]) == 2


def test_thresholds_relative_and_absolute() -> None:
    def table(rows: list[tuple[str, int, int]]) -> pa.Table:
        return pa.table({"kind": ["op"] * len(rows), "unit": pa.nulls(len(rows), pa.string()),
                         "name": [r[0] for r in rows], "source": pa.nulls(len(rows), pa.string()),
                         "count": [r[1] for r in rows], "total_ns": [r[2] for r in rows]})

    a = table([("big", 1, 1_000_000), ("edge", 1, 100_000), ("tiny", 1, 1_000), ("fast", 1, 500_000)])
    b = table([("big", 1, 1_100_001), ("edge", 1, 110_000), ("tiny", 1, 9_000), ("fast", 1, 100_000)])
    got = {r["name"]: r["status"] for r in compare_ops(a, b, relative=0.10, absolute_ns=10_000).to_pylist()}
    # +10.0001% of 1 ms is past both limits; exactly +10% (= the limit) is not; +8 µs is under 10 µs.
    assert got == {"big": "slower", "edge": "unchanged", "tiny": "unchanged", "fast": "faster"}
    strict = compare_ops(a, b, relative=0.0, absolute_ns=0).to_pylist()
    assert {r["name"]: r["status"] for r in strict}["tiny"] == "slower"
    with pytest.raises(ValueError, match="must not be negative"):
        Thresholds(relative=-1)


def test_op_table_groups_by_kind_name_and_source(tmp_path: Path) -> None:
    t = load(tmp_path, [
        x("user_annotation", "ProfilerStep#1", 0, 100),
        x("user_annotation", "PyTorch Profiler (0)", 0, 100),  # the profiler's own range: not an op
        x("cpu_op", "aten::mm", 0, 10, **{"Call stack": "m.py(3): f"}),
        x("cpu_op", "aten::mm", 20, 30, **{"Call stack": "m.py(3): f"}),
        x("cpu_op", "aten::mm", 60, 5, **{"Call stack": "m.py(9): g"}),
        x("user_annotation", "augment", 70, 20),
        x("python_function", "m.py(3): f", 0, 60),
    ])
    rows = {(r["kind"], r["name"], r["source"]): (r["count"], r["total_ns"]) for r in op_table(t).to_pylist()}
    assert rows == {("op", "aten::mm", "m.py:3 f"): (2, 40 * US), ("op", "aten::mm", "m.py:9 g"): (1, 5 * US),
                    ("annotation", "augment", None): (1, 20 * US)}


def test_device_matching_by_name_rank_then_order() -> None:
    a = [{"device": "cuda:0", "rank": 0}, {"device": "cuda:1", "rank": 0}, {"device": "cuda:0", "rank": 1}]
    b = [{"device": "cuda:0", "rank": 1}, {"device": "neuron:nc0", "rank": 0}, {"device": "cuda:0", "rank": 0}]
    pairs, unmatched = match(a, b)
    got = [(p[0]["device"], p[0]["rank"], p[1]["device"], p[1]["rank"], p[2]) for p in pairs]
    assert got == [("cuda:0", 0, "cuda:0", 0, "name+rank"), ("cuda:0", 1, "cuda:0", 1, "name+rank"),
                   ("cuda:1", 0, "neuron:nc0", 0, "order")]
    assert unmatched == {"baseline": [], "change": []}
    pairs, unmatched = match([{"device": "cpu", "rank": None}], [{"device": "cpu", "rank": 3},
                                                                 {"device": "cuda:0", "rank": 3}])
    assert [p[2] for p in pairs] == ["name"] and unmatched["change"] == [{"device": "cuda:0", "rank": 3}]


@pytest.mark.skipif(not NEURON_SAMPLE.is_dir(), reason="the synthetic Neuron sample is not in sample_traces/")
@pytest.mark.filterwarnings("ignore::neurontrace.errors.NeuronProfileWarning")  # the sample's own Explorer warning
def test_cuda_against_synthetic_neuron_matches_by_order_and_says_synthetic(tmp_path: Path) -> None:
    a, _ = write_pair(tmp_path)
    d = diff(neurontrace.load(a), neurontrace.load(NEURON_SAMPLE))
    (dev,) = d.devices
    assert (dev.baseline_device, dev.change_device, dev.matched_by) == ("cuda:0", "neuron:nc0", "order")
    assert d.synthetic and d.as_dict()["synthetic"] is True
    notes = " ".join(d.notes)
    assert "matched by order" in notes and "different formats" in notes and "SYNTHETIC" in notes
    engine_ops = d.changed_ops(["added"]).filter(pa.compute.equal(d.changed_ops(["added"])["kind"], "engine_op"))
    assert {(r["unit"], r["name"]) for r in engine_ops.to_pylist()} >= {("tensor", "MATMUL"), ("vector", "TENSOR_TENSOR")}


def test_shipped_cpu_pair_finds_the_slowed_op() -> None:
    d = diff(neurontrace.load(COMPARE / "baseline.pt.trace.json.gz"), neurontrace.load(COMPARE / "slowed.pt.trace.json.gz"))
    assert d.ops is not None
    augment = [r for r in d.ops.to_pylist() if (r["source"] or "").endswith(" augment")]
    by_name = {(r["kind"], r["name"]): r["status"] for r in augment}
    assert by_name[("annotation", "augment")] == "slower"
    assert by_name[("op", "aten::matmul")] == "added"
    assert d.devices[0].label == "cpu" and d.notes == []


def test_shipped_compare_samples_are_small_and_scrubbed() -> None:
    import gzip

    for name in ("baseline.pt.trace.json.gz", "slowed.pt.trace.json.gz"):
        path = COMPARE / name
        assert path.stat().st_size < 100_000
        text = gzip.decompress(path.read_bytes()).decode()
        assert '"host_name": "sample-host"' in text
        assert '"/' not in text  # no absolute path of the machine that made it: file names are relative


@pytest.mark.corpus
def test_corpus_trace_compare_pair() -> None:
    root = corpus_root()
    if root is None:
        pytest.skip("the real-trace corpus (../shared/corpus/kineto) is not beside this checkout")
    pair = root / "HolisticTraceAnalysis" / "tests" / "data" / "trace_compare"
    d = diff(neurontrace.load(pair / "base" / "base.json.gz"), neurontrace.load(pair / "test" / "test.json.gz"))
    assert d.ops is not None
    status = {(r["kind"], r["name"]): r for r in d.ops.to_pylist()}
    # test.json adds three host ops and drops one nccl:all_reduce range and one add<int> kernel.
    assert {k[1] for k, r in status.items() if r["status"] == "added"} == \
        {"All2All_Pooled_Req", "CatBackward0", "AddmmBackward0"}
    assert status[("op", "All2All_Pooled_Req")]["change_ns"] == 311 * US
    assert status[("annotation", "nccl:all_reduce")]["change_count"] == 1
    add_int = next(r for k, r in status.items() if k[0] == "kernel" and "CUDAFunctor_add<int>" in k[1])
    assert (add_int["baseline_count"], add_int["change_count"], add_int["status"]) == (3, 2, "unchanged")
    (dev,) = d.devices
    assert (dev.label, dev.matched_by, dev.steps) == ("cuda:1 rank 1", "name+rank", (2, 2))
    # base.json keeps the kernel that cudaLaunchKernel queued at the end of ProfilerStep#1010 and that ran
    # 52.04 ms after the step ended (the device lagged): its window runs to that kernel's end. test.json's
    # excerpt lost that kernel, so its window is the two steps (docs/diagnose.md, "Window").
    assert dev.window_ns == (466_539_623_000 - 466_265_125_000, 100_298_000 + 122_149_000 + 45_000)
    assert dev.causes_ns["host_overhead"][1] > dev.causes_ns["host_overhead"][0]
    assert any("with_stack" in n for n in d.notes)  # no stacks: ops matched by name only


def test_diff_of_stored_diagnoses_has_no_op_level(micro: Diff, tmp_path: Path) -> None:
    from neurontrace.analysis.diagnose import diagnose

    a, b = write_pair(tmp_path)
    da, db = diagnose(neurontrace.load(a)).as_dict(), diagnose(neurontrace.load(b)).as_dict()
    d = diff_diagnoses(json.loads(json.dumps(da)), json.loads(json.dumps(db)))
    assert d.ops is None and d.as_dict()["ops"] is None and d.as_dict()["ops_summary"] is None
    assert d.devices[0].regression_pct == micro.devices[0].regression_pct
    assert any("op-level comparison needs the traces" in n for n in d.notes)
    with pytest.raises(ValueError, match=r"not a neurontrace\.diagnose document"):
        diff_diagnoses({"schema": "something/1"}, db)
