"""Two real CPU runs made here with PyTorch, one with a deliberately slowed op: the diff must find it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

import neurontrace
from neurontrace.analysis.diff import diff
from tests.conftest import ROOT

pytestmark = pytest.mark.torch


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_compare_samples",
                                                  ROOT / "sample_traces" / "make_compare_samples.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fresh_runs_classify_the_slowed_augment_step(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    make = _module()
    make.compare_run(tmp_path / "baseline.pt.trace.json.gz", slow=False)
    make.compare_run(tmp_path / "slowed.pt.trace.json.gz", slow=True)
    for name in ("baseline.pt.trace.json.gz", "slowed.pt.trace.json.gz"):
        assert (tmp_path / name).stat().st_size < 100_000
    d = diff(neurontrace.load(tmp_path / "baseline.pt.trace.json.gz"),
             neurontrace.load(tmp_path / "slowed.pt.trace.json.gz"))
    assert d.ops is not None
    rows = {(r["kind"], r["name"]): r for r in d.ops.to_pylist() if (r["source"] or "").endswith(" augment")}
    augment = rows[("annotation", "augment")]
    # Three profiled steps, each sleeping SLEEP_S inside the range: at least that much slower.
    assert augment["status"] == "slower" and augment["matched_by"] == "name+source"
    assert augment["delta_ns"] >= 3 * make.SLEEP_S * 1e9 * 0.9
    assert rows[("op", "aten::matmul")]["status"] == "added"
    assert rows[("op", "aten::matmul")]["change_count"] == 3
    (dev,) = d.devices
    assert dev.label == "cpu" and dev.steps == (3, 3)
