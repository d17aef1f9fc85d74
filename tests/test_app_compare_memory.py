"""The two-run page's memory comparison (app/compare/memory.py) on the real CPU runs of tests/memory_workload.py
(profile_memory=True; A without the leak, B keeping 8 MiB alive each step): per device the figures
``neurontrace diff --json`` prints for the same pair, and what was live at each run's peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neurontrace import units
from neurontrace.analysis import memory
from neurontrace.app.compare import memory as compare_memory
from neurontrace.app.compare.model import CompareState
from neurontrace.app.server import ViewerState
from tests import memory_workload as work
from tests.app_support import layout_text
from tests.conftest import ROOT

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def pair(memory_runs: dict[str, Path]) -> CompareState:
    state = CompareState(ViewerState(str(memory_runs["noleak"])), ViewerState(str(memory_runs["leak"])))
    state.load()
    assert state.stage()[0] == "ready", state.stage()
    return state


def test_the_memory_figures_are_those_diff_prints(pair: CompareState, memory_runs: dict[str, Path]) -> None:
    proc = subprocess.run([sys.executable, "-m", "neurontrace", "diff", str(memory_runs["noleak"]),
                           str(memory_runs["leak"]), "--json"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)
    assert proc.returncode in (0, 1), proc.stderr  # 1: the diff found a regression (the leak)
    printed = json.loads(proc.stdout)["memory"]
    assert compare_memory.rows(pair) == printed and printed
    (cpu,) = printed
    assert cpu["growth_bytes_per_step"]["change"] == work.LEAK_BYTES  # the leak, exact
    text = layout_text(compare_memory.panel(pair))
    for f in ("peak_allocated_bytes", "peak_reserved_bytes"):
        for side in ("baseline", "change"):
            if cpu[f][side] is not None:
                assert units.size(cpu[f][side]) in text
    assert f"{units.size(work.LEAK_BYTES)}/step" in text


def test_what_was_live_at_each_runs_peak(pair: CompareState) -> None:
    live = compare_memory.live_at_peak(pair)
    text = layout_text(compare_memory.panel(pair))
    for side, model in zip(("a", "b"), pair.models(), strict=True):
        value = model.analysis.diagnosis.sections[memory.SECTION.key] if model.analysis else None
        assert isinstance(value, memory.Memory)
        peak = max(value.devices, key=lambda d: d.peak_allocated_bytes or 0)
        groups = live[side][(peak.device, peak.rank)]
        assert groups == peak.live_at_peak[:compare_memory.TOP_LIVE] and groups
        assert all("memory_workload.py" in (g.source or "") for g in groups[:1])
        assert f"{units.size(groups[0].bytes)} in {groups[0].count} · {groups[0].op}" in text
    assert "live at A (baseline)'s peak" in text and "live at B (change)'s peak" in text
