"""The viewer's model: cause intervals that add up to diagnose's totals, look-ups, table rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import neurontrace
from neurontrace.app.model import ViewModel
from neurontrace.causes import CAUSES
from tests.app_support import T0, US, load_quiet, synthetic_neuron, tiny_trace
from tests.conftest import SAMPLES


def _check_causes(model: ViewModel) -> None:
    analysis = model.analysis or model.analyse()
    assert analysis.cause_error is None
    for d in analysis.diagnosis.devices:
        runs = analysis.causes[(d.device, d.rank)]
        assert runs.total_ns() == d.causes_ns  # the rows drawn add up to the totals reported
        assert runs.starts[0] == d.window[0] and runs.ends[-1] == d.window[1]
        assert np.all(runs.starts[1:] == runs.ends[:-1])  # contiguous, disjoint, sorted
        assert set(runs.cause.tolist()) <= set(range(len(CAUSES)))


def test_cause_runs_conserve_the_attribution_on_the_cpu_sample() -> None:
    model = ViewModel.build(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    _check_causes(model)
    assert model.analysis is not None and list(model.analysis.causes) == [("cpu", None)]
    assert len(model.steps[0]) == 3 and model.steps[2][0] == "ProfilerStep#2"


def test_cause_runs_conserve_the_attribution_on_a_synthetic_neuron_profile(tmp_path: Path) -> None:
    model = ViewModel.build(load_quiet(synthetic_neuron(tmp_path)))
    assert model.synthetic
    _check_causes(model)
    assert any(g.device and g.device.startswith("neuron") for g in model.index.groups)
    kinds = {f.kind for fid in range(len(model.trace.frames)) for f in model.stack(fid)}
    assert {"nki", "hlo"} <= kinds


def test_every_rank_of_a_job_gets_its_own_device_rows() -> None:
    from neurontrace import Trace
    from neurontrace.app import figures

    model = ViewModel.build(Trace.concat([tiny_trace(rank=0), tiny_trace(rank=1)]))
    _check_causes(model)
    assert model.analysis is not None and sorted(model.analysis.causes) == [("cuda:0", 0), ("cuda:0", 1)]
    device_groups = [g.label for g in model.index.groups if g.side == "device"]
    assert device_groups == ["rank 0 · cuda:0", "rank 1 · cuda:0"]
    rows, hidden = figures.rows(model, {g.key for g in model.index.groups}, 10)
    assert hidden == 0
    assert [r.device for r in rows if r.kind == "cause"] == [("cuda:0", 0), ("cuda:0", 1)]
    labels = figures.summary(model)["data"][0]["y"]
    assert [label.split("  ")[0] for label in labels] == ["<b>rank 0 · cuda:0</b>", "<b>rank 1 · cuda:0</b>"]


def test_event_stack_and_links() -> None:
    model = ViewModel.build(tiny_trace())
    mm = model.event(2)
    assert mm is not None
    assert mm["name"] == "aten::mm" and mm["rel_ns"] == 10 * US and mm["ts_ns"] == T0 + 10 * US
    assert mm["args"] == {"note": "tiny"} and mm["side"] == "host"
    assert [f.location for f in model.stack(mm["frame_id"])] == ["pkg/model.py:3 forward"]
    assert model.event(12345) is None
    launch = model.links(3)
    assert [(lk.direction, lk.kind, lk.event_id) for lk in launch] == [("out", "launch", 10)]
    assert [(lk.direction, lk.event_id) for lk in model.links(10)] == [("in", 3)]


def test_links_through_correlation_when_the_flows_table_has_none() -> None:
    import pyarrow as pa

    from neurontrace import Trace

    t = tiny_trace()
    bare = Trace(system_events=t.system_events, device_events=t.device_events, frames=t.frames,
                 flows=t.flows.slice(0, 0).cast(t.flows.schema) if t.flows.num_rows else pa.table({}))
    model = ViewModel.build(bare)
    assert [(lk.kind, lk.event_id) for lk in model.links(3)] == [("correlation", 10)]
    assert [(lk.direction, lk.event_id) for lk in model.links(10)] == [("in", 3)]


def test_tables_rows() -> None:
    model = ViewModel.build(neurontrace.load(SAMPLES / "cpu_train_loop.pt.trace.json.gz"))
    a = model.analyse()
    assert a.stalls and all(r["t1_ns"] > r["t0_ns"] >= 0 for r in a.stalls)
    assert a.stalls == sorted(a.stalls, key=lambda r: -r["dur_ms"])
    assert a.stalls[0]["source"].startswith("make_samples.py:")
    ops = a.top_ops
    assert ops and ops == sorted(ops, key=lambda r: -r["total_ms"])
    assert all(r["side"] == "host" and r["calls"] >= 1 for r in ops)
    top = model.event(ops[0]["event_id"])
    assert top is not None and top["name"] == ops[0]["name"]
    assert top["dur_ns"] == pytest.approx(ops[0]["max_us"] * 1e3, abs=10)
    assert all(isinstance(f["title"], str) for f in a.findings)


def test_importing_the_app_package_does_not_import_dash() -> None:
    code = ("import sys, neurontrace.app, neurontrace.app.model, neurontrace.app.lod, neurontrace.app.source;"
            "import neurontrace.cli.view;"
            "bad = [m for m in ('dash', 'plotly', 'flask') if m in sys.modules]; assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
