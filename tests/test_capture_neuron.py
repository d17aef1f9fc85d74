"""The TorchNeuron path of a capture, against a fake ``torch_neuronx`` that records the calls made to it.

The fake (``tests/fake_torch_neuronx``, a clearly labelled TEST DOUBLE) stands in for the AWS
package, which cannot be installed here. These tests check what the capture asks of TorchNeuron
(formats/neuron.md §8-§9), not what TorchNeuron does.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import neurontrace
from neurontrace._capture_record import REDACTED
from neurontrace.capture import Capture, capture
from neurontrace.errors import CaptureWarning
from neurontrace.run_record import read_run_record

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    # The CPU build of torch has no PrivateUse1 backend registered (the real torch_neuronx registers one).
    pytest.mark.filterwarnings("ignore:The privateuseone is not a valid device option:UserWarning"),
]

FAKE = Path(__file__).parent / "fake_torch_neuronx"


@pytest.fixture
def tnx(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake torch_neuronx on sys.path for one test, then gone again."""
    monkeypatch.syspath_prepend(str(FAKE))
    import torch_neuronx

    assert torch_neuronx.IS_TEST_DOUBLE
    torch_neuronx.reset()
    yield torch_neuronx
    for name in [m for m in sys.modules if m == "torch_neuronx" or m.startswith("torch_neuronx.")]:
        del sys.modules[name]


def loop(cap: Capture, steps: int) -> None:
    model = torch.nn.Linear(8, 2)
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        cap.step()


def calls(tnx: ModuleType, name: str) -> list[dict[str, Any]]:
    return [details for n, details in tnx.CALLS if n == name]


def run_json(cap: Capture) -> dict[str, Any]:
    assert cap.path is not None
    record: dict[str, Any] = json.loads((cap.path / "run.json").read_text())
    return record


def test_neuron_capture_configures_torchneuron_and_uses_its_exporter(
        tnx: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-1")
    monkeypatch.setenv("NEURON_CC_FLAGS", "--model-type=transformer")
    monkeypatch.setenv("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", "1")
    monkeypatch.setenv("NEURON_DEPLOY_TOKEN", "do-not-record")
    with capture(tmp_path, neuron_modes=["device", "runtime", "cpu_util"], neuron_cores="0-1",
                 neuron_max_events_per_nc=5000, with_stack=False) as cap:
        loop(cap, 7)
    assert cap.path is not None and cap.warnings == []
    capture_dir = cap.path.resolve()

    # NeuronConfig: output and NEFFs inside the capture directory, the user's options passed on.
    (config,) = calls(tnx, "NeuronConfig")
    assert config == {"modes": ["device", "runtime", "cpu_util"], "profile_output_dir": str(capture_dir / "neuron"),
                      "max_events_per_nc": 5000, "capture_enabled_for_nc": "0-1",
                      "neff_cache_dir": str(capture_dir / "neff_cache"), "precache_node_info": True}
    # One NeuronProfiler, its export_trace once per window, each after a device synchronize.
    (profiler,) = calls(tnx, "NeuronProfiler")
    assert type(profiler["config"]).__name__ == "NeuronConfig"
    names = [n for n, _ in tnx.CALLS if n != "NeuronConfig"]
    assert names == ["NeuronProfiler", "synchronize", "export_trace", "synchronize", "export_trace",
                     "get_fallback_ops", "get_executed_ops"]

    r = run_json(cap)
    assert r["backend"] == "neuron" and r["profiler"]["activities"] == ["CPU", "PrivateUse1"]
    assert r["versions"]["torch_neuronx"] == tnx.__version__
    assert r["devices"] == [{"device": "neuron:0"}, {"device": "neuron:1"}]
    assert r["fallback_ops"] == ["aten::_unique2", "aten::nonzero"]
    assert r["neuron"]["executed_ops"] == ["aten::add.Tensor", "aten::mm"]
    assert r["neuron"]["fallback_ops_source"] == "torch_neuronx.get_fallback_ops()"
    assert r["neuron"]["config"]["profile_output_dir"] == "neuron"
    assert r["neuron"]["config"]["modes"] == ["device", "runtime", "cpu_util"]
    env = r["environment"]
    assert env["NEURON_RT_VISIBLE_CORES"] == "0-1" and env["NEURON_CC_FLAGS"] == "--model-type=transformer"
    assert env["TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS"] == "1"
    assert env["NEURON_DEPLOY_TOKEN"] == REDACTED

    # The framework traces sit beside the Neuron files, where TorchNeuron's exporter put them.
    windows = [(w["label"], w["first_step"], w["last_step"]) for w in r["windows"]]
    assert windows == [("startup", 0, 0), ("steady", 3, 5)]
    for w in r["windows"]:
        (trace_file,) = w["files"]
        assert trace_file.startswith("neuron/") and trace_file.endswith("/trace.json")
        assert w["exporter"] == "torch_neuronx.profiling.NeuronProfiler.export_trace"
        assert read_run_record(cap.path / trace_file) == r  # found three levels up
        assert Path(trace_file).parent.joinpath("ntrace.pb").as_posix() in r["neuron"]["files"]
    trace = neurontrace.load(cap.path / r["windows"][1]["files"][0])
    steps = trace.to_pandas("system_events").query("category == 'step'").name.astype(str)
    assert sorted(steps) == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]


def test_activities_can_leave_neuron_out(tnx: ModuleType, tmp_path: Path) -> None:
    with capture(tmp_path, activities=["cpu"], schedule="all", with_stack=False) as cap:
        loop(cap, 1)
    r = run_json(cap)
    assert r["backend"] == "cpu" and r["neuron"] is None and r["fallback_ops"] is None
    assert tnx.CALLS == []


def test_a_failing_neuron_exporter_falls_back_to_torch(tnx: ModuleType, tmp_path: Path) -> None:
    tnx.FAIL.add("export_trace")
    with pytest.warns(CaptureWarning) as caught, capture(tmp_path, schedule="all", with_stack=False) as cap:
        loop(cap, 2)
    (message,) = [str(w.message) for w in caught if w.category is CaptureWarning]
    assert "by TorchNeuron's exporter (RuntimeError: fake torch_neuronx: export_trace failed on purpose)" in message
    assert "written by torch.profiler instead" in message
    r = run_json(cap)
    (w,) = r["windows"]
    assert w["files"] == ["rank0_w00_whole_run_steps0-2.pt.trace.json.gz"] and "failed on purpose" in w["error"]
    assert (tmp_path / cap.path.name / w["files"][0]).is_file()  # type: ignore[union-attr]
    assert r["status"] == "partial" and [f["stage"] for f in r["failures"]] == ["export"]


def test_unreadable_fallback_ops_are_a_recorded_failure(tnx: ModuleType, tmp_path: Path) -> None:
    tnx.FAIL.add("get_fallback_ops")
    with pytest.warns(CaptureWarning, match=r"could not read torch_neuronx.get_fallback_ops\(\)"), \
            capture(tmp_path, schedule="all", with_stack=False) as cap:
        loop(cap, 1)
    r = run_json(cap)
    assert r["fallback_ops"] is None and r["failures"][0]["stage"] == "fallback_ops"
    assert r["status"] == "partial"


def test_runtime_inspect_with_the_profiler_is_warned_about(tnx: ModuleType, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_RT_INSPECT_ENABLE", "1")
    with pytest.warns(CaptureWarning, match="NEURON_RT_INSPECT_ENABLE is set"), \
            capture(tmp_path, schedule="all", with_stack=False) as cap:
        loop(cap, 1)
    assert run_json(cap)["warnings"] == cap.warnings and len(cap.warnings) == 1
