"""CPU fallback from what TorchNeuron really records: run.json's get_fallback_ops()/get_executed_ops().

In the released torch-neuronx source the fallback log lines are never printed and no profiler marker
is recorded (formats/neuron.md §9.3, addendum): the name sets a capture stores in run.json are the
primary source. They are joined here to the CPU-side aten ops of a **real** CPU framework trace
(made by torch.profiler in tests/test_capture_layouts.py); the run.json contents are written by hand.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import neurontrace
from neurontrace.analysis.diagnose import Diagnosis, diagnose
from tests.test_capture_layouts import cpu_trace  # noqa: F401  (the real-trace fixture)

pytestmark = pytest.mark.torch


def capture_with_run_json(tmp_path: Path, trace: Path, **record: object) -> Path:
    leaf = tmp_path / "cap"
    leaf.mkdir()
    shutil.copy(trace, leaf / "trace.json")
    (leaf / "run.json").write_text(json.dumps({"schema": "neurontrace.run/1", **record}))
    return leaf / "trace.json"


def test_each_fallback_op_has_its_evidence_state(tmp_path: Path, cpu_trace: Path) -> None:  # noqa: F811
    path = capture_with_run_json(
        tmp_path, cpu_trace, fallback_ops=["aten::nonzero", "aten::_local_scalar_dense", "aten::unique"],
        neuron={"executed_ops": ["aten::mm", "aten::nonzero"]})
    diag = diagnose(neurontrace.load(path), fallback_ops=["aten::gt"])
    ops = {op.name: op for op in diag.fallback_ops}
    nz = ops["aten::nonzero"]
    assert (nz.evidence, nz.calls, nz.named_by, nz.also_executed_on_device) == (
        "confirmed", 2, ["run.json get_fallback_ops()"], True)
    assert nz.host_ns > 0 and nz.event_ids
    scalar = ops["aten::_local_scalar_dense"]
    assert (scalar.evidence, scalar.calls, scalar.also_executed_on_device) == ("host_scalar_read", 2, False)
    assert ops["aten::unique"].evidence == "named_not_seen" and ops["aten::unique"].calls == 0
    assert ops["aten::gt"].named_by == ["given (--fallback-ops / --fallback-log)"]
    assert ops["aten::gt"].evidence == "confirmed"
    # A scalar read is the host waiting on the device, not CPU compute: its time is not host_fallback.
    (dev,) = diag.devices
    charged = sum(op.host_ns for op in diag.fallback_ops if op.charged)
    assert dev.causes_ns["host_fallback"] <= charged
    doc = diag.as_dict()
    assert {op["evidence"] for op in doc["fallback_ops"]} == {"confirmed", "host_scalar_read", "named_not_seen"}
    assert Diagnosis.from_dict(json.loads(json.dumps(doc))).as_dict()["fallback_ops"] == doc["fallback_ops"]


def test_the_scalar_read_is_not_charged_as_host_fallback(tmp_path: Path, cpu_trace: Path) -> None:  # noqa: F811
    only_scalar = capture_with_run_json(tmp_path, cpu_trace, fallback_ops=["aten::_local_scalar_dense"])
    (dev,) = diagnose(neurontrace.load(only_scalar)).devices
    assert dev.causes_ns["host_fallback"] == 0
