"""Memory views (issue 25): memory_events from Kineto and snapshots, the memory section, its findings, the CLI.

Proof on real inputs: CPU runs made here with profile_memory=True (tests/memory_workload.py: a 64 MiB
temporary per step, an 8 MiB leak kept in a list, or the same tensor dropped), the corpus's TraceLens H100
and MI300 traces and tb_plugin's ResNet-50 (old-style events without totals or addresses). Snapshots are
SYNTHETIC (no GPU here), built from the format ``torch/cuda/memory.py`` documents.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurontrace
from neurontrace import Trace, errors, units
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from neurontrace.analysis.memory import Memory, combine, memory
from neurontrace.analysis.memory_findings import findings
from neurontrace.parsers import torch_memory_snapshot as snapshot
from neurontrace.testing import synthetic_snapshot
from tests import memory_workload as work
from tests.conftest import ROOT, corpus_root
from tests.micro import load, x

MIB = 1024**2


def _raw(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    events: list[dict[str, Any]] = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)["traceEvents"]
    return [e for e in events if e.get("name") in ("[memory]", "[OutOfMemory]")]


@pytest.fixture(scope="module")
def runs(memory_runs: dict[str, Path]) -> dict[str, Path]:
    """tests/conftest.py's memory_runs: the two real CPU runs, once per session."""
    return memory_runs


@pytest.mark.torch
def test_a_real_leak_is_measured_exactly(runs: dict[str, Path]) -> None:
    path = runs["leak"]
    trace = neurontrace.load(path)
    raw = _raw(path)
    assert trace.memory_events.num_rows == len(raw) > 0  # one row per [memory] event
    (d,) = memory(trace).devices  # type: ignore[union-attr]
    cpu = [e for e in raw if e["args"]["Device Type"] == 0]
    peak = max(cpu, key=lambda e: e["args"]["Total Allocated"])
    assert d.device == "cpu" and d.totals_recorded and d.addresses_recorded
    assert d.peak_allocated_bytes == peak["args"]["Total Allocated"]  # exact: the maximum of the recorded totals
    assert d.peak_reserved_bytes is None  # the CPU allocator records a reserve of 0: no reserve
    # what was live at the peak: the temporary of the last step, and the four earlier steps' leaks
    live = {(g.op, g.bytes, g.count) for g in d.live_at_peak}
    assert ("aten::empty", work.TEMP_BYTES, 1) in live
    assert ("aten::ones", 4 * work.LEAK_BYTES, 4) in live
    assert sum(g.bytes for g in d.live_at_peak) + (d.live_at_peak_before_trace_bytes or 0) == d.peak_allocated_bytes
    assert all("memory_workload.py" in (g.source or "") and "train_step" in (g.source or "")
               for g in d.live_at_peak if g.bytes >= MIB)
    assert [s.step for s in d.steps] == [1, 2, 3, 4, 5]
    assert d.growth_bytes_per_step == work.LEAK_BYTES  # exact to the leaked tensor's bytes
    ends = [s.end_allocated_bytes for s in d.steps]
    assert all(b - a == work.LEAK_BYTES for a, b in pairwise(ends))  # type: ignore[operator]
    top = d.never_freed[0]
    assert (top.op, top.bytes, top.count) == ("aten::ones", 4 * work.LEAK_BYTES, 4)  # made before the last step
    assert all(s.largest_temporary is not None and s.largest_temporary.bytes == work.TEMP_BYTES for s in d.steps)
    ids = {f.id: f for f in findings(memory(trace))}  # type: ignore[arg-type]
    assert set(ids) == {"memory_growth", "large_temporary"}
    assert "8.00 MiB per step" in ids["memory_growth"].evidence and "aten::ones" in ids["memory_growth"].evidence


@pytest.mark.torch
def test_a_del_that_frees_is_no_leak(runs: dict[str, Path]) -> None:
    trace = neurontrace.load(runs["noleak"])
    (d,) = memory(trace).devices  # type: ignore[union-attr]
    assert d.growth_bytes_per_step == 0
    assert not [g for g in d.never_freed if g.bytes >= MIB]
    assert d.peak_allocated_bytes == max(e["args"]["Total Allocated"] for e in _raw(runs["noleak"]))
    assert [f.id for f in findings(memory(trace))] == ["large_temporary"]  # type: ignore[arg-type]


