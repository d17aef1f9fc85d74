"""The shipped SYNTHETIC Neuron samples: each loads, says it is synthetic, is small and up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace.errors import NeuronProfileWarning, NeuronToolMissingError
from neurontrace.parsers import _neuron_tool
from tests.conftest import ROOT, SAMPLES

NEURON = SAMPLES / "synthetic_neuron"
LOADABLE = {
    "synthetic_mlp_parquet": "neuron-explorer",
    "synthetic_mlp_v12_parquet": "neuron-explorer",
    "synthetic_mlp_device.json": "neuron-json",
    "synthetic_mlp_system.json": "neuron-json",
    "synthetic_mlp_summary.json": "neuron-summary",
    "synthetic_mlp_summary.txt": "neuron-summary",
    "synthetic_capture": "torchneuron-capture",
}
# The scenario has one Explorer warning: Parquet keeps it in Warning, legacy system JSON in warnings.
WARNS = dict.fromkeys(("synthetic_mlp_parquet", "synthetic_mlp_v12_parquet", "synthetic_mlp_system.json"),
                      "missing compiler metrics")


def _load(path: Path) -> neurontrace.Trace:
    if path.name in WARNS:
        with pytest.warns(NeuronProfileWarning, match=WARNS[path.name]):
            return neurontrace.load(path)
    return neurontrace.load(path)


@pytest.mark.parametrize("name", sorted(LOADABLE))
def test_each_sample_loads_and_is_labelled_synthetic(name: str) -> None:
    path = NEURON / name
    assert neurontrace.detect(path).name == LOADABLE[name]
    t = _load(path)
    assert t.meta("synthetic") is True
    assert name.startswith("synthetic_")


def test_samples_are_small_and_documented() -> None:
    assert "SYNTHETIC" in (NEURON / "SYNTHETIC.md").read_text()
    for p in NEURON.iterdir():
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
        assert size < 200 * 1024, p.name


def test_ntff_sample_without_the_tool_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NEURONTRACE_NEURON_EXPLORER", raising=False)
    monkeypatch.setattr(_neuron_tool, "DOCUMENTED_DIR", tmp_path)
    with pytest.raises(NeuronToolMissingError, match=r"neuron-explorer view -n synthetic_mlp\.neff -s profile\.ntff"):
        neurontrace.load(NEURON / "synthetic_ntff" / "profile.ntff")


def test_samples_match_their_generator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("make_synthetic_neuron",
                                                  ROOT / "sample_traces" / "make_synthetic_neuron.py")
    assert spec and spec.loader
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "OUT", tmp_path / "synthetic_neuron")
    module.main()
    for name in ("synthetic_mlp_parquet", "synthetic_mlp_device.json", "synthetic_mlp_summary.txt"):
        fresh, shipped = _load(tmp_path / "synthetic_neuron" / name), _load(NEURON / name)
        for table in ("system_events", "device_events", "flows", "counters", "frames"):
            assert neurontrace.Trace(**{table: fresh.tables[table]}).equals(
                neurontrace.Trace(**{table: shipped.tables[table]})), (name, table)
    assert (tmp_path / "synthetic_neuron" / "SYNTHETIC.md").read_text() == (NEURON / "SYNTHETIC.md").read_text()
