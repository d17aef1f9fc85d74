"""Real torch.profiler traces made here by running PyTorch on the CPU, checked end to end."""

from __future__ import annotations

import decimal
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace import Trace
from tests.conftest import ROOT, SAMPLES

pytestmark = pytest.mark.torch


# The capture runs in a process of its own: torch.profiler records the Python frames of every thread, and
# threads other tests leave behind in this process (a Dask client's, say) would show up in the trace.
_CAPTURE = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("make_samples", "sample_traces/make_samples.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod.cpu_train_loop(Path(sys.argv[1]), steps=5)
"""


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trace]:
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("capture") / "fresh.pt.trace.json.gz"
    subprocess.run([sys.executable, "-c", _CAPTURE, str(path)], cwd=ROOT, check=True, timeout=300)
    return path, neurontrace.load(path)


def _raw(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()), parse_float=decimal.Decimal)
    return doc


@pytest.mark.parametrize("which", ["fresh", "shipped"])
def test_every_event_is_accounted_for(fresh: tuple[Path, Trace], which: str) -> None:
    path, trace = fresh if which == "fresh" else (SAMPLES / "cpu_train_loop.pt.trace.json.gz",
                                                  neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    raw = _raw(path)["traceEvents"]
    (acct,) = trace.accounting
    assert acct.events_read == len(raw) and acct.skipped == {}
    assert acct.kept["system_events"] == sum(e["ph"] in ("X", "i") and e.get("name") != "[memory]" for e in raw)
    assert acct.kept["counters"] == sum(e.get("name") == "[memory]" for e in raw)
    assert acct.kept["flows"] == sum(e["ph"] in ("s", "f") for e in raw)


def test_timestamps_are_exact_nanoseconds(fresh: tuple[Path, Trace]) -> None:
    path, trace = fresh
    doc = _raw(path)
    base = doc["baseTimeNanoseconds"]
    raw = doc["traceEvents"]
    ev = trace.system_events
    for eid, ts, dur in zip(ev["event_id"].to_pylist(), ev["ts_ns"].to_pylist(), ev["dur_ns"].to_pylist(),
                            strict=True):
        assert ts == base + int(raw[eid]["ts"] * 1000)
        assert dur == int(raw[eid].get("dur", 0) * 1000) >= 0


def test_steps_stacks_and_host_round_trip_are_visible(fresh: tuple[Path, Trace]) -> None:
    _, trace = fresh
    ev = trace.system_events.to_pandas()
    steps = ev[ev.category == "step"]
    assert sorted(steps.name.astype(str)) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    frames = trace.frames.to_pandas().set_index("frame_id")
    user = frames[frames.is_user]
    assert {"train_step", "host_side_metric", "forward"} <= set(user.function.astype(str))
    # Only the workload is user code; torch, the capturing process's own code and the stdlib are not.
    assert set(user.file.astype(str)) == {"sample_traces/make_samples.py"}

    def where(op: str) -> set[str]:
        ids = ev[ev.name == op].frame_id.dropna().astype(int)
        return set(frames.loc[ids].function.astype(str))

    # The deliberate host round trip: .numpy() in host_side_metric, .item() in train_step.
    assert where("aten::detach") >= {"host_side_metric"}
    assert where("aten::item") == {"train_step"}
    assert where("aten::linear") == {"forward"}


def test_flows_link_forward_to_backward(fresh: tuple[Path, Trace]) -> None:
    _, trace = fresh
    flows = trace.flows.to_pandas()
    assert len(flows) > 0 and set(flows.kind.astype(str)) == {"fwdbwd"}
    assert flows.src_event_id.notna().all() and flows.dst_event_id.notna().all()
    names = dict(zip(trace.system_events["event_id"].to_pylist(), trace.system_events["name"].to_pylist(),
                     strict=True))
    assert any("Backward" in names[int(d)] for d in flows.dst_event_id)


def test_memory_counters_track_the_allocator(fresh: tuple[Path, Trace]) -> None:
    _, trace = fresh
    c = trace.counters.to_pandas()
    alloc = c[(c.name == "[memory]") & (c.field == "Total Allocated")]
    assert len(alloc) > 10 and (alloc.value >= 0).all() and set(c.device.astype(str)) == {"cpu"}


def test_diagnose_a_real_cpu_run_end_to_end(fresh: tuple[Path, Trace]) -> None:
    from neurontrace.analysis.diagnose import diagnose

    _, trace = fresh
    diag = diagnose(trace)
    (dev,) = diag.devices
    assert dev.device == "cpu" and dev.window_source == "3 profiled steps"
    assert sum(dev.causes_ns.values()) == dev.window_ns
    assert dev.causes_ns["compute"] > 0 and dev.causes_ns["host_overhead"] > 0
    # Every stall between ops is Python time in the workload's own functions.
    assert dev.top_stalls and all(s.cause == "host_overhead" for s in dev.top_stalls)
    # ... in the workload's own functions, except the profiler's own step(): never blamed on the user's line.
    for s in dev.top_stalls:
        assert (s.source or "").startswith("sample_traces/make_samples.py:") or \
            (s.detail == "profiler" and s.source is None and "profiler" in s.evidence[0]), s
    assert [s["step"] for s in diag.phases.steps] == [2, 3, 4]