@pytest.mark.torch
def test_diagnose_and_the_memory_command_report_it(runs: dict[str, Path]) -> None:
    diag = diagnose(neurontrace.load(runs["leak"]))
    doc = json.loads(json.dumps(diag.as_dict()))
    assert doc["memory"]["devices"][0]["growth_bytes_per_step"] == work.LEAK_BYTES
    assert "memory_growth" in [f["id"] for f in doc["findings"]]
    assert Diagnosis.from_dict(doc).as_dict() == doc
    out = subprocess.run([sys.executable, "-m", "neurontrace", "memory", str(runs["leak"]), "--json"], check=False, cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    mem = json.loads(out.stdout)
    assert mem["schema"] == "neurontrace.memory/1"
    assert mem["devices"] == doc["memory"]["devices"]
    assert "memory_growth" in [f["id"] for f in mem["findings"]]


def test_no_memory_events_no_section_no_finding(tmp_path: Path) -> None:
    trace = load(tmp_path, [x("cpu_op", "aten::mm", 0, 10)])
    assert trace.memory_events.num_rows == 0 and memory(trace) is None
    doc = diagnose(trace).as_dict()
    assert "memory" not in doc
    assert not [f for f in doc["findings"] if "memory" in f["id"]]


def _mem(ts: float, nbytes: int, total: int | None, addr: int | None = 4096, **args: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"Device Type": 1, "Device Id": 0, "Bytes": nbytes, **args}
    if total is not None:
        a["Total Allocated"] = total
    if addr is not None:
        a["Addr"] = addr
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": a}


def test_negative_totals_are_left_out_with_a_count(tmp_path: Path) -> None:
    with pytest.warns(errors.TraceWarning, match="2 negative or non-integral Total Allocated"):
        trace = load(tmp_path, [_mem(1, 100, -5), _mem(2, 100, 200, addr=8192), _mem(3, -100, -1)])
    assert trace.memory_events["total_allocated_bytes"].to_pylist() == [None, 200, None]
    (d,) = memory(trace).devices  # type: ignore[union-attr]
    assert d.peak_allocated_bytes == 200


def test_an_addr_that_is_not_an_address_is_dropped_with_a_count(tmp_path: Path) -> None:
    bad = _mem(1, 100, 100, addr=None, Addr="0x1000")
    with pytest.warns(errors.TraceWarning, match="1 memory events have an Addr that is not an address"):
        trace = load(tmp_path, [bad, _mem(2, 100, 200, addr=8192)])
    assert trace.memory_events["addr"].to_pylist() == [None, 8192]


def test_an_out_of_memory_event_says_what_asked_and_what_was_live(tmp_path: Path) -> None:
    oom = {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[OutOfMemory]", "pid": 1, "tid": 1, "ts": 25,
           "args": {"Device Type": 1, "Device Id": 0, "Bytes": 80 * 1024 * MIB, "Total Allocated": 300 * MIB,
                    "Total Reserved": 320 * MIB}}
    trace = load(tmp_path, [x("cpu_op", "aten::mm", 20, 10), _mem(10, 300 * MIB, 300 * MIB), oom])
    (d,) = memory(trace).devices  # type: ignore[union-attr]
    (o,) = d.ooms
    assert (o.requested_bytes, o.op, o.allocated_bytes, o.reserved_bytes) == (80 * 1024 * MIB, "aten::mm", 300 * MIB,
                                                                             320 * MIB)
    assert [(g.bytes, g.count) for g in o.live] == [(300 * MIB, 1)]
    (f,) = [f for f in findings(memory(trace)) if f.id == "out_of_memory"]  # type: ignore[arg-type]
    assert f.severity == "error" and "80.0 GiB asked at aten::mm" in f.evidence


def test_the_section_round_trips_and_combines_ranks(tmp_path: Path) -> None:
    trace = load(tmp_path, [_mem(1, 100, 100), _mem(2, -100, 0)])
    m = memory(trace)
    assert m is not None
    assert Memory.from_dict(json.loads(json.dumps(m.as_dict()))) == m
    both = combine([m, m])
    assert len(both.devices) == 2 and both.as_dict()["devices"][1] == m.as_dict()["devices"][0]


def test_memory_events_round_trip_through_parquet_and_old_outputs_load(tmp_path: Path) -> None:
    trace = load(tmp_path, [x("cpu_op", "aten::mm", 0, 10), _mem(1, 100, 100), _mem(2, -100, 0)])
    out = trace.to_parquet(tmp_path / "pq")
    again = Trace.from_parquet(out)
    assert again.equals(trace) and again.memory_events.num_rows == 2
    assert again.memory_events["op"].cast("string").to_pylist() == ["aten::mm", "aten::mm"]
    (out / "memory_events.parquet").unlink()  # an output written before the table existed
    assert Trace.from_parquet(out).memory_events.num_rows == 0


def test_a_dataset_written_before_memory_events_existed_reads_them_empty(tmp_path: Path) -> None:
    from neurontrace import dataset

    trace = load(tmp_path, [x("cpu_op", "aten::mm", 0, 10), _mem(1, 100, 100)])
    out = dataset.write_dataset([trace], tmp_path / "ds")
    ds = dataset.open_dataset(out)
    assert ds.dataset("memory_events").to_table().num_rows == 1
    import shutil

    shutil.rmtree(out / "memory_events")
    assert ds.load().memory_events.num_rows == 0 and ds.dataset("memory_events").to_table().num_rows == 0


# -- the corpus ----------------------------------------------------------------------------------------------


def _corpus(rel: str) -> Path:
    root = corpus_root()
    if root is None or not (root / rel).is_file():
        pytest.skip(f"the corpus trace {rel} is not beside this checkout")
    return root / rel


@pytest.mark.parametrize("rel", ["TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
                                 "TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                 "TraceLens/tests/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"])
def test_real_gpu_traces_peak_exactly_at_the_recorded_totals(rel: str) -> None:
    path = _corpus(rel)
    raw = [e for e in _raw(path) if e["args"].get("Device Type") != 0]
    result = memory(neurontrace.load(path))
    assert result is not None
    (d,) = [d for d in result.devices if d.device != "cpu"]
    assert d.device.startswith("rocm" if "mi300" in rel else "cuda")
    assert d.peak_allocated_bytes == max(e["args"]["Total Allocated"] for e in raw)
    assert d.peak_reserved_bytes == max(e["args"]["Total Reserved"] for e in raw)
    at = next(e for e in raw if e["args"]["Total Allocated"] == d.peak_allocated_bytes)
    top = json.loads(gzip.decompress(path.read_bytes()))
    assert abs(d.peak_ts_ns - (top.get("baseTimeNanoseconds", 0) + at["ts"] * 1000)) < 1000
    assert sum(g.bytes for g in d.live_at_peak) + (d.live_at_peak_before_trace_bytes or 0) == d.peak_allocated_bytes
    assert d.live_at_peak and all(g.op for g in d.live_at_peak[:3])  # charged to the op user code called
    assert d.capacity_bytes == top["deviceProperties"][0]["totalGlobalMem"]


def test_old_style_events_peak_from_the_running_sum() -> None:
    path = _corpus("kineto-tb_plugin/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    raw = _raw(path)
    result = memory(neurontrace.load(path))
    assert result is not None
    for d in result.devices:
        kind = 0 if d.device == "cpu" else 1
        sums = np.cumsum([e["args"]["Bytes"] for e in raw if e["args"]["Device Type"] == kind])
        assert not d.totals_recorded and not d.addresses_recorded
        assert d.peak_allocated_bytes == int(sums.max())
        assert d.live_at_peak == [] and d.never_freed == []  # no addresses: blocks cannot be followed
    assert not [f for f in findings(result) if f.id in ("memory_near_capacity", "memory_fragmentation")]


# -- snapshots (SYNTHETIC: built from the documented format) --------------------------------------------------


def test_a_snapshot_replays_to_exact_totals(tmp_path: Path) -> None:
    path = synthetic_snapshot.write(synthetic_snapshot.leaky_steps(steps=4), tmp_path / "snap.pickle")
    trace = neurontrace.load(path)
    assert trace.meta("format") == "torch-memory-snapshot" and trace.meta("synthetic") is True
    (d,) = memory(trace).devices  # type: ignore[union-attr]
    weights, leak, temp = 16 * MIB, 8 * MIB, 64 * MIB
    assert d.peak_allocated_bytes == weights + 3 * leak + temp  # the last step's temporary over 3 leaks
    assert d.peak_reserved_bytes == 2048 * MIB
    assert d.live_at_peak_before_trace_bytes == weights  # allocated before the history began
    assert [(g.source, g.bytes) for g in d.live_at_peak] == [("train.py:12 step", temp), ("train.py:20 step", 3 * leak)]
    (seg,) = trace.meta("memory_snapshot")
    assert seg["allocated_bytes"] == weights + 4 * leak and seg["segments"] == 1


def test_an_oom_in_a_snapshot_is_an_error_finding(tmp_path: Path) -> None:
    trace = snapshot.from_object(synthetic_snapshot.leaky_steps(oom_bytes=4 << 30))
    (f,) = [f for f in findings(memory(trace)) if f.id == "out_of_memory"]  # type: ignore[arg-type]
    assert "4.00 GiB asked at train.py:30 step" in f.evidence


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_runs_code_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    snap = synthetic_snapshot.leaky_steps()
    snap["segments"][0]["blocks"][0]["frames"] = _Payload(marker)
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    with pytest.raises(errors.UnsafePickleError, match=r"posix\.system|os\.system"):
        neurontrace.load(path)
    assert not marker.exists()
    out = subprocess.run([sys.executable, "-m", "neurontrace", "memory", str(path)], check=False, cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == errors.UnsafePickleError.exit_code == errors.EXIT_MALFORMED
    assert errors.EXIT_MALFORMED in dict(errors.EXIT_CODES) and "Traceback" not in out.stderr
    assert not marker.exists()


def test_truncated_and_nested_pickles_are_named_errors(tmp_path: Path) -> None:
    data = pickle.dumps(synthetic_snapshot.leaky_steps(), protocol=4)
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(errors.TruncatedTraceError, match="ends early"):
        neurontrace.load(cut)
    # 100,000 lists nested in each other, written opcode by opcode (pickling it would recurse): EMPTY_LIST
    # x N, APPEND x N-1, under {"segments": ...}
    n = 100_000
    deep = tmp_path / "deep.pickle"
    deep.write_bytes(b"\x80\x02}X\x08\x00\x00\x00segments" + b"]" * n + b"a" * (n - 1) + b"s.")
    with pytest.raises(errors.MalformedTraceError, match="nested more than 32 deep"):
        neurontrace.load(deep)


def test_a_newer_torch_snapshot_reads_what_maps_and_warns_with_counts() -> None:
    snap = synthetic_snapshot.leaky_steps(steps=2)
    for e in snap["device_traces"][0]:
        e["new_field"] = 1
    snap["device_traces"][0].append({"action": "segment_defragment", "size": 4, "addr": 0})
    snap["future_section"] = {}
    trace = snapshot.from_object(snap)
    (acct,) = trace.accounting
    assert acct.skipped == {"snapshot trace entry with an unknown action or no size": 1}
    assert acct.kept == {"memory_events": len(snap["device_traces"][0]) - 1}
    (w,) = [w for w in acct.warnings if "does not know" in w]
    assert "entry.new_field (10)" in w and "snapshot.future_section (1)" in w
    assert memory(trace) is not None


@pytest.mark.torch
def test_diff_reports_peak_and_growth_change_per_device(runs: dict[str, Path]) -> None:
    from neurontrace.analysis.diff import Diff, diff

    leak, fixed = neurontrace.load(runs["leak"]), neurontrace.load(runs["noleak"])
    result = diff(leak, fixed)
    (m,) = result.memory
    assert m["device"] == "cpu"
    assert m["growth_bytes_per_step"] == {"baseline": work.LEAK_BYTES, "change": 0, "delta": -work.LEAK_BYTES,
                                          "pct": -100.0}
    peaks = [memory(t).devices[0].peak_allocated_bytes for t in (leak, fixed)]  # type: ignore[union-attr]
    assert (m["peak_allocated_bytes"]["baseline"], m["peak_allocated_bytes"]["change"]) == tuple(peaks)
    assert peaks[0] is not None and peaks[1] is not None
    assert peaks[0] - peaks[1] == 4 * work.LEAK_BYTES  # the four leaks live at the leaking run's peak
    assert Diff.from_dict(json.loads(json.dumps(result.as_dict()))).as_dict() == result.as_dict()


@pytest.mark.torch
def test_the_viewer_marks_the_peak_with_what_was_live(runs: dict[str, Path]) -> None:
    pytest.importorskip("dash")
    from neurontrace.app import callbacks, figures
    from neurontrace.app.model import ViewModel

    trace = neurontrace.load(runs["leak"])
    model = ViewModel.build(trace)
    (d,) = memory(trace).devices  # type: ignore[union-attr]
    drawn = figures.timeline(model, callbacks.request(model, (0, model.index.span_ns)))
    (marker,) = [t for t in drawn.figure["data"] if t["name"] == "memory-peak"]
    origin = callbacks.request(model, (0, model.index.span_ns)).origin
    assert marker["x"] == [pytest.approx((d.peak_ts_ns - model.index.origin_ns - origin) / 1e6)]  # type: ignore[operator]
    assert "peak 96.0 MiB allocated" in marker["text"][0]
    assert "aten::ones · " in marker["text"][0] and "memory_workload.py" in marker["text"][0]
    # a click selects the op that allocated the largest live block: the 64 MiB temporary's aten::empty
    selected, _ = callbacks.on_navigate(model, "nt-timeline", {"points": [{"customdata": marker["customdata"][0],
                                                                          "x": marker["x"][0]}]}, None)
    (big,) = [g for g in d.live_at_peak if g.largest_bytes == work.TEMP_BYTES]
    assert selected == big.op_event_id is not None
    names = dict(zip(trace.system_events["event_id"].to_pylist(),
                     trace.system_events["name"].cast("string").to_pylist(), strict=True))
    assert names[selected] == "aten::empty"
    # a view well before the peak has no marker
    early = figures.timeline(model, callbacks.request(model, (0, (d.peak_ts_ns - model.index.origin_ns) // 4)))  # type: ignore[operator]
    assert not [t for t in early.figure["data"] if t["name"] == "memory-peak"]


def test_neuron_hbm_usage_by_category_at_the_peak() -> None:
    """SYNTHETIC Neuron profile (sample_traces/synthetic_neuron, no Trainium here). Columns per formats/neuron.md
    §3: SystemProfileHbmUsage `timestamp`, `total_bytes`, `<type>_bytes`, `device_idx`, `hbm_idx`;
    HostMemUsage `timestamp`, `used_bytes`."""
    import pyarrow.parquet as pq

    path = ROOT / "sample_traces" / "synthetic_neuron" / "synthetic_mlp_parquet"
    with pytest.warns(errors.NeuronProfileWarning, match="missing compiler metrics"):  # the sample's own Warning row
        trace = neurontrace.load(path)
    assert trace.meta("synthetic") is True
    result = memory(trace)
    assert result is not None
    by = {d.device: d for d in result.devices}
    raw = pq.read_table(next(path.rglob("SystemProfileHbmUsage*.parquet"))).to_pylist()
    top = max(raw, key=lambda r: r["total_bytes"])
    hbm = by[f"neuron:dev{top['device_idx']}.hbm{top['hbm_idx']}"]
    assert hbm.usage_samples and hbm.peak_allocated_bytes == top["total_bytes"]
    assert hbm.categories_at_peak == {k.removesuffix("_bytes"): v for k, v in top.items()
                                      if k.endswith("_bytes") and k != "total_bytes" and v}
    host = pq.read_table(next(path.rglob("HostMemUsage*.parquet"))).to_pylist()
    assert by["cpu"].peak_allocated_bytes == max(r["used_bytes"] for r in host)
    assert not findings(result)


@pytest.mark.torch
def test_the_two_run_page_compares_memory_peaks(runs: dict[str, Path]) -> None:
    pytest.importorskip("dash")
    from neurontrace.analysis.diff import diff
    from neurontrace.app.compare.model import memory_peaks

    result = diff(neurontrace.load(runs["leak"]), neurontrace.load(runs["noleak"]))
    (line,) = memory_peaks(result.memory)
    a, b = (result.memory[0]["peak_allocated_bytes"][k] for k in ("baseline", "change"))
    assert line == f"cpu memory peak {units.size(a)} → {units.size(b)} ({100 * (b - a) / a:+.1f}%)"
